"""The machine the generated C is built for: its vector width and register file.

Kernels are compiled with ``-march=native``, so the CPU decides how wide a vector
is and how many of them fit in registers, and the register tiles of a row sum
(``lower.Lowerer.compute_rows``, ``codegen.rowsum_registers``) must be shaped for it: a
tile of 8 rows x 32 floats kept its 16 accumulators in registers on AVX-512 (32
registers of 16 floats) but needs 32 AVX2 registers of 8 floats, of which there
are 16, and ran at a third of the speed there (spilled to the stack). AVX2 takes
6 rows x 2 vectors instead (12 accumulators, 2 loads of the row operand, one
broadcast: the shape BLAS kernels use on these CPUs).

The target is read once per compiler and machine from the compiler's predefined
macros under the build flags (``cc -march=native -dM -E``), and kept on disk next
to the kernels, so a cached build in a new process does not run the compiler.
Without a compiler (the numpy backend) lowering never runs; ``DEFAULT`` stands in.

>>> t = Target(vector_bytes=32, registers=16, fma=True)
>>> t.lanes("float32"), t.lanes("float64"), t.row_block, t.tile_vectors
(8, 4, 6, 2)
>>> Target(vector_bytes=64, registers=32, fma=True).row_block
8
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, replace
from typing import Iterator, Optional

import numpy as np


@dataclass(frozen=True)
class Target:
    """What the vector unit offers: bytes per vector register, how many registers,
    whether a fused multiply-add instruction exists."""

    vector_bytes: int
    registers: int
    fma: bool

    #: vectors of a row tile per row (two loads of the row operand per broadcast)
    tile_vectors: int = 2
    #: bytes of the last-level cache (:func:`last_level_cache`): data a kernel touches
    #: stays there for its next reader when it fits (``codegen.streaming``)
    llc_bytes: int = 32 << 20
    #: bytes an output must hold for its stores to stream around the caches, in kernels
    #: whose data exceed :attr:`llc_bytes` (``codegen.streaming``: 1 to 2 MiB outputs
    #: gained nothing or lost, conv 1x1 0.8-1.0x); data, so that a test or the fuzzer
    #: reaches streaming stores with small arrays (and the build key tells them apart)
    stream_bytes: int = 4 << 20

    def lanes(self, dtype: str) -> int:
        """Elements of ``dtype`` in one vector register."""
        return max(1, self.vector_bytes // np.dtype(dtype).itemsize)

    @property
    def accumulators(self) -> int:
        """Vector registers a tile's accumulators may take: all but the row operand's
        ``tile_vectors``, a broadcast and one more (12 of AVX2's 16)."""
        return self.registers - self.tile_vectors - 2

    @property
    def row_block(self) -> int:
        """Rows of a register tile: as many as keep ``rows x tile_vectors`` accumulators
        in :attr:`accumulators`, at most 8 (measured best on AVX-512; 12 rows gain
        nothing and the row remainders grow)."""
        return max(1, min(8, self.accumulators // self.tile_vectors))

    def describe(self) -> str:
        """A line for cache keys and generated sources."""
        return (f"{self.vector_bytes * 8}-bit vectors x {self.registers} registers"
                f"{', fma' if self.fma else ''}, {self.llc_bytes >> 10} KiB last-level cache"
                f"{'' if self.stream_bytes == Target.stream_bytes else f', streams from {self.stream_bytes} B'}")


#: the target assumed where none can be asked (no compiler): AVX2-like
DEFAULT = Target(vector_bytes=32, registers=16, fma=True)

_current: Optional[Target] = None
_override: Optional[Target] = None


def from_macros(text: str) -> Target:
    """The target named by a compiler's predefined macros (``cc -dM -E`` output).

    >>> from_macros("#define __AVX512F__ 1\\n#define __AVX2__ 1\\n#define __FMA__ 1\\n")
    Target(vector_bytes=64, registers=32, fma=True, tile_vectors=2, llc_bytes=33554432, stream_bytes=4194304)
    >>> from_macros("#define __aarch64__ 1\\n#define __ARM_FEATURE_FMA 1\\n").registers
    32
    >>> from_macros("#define __SSE2__ 1\\n")
    Target(vector_bytes=16, registers=16, fma=False, tile_vectors=2, llc_bytes=33554432, stream_bytes=4194304)
    """
    macros = {line.split()[1] for line in text.splitlines()
              if line.startswith("#define ") and len(line.split()) >= 2}
    fma = bool({"__FMA__", "__ARM_FEATURE_FMA"} & macros)
    if "__AVX512F__" in macros:
        return Target(64, 32, True)
    if "__AVX__" in macros:
        return Target(32, 16, fma)
    if "__aarch64__" in macros:
        return Target(16, 32, fma)
    return Target(16, 16, fma)


def current() -> Target:
    """The target of this process's compiler (asked once, answers kept on disk), or the
    one :func:`use` put in force.

    >>> current().vector_bytes in (16, 32, 64)
    True
    """
    global _current
    if _override is not None:
        return _override
    if _current is None:
        _current = replace(_detect(), llc_bytes=last_level_cache())
    return _current


def last_level_cache(root: str = "/sys/devices/system/cpu/cpu0/cache") -> int:
    """Bytes of the largest data (or unified) cache of CPU 0, as Linux describes it;
    the :class:`Target` default where it does not (another OS, a sandbox hiding sysfs).

    >>> last_level_cache("/nonexistent") == Target(16, 16, False).llc_bytes
    True
    """
    best = 0
    try:
        entries = os.listdir(root)
    except OSError:
        entries = []
    for name in entries:
        if not name.startswith("index"):
            continue
        try:
            with open(os.path.join(root, name, "type"), encoding="ascii") as f:
                kind = f.read().strip()
            with open(os.path.join(root, name, "size"), encoding="ascii") as f:
                text = f.read().strip()
        except OSError:
            continue
        if kind == "Instruction":
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
        try:
            best = max(best, int(text.rstrip("KkMmGg")) * scale)
        except ValueError:
            continue
    return best or Target.llc_bytes


@contextlib.contextmanager
def use(target: Target) -> Iterator[Target]:
    """Lower for ``target`` inside the block (tests: the AVX-512 tile shapes on any
    machine; the C stays portable, see ``cemit``'s vector helpers).

    >>> with use(Target(64, 32, True)):
    ...     current().row_block
    8
    """
    global _override
    saved, _override = _override, target
    try:
        yield target
    finally:
        _override = saved


def _detect() -> Target:
    from . import compiler
    try:
        comp = compiler.find_compiler()
    except compiler.CompilerNotFoundError:
        return DEFAULT
    stamp = f"{comp.identity}\n{' '.join(comp.flags())}\n{compiler.machine()}"
    marker = os.path.join(compiler.cache_dir(),
                          f"target-{compiler.digest(stamp, compiler.CACHE_FORMAT)[:24]}.txt")
    try:
        with open(marker, encoding="utf-8") as f:
            return from_macros(f.read())
    except OSError:
        pass
    import subprocess
    flags = [f for f in comp.flags() if f not in ("-shared", "-fPIC")]
    try:
        run = subprocess.run(list(comp.argv) + flags + ["-dM", "-E", "-x", "c", os.devnull],
                             capture_output=True, text=True, timeout=60)
    except OSError:
        return DEFAULT
    if run.returncode != 0:
        return DEFAULT
    try:
        compiler.write_atomic(marker, run.stdout)
    except OSError:
        pass  # an unwritable cache only costs asking again
    return from_macros(run.stdout)

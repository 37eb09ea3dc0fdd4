"""The system C compiler: finding it, probing OpenMP, compiling into an on-disk cache.

The compiler is ``$CC`` if set (it may carry arguments, e.g. ``"ccache gcc"``),
else the first of ``cc``, ``gcc``, ``clang`` on ``PATH``. Shared libraries are
cached in ``$TENSOREXPR_CACHE_DIR`` (default ``~/.cache/tensorexpr``) under a
hash of the source, the compiler's identity and version, the flags and the
machine, so another process reuses them without compiling. Files are written
under a temporary name and renamed into place, so concurrent processes never
see half-written files.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shlex
import shutil
import sys
import time
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from tensorexpr.errors import CompilerError, CompilerNotFoundError, TensorExprError

#: IEEE semantics are promised: no -ffast-math, no contraction into FMA (the code
#: generator writes ``fma`` itself where ir.py allows it: a sum's product terms); signed
#: integer overflow wraps as in numpy. ``-march=native`` lets loops use this CPU's
#: vector units, so the cache key names the CPU (``_machine``).
FLAGS = ("-O3", "-march=native", "-std=gnu11", "-fPIC", "-shared", "-fno-math-errno",
         "-fno-trapping-math",
         "-fwrapv", "-ffp-contract=off")
#: GCC's predictive commoning keeps values loaded in one iteration of a loop in
#: registers for the next ones. In a register tile whose tap loop has bounds that
#: move with the tile (a convolution's input gradient) it rotated the weights of
#: the taps through registers and spilled the tile's accumulators: conv dilation-2
#: dX ran at 1.43 ms with it, 0.82 ms without; no other benchmark case changed.
GCC_FLAGS = ("-fno-predictive-commoning",)
OPENMP_FLAG = "-fopenmp"
LIBS = ("-lm",)
#: bump when the calling convention or file layout of cached libraries changes
CACHE_FORMAT = "1"

#: what this process did, for tests and curious users: compilations, cache hits and the
#: seconds spent in the C compiler (the benchmark reports build time without them)
stats: Dict[str, float] = {"compiled": 0, "cache_hits": 0, "compile_s": 0.0}


class CacheDirError(TensorExprError, OSError):
    """The kernel cache directory cannot be written."""


@dataclass(frozen=True)
class Compiler:
    """A resolved compiler: command prefix, identity text (path and version), OpenMP support."""

    argv: Tuple[str, ...]
    identity: str
    openmp: bool

    def flags(self) -> Tuple[str, ...]:
        gcc = "Free Software Foundation" in self.identity and "clang" not in self.identity
        return FLAGS + (GCC_FLAGS if gcc else ()) + ((OPENMP_FLAG,) if self.openmp else ())


_compilers: Dict[tuple, Compiler] = {}


def cache_dir() -> str:
    """Where compiled kernels live: ``$TENSOREXPR_CACHE_DIR`` or ``~/.cache/tensorexpr``.

    >>> isinstance(cache_dir(), str)
    True
    """
    d = os.environ.get("TENSOREXPR_CACHE_DIR") or os.path.join("~", ".cache", "tensorexpr")
    return os.path.abspath(os.path.expanduser(d))


def _not_found(why: str) -> CompilerNotFoundError:
    return CompilerNotFoundError(
        f"the C backend needs a C compiler: {why}. Install one (e.g. gcc or clang), point $CC "
        f"at it, or build with te.build(..., backend=\"numpy\") (slower, no compiler needed)")


def find_compiler() -> Compiler:
    """The compiler to use (resolved once per process for a given ``$CC`` and ``PATH``).

    Raises :class:`CompilerNotFoundError` if there is none.

    >>> find_compiler().argv[0]  # doctest: +SKIP
    '/usr/bin/cc'
    """
    cc = os.environ.get("CC", "").strip()
    key = (cc, os.environ.get("PATH", ""))
    if key in _compilers:
        return _compilers[key]
    if cc:
        argv = shlex.split(cc)
        path = shutil.which(argv[0])
        if path is None:
            raise _not_found(f"$CC is {cc!r}, which is not an executable program")
    else:
        argv, path = [], None
        for name in ("cc", "gcc", "clang"):
            path = shutil.which(name)
            if path:
                argv = [name]
                break
        if path is None:
            raise _not_found("none of cc, gcc, clang is on PATH and $CC is not set")
    argv = [path] + argv[1:]
    identity = _identity(argv)
    comp = Compiler(tuple(argv), identity, _probe_openmp(tuple(argv), identity))
    _compilers[key] = comp
    return comp


def _identity(argv) -> str:
    """The compiler's path, arguments and ``--version`` text. Running it costs a few
    milliseconds per process, so the answer is kept in the cache directory under the
    compiler file's path, size, time and inode (a new compiler there is asked again)."""
    path = argv[0]
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
        stamp = f"{real} {st.st_size} {st.st_mtime_ns} {st.st_ino} {shlex.join(argv)}"
    except OSError:
        stamp = None
    marker = None
    if stamp is not None:
        marker = os.path.join(cache_dir(), f"compiler-{_digest(stamp, CACHE_FORMAT)[:24]}.txt")
        try:
            with open(marker, encoding="utf-8") as f:
                text = f.read()
            if text.startswith(stamp + "\n") and text.endswith("\n"):
                return text[len(stamp) + 1:-1]
        except OSError:
            pass
    try:
        import subprocess  # imported when needed: a cached build never runs the compiler
        ver = subprocess.run(list(argv) + ["--version"], capture_output=True, text=True,
                             timeout=60)
    except OSError as exc:
        raise _not_found(f"{path} cannot be run ({exc})") from None
    if ver.returncode != 0:
        raise _not_found(f"`{shlex.join(argv)} --version` failed: {ver.stderr.strip()[:200]}")
    identity = f"{real} {shlex.join(argv[1:])}\n{ver.stdout.strip()}"
    if marker is not None:
        try:
            _write_atomic(marker, f"{stamp}\n{identity}\n")
        except OSError:
            pass  # an unwritable cache only costs asking again
    return identity


def _machine() -> str:
    machine = os.uname().machine if hasattr(os, "uname") else __import__("platform").machine()
    return (f"{sys.platform} {machine} {ctypes.sizeof(ctypes.c_void_p) * 8}bit "
            f"{_cpu()}")


_cpu_text: Optional[str] = None


def _cpu() -> str:
    """This CPU's model and feature flags: code built with -march=native for one CPU
    may not run on another, so cached libraries are keyed by it."""
    global _cpu_text
    if _cpu_text is None:
        keep = []
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    key = line.split(":", 1)[0].strip()
                    if key in ("vendor_id", "model name", "flags", "Features", "CPU part",
                               "CPU implementer") and line not in keep:
                        keep.append(line)
                    if not line.strip() and keep:
                        break  # the first processor describes them all
        except OSError:
            import platform
            keep = [platform.processor(), platform.version()]
        _cpu_text = "".join(keep)
    return _cpu_text


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()


_OPENMP_PROBE = """#include <omp.h>
int te_probe(int n) { int s = 0;
#pragma omp parallel for reduction(+:s)
  for (int i = 0; i < n; i++) s += i;
  return s + omp_get_max_threads() * 0; }
"""


def _probe_openmp(argv: Tuple[str, ...], identity: str) -> bool:
    """Can this compiler build and load an OpenMP library? Answered once per compiler
    (the answer is cached on disk next to the kernels)."""
    d = cache_dir()
    marker = os.path.join(d, f"openmp-{_digest(identity, _machine(), CACHE_FORMAT)[:24]}.txt")
    try:
        with open(marker) as f:
            return f.read().strip() == "yes"
    except OSError:
        pass
    ok = False
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory(prefix="te-probe-") as tmp:
        src, so = os.path.join(tmp, "probe.c"), os.path.join(tmp, "probe.so")
        with open(src, "w") as f:
            f.write(_OPENMP_PROBE)
        try:
            r = subprocess.run(list(argv) + list(FLAGS) + [OPENMP_FLAG, "-o", so, src] + list(LIBS),
                               capture_output=True, text=True, timeout=120)
            if r.returncode == 0:
                ok = ctypes.CDLL(so).te_probe(10) == 45
        except (OSError, subprocess.SubprocessError, AttributeError):
            ok = False
    try:
        _write_atomic(marker, "yes\n" if ok else "no\n")
    except OSError:
        pass  # an unwritable cache only costs probing again; compile_shared says why
    return ok


def _write_atomic(path: str, text: str) -> None:
    import tempfile
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def compile_shared(source: str, compiler: Optional[Compiler] = None, count: bool = True) -> str:
    """Path of a shared library built from ``source`` (from the cache when possible).

    ``count=False`` leaves ``stats`` alone (the runtime's own helper libraries are not
    the user's kernels).

    Raises :class:`CompilerError` (with the compiler's message and the path of
    the kept source) if the compiler rejects the source.

    >>> path = compile_shared("int te_kernel(void) { return 0; }")  # doctest: +SKIP
    """
    compiler = compiler or find_compiler()
    flags = compiler.flags()
    key = _digest(CACHE_FORMAT, source, compiler.identity, shlex.join(flags + LIBS), _machine())
    d = cache_dir()
    so = os.path.join(d, f"te_{key[:40]}.so")
    if os.path.exists(so):
        stats["cache_hits"] += count
        return so
    src = os.path.join(d, f"te_{key[:40]}.c")
    import subprocess
    import tempfile
    try:
        _write_atomic(src, source)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=".so")
        os.close(fd)
    except OSError as exc:
        raise CacheDirError(
            f"cannot write compiled kernels to {d} ({exc}); set $TENSOREXPR_CACHE_DIR to a "
            f"writable directory") from None
    cmd = list(compiler.argv) + list(flags) + ["-o", tmp, src] + list(LIBS)
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as exc:
        _unlink(tmp)
        raise CompilerError(f"running the C compiler failed: {exc}\ncommand: {shlex.join(cmd)}\n"
                            f"source kept at {src}") from None
    finally:
        stats["compile_s"] += time.perf_counter() - t0
    if r.returncode != 0:
        _unlink(tmp)
        msg = (r.stderr or r.stdout).strip()
        if len(msg) > 8000:
            msg = msg[:8000] + "\n... (truncated)"
        raise CompilerError(
            f"the C compiler rejected the generated code (a bug in tensorexpr; please report "
            f"it with the source file below)\ncommand: {shlex.join(cmd)}\n{msg}\n"
            f"source kept at {src}")
    os.replace(tmp, so)
    stats["compiled"] += count
    return so


_libs: Dict[str, ctypes.CDLL] = {}


def load(path: str) -> ctypes.CDLL:
    """The loaded library at ``path`` (loaded once per process)."""
    lib = _libs.get(path)
    if lib is None:
        lib = _libs[path] = ctypes.CDLL(path)
    return lib

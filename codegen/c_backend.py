"""The C backend: IR -> loop-AST -> C -> shared library -> callable.

``te.build(..., backend="c")`` (the default) calls :func:`compile_program`.
The stages are separate modules so that schedule transformations can later be
added between lowering and emission, on the loop-AST:

* ``codegen.lower``: tensors to loop nests (isl for non-box domains);
* ``codegen.cemit``: loop-AST to C text;
* ``codegen.compiler``: the system compiler and the on-disk cache;
* ``codegen.runtime``: calling the kernel through ctypes.

Builds are cached: a program's structural fingerprint (``codegen.fingerprint``)
with the code generator's own source, the compiler and the machine names a JSON
entry in the cache directory that holds the C source, the library's file name
and the runtime :class:`~codegen.runtime.Layout`. A hit, in this process or
another, loads the library without lowering, emitting or compiling anything
(the lowering modules, and isl, are not even imported). Entries are written
atomically; an entry that cannot be read, parsed or loaded is ignored and
rebuilt; so is a library that fails its checksum or does not load.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import sys
from typing import Callable, Dict, List, Optional, Tuple

from . import compiler, runtime, target

#: bump when the layout of build-cache entries changes
BUILD_FORMAT = "1"

#: what this process did (for tests and curious users): build-cache hits, and lowerings
stats: Dict[str, int] = {"build_hits": 0, "lowered": 0}

_code_version: Optional[str] = None


def code_version() -> str:
    """A digest of the code generator's source (this package and ``tensorexpr``): a
    cached build is reused only by the code that would generate it again.

    >>> len(code_version())
    64
    """
    global _code_version
    if _code_version is None:
        h = hashlib.sha256()
        here = os.path.dirname(os.path.abspath(__file__))
        pkgs = (here, os.path.join(os.path.dirname(here), "tensorexpr"))
        for path in sorted(p for d in pkgs for p in glob.glob(os.path.join(d, "*.py"))):
            h.update(os.path.basename(path).encode() + b"\0")
            with open(path, "rb") as f:
                h.update(f.read())
            h.update(b"\0")
        _code_version = h.hexdigest()
    return _code_version


def generate(sig, name: Optional[str] = None):
    """Lower and print a program: ``(program, C source)``; nothing is compiled.

    >>> import tensorexpr as te
    >>> from codegen.signature import Signature
    >>> A = te.placeholder((4,), name="A")
    >>> B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    >>> _, src = generate(Signature([B], [A]))
    >>> "b1[i0] = b0[i0] + 1.0f;" in src
    True
    """
    from .cemit import emit
    from .lower import Lowerer
    title = name if name is not None else ", ".join(t.name for t in sig.outputs)
    program = Lowerer(sig, title).program()
    stats["lowered"] += 1
    return program, emit(program.kernel)


def _entry_path(sig, comp: compiler.Compiler) -> Optional[str]:
    """Where ``sig``'s build-cache entry lives (None: the program cannot be fingerprinted)."""
    from .fingerprint import Unfingerprintable, fingerprint
    try:
        fp = fingerprint(sig)
    except Unfingerprintable:
        return None
    # The checkpointing switch changes the lowering; read it without importing the
    # lowering (a cache hit must not): never imported means its default, on.
    checkpointing = getattr(sys.modules.get("codegen.checkpoint"), "ENABLED", True)
    key = compiler._digest(BUILD_FORMAT, compiler.CACHE_FORMAT, fp, code_version(),
                           comp.identity, " ".join(comp.flags() + compiler.LIBS),
                           compiler._machine(), f"checkpointing={bool(checkpointing)}",
                           target.current().describe())
    return os.path.join(compiler.cache_dir(), f"build_{key[:40]}.json")


def _load_entry(path: str, sig) -> Optional[Tuple[runtime.KernelFunction, str]]:
    """The cached build at ``path``, or None if it is missing or unusable."""
    try:
        with open(path, encoding="utf-8") as f:
            entry = json.load(f)
        if entry.get("format") != BUILD_FORMAT:
            return None
        lib = os.path.join(os.path.dirname(path), os.path.basename(entry["library"]))
        source = entry["source"]
        if not isinstance(source, str) or not os.path.exists(lib):
            return None
        layout = runtime.Layout.from_plain(entry["layout"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError):
        return None  # missing, partial, corrupt or foreign: rebuild it
    try:
        return runtime.KernelFunction(lib, layout, sig), source
    except (OSError, AttributeError):
        # The library fails its checksum or cannot be loaded: drop it, so the rebuild
        # compiles it again.
        compiler.discard(lib)
        return None
    except ValueError:
        return None


def source_text(sig, name: Optional[str] = None) -> str:
    """The source :func:`compile_program` would compile for ``sig`` (the note on outputs
    returned as views included), generated without compiling or reading the cache:
    what the snapshot tests hash.

    >>> import tensorexpr as te
    >>> from codegen.signature import Signature
    >>> A = te.placeholder((3,), name="A")
    >>> B = te.compute((3,), lambda i: A[i] * 2.0, name="B")
    >>> "b1[i0] = b0[i0] * 2.0f;" in source_text(Signature([B], [A]))
    True
    """
    from . import views
    found = views.find(sig.outputs, sig.inputs)
    note = ""
    if found:
        note = views.describe(sig.outputs, sig.inputs, found)
        rest = [t for k, t in enumerate(sig.outputs) if k not in found]
        if not rest:
            return note
        from .signature import Signature
        sig = Signature(rest, sig.inputs)
    return note + generate(sig, name)[1]


def compile_program(sig, name: Optional[str] = None
                    ) -> Tuple[Callable[..., List], str]:
    """``(impl, source)``: ``impl(arrays, sizes)`` runs the compiled program.

    >>> import numpy as np, tensorexpr as te
    >>> from codegen.signature import Signature
    >>> A = te.placeholder((3,), name="A")
    >>> B = te.compute((3,), lambda i: A[i] * 2.0, name="B")
    >>> impl, src = compile_program(Signature([B], [A]))
    >>> impl([np.arange(3, dtype=np.float32)], {})[0]
    array([0., 2., 4.], dtype=float32)
    """
    from . import views
    found = views.find(sig.outputs, sig.inputs)
    if found:
        rest = [t for k, t in enumerate(sig.outputs) if k not in found]
        note = views.describe(sig.outputs, sig.inputs, found)
        if not rest:
            return views.WithViews(len(sig.outputs), found, None), note
        from .signature import Signature
        impl, source = compile_program(Signature(rest, sig.inputs), name)
        return views.WithViews(len(sig.outputs), found, impl), note + source
    comp = compiler.find_compiler()
    entry = _entry_path(sig, comp)
    if entry is not None:
        hit = _load_entry(entry, sig)
        if hit is not None:
            stats["build_hits"] += 1
            return hit
    program, source = generate(sig, name)
    path = compiler.compile_shared(source, comp)
    layout = runtime.Layout.of(program, sig)
    try:
        impl = runtime.KernelFunction(path, layout, sig)
    except OSError:
        # Damaged between its check and loading, or it does not load: compiled once more
        # (a second failure is not the cache's fault and is raised).
        compiler.discard(path)
        impl = runtime.KernelFunction(compiler.compile_shared(source, comp), layout, sig)
    if entry is not None:
        text = json.dumps({"format": BUILD_FORMAT, "library": os.path.basename(path),
                           "source": source, "layout": layout.to_plain()})
        try:
            compiler._write_atomic(entry, text)
        except OSError:
            pass  # an unwritable cache only costs lowering again next time
    return impl, source

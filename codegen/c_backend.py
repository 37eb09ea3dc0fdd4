"""The C backend's build cache: a program built before is loaded, never lowered again.

``codegen.pipeline.build`` (what ``te.build(..., backend="c")`` runs) asks it
first. A program's structural fingerprint (``codegen.fingerprint``) with the
code generator's own source, the schedule options, the compiler and the machine
names a JSON entry in the cache directory that holds the C source, the library's
file name and the runtime :class:`~codegen.runtime.Layout`. A hit, in this
process or another, loads the library without lowering, emitting or compiling
anything (the lowering modules, and isl, are not even imported). Entries are
written atomically; an entry that cannot be read, parsed or loaded is ignored and
rebuilt; so is a library that fails its checksum or does not load.
"""
from __future__ import annotations

import json
import os
from typing import Dict, Optional, Tuple

from . import compiler, runtime, source_digest, target

#: bump when the layout of build-cache entries changes
BUILD_FORMAT = "1"

#: what this process did (for tests, curious users and ``benchmarks.build_time``): build-cache
#: hits, lowerings, and the seconds spent lowering (steps 3-7 of ``codegen.pipeline``) and
#: emitting C (step 8)
stats: Dict[str, float] = {"build_hits": 0, "lowered": 0, "lower_s": 0.0, "emit_s": 0.0}

#: the packages whose text decides generated C: ``codegen``, ``passes`` (the program
#: rewrites run before lowering) and ``tensorexpr``, subpackages included
CODE_PACKAGES = ("codegen", "passes", "tensorexpr")


def code_files() -> list:
    """The source files whose text decides generated C (:data:`CODE_PACKAGES`).

    >>> sorted(os.path.basename(p) for p in code_files())[:2]
    ['__init__.py', '__init__.py']
    """
    return sorted(p for d in CODE_PACKAGES for p in source_digest.package_files(d))


def code_version() -> str:
    """A digest of :func:`code_files`: a cached build is reused only by the code that
    would generate it again (each package is hashed once per process, and shared with
    the differentiation cache).

    >>> len(code_version())
    64
    """
    return source_digest.source_digest(*CODE_PACKAGES)


def entry_path(sig, comp: compiler.Compiler, options) -> Optional[str]:
    """Where ``sig``'s build-cache entry lives (None: the program cannot be fingerprinted);
    ``options`` (``codegen.schedule.Options``) change the lowering, so they are in the key."""
    from .fingerprint import Unfingerprintable, fingerprint
    try:
        fp = fingerprint(sig)
    except Unfingerprintable:
        return None
    key = compiler.digest(BUILD_FORMAT, compiler.CACHE_FORMAT, fp, code_version(),
                           comp.identity, " ".join(comp.flags() + compiler.LIBS),
                           compiler.machine(), options.key(),
                           target.current().describe())
    return os.path.join(compiler.cache_dir(), f"build_{key[:40]}.json")


def load_entry(path: str, sig) -> Optional[Tuple[runtime.KernelFunction, str]]:
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


def store_entry(path: str, library: str, source: str, layout) -> None:
    """Write the cache entry at ``path`` (atomically; an unwritable cache only costs
    lowering again next time)."""
    text = json.dumps({"format": BUILD_FORMAT, "library": os.path.basename(library),
                       "source": source, "layout": layout.to_plain()})
    try:
        compiler.write_atomic(path, text)
    except OSError:
        pass

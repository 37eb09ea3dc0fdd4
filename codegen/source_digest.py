"""Digests of the project's own source: what an on-disk cache entry was made by.

A cached result is reused only by the code that would make it again, so the keys
of the build cache (``codegen.c_backend``) and of the differentiation cache
(``tensorexpr.differentiate_cache``) include a digest of the packages whose text
decides the result. Each package is read and hashed once per process, and the
caches share those reads (every edit of a file in it changes its digest).
"""
from __future__ import annotations

import glob
import hashlib
import os
from typing import Dict, List

#: the project's root (the directory holding ``codegen``, ``passes`` and ``tensorexpr``)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_digests: Dict[str, str] = {}


def package_files(package: str) -> List[str]:
    """The ``.py`` files of ``package`` (a directory under :data:`ROOT`, e.g. ``"passes"``),
    subpackages included, sorted.

    >>> names = [os.path.basename(p) for p in package_files("passes")]
    >>> names[0], "differentiate.py" in names
    ('__init__.py', True)
    """
    return sorted(glob.glob(os.path.join(ROOT, package, "**", "*.py"), recursive=True))


def package_digest(package: str) -> str:
    """The SHA-256 of :func:`package_files` (their paths and text), computed once per process.

    >>> package_digest("passes") == package_digest("passes") != package_digest("codegen")
    True
    """
    got = _digests.get(package)
    if got is None:
        h = hashlib.sha256()
        for path in package_files(package):
            h.update(os.path.relpath(path, ROOT).encode() + b"\0")
            with open(path, "rb") as f:
                h.update(f.read())
            h.update(b"\0")
        got = _digests[package] = h.hexdigest()
    return got


def source_digest(*packages: str) -> str:
    """One digest of several packages' sources (see :func:`package_digest`).

    >>> len(source_digest("passes", "tensorexpr"))
    64
    """
    h = hashlib.sha256()
    for p in packages:
        h.update(f"{p}:{package_digest(p)}\0".encode())
    return h.hexdigest()


__all__ = ["ROOT", "package_digest", "package_files", "source_digest"]

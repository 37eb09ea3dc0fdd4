"""Fixtures shared by the whole test suite (keep this file small)."""
from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def tensorexpr_cache_dir(tmp_path_factory):
    """Compiled kernels go to a directory of this test session, never the user's cache.

    Under pytest-xdist the workers share it (the parent of their base temp
    directories belongs to this session), which also exercises concurrent writes.
    """
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    path = root / "tensorexpr-cache"
    path.mkdir(exist_ok=True)
    old = os.environ.get("TENSOREXPR_CACHE_DIR")
    os.environ["TENSOREXPR_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("TENSOREXPR_CACHE_DIR", None)
    else:
        os.environ["TENSOREXPR_CACHE_DIR"] = old

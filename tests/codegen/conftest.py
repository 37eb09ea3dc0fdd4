"""Fixtures of the C backend tests."""
from __future__ import annotations

import pytest


@pytest.fixture
def every_loop_on_threads(monkeypatch):
    """The thread threshold at 1 for the test: every parallel loop really runs on the team
    (``pytestmark = pytest.mark.usefixtures("every_loop_on_threads")``)."""
    from codegen import threads
    monkeypatch.setenv("TENSOREXPR_PARALLEL_WORK", "1")
    monkeypatch.setattr(threads, "_value", None)
    yield
    threads._value = None

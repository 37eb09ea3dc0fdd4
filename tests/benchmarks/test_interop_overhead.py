"""benchmarks/interop_overhead.py measures every adapter row and states the goal's ratio."""
from __future__ import annotations

import doctest

import pytest

from benchmarks import interop_overhead as bench


def test_docstring_examples():
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    result = doctest.testmod(bench)
    assert result.failed == 0 and result.attempted > 0


def test_quick_measurement_reports_every_row():
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    import tensorexpr.jax as tej
    rows = bench.measure(quick=True)
    measured = {k: v for k, v in rows.items() if v is not None}
    ffi = tej.ffi_available() is None
    assert len(measured) == 5 + ffi and all(v > 0 for v in measured.values())
    assert (rows[bench.FFI] is not None) == ffi and rows[bench.CALLBACK] is not None
    text = bench.report(rows)
    assert "tensorexpr.torch / native custom op:" in text
    assert ("XLA FFI call" in text) == ffi

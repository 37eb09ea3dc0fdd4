"""Statuses, timing statistics and the docstring examples of the benchmark package."""
from __future__ import annotations

import doctest
import importlib

import pytest

from benchmarks import runner, timing
from benchmarks.cases import by_id
from benchmarks.systems import Prepared, numpy_sys


def _check(monkeypatch, prepared):
    monkeypatch.setattr(numpy_sys, "prepare", lambda case, p, inputs, H: prepared(inputs, H))
    case = by_id(10)
    p = case.params(quick=True)
    inputs = case.inputs(p)
    Y, H, grads = runner.reference(case, p, inputs)
    return runner._prepare_and_check("numpy", case, p, inputs, H, Y, grads, runner.Options())


def test_a_wrong_gradient_is_reported_as_wrong(monkeypatch):
    def prepared(inputs, H):
        return Prepared(fwd=lambda: (inputs["X"] + inputs["b"]).T,
                        vjp=lambda: (H.T, 1.01 * H.sum(axis=1)))
    prep, row = _check(monkeypatch, prepared)
    assert row["fwd_status"] == "ok"
    assert row["status"] == "wrong (max rel err 0.01)"
    assert prep.vjp is not None  # still timed: a wrong result is labelled, not hidden


def test_a_crash_at_run_time_is_unsupported(monkeypatch):
    def prepared(inputs, H):
        def boom():
            raise IndexError("index 7 outside")
        return Prepared(fwd=boom, vjp=boom)
    prep, row = _check(monkeypatch, prepared)
    assert row["fwd_status"] == row["status"] == "unsupported (running: index 7 outside)"
    assert prep.fwd is None and prep.vjp is None and "err" not in row


def test_interleaved_rotates_and_times_every_call():
    order = []
    fns = {n: (lambda n=n: order.append(n)) for n in "abc"}
    samples = timing.interleaved(fns, timing.Budget(0.0, 3, 3, 0.0))
    assert order == list("abc") + list("abc") + list("bca") + list("cab")  # warm-up first
    assert all(len(rounds) == 3 and all(len(r) == 1 for r in rounds)
               for rounds in samples.values())


def test_median_and_paired_ratio_ignore_outliers():
    a = [[1.0, 1.0, 50.0], [2.0, 2.0, 2.0]]
    b = [[0.5, 0.5, 0.5], [1.0, 1.0, 90.0]]
    assert timing.median(a) == 2.0
    assert timing.paired_ratio(a, b) == 2.0
    assert timing.median([]) is None and timing.paired_ratio([], []) is None


MODULES = ["benchmarks", "benchmarks.cases", "benchmarks.growth", "benchmarks.reference", "benchmarks.report",
           "benchmarks.timing", "benchmarks.systems", "benchmarks.systems.te_sys",
           "benchmarks.systems.numpy_sys", "benchmarks.systems.torch_sys",
           "benchmarks.systems.jax_sys"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0 and result.attempted > 0


def test_a_missing_peer_is_skipped_with_a_note(monkeypatch):
    from benchmarks import systems
    assert systems.missing_module("numpy") is None
    note = systems.missing_module("no_such_peer_package")
    assert note.startswith("no_such_peer_package not installed (") and "[bench]" in note
    monkeypatch.setattr(systems.module("jax"), "missing", lambda: "jax not installed (x)")
    res = runner.run(runner.Options(cases=[7], systems=["jax", "numpy"], quick=True))
    assert res["meta"]["skipped"] == {"jax": "jax not installed (x)"}
    assert list(res["cases"][0]["systems"]) == ["numpy"]

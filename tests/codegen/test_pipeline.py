"""The C backend's pipeline (codegen.pipeline) and its schedule (codegen.schedule): what a
build chose is data, the options are arguments, and both reach the build cache."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te
from codegen import pipeline
from codegen.schedule import Choice, Options, Schedule
from codegen.signature import Signature

from .util import rand


def _softmax(n=8, m=64):
    X = te.placeholder((n, m), name="X")
    k = te.reduce_axis((0, m), name="k")
    mx = te.compute((n,), lambda i: te.max(X[i, k], axis=k), name="mx")
    e = te.compute((n, m), lambda i, j: te.exp(X[i, j] - mx[i]), name="e")
    k2 = te.reduce_axis((0, m), name="k2")
    s = te.compute((n,), lambda i: te.sum(e[i, k2], axis=k2), name="s")
    Y = te.compute((n, m), lambda i, j: e[i, j] / s[i], name="Y")
    return Y, X


def _matmul_vjp():
    A = te.placeholder((48, 64), name="A")
    B = te.placeholder((64, 80), name="B")
    k = te.reduce_axis((0, 64), name="k")
    C = te.compute((48, 80), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    H = te.placeholder((48, 80), name="H")
    return te.differentiate(C, [A, B], head=H), [A, B, H]


def test_the_schedule_prints_one_line_per_choice_and_the_program_wide_decisions():
    (dA, dB), ins = _matmul_vjp()
    f = te.build([dA, dB], ins)
    text = str(f.schedule)
    assert text.splitlines()[0] == "B_T: blocks (axis=0)"
    assert "dA: rows (tile=" in text and "copy: B_T" in text
    assert f.schedule["dA"].param("row block") is not None
    assert f.schedule.strategies() == {"B_T": "blocks", "dA": "rows", "dB": "rows"}
    with pytest.raises(KeyError, match="no tensor named 'C' was lowered; lowered: B_T, dA, dB"):
        f.schedule["C"]


def test_fusion_groups_are_recorded_and_the_fuse_option_turns_them_off():
    Y, X = _softmax()
    x = rand((8, 64))
    fused = te.build(Y, [X])
    alone = te.build(Y, [X], options=te.ScheduleOptions(fuse=False))
    assert fused.schedule.groups == (("mx", "e", "s", "Y"),)
    assert alone.schedule.groups == ()
    assert "fused: " in str(fused.schedule)
    np.testing.assert_allclose(fused(x), alone(x), rtol=1e-6)


def test_register_tiles_option():
    (dA, dB), ins = _matmul_vjp()
    arrays = [rand((48, 64)), rand((64, 80), seed=1), rand((48, 80), seed=2)]
    on = te.build([dA, dB], ins)
    off = te.build([dA, dB], ins, options=te.ScheduleOptions(register_tiles=False))
    assert on.schedule["dA"].param("register tile") is not None
    assert off.schedule["dA"].param("register tile") is None
    for a, b in zip(on(*arrays), off(*arrays)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_copies_option():
    (dA, dB), ins = _matmul_vjp()
    off = te.build([dA, dB], ins, options=te.ScheduleOptions(copies=False))
    assert off.schedule.copies == () and "B_T" not in off.schedule
    arrays = [rand((48, 64)), rand((64, 80), seed=1), rand((48, 80), seed=2)]
    want = te.build([dA, dB], ins, backend="numpy")(*arrays)
    for a, b in zip(off(*arrays), want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_options_are_part_of_the_build_cache_key(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSOREXPR_CACHE_DIR", str(tmp_path))
    Y, X = _softmax(4, 32)
    a = te.build(Y, [X], options=te.ScheduleOptions(fuse=False))
    b = te.build(Y, [X])
    assert a.source != b.source and a.schedule.groups == () and b.schedule.groups


def test_a_cache_hit_gives_the_schedule_of_the_build_it_reuses(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSOREXPR_CACHE_DIR", str(tmp_path))
    from codegen import c_backend
    (dA, dB), ins = _matmul_vjp()
    first = te.build([dA, dB], ins)
    hits = c_backend.stats["build_hits"]
    again = te.build([dA, dB], ins)
    assert c_backend.stats["build_hits"] == hits + 1
    assert str(again.schedule) == str(first.schedule)


def test_options_are_checked():
    Y, X = _softmax(2, 8)
    with pytest.raises(TypeError, match="options= takes a te.ScheduleOptions, not dict"):
        te.build(Y, [X], options={"fuse": False})


def test_the_numpy_backend_has_no_schedule():
    Y, X = _softmax(2, 8)
    assert te.build(Y, [X], backend="numpy").schedule is None


def test_outputs_that_are_views_lower_nothing():
    X = te.placeholder((3, 4), name="X")
    f = te.build(te.compute((3, 4), lambda i, j: X[i, j], name="Y"), [X])
    assert f.schedule.choices == () and "nothing lowered" in str(f.schedule)


def test_generate_and_lower_agree_with_build():
    Y, X = _softmax(4, 32)
    sig = Signature([Y], [X])
    program, source, schedule = pipeline.generate(sig, name="Y")
    assert source == te.build(Y, [X]).source
    assert str(schedule) == str(pipeline.lower(sig, title="Y")[1])
    assert [t.name for t in program.tensors] == ["X", "mx", "e", "s", "Y"]


def test_the_pipeline_docstring_lists_the_steps_in_order():
    steps = [line.split("**")[1] for line in pipeline.__doc__.splitlines()
             if line[:1].isdigit() and "**" in line]
    assert steps == ["views", "cache", "analysis", "recurrences", "program rewrites",
                     "schedule and lowering", "loop-AST passes", "emission", "compile and load"]


def test_schedules_and_options_are_frozen_values():
    o = Options(force={"Y": "loops"})
    assert o == Options(force=(("Y", "loops"),)) and hash(o) == hash(Options(force={"Y": "loops"}))
    s = Schedule((Choice("Y", "loops"),), options=o)
    with pytest.raises(AttributeError):
        s.choices = ()
    assert "Y" in s and "Z" not in s


@pytest.mark.parametrize("mode", [None, "revolve", "segments"])
def test_lowering_leaves_no_cycles_for_the_collector(mode):
    # (a cycle, a recursive closure or the lowerer and its replays, kept a lowering's
    # nodes alive to the cyclic collector's pass after the build: 39,000 objects of an
    # LSTM's gradient, ~10 ms of that pass)
    import gc

    from benchmarks.recurrence_cells import te_program
    ins, grads = te_program("lstm", 6, 2, 8, 4, 3)
    options = Options(checkpoint={None: False, "revolve": True, "segments": "segments"}[mode])
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        pipeline.generate(Signature(grads, ins), options)
        left = gc.collect()
    finally:
        if was:
            gc.enable()
    assert left < 100, left

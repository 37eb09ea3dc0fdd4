"""tensorexpr.collector: the cyclic collector off during a build, restored after it."""
from __future__ import annotations

import gc
import threading

import numpy as np

import tensorexpr as te
from tensorexpr.collector import paused


def test_nested_pauses_resume_at_the_last_exit():
    assert gc.isenabled()
    with paused():
        with paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer build still runs
    assert gc.isenabled()


def test_an_error_inside_still_resumes():
    try:
        with paused():
            raise KeyError("x")
    except KeyError:
        pass
    assert gc.isenabled()


def test_a_callers_disabled_collector_stays_disabled_after_a_build():
    X = te.placeholder((3,), name="X")
    Y = te.compute((3,), lambda i: X[i] * 3.0, name="Y")
    gc.disable()
    try:
        f = te.build(Y)
        assert not gc.isenabled()
    finally:
        gc.enable()
    np.testing.assert_array_equal(f(np.arange(3, dtype=np.float32)), [0.0, 3.0, 6.0])


def test_builds_in_threads_overlapping_resume_once_all_end():
    # thread a enters, then b; a leaves first: still paused until b leaves
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def a():
        with paused():
            a_in.set()
            b_in.wait(10)
        a_out.set()

    def b():
        a_in.wait(10)
        with paused():
            b_in.set()
            a_out.wait(10)
            seen["after a left"] = gc.isenabled()

    ts = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(20)
    assert seen == {"after a left": False}
    assert gc.isenabled()


def test_differentiate_and_build_run_with_the_collector_off(monkeypatch):
    states = []
    import passes.differentiate as pd
    real = pd.differentiate

    def spy(*args, **kwargs):
        states.append(gc.isenabled())
        return real(*args, **kwargs)
    monkeypatch.setattr(pd, "differentiate", spy)
    monkeypatch.setenv("TENSOREXPR_DIFF_CACHE", "0")
    X = te.placeholder((4,), name="X")
    i = te.reduce_axis(4)
    L = te.compute((), lambda: te.sum(te.sin(X[i]) * X[i], axis=i), name="L")
    (dX,) = te.differentiate(L, [X])
    assert states == [False] and gc.isenabled()
    x = np.linspace(-1, 1, 4).astype(np.float32)
    np.testing.assert_allclose(te.build(dX, inputs=[X])(x), np.cos(x) * x + np.sin(x), rtol=1e-6)
    assert gc.isenabled()


def test_the_collector_runs_while_a_build_waits_for_the_c_compiler(monkeypatch, tmp_path):
    # lowering pauses it; waiting seconds for the compiler must not (the caller's other
    # threads keep their cyclic collection)
    from codegen import background
    monkeypatch.setenv("TENSOREXPR_CACHE_DIR", str(tmp_path))  # (a miss: really compiled)
    states = {}
    real = background.PendingKernel.resolve

    def spy(self):
        states.setdefault("waiting", gc.isenabled())
        return real(self)
    monkeypatch.setattr(background.PendingKernel, "resolve", spy)
    import codegen.pipeline as pipeline
    real_generate = pipeline.generate

    def generate(*args, **kwargs):
        states.setdefault("lowering", gc.isenabled())
        return real_generate(*args, **kwargs)
    monkeypatch.setattr(pipeline, "generate", generate)
    X = te.placeholder((3,), name="X")
    Y = te.compute((3,), lambda i: X[i] * 5.0 + 1.0, name="Y")
    f = te.build(Y)
    assert states == {"lowering": False, "waiting": True}
    np.testing.assert_array_equal(f(np.arange(3, dtype=np.float32)), [1.0, 6.0, 11.0])

"""Bounded-memory recurrences: rings for rolling state, checkpointed gradients (C backend)."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te
from codegen.pipeline import generate
from codegen.checkpoint import plan
from codegen.signature import Signature

from .recurrence_programs import (STEPS, agrees_with_its_full_tape, checkpointed,
                                 larger_plans, rnn, tanh_layer, with_head)
from .util import assert_same


def ewma(d, T, R, k):
    return te.recurrence((T, R), lambda e, t, r: te.select(
        t == 0, d[r, 0], 0.5 * d[r, t] + 0.5 * e[t - 1, r]), name="e", checkpoints=k)


def alpha(d, T, R, k):
    return te.recurrence((T, R), lambda a, s, r: te.select(
        s == 0, d[r, 0], (1.0 - a[s - 1, r]) * d[r, s] + a[s - 1, r]), name="acc", checkpoints=k)


def window2(d, T, R, k):
    # reads two steps back: checkpoints keep two rows per segment start
    return te.recurrence((T, R), lambda e, t, r: te.select(
        t < 2, d[r, t], d[r, t] + 0.3 * e[t - 1, r] + 0.2 * e[t - 2, r]), name="e", checkpoints=k)


def product2(d, T, R, k):
    # nonlinear, two steps back: the adjoint reads e one step behind and one ahead
    return te.recurrence((T, R), lambda e, t, r: te.select(
        t < 2, d[r, t], d[r, t] + 0.9 * e[t - 1, r] * e[t - 2, r]), name="e", checkpoints=k)


def squashed(d, T, R, k):
    # the adjoint reads tanh' at t + 1, i.e. e[t + 1]: recomputation runs one step ahead
    return te.recurrence((T, R), lambda e, t, r: te.tanh(d[r, t] + te.select(
        t == 0, 0.0, 0.9 * e[t - 1, r])), name="e", checkpoints=k)


def gradient(make, T, R, k, dtype="float32"):
    d = te.placeholder((R, T), dtype, "d")
    e = make(d, T, R, k)
    r = te.reduce_axis(R)
    L = te.compute((), lambda: te.sum(e[T - 1, r] * e[T - 1, r], axis=r), name="L")
    (dd,) = te.differentiate(L, [d])
    return d, dd


def data(R, T, dtype="float32", seed=0):
    return np.random.default_rng(seed).uniform(0.0, 0.5, (R, T)).astype(dtype)


@pytest.mark.parametrize("make", [ewma, alpha, window2, product2, squashed])
@pytest.mark.parametrize("T,k", [(37, 4), (64, 8), (10, 1), (5, 20), (33, 33), (1, 1), (1, 3)])
@pytest.mark.parametrize("mode", [True, "segments"])
def test_checkpointed_gradient_is_bit_identical_to_the_full_tape(make, T, k, mode):
    R = 3
    x = data(R, T)
    d0, g0 = gradient(make, T, R, None)
    full = te.build(g0, inputs=[d0])
    d1, g1 = gradient(make, T, R, k)
    ck = te.build(g1, inputs=[d1], options=te.ScheduleOptions(checkpoint=mode))
    assert "checkpointed gradient" not in full.source
    if T > 1:  # revolve: k = 1 too (recomputed from the start); segments: not k = 1, nor
        # a plan keeping no fewer bytes than the full tape (k >= T: T checkpoints of 2 rows)
        larger = larger_plans(ck)
        assert not larger or k >= T
        assert ("checkpointed gradient" in ck.source) == (
            (mode is True or k > 1) and not larger)
    got = ck(x)
    assert np.array_equal(got, full(x))
    assert_same(got, te.build(g1, inputs=[d1], backend="numpy")(x))


def test_only_small_buffers_are_allocated():
    T, R, k = 4096, 16, 64
    d, dd = gradient(alpha, T, R, k)
    sig = Signature([dd], [d])
    # revolve: k checkpoints of one row, and one step of acc and of its adjoint
    prog, src, _ = generate(sig)
    shapes = {t.name: sig.shape(t, {}) for t in prog.tensors[1:]}
    assert shapes == {"dL": (), "acc_ring": (2, R), "dacc_ring": (2, R),
                      "dd": (R, T), "acc_checkpoints": (k, R)}
    assert "acc (ring of 2 rows)" in src
    # segments: the checkpoints, and a segment's rows of each
    prog, src, _ = generate(sig, te.ScheduleOptions(checkpoint="segments"))
    shapes = {t.name: sig.shape(t, {}) for t in prog.tensors[1:]}
    seg = T // k
    assert shapes == {"dL": (), "acc_ring": (seg + 1, R), "dacc_ring": (seg + 1, R),
                      "dd": (R, T), "acc_checkpoints": (k, R)}
    assert f"acc (ring of {seg + 1} rows)" in src


def test_ahead_and_window_sizes_of_the_plan():
    def segments(make, k=10):
        d, dd = gradient(make, 100, 2, k)
        return plan(Signature([dd], [d])).segments

    s = segments(squashed)
    assert (s.recompute, s.back, s.ahead, s.k) == (True, 1, 1, 10)
    s = segments(product2)
    assert (s.recompute, s.back, s.ahead) == (True, 2, 1)
    # linear recurrences: the adjoint never reads e but at its end, nothing is recomputed
    for make in (ewma, window2):
        s = segments(make)
        assert not s.recompute and s.store is None
    assert segments(alpha, 1000).k == 100  # no more checkpoints than steps


@pytest.mark.parametrize("make", [ewma, alpha, squashed])
def test_symbolic_length(make):
    n = te.var("n")
    R = 2
    d, dd = gradient(make, n, R, 3)
    f = te.build(dd, inputs=[d])
    assert "checkpointed gradient" in f.source
    assert ("recomputed backwards" in f.source) == (make is not ewma)
    d0, dd0 = gradient(make, n, R, None)
    full = te.build(dd0, inputs=[d0])
    ref = te.build(dd, inputs=[d], backend="numpy")
    for T in (1, 2, 3, 7, 40):
        x = data(R, T, seed=T)
        got = f(x)
        assert np.array_equal(got, full(x))
        assert_same(got, ref(x))


def test_forward_keeps_a_rolling_state():
    # nothing but the last step is read: the forward pass needs two rows, not T
    T, R = 500, 4
    d = te.placeholder((R, T), "float32", "d")
    e = ewma(d, T, R, None)
    last = te.compute((R,), lambda r: e[T - 1, r] + e[T - 2, r], name="last")
    sig = Signature([last], [d])
    prog, src, _ = generate(sig)
    assert [sig.shape(t, {}) for t in prog.tensors if t.name == "e_ring"] == [(2, R)]
    x = data(R, T)
    assert_same(te.build(last, inputs=[d])(x), te.build(last, inputs=[d], backend="numpy")(x))


def test_outputs_and_whole_readers_keep_the_full_tape():
    T, R = 20, 2
    d = te.placeholder((R, T), "float32", "d")
    e = ewma(d, T, R, None)
    first = te.compute((R,), lambda r: e[0, r], name="first")  # not a last step
    assert not plan(Signature([first], [d])).rings
    assert not plan(Signature([e], [d])).rings  # an output is stored whole
    x = data(R, T)
    assert_same(te.build(first, inputs=[d])(x), x[:, 0])


def test_rnn_weight_gradient_is_added_a_step_at_a_time():
    # an RNN's weight gradient sums over the steps: its terms are added a step at a time,
    # last first, in every build of a program with a checkpointed recurrence
    # (codegen.adjoint_sums), so the checkpointed one is the full tape's bit for bit
    T, B, H = 6, 2, 3
    x = te.placeholder((T, B, H), "float64", "x")
    W = te.placeholder((H, H), "float64", "W")

    def net(k):
        kk = te.reduce_axis(H, "k")
        h = te.recurrence((T, B, H), lambda h, t, b, j: te.tanh(x[t, b, j] + te.select(
            t == 0, 0.0, te.sum(h[t - 1, b, kk] * W[kk, j], axis=kk))), name="h",
            dtype="float64", checkpoints=k)
        r1, r2 = te.reduce_axis(B), te.reduce_axis(H)
        L = te.compute((), lambda: te.sum(h[T - 1, r1, r2] ** 2, axis=[r1, r2]), name="L")
        return te.differentiate(L, [x, W])

    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal((T, B, H)), 0.5 * rng.standard_normal((H, H))]
    # (2 checkpoints: 4 checkpoints of 2 rows and a ring of 3 would hold more than the
    # full tape's 6 rows, which the build would keep instead)
    f = te.build(list(net(2)), inputs=[x, W])
    assert "checkpointed gradient" in f.source
    got = f(*arrays)
    want = te.build(list(net(2)), inputs=[x, W],
                    options=te.ScheduleOptions(checkpoint=False))(*arrays)
    ref = te.build(list(net(2)), inputs=[x, W], backend="numpy")(*arrays)
    for g, w, r in zip(got, want, ref):
        assert np.array_equal(g, w)
        assert_same(g, r)


@pytest.mark.parametrize("bad", [0, -3, 2.5, "8", True])
def test_checkpoints_must_be_a_positive_int(bad):
    d = te.placeholder((2, 5), "float32", "d")
    with pytest.raises((TypeError, ValueError), match="checkpoints"):
        ewma(d, 5, 2, bad)


def test_docstring_examples():
    import doctest

    import codegen.checkpoint
    from tensorexpr import polyhedral
    result = doctest.testmod(codegen.checkpoint)
    assert result.failed == 0 and result.attempted > 0
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner()
    for test in finder.find(polyhedral.offset_range, "offset_range", globs=vars(polyhedral)):
        runner.run(test)
    assert runner.failures == 0 and runner.tries > 0


def test_a_consumer_holding_a_sum_runs_by_steps_in_both_builds():
    # dd[t, j] = sum_r de[t, r] * M[j, r]: the C backend vectorizes that sum, in an order
    # that may depend on the alignment of de's rows; every build of the program computes
    # dd a step at a time (step-rows), the same C in the full tape and at the turns
    T, J, R = 30, 8, 40

    def grads(k):
        d = te.placeholder((T, J), "float32", "d")
        M = te.placeholder((J, R), "float32", "M")
        j = te.reduce_axis(J, "j")
        e = te.recurrence((T, R), lambda e, t, r: te.sum(d[t, j] * M[j, r], axis=j) + te.select(
            t == 0, 0.0, 0.5 * e[t - 1, r]), name="e", checkpoints=k)
        rr = te.reduce_axis(R)
        L = te.compute((), lambda: te.sum(e[T - 1, rr] * e[T - 1, rr], axis=rr), name="L")
        return d, M, te.differentiate(L, [d])[0]

    rng = np.random.default_rng(5)
    x, m = rng.standard_normal((T, J)).astype(np.float32), rng.standard_normal((J, R)).astype(
        np.float32)
    d, M, g = grads(4)
    for mode in (True, "segments"):
        f = te.build(g, inputs=[d, M], options=te.ScheduleOptions(checkpoint=mode))
        assert "checkpointed gradient" in f.source
        full = te.build(g, inputs=[d, M], options=te.ScheduleOptions(checkpoint=False))
        assert full.schedule["dd"].strategy == "step-rows"
        assert np.array_equal(f(x, m), full(x, m))
    d0, M0, g0 = grads(None)
    plain = te.build(g0, inputs=[d0, M0])
    assert plain.schedule["dd"].strategy != "step-rows"  # (no checkpoints: unchanged)
    assert_same(f(x, m), plain(x, m))
    assert_same(f(x, m), te.build(g, inputs=[d, M], backend="numpy")(x, m))


def test_an_adjoint_read_only_at_its_first_step_is_a_ring():
    # the gradient w.r.t. the initial state reads de[0] only: de runs backwards in 2 rows
    T, R = 300, 3
    x0 = te.placeholder((R,), "float64", "x0")
    c = te.placeholder((R, T), "float64", "c")
    e = te.recurrence((T, R), lambda e, t, r: te.select(
        t == 0, x0[r], 0.5 * e[t - 1, r] + c[r, t]), name="e", dtype="float64")
    r = te.reduce_axis(R)
    L = te.compute((), lambda: te.sum(e[T - 1, r] * e[T - 1, r], axis=r), name="L")
    (dx0,) = te.differentiate(L, [x0])
    sig = Signature([dx0], [x0, c])
    prog, _, _ = generate(sig)
    rings = {t.name: sig.shape(t, {}) for t in prog.tensors if t.name.endswith("_ring")}
    assert rings == {"e_ring": (2, R), "de_ring": (2, R)}
    rng = np.random.default_rng(7)
    args = rng.standard_normal(R), rng.standard_normal((R, T))
    assert_same(te.build(dx0, inputs=[x0, c])(*args),
                te.build(dx0, inputs=[x0, c], backend="numpy")(*args))


@pytest.mark.parametrize("T,k", [(50, 7), (9, 9), (64, 2)])
def test_consumers_reading_farther_back_and_ahead(T, k):
    # a loss over every step (the adjoint reads e[t] and e[t + 1]) and a second consumer
    # reading de two steps ahead and e three steps back: wider rings and checkpoints
    R = 3

    def outputs(k):
        d = te.placeholder((R, T), "float32", "d")
        e = te.recurrence((T, R), lambda e, t, r: te.tanh(d[r, t] + te.select(
            t == 0, 0.0, 0.9 * e[t - 1, r])), name="e", checkpoints=k)
        r, t2 = te.reduce_axis(R), te.reduce_axis(T)
        L = te.compute((), lambda: te.sum(e[t2, r] * e[t2, r] * 0.5, axis=[t2, r]), name="L")
        res = te.differentiate(L, [d])
        de = res.adjoints[e]
        X = te.compute((R, T), lambda r, t: te.select(
            t + 2 < T, de[te.minimum(t + 2, T - 1), r], 0.0) * te.select(
            t >= 3, e[te.maximum(t - 3, 0), r], 0.0), name="X")
        return d, [res[0], X]

    d, outs = outputs(k)
    p = plan(Signature(outs, [d]), "segments")
    if k < T:
        s = p.segments
        assert (s.back, s.ahead, s.look_d, s.recompute) == (3, 1, 2, True)
    else:  # (k >= T: 9 checkpoints of 3 rows and a ring hold more than the full tape)
        assert p.segments is None
        assert [(n, w.split(":")[0]) for n, w in p.refused] == [
            ("e", "its plan (e")] and "keeps no less than the full tape" in p.refused[0][1]
    s = plan(Signature(outs, [d])).segments
    if k < T:  # (k >= T: e is cheaper kept whole than in k checkpoints of 4 rows)
        assert (s.mode, s.width, s.back, s.ahead, s.look_d) == ("revolve", 4, 3, 1, 2)
    assert sorted(c.name for c, *_ in s.consumers) == ["X", "dd"]
    x = np.random.default_rng(T).standard_normal((R, T)).astype(np.float32)
    got = te.build(outs, inputs=[d])(x)
    d0, outs0 = outputs(None)
    for a, b, c in zip(got, te.build(outs0, inputs=[d0])(x),
                       te.build(outs, inputs=[d], backend="numpy")(x)):
        assert np.array_equal(a, b)
        assert_same(a, c)


def test_checkpoint_option_is_part_of_the_build_cache_key():
    import numpy as np
    import tensorexpr as te
    d = te.placeholder((2, 6), "float32", "d")
    e = te.recurrence((6, 2), lambda e, t, r: te.select(
        t == 0, d[r, 0], 0.5 * d[r, t] + 0.5 * e[t - 1, r]), name="e", checkpoints=3)
    L = te.compute((2,), lambda r: e[5, r] * e[5, r], name="L")
    H = te.placeholder((2,), "float32", "H")
    (dd,) = te.differentiate(L, [d], head=H)
    on = te.build(dd, inputs=[d, H])
    off = te.build(dd, inputs=[d, H], options=te.ScheduleOptions(checkpoint=False))
    assert on.source != off.source
    assert on.schedule.checkpoint and not off.schedule.checkpoint
    x, h = np.random.rand(2, 6).astype(np.float32), np.ones(2, np.float32)
    assert np.array_equal(on(x, h), off(x, h))


# {{{ rings read through // and %, clamps, data and several readers (issue 5)


def _ring_readers(T):
    """Readers of a recurrence's last rows (index into Y, and whether a ring may hold it)."""
    return {
        "mod_pair": (lambda b, I: 3 + b % 2, 2, True),  # the issue: T = 5, Y[3], Y[4]
        "mod3": (lambda b, I: T - 3 + b % 3, 4, True),
        "div": (lambda b, I: T - 1 - b // 2, 4, True),
        "clamp": (lambda b, I: te.minimum(te.maximum(T - 3 + b, T - 2), T - 1), 4, True),
        "flat_div_mod": (lambda b, I: T - 2 + (b // 2) % 2, 4, True),
        "data": (lambda b, I: I[b] % T, 4, False),
        "data_last": (lambda b, I: T - 1 - I[b] % 2, 4, False),
    }


@pytest.mark.parametrize("T", [5, 6, 9])
@pytest.mark.parametrize("name", sorted(_ring_readers(5)))
def test_ring_read_through_div_mod(T, name):
    # Y[3 + b % 2] over b < 2 flattened to Y.flat[3 + b] (affine on the box) but
    # Y lives in a ring of 2 rows: it read past the ring's end
    index, n, ring = _ring_readers(T)[name]
    d = te.placeholder((T, 2), name="d")
    I = te.placeholder((n,), dtype="int32", name="I")
    Y = te.recurrence((T, 2), lambda y, t, r: te.select(
        t == 0, d[0, r], 0.5 * y[t - 1, r] + d[t, r]), name="Y")
    Z = te.compute((n, 2), lambda b, r: Y[index(b, I), r], name="Z")
    W = te.compute((2,), lambda r: Y[T - 1, r] * 2.0, name="W")  # a second reader
    Z1 = te.compute((n,), lambda b: Y[index(b, I), b % 2] + 1.0, name="Z1")  # a third
    rng = np.random.default_rng(T)
    args = (rng.uniform(-1, 1, (T, 2)).astype(np.float32),
            rng.integers(0, 2 * T, n).astype(np.int32))
    f = te.build([Z, W, Z1], inputs=[d, I])
    want = te.build([Z, W, Z1], inputs=[d, I], backend="numpy")(*args)
    for got, w in zip(f(*args), want):
        assert_same(got, w)
    # every affine reader reads rows >= T - 3 only: Y is kept in a ring; a row
    # chosen by data could be any, so Y is kept whole
    assert bool(f.schedule.checkpoint) == ring


@pytest.mark.parametrize("make", [alpha, squashed])
def test_auto_checkpoints(make):
    # "auto": the fewest slots with which no step is advanced more than twice
    from codegen.revolve import auto_slots, repetitions
    T, R = 200, 3
    d, dd = gradient(make, T, R, "auto")
    s = plan(Signature([dd], [d])).segments
    assert s.k == auto_slots(T) == 19 and repetitions(T, s.k) == 2
    x = data(R, T)
    d0, g0 = gradient(make, T, R, None)
    assert np.array_equal(te.build(dd, inputs=[d])(x), te.build(g0, inputs=[d0])(x))
    n = te.var("n")  # a symbolic T: 64 segments
    d, dd = gradient(make, n, R, "auto")
    assert plan(Signature([dd], [d])).segments.k == 64


@pytest.mark.parametrize("T,k", [(40, 3), (7, 1)])
def test_second_order_through_a_checkpointed_recurrence(T, k):
    # the gradient's own gradient: d/dd of sum(dd * v), through the revolve lowering
    R = 2

    def second(k):
        d = te.placeholder((R, T), "float64", "d")
        e = squashed(d, T, R, k)
        r = te.reduce_axis(R)
        L = te.compute((), lambda: te.sum(e[T - 1, r] * e[T - 1, r], axis=r), name="L")
        (dd,) = te.differentiate(L, [d])
        v = te.placeholder((R, T), "float64", "v")
        a, b = te.reduce_axis(R), te.reduce_axis(T)
        M = te.compute((), lambda: te.sum(dd[a, b] * v[a, b], axis=[a, b]), name="M")
        (ddd,) = te.differentiate(M, [d])
        return d, v, [dd, ddd]

    rng = np.random.default_rng(T)
    x, v = rng.uniform(0, 0.5, (R, T)), rng.standard_normal((R, T))
    d, vv, outs = second(k)
    f = te.build(outs, inputs=[d, vv])
    d0, v0, outs0 = second(None)
    for got, want, ref in zip(f(x, v), te.build(outs0, inputs=[d0, v0])(x, v),
                              te.build(outs, inputs=[d, vv], backend="numpy")(x, v)):
        assert np.array_equal(got, want)
        assert_same(got, ref)


@pytest.mark.parametrize("make", [ewma, alpha, window2, product2, squashed])
@pytest.mark.parametrize("T,k", [(13, 3), (9, 1), (5, 9)])
def test_a_head_over_every_step_agrees_with_numpy(make, T, k):
    # the recurrence is the output and its head reaches every step's adjoint (a branch
    # that checkpointed an RNN of this shape got its dW wrong by 4: keep the shape tested)
    R = 3
    d = te.placeholder((R, T), "float64", "d")
    e = make(d, T, R, k)
    H = te.placeholder((T, R), "float64", "H")
    (g,) = te.differentiate(e, [d], head=H)
    rng = np.random.default_rng(T * 10 + k)
    a = [rng.uniform(0.0, 0.5, (R, T)), rng.standard_normal((T, R))]
    got = te.build(g, inputs=[d, H])(*a)
    np.testing.assert_allclose(got, te.build(g, inputs=[d, H], backend="numpy")(*a),
                               rtol=1e-12, atol=1e-12)
    full = te.build(g, inputs=[d, H], options=te.ScheduleOptions(checkpoint=False))(*a)
    assert np.array_equal(got, full)


# {{{ recurrences with sums over the previous step, and sums over the steps (issue 15)


HEADS_MODES = pytest.mark.parametrize("head,mode", [(h, m) for h in ("last", "every")
                                                    for m in (True, "segments")])
@HEADS_MODES
@pytest.mark.parametrize("T,k", STEPS)
@pytest.mark.parametrize("net", ["rnn", "gru"])
def test_checkpointed_gradient_of_an_rnn_is_its_full_tape_bit_for_bit(net, T, k, head, mode):
    # the head over every step is the shape a branch got wrong (dW off by 4): the sums
    # over the steps read h at every step, and the no-recompute ring held too few rows.
    # (The GRU has 3 units: from 5 on, passes.hoist moves its gates out of dh's sum.)
    ins, g = rnn(T, 3, 5, k, head=head) if net == "rnn" else _gru(T, 2, 3, k, head=head)
    ck = agrees_with_its_full_tape(ins, g, mode, seed=T * 10 + k)
    assert ("checkpointed gradient" in ck.source) == checkpointed(T, k, mode, ck)


@pytest.mark.parametrize("mode", [True, "segments"])
@pytest.mark.parametrize("T,k", STEPS)
def test_rnn_weight_gradient_alone_with_a_head_over_every_step(T, k, mode):
    # the reproducer of that wrong dW: dW alone (no dx, whose rows read h at every step
    # too), so that the sum over the steps is what reads h's first rows
    x, W = (te.placeholder(s, "float32", n) for s, n in (((T, 3, 16), "x"), ((16, 16), "W")))
    h = tanh_layer(x, W, k, "h")
    Hd = te.placeholder(h.shape, "float32", "Hd")
    (dW,) = te.differentiate(h, [W], head=Hd)
    ck = agrees_with_its_full_tape([x, W, Hd], [dW], mode, seed=T)
    assert ("checkpointed gradient" in ck.source) == checkpointed(T, k, mode, ck)
    if (T, k, mode) == (4, 9, True):
        # nothing recomputed: h's ring holds every row dW's steps read, h[t - 1] and h[t]
        assert "h (ring of 4 rows)" in ck.schedule.checkpoint
    if (T, k, mode) == (6, 2, True):
        # fewer checkpoints than steps: never a ring of every step, though 2 x 2 checkpoint
        # rows and a ring of 3 hold more than 6 rows
        assert "h (revolve: 2 checkpoints x 2 rows)" in ck.schedule.checkpoint


def test_rnn_of_symbolic_length_runs_segments():
    # revolve needs T: a symbolic one runs segments, each step as the full tape's; the
    # weight gradient's steps [1, T) are added at the turns, as the full tape adds them
    # (it kept the full tape while a sum over the steps needed constant bounds)
    n = te.var("n")
    x, W = te.placeholder((n, 2, 5), "float32", "x"), te.placeholder((5, 5), "float32", "W")
    h = tanh_layer(x, W, 3, "h")
    r1, r2 = te.reduce_axis(2), te.reduce_axis(5)
    L = te.compute((), lambda: te.sum(h[n - 1, r1, r2] * h[n - 1, r1, r2], axis=[r1, r2]),
                   name="L")
    for wrt in ([x], [x, W], [W]):
        g = list(te.differentiate(L, wrt))
        for T in (1, 7, 12):
            ck = agrees_with_its_full_tape([x, W], g, True, T, {"x": (T, 2, 5)})
            assert "h (segments: 3 checkpoints x 1 rows)" in ck.schedule.checkpoint
            if W in wrt:
                assert "checkpointed gradient of h" in ck.source
                assert "dW: adjoint-steps (step=t, added=at the checkpointed turns)" in str(
                    ck.schedule)


@pytest.mark.parametrize("T,k,H", [(13, 3, 3), (7, 1, 3), (4, 9, 3), (5, 5, 3), (1, 1, 3),
                                   (13, 3, 16), (10, 4, 64)])
def test_rnn_by_revolve_is_bit_identical_to_the_full_tape(T, k, H):
    # the steps' sums (rows, jam or loops by size) and dW's steps run the full tape's
    # lowering of a step; every float sum's association is in the C source
    B = 4
    rng = np.random.default_rng(T * 100 + H)
    arrays = [rng.uniform(-1.0, 1.0, (T, B, H)).astype(np.float32),
              (rng.standard_normal((H, H)) / np.sqrt(H)).astype(np.float32)]
    ins0, g0 = rnn(T, B, H, None)
    ins1, g1 = rnn(T, B, H, k)
    # the full tape of the same program (a checkpointed recurrence's weight gradient is
    # added a step at a time in both)
    full = te.build(g1, inputs=ins1, options=te.ScheduleOptions(checkpoint=False))
    ck = te.build(g1, inputs=ins1)
    if T > 1:
        assert "checkpointed gradient" in ck.source
    for a, b in zip(ck(*arrays), full(*arrays)):
        assert np.array_equal(a, b)
    # without checkpoints, the weight gradient is one sum over all steps: the same values
    # to rounding
    for a, b in zip(ck(*arrays), te.build(g0, inputs=ins0)(*arrays)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_rnn_revolve_memory_is_bounded():
    T, B, H, k = 200, 2, 8, 4
    ins, g = rnn(T, B, H, k)
    sig = Signature(g, ins)
    prog, _, _ = generate(sig)
    rows = {t.name: sig.shape(t, {}) for t in prog.tensors[len(ins):]}
    assert rows["h_checkpoints"][0] <= k * 2 and rows["h_ring"][0] <= 4
    assert rows["dh_ring"][0] <= 3
    assert not any(s[0] == T for n, s in rows.items() if n.startswith(("h", "dh")))


def test_second_order_through_a_checkpointed_rnn():
    T, B, H = 5, 1, 2
    ins, g = rnn(T, B, H, 2, "float64")
    rng = np.random.default_rng(1)
    arrays = [rng.uniform(-1.0, 1.0, (T, B, H)), 0.5 * rng.standard_normal((H, H))]
    i, j = te.reduce_axis(H), te.reduce_axis(H)
    L2 = te.compute((), lambda: te.sum(g[1][i, j] * g[1][i, j], axis=[i, j]), name="L2")
    from tests.passes.gradcheck import check_grads
    check_grads(L2, ins, arrays, backend="c")


def _gru(T, B, H, k, head="last"):
    kk = te.reduce_axis(H, "k")
    u, xz, xr = (te.placeholder((T, B, H), "float32", n) for n in ("u", "xz", "xr"))
    W, Uz, Ur = (te.placeholder((H, H), "float32", n) for n in ("W", "Uz", "Ur"))

    def prev(h, t, b, j, U):
        return te.select(t == 0, 0.0, te.sum(h[t - 1, b, kk] * U[kk, j], axis=kk))

    def fn(h, t, b, j):
        z = te.sigmoid(xz[t, b, j] + prev(h, t, b, j, Uz))
        r = te.sigmoid(xr[t, b, j] + prev(h, t, b, j, Ur))
        n = te.tanh(u[t, b, j] + r * prev(h, t, b, j, W))
        return (1.0 - z) * n + z * te.select(t == 0, 0.0, h[t - 1, b, j])
    h = te.recurrence((T, B, H), fn, name="h", dtype="float32", checkpoints=k)
    return with_head(h, [u, xz, xr, W, Uz, Ur], head)


@pytest.mark.parametrize("T,k", [(7, 3), (5, 1)])
def test_gru_by_revolve_is_bit_identical_to_the_full_tape(T, k):
    # (its forward sums h_sum, read by the adjoint at every step, still keep h whole:
    # the ring has T rows; what holds here is the exactness of the revolve reversal)
    B, H = 2, 3
    rng = np.random.default_rng(T)
    arrays = [(0.5 * rng.standard_normal((T, B, H) if n < 3 else (H, H))).astype(np.float32)
              for n in range(6)]
    ins0, g0 = _gru(T, B, H, None)
    ins1, g1 = _gru(T, B, H, k)
    ck = te.build(g1, inputs=ins1)
    assert "revolve schedule" in ck.source
    full = te.build(g1, inputs=ins1, options=te.ScheduleOptions(checkpoint=False))
    for a, b in zip(ck(*arrays), full(*arrays)):
        assert np.array_equal(a, b)
    for a, b in zip(ck(*arrays), te.build(g0, inputs=ins0)(*arrays)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("head", ["last", "every"])
@pytest.mark.parametrize("mode", [True, "segments"])
def test_a_gru_whose_adjoint_reads_h_through_hoisted_tensors_is_checkpointed(head, mode):
    # from 5 units on, passes.hoist moves the gates out of dh's sum over the units into
    # tensors computed before dh at every step (dh_h0..2, reading the forward sums h_sum):
    # forward rows, recomputed with h at each turn and kept in rings of a turn's rows
    T = 9
    ins, g = _gru(T, 2, 8, 3, head=head)
    ck = agrees_with_its_full_tape(ins, g, mode)
    assert "dh_h0[t, b, j] from dh" in ck.schedule.hoisted
    assert "checkpointed gradient" in ck.source
    kept = " ".join(ck.schedule.checkpoint)
    assert f"h (ring of {T} rows)" not in kept and "dh_h0 (ring of" in kept


@pytest.mark.parametrize("mode", [True, "segments"])
def test_a_sum_over_the_steps_reading_what_the_segments_precede_keeps_the_full_tape(mode):
    # S sums over the steps a tensor computed after the segments (dx2, reading the
    # consumer dx backwards in time): at a step's turn it is not there yet. (Added at the
    # turns, S matched numpy only from a second call on, reading the buffer the first
    # call left.)
    T, H = 9, 4
    ins, (dx, dW) = rnn(T, 2, H, 3, "float64")
    dx2 = te.compute((T, 2, H), lambda t, b, j: dx[T - 1 - t, b, j] * 2.0, name="dx2")
    t, b = te.reduce_axis(T, "t"), te.reduce_axis(2, "b")
    h = next(p for p in te.ir.topo_order([dx]) if p.name == "h")
    S = te.compute((H,), lambda j: te.sum(dx2[t, b, j] * h[t, b, j], axis=[t, b]), name="S")
    ck = agrees_with_its_full_tape(ins, [S, dW], mode)
    assert "checkpointed gradient" not in ck.source


@pytest.mark.parametrize("mode", [True, "segments"])
def test_a_sum_over_the_steps_of_a_consumer_holding_a_sum(mode):
    # dx2 = dx @ W (a sum: by steps in both builds) is a consumer: its turn's row is
    # computed before S adds that step
    T, H = 9, 4
    ins, (dx, dW) = rnn(T, 2, H, 3, "float64")
    i = te.reduce_axis(H, "i")
    dx2 = te.compute((T, 2, H), lambda t, b, j: te.sum(dx[t, b, i] * ins[1][i, j], axis=i),
                     name="dx2")
    t, b = te.reduce_axis(T, "t"), te.reduce_axis(2, "b")
    h = next(p for p in te.ir.topo_order([dx]) if p.name == "h")
    S = te.compute((H,), lambda j: te.sum(dx2[t, b, j] * h[t, b, j], axis=[t, b]), name="S")
    ck = agrees_with_its_full_tape(ins, [S, dW], mode)
    assert "checkpointed gradient" in ck.source
    assert "dx2 (ring of" in " ".join(ck.schedule.checkpoint)  # read at its turn only


# }}}


@pytest.mark.parametrize("mode", [True, "segments"])
def test_a_tensor_reading_the_last_step_along_another_axis_stays_before_the_turns(mode):
    # p[r] = exp(e[T - 1, r]) (a log-sum-exp loss): within some distance of its axis r
    # with constant sizes, but it reads e's last row only: computed once from the
    # forward ring, not recomputed at every turn (which would keep e whole)
    T, R = 40, 3
    d = te.placeholder((R, T), "float32", "d")
    e = te.recurrence((T, R), lambda e, t, r: te.tanh(d[r, t] + te.select(
        t == 0, 0.0, 0.9 * e[t - 1, r])), name="e", checkpoints=4)
    p = te.compute((R,), lambda r: te.exp(e[T - 1, r]), name="p")
    r = te.reduce_axis(R)
    L = te.compute((), lambda: te.log(te.sum(p[r], axis=r)), name="L")
    (g,) = te.differentiate(L, [d])
    ck = agrees_with_its_full_tape([d], [g], mode)
    kept = " ".join(ck.schedule.checkpoint)
    assert "checkpointed gradient" in ck.source and f"e (ring of {T} rows)" not in kept

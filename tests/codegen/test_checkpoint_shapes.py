"""Checkpointed recurrence shapes of issue 15 item 2 that kept more than their checkpoints:
an LSTM whose loss of shape ``(1,)`` reads a tensor of its state (the Jacobian-shaped
gradients' one-point axis ``p0`` is never a step axis), a ``T`` whose revolve memory equals
``T`` rows (never a ring of every step when ``checkpoints < T``), and a bidirectional RNN
under a head over every step (two groups, each reversed by its own plan, one after the
other) or a loss of its last step (computed before both reversals from the rows the
plans keep). Gradients bit-identical to the full tape in both modes, memory bounded."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te
from codegen.pipeline import generate, lower
from codegen.schedule import Options
from codegen.signature import Signature
from tests.codegen.recurrence_programs import (STEPS, agrees_with_its_full_tape, bidirectional,
                                               checkpointed, larger_plans, lstm_layer,
                                               random_arrays, rnn, step_buffers, tanh_layer)

MODES = [True, "segments"]


def lstm_loss_one(T, B, H, k):
    """An LSTM (state ``s[T, B, 2, H]``) whose hidden part is a tensor of its own,
    ``hs[t, b, j] = s[t, b, 1, j]``, and the gradients of ``L[p] = sum(hs[T - 1] ** 2)``,
    a loss of shape ``(1,)``: Jacobian-shaped, each with a leading axis of one point."""
    x = te.placeholder((T, B, H), "float32", "x")
    Ws = [te.placeholder((H, H), "float32", f"W{g}") for g in "ifog"]
    Us = [te.placeholder((H, H), "float32", f"U{g}") for g in "ifog"]
    s = lstm_layer(x, Ws, Us, k, "s")
    hs = te.compute((T, B, H), lambda t, b, j: s[t, b, 1, j], name="hs")
    r1, r2 = te.reduce_axis(B), te.reduce_axis(H)
    L = te.compute((1,), lambda p: te.sum(hs[T - 1, r1, r2] * hs[T - 1, r1, r2],
                                          axis=[r1, r2]), name="L")
    ins = [x] + Ws + Us
    return ins, list(te.differentiate(L, ins))


@pytest.mark.parametrize("T,k,mode", [(13, 3, True), (13, 3, "segments"), (7, 1, True),
                                      (4, 9, "segments"), (1, 1, True)])
def test_an_lstm_loss_of_shape_one_through_a_tensor_of_its_state(T, k, mode):
    ins, grads = lstm_loss_one(T, 2, 3, k)
    ck = agrees_with_its_full_tape(ins, grads, mode, seed=T + k)
    assert ("checkpointed gradient" in ck.source) == checkpointed(T, k, mode, ck)
    if checkpointed(T, k, mode, ck) and k < T:
        want = f"s (revolve: {k} checkpoints x 1 rows)" if mode is True else \
            f"s (segments: {k} checkpoints x 1 rows)"
        assert want in ck.schedule.checkpoint


@pytest.mark.parametrize("mode", MODES)
def test_an_lstm_loss_of_shape_one_keeps_no_buffer_of_every_step(mode):
    T, k = 97, 4
    ins, grads = lstm_loss_one(T, 2, 3, k)
    # (the one-point axis was the step axis: checkpoints of every step, hs and dhs whole)
    assert not step_buffers(ins, grads, mode, T)
    sig = Signature(grads, ins)
    rows = {t.name: sig.shape(t, {}) for t in generate(sig, Options(checkpoint=mode))[0].tensors}
    assert rows["s_checkpoints"][0] == k


def _tanh(T, k):
    # a tanh RNN without sums (cheap to lower: the sweep lowers it 100 times); its
    # adjoint reads h[t + 1], a checkpoint holds 2 rows
    x = te.placeholder((T, 2, 3), "float32", "x")
    h = te.recurrence((T, 2, 3), lambda h, t, b, j: te.tanh(x[t, b, j] + te.select(
        t == 0, 0.0, 0.5 * h[t - 1, b, j])), name="h", checkpoints=k)
    L = te.compute((), lambda: h[T - 1, 0, 0] * h[T - 1, 1, 2], name="L")
    return [x], list(te.differentiate(L, [x]))


def _last_T(k):
    return min(40, 2 * k + 4)


@pytest.mark.parametrize("k", range(1, 9))
def test_no_ring_of_every_step_with_fewer_checkpoints_than_steps(k):
    # T up to 2k + 4: past it revolve's k checkpoints of 2 rows and its ring of 3 hold
    # fewer rows than T, and a ring of every step was never chosen (the whole grid,
    # T in 1..40, was checked when T = 9, k = 3 was fixed: it ran as a ring of 9 rows)
    for T in range(2, _last_T(k) + 1):
        ins, grads = _tanh(T, k)
        sig = Signature(grads, ins)
        for mode in MODES if T <= 12 else [True]:
            prog, schedule = lower(sig, Options(checkpoint=mode))
            rows = {t.name: sig.shape(t, {})[0] for t in prog.tensors if sig.shape(t, {})}
            kept = " ".join(schedule.checkpoint)
            if mode == "segments" and k == 1:
                assert schedule.full_tape, (T, k)  # (one segment would be the whole tape)
                continue
            if schedule.full_tape:  # (a plan keeping no fewer bytes than the full tape)
                # (k checkpoints and the rings: 7 rows at T = 3, k = 1 in revolve, 11 at
                # T = 5, k = 2 in segments)
                assert T <= 2 * k + 1 and "keeps no less than the full tape" in \
                    schedule.full_tape[0], (T, k, mode, schedule.full_tape)
                continue
            assert "h (ring of " in kept, (T, k, mode, kept)
            if k >= T:
                continue  # (nothing recomputed: the ring of every step is the full tape)
            assert ("h (revolve: " if mode is True else "h (segments: ") in kept, (T, k, kept)
            # revolve: a checkpoint's 2 rows and one more; segments: a segment and a row
            # on each side (which is T at T = 4, k = 2: segments save nothing so small)
            most = 3 if mode is True else -(-T // k) + 2
            for name in ("h_ring", "dh_ring"):
                assert rows[name] <= most and (mode != True or T <= most or rows[name] < T), (
                    T, k, rows)
            assert "h" not in rows and "dh" not in rows, (T, k, mode, rows)
            assert rows["h_checkpoints"] == (2 if mode is True else 1) * k, (T, k, mode, rows)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("T,k", [(9, 3), (4, 2), (6, 3), (16, 4)])
def test_where_revolve_memory_equals_every_step_it_is_still_the_full_tape_bit_for_bit(
        T, k, mode):
    ins, grads = rnn(T, 2, 3, k)
    ck = agrees_with_its_full_tape(ins, grads, mode, seed=T)
    # (T = 4, k = 2: 2 checkpoints of 2 rows, a ring of 3 and dh's of 2 hold more than h
    # and dh whole, 8 rows: the full tape, which the schedule says)
    assert ("checkpointed gradient" in ck.source) == ((T, k) != (4, 2))
    assert bool(larger_plans(ck)) == ((T, k) == (4, 2))
    if mode is True:  # (segments: a segment and a row on each side, T at T = 4, k = 2)
        assert not any(f"ring of {T} rows" in c for c in ck.schedule.checkpoint), \
            ck.schedule.checkpoint


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("T,k", STEPS)
def test_a_bidirectional_rnn_under_a_head_over_every_step(T, k, mode):
    ins, grads = bidirectional(T, 2, 3, k, "every")
    ck = agrees_with_its_full_tape(ins, grads, mode, seed=T * 10 + k)
    assert ("checkpointed gradient" in ck.source) == checkpointed(T, k, mode, ck)
    if checkpointed(T, k, mode, ck):
        assert not ck.schedule.full_tape
        assert "g; h: reversed one after the other" in ck.schedule.checkpoint
        if k < T:
            assert "checkpointed gradient of g" in ck.source
            assert "checkpointed gradient of h" in ck.source


@pytest.mark.parametrize("mode", MODES)
def test_a_bidirectional_rnn_keeps_no_state_of_every_step(mode):
    T, k = 97, 4
    ins, grads = bidirectional(T, 2, 3, k, "every")
    # the reversed layer's input gradient dxr is whole: dx[t] reads dxr[T - 1 - t], a row
    # of another turn of the other reversal (as large as dx itself)
    assert set(step_buffers(ins, grads, mode, T)) == {"dxr"}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("T,k", STEPS)
@pytest.mark.parametrize("head", ["last", "concat", "every+last"])
def test_a_bidirectional_rnn_under_a_loss_of_its_last_step(T, k, head, mode):
    # y[t] = h[t] + g[T - 1 - t] read at T - 1 only (sum(y[T - 1] ** 2), alone or with a
    # head over every step): y is computed at that row, from h's last row (its forward
    # ring) and g's first (copied as the forward sweep computes it), and dy, read by dh[t]
    # and dg[T - 1 - t], before both reversals (codegen.checkpoint_kept); the loss of
    # concat(h[T - 1], g[T - 1]) reads both layers' last rows
    ins, grads = bidirectional(T, 2, 3, k, head)
    ck = agrees_with_its_full_tape(ins, grads, mode, seed=T * 10 + k)
    assert ("checkpointed gradient" in ck.source) == checkpointed(T, k, mode, ck)
    if not checkpointed(T, k, mode, ck):
        return
    assert not ck.schedule.full_tape
    assert "h; g: reversed one after the other" in ck.schedule.checkpoint
    if k < T:
        assert "checkpointed gradient of g" in ck.source
        assert "checkpointed gradient of h" in ck.source
    if head != "concat":
        assert "y (ring of 1 rows)" in ck.schedule.checkpoint
        assert "g's first rows (1: read before the reversals)" in ck.source
    else:
        assert "first rows" not in ck.source


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("head", ["last", "concat", "every+last"])
def test_a_bidirectional_rnn_under_a_loss_of_its_last_step_keeps_no_state_of_every_step(
        head, mode):
    T, k = 97, 4
    ins, grads = bidirectional(T, 2, 3, k, head)
    # dxr is whole (as under a head over every step); under a loss of y's last step, dy
    # (y's gradient, read by dh[t] and by dg at T - 1 - t) is computed where it is read,
    # from y's last row: no row of h, g, dh, dg or dy is kept but the checkpoints', y's
    # last and g's first (codegen.checkpoint_kept.where_read); with a head over every
    # step too, dy holds Hd: every step's (as large as the input Hd)
    want = {"dxr", "dy"} if head == "every+last" else {"dxr"}
    assert set(step_buffers(ins, grads, mode, T)) == want


def test_a_bidirectional_rnn_under_a_loss_of_every_step_says_why_it_keeps_its_tape():
    # sum(y ** 2) over every step: dy[t] = 2 y[t] reads h[t] and g[T - 1 - t], and is read
    # by dh[t] and dg[T - 1 - t]: each layer is read by two descending recurrences, at
    # rows of no single turn of either
    ins, grads = bidirectional(13, 2, 3, 3, "all")
    f = agrees_with_its_full_tape(ins, grads, True)
    assert f.schedule.full_tape == tuple(
        f"{n} (checkpoints=3: several descending recurrences read it (dg, dh): no turn could "
        f"run them)" for n in ("h", "g"))


def test_second_order_through_a_checkpointed_bidirectional_rnn():
    from tests.passes.gradcheck import check_grads
    T, B, H = 5, 1, 2
    ins, (gx, gW, gV) = bidirectional(T, B, H, 2, "last", "float64")
    first = te.build([gx, gW, gV], inputs=ins)
    assert "checkpointed gradient of g" in first.source
    assert "checkpointed gradient of h" in first.source
    i, j = te.reduce_axis(H), te.reduce_axis(H)
    a, b, c = te.reduce_axis(T), te.reduce_axis(B), te.reduce_axis(H)
    L2 = te.compute((), lambda: te.sum(gW[i, j] * gV[i, j], axis=[i, j]) + te.sum(
        gx[a, b, c] * gx[a, b, c], axis=[a, b, c]), name="L2", dtype="float64")
    arrays = random_arrays(ins, 1)
    # against float64 central differences, the C backend, and the full tape bit for bit
    g2 = check_grads(L2, ins, arrays, backend="c")
    ck = te.build(list(g2), inputs=ins)
    # (the second-order program keeps its full tape: d2h reads dh and h at every step,
    # after the tangent's forward sweep, a second reversal of the steps; the schedule
    # says so)
    assert [line.split(" ")[0] for line in ck.schedule.full_tape] == ["h", "g"]
    assert all("(d2g reads dg: a gradient of its gradient, which would reverse dg's steps "
               "again: checkpoints of checkpoints are not made)" in line
               for line in ck.schedule.full_tape), ck.schedule.full_tape
    full = te.build(list(g2), inputs=ins, options=te.ScheduleOptions(checkpoint=False))
    for p, q in zip(ck(*arrays), full(*arrays)):
        assert np.array_equal(p, q)
    # (the first-order gradients too)
    full1 = te.build([gx, gW, gV], inputs=ins, options=te.ScheduleOptions(checkpoint=False))
    for p, q in zip(first(*arrays), full1(*arrays)):
        assert np.array_equal(p, q)


@pytest.mark.parametrize("head", ["last", "concat"])
def test_a_bidirectional_rnn_of_symbolic_length_under_a_loss_of_its_last_step(head):
    # y's last row is T - 1 for every T (isl proves the reads at T - 1 - t, t = T - 1)
    n = te.var("n")
    ins, grads = bidirectional(n, 2, 3, 3, head)
    ck = agrees_with_its_full_tape(ins, grads, True, seed=2, shapes={"x": (13, 2, 3)})
    assert not ck.schedule.full_tape
    assert "h; g: reversed one after the other" in ck.schedule.checkpoint


def test_an_output_reading_the_rows_kept_where_they_are_not_keeps_the_full_tape():
    # O reads y[T - 1] as well: y is computed where it is read (inlined), and O, no tensor
    # of the rows kept, would read g[0] from g's ring: y is not computed from the rows
    # kept, dy reaches both adjoints again, and both layers keep their full tape (exact)
    T, B, H, k = 13, 2, 3, 3
    x = te.placeholder((T, B, H), "float32", "x")
    W, V = (te.placeholder((H, H), "float32", n) for n in ("W", "V"))
    h = tanh_layer(x, W, k, "h")
    xr = te.compute((T, B, H), lambda t, b, j: x[T - 1 - t, b, j], name="xr")
    g = tanh_layer(xr, V, k, "g")
    y = te.compute((T, B, H), lambda t, b, j: h[t, b, j] + g[T - 1 - t, b, j], name="y")
    r1, r2 = te.reduce_axis(B), te.reduce_axis(H)
    L = te.compute((), lambda: te.sum(y[T - 1, r1, r2] * y[T - 1, r1, r2], axis=[r1, r2]),
                   name="L")
    O = te.compute((B, H), lambda b, j: y[T - 1, b, j] * 3.0, name="O")
    ins = [x, W, V]
    for mode in MODES:
        f = agrees_with_its_full_tape(ins, list(te.differentiate(L, ins)) + [O], mode)
        assert [line.split(" ")[0] for line in f.schedule.full_tape] == ["h", "g"]

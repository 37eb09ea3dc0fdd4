"""Checkpointed recurrences along another axis than their first (issue 15 item 2): a
batch-first RNN, GRU and LSTM (``h[b, t, j]``) and the Jacobian-shaped gradients of a
loss of shape ``(1,)`` (the adjoint's steps along its second axis) are checkpointed in
both modes, bit-identical to the full tape, with no buffer of every step
(``codegen.checkpoint_axes``); a recurrence asking for checkpoints that keeps its full
tape says why in the schedule."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te
from codegen.pipeline import generate
from codegen.schedule import Options
from codegen.signature import Signature
from tests.codegen.recurrence_programs import (STEPS, agrees_with_its_full_tape, batch_first,
                                               bidirectional, checkpointed, larger_plans, rnn,
                                               step_buffers)

MODES = [True, "segments"]


def _kept(ck, mode):
    # (revolve with few steps may recompute nothing: its gradient runs segments of the
    # state's last rows)
    return [c for c in ck.schedule.checkpoint
            if "(segments: " in c or mode is True and "(revolve: " in c]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("T,k", STEPS)
@pytest.mark.parametrize("head", ["last", "every", "one"])
def test_a_batch_first_rnn_is_checkpointed_bit_for_bit(head, T, k, mode):
    ins, grads = batch_first("rnn", T, 3, 4, k, head)
    ck = agrees_with_its_full_tape(ins, grads, mode, seed=T * 10 + k)
    assert ("checkpointed gradient" in ck.source) == checkpointed(T, k, mode, ck)
    if checkpointed(T, k, mode, ck):
        assert _kept(ck, mode), ck.schedule.checkpoint
        assert not ck.schedule.full_tape


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("head,T,k", [("last", 13, 3), ("last", 7, 1), ("last", 4, 9),
                                      ("last", 1, 1), ("one", 13, 3)])
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_batch_first_cells_are_checkpointed_bit_for_bit(cell, head, T, k, mode):
    ins, grads = batch_first(cell, T, 2, 5, k, head)
    ck = agrees_with_its_full_tape(ins, grads, mode, seed=T + k)
    assert ("checkpointed gradient" in ck.source) == checkpointed(T, k, mode, ck)
    if checkpointed(T, k, mode, ck):
        assert _kept(ck, mode), ck.schedule.checkpoint


@pytest.mark.parametrize("cell", ["rnn", "gru", "lstm"])
def test_a_head_over_every_step_of_a_batch_first_cell(cell):
    for mode in MODES:
        ins, grads = batch_first(cell, 11, 2, 5, 3, "every")
        ck = agrees_with_its_full_tape(ins, grads, mode, seed=3)
        assert _kept(ck, mode), ck.schedule.checkpoint


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("head", ["last", "one"])
@pytest.mark.parametrize("cell", ["rnn", "lstm"])
def test_no_buffer_holds_every_step(cell, head, mode):
    T, k = 97, 4  # (T is no other size of the program)
    ins, grads = batch_first(cell, T, 2, 6, k, head)
    assert not step_buffers(ins, grads, mode, T)
    state = "s" if cell == "lstm" else "h"
    rows = {t.name: Signature(grads, ins).shape(t, {}) for t in
            generate(Signature(grads, ins), Options(checkpoint=mode))[0].tensors}
    assert rows[f"{state}_checkpoints"][0] <= 2 * k


def test_the_moved_recurrence_keeps_its_full_tape_layout_where_it_is_an_output():
    # the recurrence itself an output: its layout is the caller's, its full tape kept,
    # and the schedule says why
    x = te.placeholder((2, 9), "float64", "x")
    h = te.recurrence((2, 9), lambda h, b, t: te.tanh(x[b, t] + te.select(
        t > 0, h[b, t - 1], 0.0)), name="h", dtype="float64", checkpoints=3)
    f = te.build(h, [x])
    a = np.random.default_rng(0).uniform(-1, 1, (2, 9))
    np.testing.assert_allclose(f(a), te.build(h, [x], backend="numpy")(a), rtol=1e-14)
    assert f(a).shape == (2, 9)
    assert f.schedule.full_tape == ("h (checkpoints=3: it is an output (every step is "
                                    "returned))",)


def test_the_schedule_says_why_a_recurrence_keeps_its_full_tape():
    # the reversed layer of a bidirectional RNN under a loss of every step: a tensor read
    # by both layers' adjoints reads both layers' steps
    ins, grads = bidirectional(13, 2, 3, 3, "all")
    f = te.build(grads, ins)
    assert "full tape: g (checkpoints=3: several descending recurrences read it" in str(
        f.schedule)
    # one step; the full tape asked for; checkpointed: nothing said
    for (T, k), options, line in [
            ((1, 1), te.ScheduleOptions(), "h (checkpoints=1: one step: nothing to checkpoint)"),
            ((13, 3), te.ScheduleOptions(checkpoint=False),
             "h (checkpoints=3: ScheduleOptions(checkpoint=False))")]:
        ins, grads = rnn(T, 2, 3, k)
        assert te.build(grads, ins, options=options).schedule.full_tape == (line,)
    ins, grads = batch_first("rnn", 13, 2, 3, 3)
    f = te.build(grads, ins)
    assert f.schedule.full_tape == () and "h (revolve: 3 checkpoints x 2 rows)" in str(f.schedule)


def test_second_order_through_a_checkpointed_batch_first_rnn():
    T, B, H = 5, 1, 2
    ins, g = batch_first("rnn", T, B, H, 2)
    rng = np.random.default_rng(1)
    arrays = [rng.uniform(-1.0, 1.0, (B, T, H)), 0.5 * rng.standard_normal((H, H))]
    i, j = te.reduce_axis(H), te.reduce_axis(H)
    L2 = te.compute((), lambda: te.sum(g[1][i, j] * g[1][i, j], axis=[i, j]), name="L2")
    assert "checkpointed gradient" in te.build(g, ins).source
    from tests.passes.gradcheck import check_grads
    check_grads(L2, ins, arrays, backend="c")


@pytest.mark.parametrize("mode", MODES)
def test_a_loss_of_shape_one_of_a_steps_first_rnn(mode):
    # h[t, b, j] is carried along its first axis, its adjoint dh[0, t, b, j] (the gradients
    # are Jacobian-shaped) along its second: only the adjoint moves
    T, B, H = 13, 2, 3
    x, W = te.placeholder((T, B, H), "float64", "x"), te.placeholder((H, H), "float64", "W")
    kk = te.reduce_axis(H, "k")
    h = te.recurrence((T, B, H), lambda h, t, b, j: te.tanh(x[t, b, j] + te.select(
        t == 0, 0.0, te.sum(h[t - 1, b, kk] * W[kk, j], axis=kk))), name="h", dtype="float64",
        checkpoints=3)
    r1, r2 = te.reduce_axis(B), te.reduce_axis(H)
    L = te.compute((1,), lambda o: te.sum(h[T - 1, r1, r2] * h[T - 1, r1, r2], axis=[r1, r2]),
                   name="L", dtype="float64")
    grads = list(te.differentiate(L, [x, W]))
    assert grads[0].shape == (1, T, B, H)
    ck = agrees_with_its_full_tape([x, W], grads, mode, seed=5)
    assert _kept(ck, mode) and not ck.schedule.full_tape


def _batch_first_layers(gru, T, B, H, k):
    """An RNN layer over ``x[b, t, j]`` and a second layer on it (a GRU's input
    projections ``h1[b, t] @ W``, which ``passes.hoist`` makes tensors between the
    layers, or an RNN reading ``h1[b, t, j]``), both batch first."""
    x = te.placeholder((B, T, H), "float64", "x")
    Ws = [te.placeholder((H, H), "float64", f"W{g}") for g in "hzn"]

    def prev(h, b, t, j, U):
        kk = te.reduce_axis(H, "k")
        return te.select(t == 0, 0.0, te.sum(h[b, t - 1, kk] * U[kk, j], axis=kk))

    def proj(b, t, j, W):
        d = te.reduce_axis(H, "d")
        return te.sum(h1[b, t, d] * W[d, j], axis=d)
    h1 = te.recurrence((B, T, H), lambda h, b, t, j: te.tanh(x[b, t, j] + prev(
        h, b, t, j, Ws[0])), name="h1", dtype="float64", checkpoints=k)
    if gru:
        def fn(h, b, t, j):
            z = te.sigmoid(proj(b, t, j, Ws[1]) + prev(h, b, t, j, Ws[0]))
            n = te.tanh(proj(b, t, j, Ws[2]) + z * prev(h, b, t, j, Ws[0]))
            return (1.0 - z) * n + z * te.select(t == 0, 0.0, h[b, t - 1, j])
    else:
        def fn(h, b, t, j):
            return te.tanh(h1[b, t, j] + prev(h, b, t, j, Ws[1]))
    h2 = te.recurrence((B, T, H), fn, name="h2", dtype="float64", checkpoints=k)
    r1, r2 = te.reduce_axis(B), te.reduce_axis(H)
    L = te.compute((), lambda: te.sum(h2[r1, T - 1, r2] * h2[r1, T - 1, r2], axis=[r1, r2]),
                   name="L", dtype="float64")
    ins = [x] + Ws
    return ins, list(te.differentiate(L, ins))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("T,k", [(13, 3), (4, 9)])
@pytest.mark.parametrize("gru", [False, True])
def test_batch_first_layers_are_checkpointed_in_lockstep(gru, T, k, mode):
    # the GRU layer's input projections are moved with the layers: the group's rows
    ins, grads = _batch_first_layers(gru, T, 2, 3, k)
    ck = agrees_with_its_full_tape(ins, grads, mode, seed=T)
    if k >= T and larger_plans(ck):  # (4 steps: 4 checkpoints hold more than the tape)
        line = ck.schedule.full_tape[-1]  # (the group: the layers and the projections)
        assert line.startswith("h2 (checkpoints=9: its plan (h1, ") and " in lockstep: " in line
        return
    assert any(c.startswith("h1, ") and "h2: in lockstep" in c for c in ck.schedule.checkpoint)
    assert not ck.schedule.full_tape

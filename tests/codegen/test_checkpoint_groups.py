"""Several checkpointed recurrences in one program (issue 15 item 2): recurrences of the
same steps that read each other at their own step or earlier (the layers of a stacked
RNN; a GRU or an LSTM on an RNN, with the input projections between them) are
checkpointed as one group in lockstep, in both modes, bit-identical to the full tape of
the same program, close to the numpy backend, and with no buffer of ``T`` rows."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te
from codegen.pipeline import generate
from codegen.schedule import Options
from codegen.signature import Signature

from .recurrence_programs import (STEPS, agrees_with_its_full_tape, bidirectional,
                                  checkpointed, layers, lstm_layer, random_arrays, tanh_layer,
                                  with_head)

MODES = [True, "segments"]
HEADS_MODES = pytest.mark.parametrize("head,mode", [(h, m) for h in ("last", "every")
                                                    for m in MODES])


def _lockstep(ck, mode, names=("h1", "h2")):
    """Are ``names`` checkpointed together, in ``mode``, as the schedule says?"""
    kept = ck.schedule.checkpoint
    kind = "revolve" if mode is True else "segments"
    together = [c for c in kept if c.endswith("in lockstep (a step of each in turn; a "
                                              "checkpoint holds the state of each)")]
    return (len(together) == 1 and all(n in together[0].split(":")[0].split(", ")
                                       for n in names)
            and all(any(c.startswith(f"{n} ({kind}: ") for c in kept) for n in names)
            and f"checkpointed gradient of {together[0].split(':')[0]}" in ck.source)


@HEADS_MODES
@pytest.mark.parametrize("T,k", STEPS)
def test_stacked_rnn_layers_are_checkpointed_in_lockstep_bit_for_bit(T, k, head, mode):
    ins, grads = layers(("rnn", "rnn"), T, 2, 4, k, head)
    ck = agrees_with_its_full_tape(ins, grads, mode, seed=T * 10 + k)
    assert _lockstep(ck, mode) == checkpointed(T, k, mode, ck)
    if checkpointed(T, k, mode, ck) == checkpointed(T, k, mode):
        assert ("checkpointed gradient" in ck.source) == checkpointed(T, k, mode, ck)
    else:  # (the group keeping more than the tape: h1 alone may still be smaller)
        assert [line.split(" ")[0] for line in ck.schedule.full_tape][-1] == "h2"


@HEADS_MODES
@pytest.mark.parametrize("T,k", [(13, 3), (7, 1), (4, 9), (1, 1)])
@pytest.mark.parametrize("kinds", [("rnn", "gru"), ("gru", "gru")])
def test_gru_layers_are_checkpointed_in_lockstep_bit_for_bit(kinds, T, k, head, mode):
    # the GRU layer's input projections h1 @ Wz2 (passes.hoist: h2_sum) run in the group's
    # steps; its adjoint's dh2_sum, read by dh1, between the adjoints at each turn
    ins, grads = layers(kinds, T, 2, 3, k, head)
    ck = agrees_with_its_full_tape(ins, grads, mode, seed=T * 10 + k)
    assert _lockstep(ck, mode) == checkpointed(T, k, mode, ck)


@pytest.mark.parametrize("mode", MODES)
def test_gru_layers_with_hoisted_gates(mode):
    # from 5 units on, passes.hoist moves the gates out of the adjoints' sums: forward
    # rows of the group, recomputed at each turn
    ins, grads = layers(("rnn", "gru"), 9, 2, 8, 3, "every")
    ck = agrees_with_its_full_tape(ins, grads, mode)
    assert _lockstep(ck, mode)
    assert any(h.startswith("dh2_h0") for h in ck.schedule.hoisted)


def _scratch_rows(ins, grads, mode):
    """name -> shape of every buffer of the build that is no input and no output."""
    sig = Signature(grads, ins)
    prog, src, _ = generate(sig, Options(checkpoint=mode))
    assert "checkpointed gradient" in src
    skip = {t.uid for t in list(ins) + list(grads)}
    return {t.name: sig.shape(t, {}) for t in prog.tensors if t.uid not in skip}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kinds", [("rnn", "rnn"), ("rnn", "gru"), ("rnn", "rnn", "rnn")])
def test_groups_keep_no_buffer_of_every_step(kinds, mode):
    T, k = 240, 6
    for head in ("last", "every"):
        rows = _scratch_rows(*layers(kinds, T, 2, 4, k, head), mode)
        assert not {n: r for n, r in rows.items() if r and r[0] >= T - 1}, (head, rows)
        for n in range(1, len(kinds) + 1):  # k checkpoints of each layer's state
            # (revolve: a state and the row the adjoint reads ahead; segments: a row)
            assert rows[f"h{n}_checkpoints"][0] == (2 * k if mode is True else k)
        # revolve: rings of a checkpoint's rows and one; segments: of a segment's
        most = 3 if mode is True else T // k + 2
        assert max(r[0] for n, r in rows.items() if n.endswith("_ring")) <= most


@pytest.mark.parametrize("mode", MODES)
def test_a_second_layer_without_checkpoints_keeps_the_first_whole(mode):
    # only the first layer asks for checkpoints: it is checkpointed alone, and the second
    # layer (full tape) reads it at every step, so its ring holds every row
    T = 13
    x = te.placeholder((T, 2, 4), "float32", "x")
    W, V = (te.placeholder((4, 4), "float32", n) for n in ("W", "V"))
    h = tanh_layer(x, W, 4, "h")
    ins, grads = with_head(tanh_layer(h, V, None, "g"), [x, W, V], "every")
    ck = agrees_with_its_full_tape(ins, grads, mode, seed=T)
    kept = " ".join(ck.schedule.checkpoint)
    assert "checkpointed gradient of h:" in ck.source and f"h (ring of {T} rows)" in kept
    assert "lockstep" not in kept and "g (" not in kept


@HEADS_MODES
@pytest.mark.parametrize("T,k", [(13, 3), (6, 2), (1, 1)])
def test_a_bidirectional_rnn_is_exact(T, k, head, mode):
    # the reversed layer g is read backwards in time (y[t] = h[t] + g[T - 1 - t]): each
    # layer is a group of its own, reversed one after the other (dx[t] reads g's
    # dxr[T - 1 - t] whole); under a loss of the last step dy, read by both adjoints, is
    # computed before both reversals from h's last row and g's first (test_checkpoint_shapes
    # has the rest)
    ins, grads = bidirectional(T, 2, 4, k, head)
    ck = agrees_with_its_full_tape(ins, grads, mode, seed=T)
    kept = " ".join(ck.schedule.checkpoint)
    for n in "gh":
        assert (f"{n} (revolve" in kept or f"{n} (segments" in kept) == checkpointed(T, k, mode, ck)
        assert (f"checkpointed gradient of {n}:" in ck.source) == checkpointed(T, k, mode, ck)
    assert not ck.schedule.full_tape or not checkpointed(T, k, mode, ck)


def test_second_order_through_checkpointed_stacked_layers():
    from tests.passes.gradcheck import check_grads
    T, B, H = 5, 1, 2
    x = te.placeholder((T, B, H), "float64", "x")
    W, V = (te.placeholder((H, H), "float64", n) for n in ("W", "V"))
    h = tanh_layer(tanh_layer(x, W, 2, "h1"), V, 2, "h2")
    r1, r2 = te.reduce_axis(B), te.reduce_axis(H)
    L = te.compute((), lambda: te.sum(h[T - 1, r1, r2] * h[T - 1, r1, r2], axis=[r1, r2]),
                   name="L", dtype="float64")
    gW, gV = te.differentiate(L, [W, V])
    assert "checkpointed gradient of h1, h2" in te.build([gW, gV], inputs=[x, W, V]).source
    i, j = te.reduce_axis(H), te.reduce_axis(H)
    L2 = te.compute((), lambda: te.sum(gW[i, j] * gV[i, j], axis=[i, j]), name="L2",
                    dtype="float64")
    arrays = random_arrays([x, W, V], 1)
    check_grads(L2, [x, W, V], arrays, backend="c")
    # and the first-order gradients, bit for bit
    full = te.build([gW, gV], inputs=[x, W, V], options=te.ScheduleOptions(checkpoint=False))
    for a, b in zip(te.build([gW, gV], inputs=[x, W, V])(*arrays), full(*arrays)):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("head", ["last", "every"])
def test_stacked_layers_of_symbolic_length_with_weight_gradients(head):
    # a symbolic T runs segments; the weight gradients' steps [1, T) are added at the
    # turns (as the full tape adds them); no buffer has T rows
    n = te.var("n")
    x = te.placeholder((n, 2, 4), "float32", "x")
    W, V = (te.placeholder((4, 4), "float32", name) for name in ("W", "V"))
    h = tanh_layer(tanh_layer(x, W, 3, "h1"), V, 3, "h2")
    if head == "every":
        Hd = te.placeholder((n, 2, 4), "float32", "Hd")
        ins, grads = [x, W, V, Hd], list(te.differentiate(h, [x, W, V], head=Hd))
    else:
        r1, r2 = te.reduce_axis(2), te.reduce_axis(4)
        L = te.compute((), lambda: te.sum(h[n - 1, r1, r2] * h[n - 1, r1, r2], axis=[r1, r2]),
                       name="L")
        ins, grads = [x, W, V], list(te.differentiate(L, [x, W, V]))
    for T in (1, 7, 12):
        shapes = {"x": (T, 2, 4), "Hd": (T, 2, 4)}
        ck = agrees_with_its_full_tape(ins, grads, True, T, shapes)
        assert _lockstep(ck, "segments")
        assert "dW: adjoint-steps (step=t, added=at the checkpointed turns)" in str(ck.schedule)
    sig = Signature(grads, ins)
    prog, _, _ = generate(sig)
    skip = {t.uid for t in list(ins) + list(grads)}
    T = 240
    rows = {t.name: sig.shape(t, {"n": T}) for t in prog.tensors if t.uid not in skip}
    assert not {name: r for name, r in rows.items() if r and r[0] >= T - 1}, rows


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("T,k", [(13, 3), (4, 9)])
def test_an_lstm_on_an_rnn_layer(T, k, mode):
    # the LSTM's state s[t, b, 2, H] holds c and h; its input projections of h1 are
    # members of the group, its adjoint's sums reading ds between the adjoints
    B, H = 2, 3
    x = te.placeholder((T, B, H), "float32", "x")
    W1 = te.placeholder((H, H), "float32", "W1")
    Ws = [te.placeholder((H, H), "float32", f"W{g}") for g in "ifog"]
    Us = [te.placeholder((H, H), "float32", f"U{g}") for g in "ifog"]
    s = lstm_layer(tanh_layer(x, W1, k, "h1"), Ws, Us, k, "s")
    r1, r2 = te.reduce_axis(B), te.reduce_axis(H)
    L = te.compute((), lambda: te.sum(s[T - 1, r1, 1, r2] * s[T - 1, r1, 1, r2],
                                      axis=[r1, r2]), name="L")
    ins = [x, W1] + Ws + Us
    ck = agrees_with_its_full_tape(ins, list(te.differentiate(L, ins)), mode, T)
    assert _lockstep(ck, mode, ("h1", "s")) == checkpointed(T, k, mode, ck)

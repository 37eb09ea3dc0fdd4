"""Checkpointed gradients of the GRU and LSTM cells (issue 15 item 2): their adjoints
read the state through forward rows (the step sums h_sum, hoisted gates), their input
gradients hold sums, their weight gradients' hoisted terms read the adjoint a step
ahead. Each is checkpointed in both modes, bit-identical to the full tape of the same
program, close to the numpy backend, with rings of a turn's (a segment's) rows."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te
from benchmarks.recurrence_cells import arrays, names, te_program
from codegen.pipeline import generate
from codegen.schedule import Options
from codegen.signature import Signature

# T not a multiple of k, k = 1, k >= T, T = 1, k dividing T
STEPS = [(13, 3), (7, 1), (4, 9), (1, 1), (6, 2)]
MODES = [True, "segments"]
B, H, D = 2, 8, 4  # (H = 8: passes.hoist moves the gates out of the adjoint's sum)


def _check(ins, grads, T, mode, seed):
    """The ``checkpoint=mode`` build of ``grads``: bit-identical to the full tape of the
    same program and close to the numpy backend, each on its first call."""
    cell = "gru" if len(ins) == 7 else "lstm"
    data = arrays(cell, T, B, H, D, seed)
    ck = te.build(grads, inputs=ins, options=te.ScheduleOptions(checkpoint=mode))
    full = te.build(grads, inputs=ins, options=te.ScheduleOptions(checkpoint=False))
    ref = te.build(grads, inputs=ins, backend="numpy")
    for name, a, b, c in zip(names(cell), ck(*data), full(*data), ref(*data)):
        assert np.array_equal(a, b), name
        np.testing.assert_allclose(a, c, rtol=2e-4, atol=2e-5, err_msg=name)
    return ck


def _checkpointed(T, k, mode) -> bool:
    # one step has nothing to checkpoint; one segment (k = 1) would be the whole tape
    return T > 1 and not (mode == "segments" and k == 1)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("T,k", STEPS)
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_benchmark_cells_are_checkpointed_bit_for_bit(cell, T, k, mode):
    ins, grads = te_program(cell, T, B, H, D, k)
    ck = _check(ins, grads, T, mode, seed=T * 10 + k)
    assert ("checkpointed gradient" in ck.source) == _checkpointed(T, k, mode)
    if _checkpointed(T, k, mode):
        state = "h" if cell == "gru" else "s"
        kept = " ".join(ck.schedule.checkpoint)
        assert f"{state} ({'revolve' if mode is True else 'segments'}: " in kept
        assert f"{state} (ring of {T} rows)" not in kept


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("T,k", [(13, 3), (6, 2), (4, 9)])
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_a_loss_over_every_step_is_checkpointed_bit_for_bit(cell, T, k, mode):
    ins, grads = te_program(cell, T, B, H, D, k, loss="every")
    ck = _check(ins, grads, T, mode, seed=T + k)
    assert "checkpointed gradient" in ck.source


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_checkpointed_cells_agree_with_their_uncheckpointed_program(cell):
    # (checkpoints=None: the weight gradients are one sum over all steps, the input
    # gradient one product: the same values to rounding, not bit for bit)
    T, k = 11, 3
    data = arrays(cell, T, B, H, D, 1)
    ins, grads = te_program(cell, T, B, H, D, k)
    ins0, grads0 = te_program(cell, T, B, H, D, None)
    got = te.build(grads, inputs=ins)(*data)
    want = te.build(grads0, inputs=ins0)(*data)
    for name, a, b in zip(names(cell), got, want):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6, err_msg=name)


def _scratch_rows(cell, T, k, mode):
    """name -> rows along the steps of every buffer of the checkpointed gradient that
    is no input, no output, and not an input projection x* (computed for all steps
    before the recurrence, as JAX and PyTorch do)."""
    ins, grads = te_program(cell, T, B, H, D, k)
    sig = Signature(grads, ins)
    prog, src, _ = generate(sig, Options(checkpoint=mode))
    assert "checkpointed gradient" in src
    skip = {t.uid for t in list(ins) + list(grads)}
    return {t.name: sig.shape(t, {}) for t in prog.tensors
            if t.uid not in skip and not t.name.startswith("x")}


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_checkpointed_cells_keep_k_plus_t_over_k_rows(cell):
    T, k = 240, 6
    # revolve: k checkpoints of one row; the state, its adjoint, the forward rows and
    # the consumers read at the turns in rings of a turn's rows
    rows = _scratch_rows(cell, T, k, True)
    state = "h" if cell == "gru" else "s"
    assert rows[f"{state}_checkpoints"][0] == k
    steps = {n: r for n, r in rows.items() if r and r[0] >= T - 1}
    assert not steps, steps  # nothing kept for every step
    assert max(r[0] for n, r in rows.items() if n.endswith("_ring")) <= 2
    # segments: k checkpoints, and rings of a segment (T / k steps) and a few rows
    rows = _scratch_rows(cell, T, k, "segments")
    seg = T // k
    assert rows[f"{state}_checkpoints"][0] == k
    assert not {n: r for n, r in rows.items() if r and r[0] >= T - 1}
    assert max(r[0] for n, r in rows.items() if n.endswith("_ring")) <= seg + 2
    # the schedule says so
    ins, grads = te_program(cell, T, B, H, D, k)
    kept = te.build(grads, inputs=ins, options=te.ScheduleOptions(
        checkpoint="segments")).schedule.checkpoint
    assert f"{state} (segments: {k} checkpoints x 1 rows)" in kept
    assert f"{state} (ring of {seg + 1} rows)" in kept


def _three_part_cell(checkpoints):
    # a state of three parts s[t, b, w, j] with selects on w, two sums over different
    # parts of the previous step, a gate read by every gradient (passes.share), an input
    # projection over a unit axis (passes.squeeze) and a loss over every step
    T, Bn, Dn, Hn = 5, 3, 4, 6
    x = te.placeholder((T, Bn, Dn), "float64", "x")
    Wx = te.placeholder((Dn, 1, Hn), "float64", "Wx")
    U = te.placeholder((Hn, Hn), "float64", "U")
    V = te.placeholder((Hn, Hn), "float64", "V")
    d, k = te.reduce_axis(Dn, "d"), te.reduce_axis(Hn, "k")
    xp = te.compute((T, Bn, 1, Hn), lambda t, b, o, j: te.sum(x[t, b, d] * Wx[d, o, j], axis=d),
                    name="xp", dtype="float64")

    def prev(s, t, b, j, W, part):
        return te.select(t == 0, 0.0, te.sum(s[t - 1, b, part, k] * W[k, j], axis=k))

    def fn(s, t, b, w, j):
        g = te.sigmoid(xp[t, b, 0, j] + prev(s, t, b, j, U, 2))
        c = g * te.select(t == 0, 0.0, s[t - 1, b, 0, j]) + (1.0 - g) * te.tanh(xp[t, b, 0, j])
        m = te.tanh(prev(s, t, b, j, V, 0) + c)
        return te.select(w == 0, c, te.select(w == 1, m, g * te.tanh(c) + 0.1 * m))
    s = te.recurrence((T, Bn, 3, Hn), fn, name="s", dtype="float64", checkpoints=checkpoints)
    r = [te.reduce_axis(n) for n in (T, Bn, Hn)]
    L = te.compute((), lambda: te.sum(s[r[0], r[1], 2, r[2]] ** 2 + 0.5 * s[r[0], r[1], 1, r[2]],
                                      axis=r), name="L", dtype="float64")
    ins = [x, Wx, U, V]
    rng = np.random.default_rng(7)
    return L, ins, [rng.uniform(-1, 1, t.shape) * (1.0 if t is x else 0.5) for t in ins]


def test_a_three_part_state_agrees_with_central_differences_and_its_full_tape():
    from tests.passes.gradcheck import check_grads
    L, ins, arrs = _three_part_cell(None)
    check_grads(L, ins, arrs, backend="c", tol=1e-6)
    L, ins, arrs = _three_part_cell(2)
    grads = list(te.differentiate(L, ins))
    full = te.build(grads, ins, options=te.ScheduleOptions(checkpoint=False))(*arrs)
    for mode in MODES:
        f = te.build(grads, ins, options=te.ScheduleOptions(checkpoint=mode))
        assert any("ring" in c for c in f.schedule.checkpoint)
        for a, b in zip(f(*arrs), full):
            np.testing.assert_array_equal(a, b)

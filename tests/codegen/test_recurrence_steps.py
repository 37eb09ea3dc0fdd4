"""Recurrences by steps (codegen.recurrence_steps): each step's sums over earlier steps for
all positions at once. Checked against the numpy backend and against the point-by-point
loops (the same values), for cells of several shapes, both directions, rings, gradients."""
from __future__ import annotations

import numpy as np

import tensorexpr as te
from codegen import recurrence_steps

from .util import agree, rand


def _rnn(T=7, B=3, D=12, where=None):
    W = te.placeholder((D, D), name="W")
    x = te.placeholder((T, B, D), name="x")
    k = te.reduce_axis(D, name="k")

    def fn(h, t, b, j):
        s = te.sum(h[t - 1, b, k] * W[k, j], axis=k,
                   where=None if where is None else where(t, b, k))
        return te.tanh(x[t, b, j] + te.select(t == 0, 0.0, s))
    h = te.recurrence((T, B, D), fn, name="h")
    return h, [x, W], [rand((T, B, D)), rand((D, D), seed=1) * 0.3]


def _gru(T=6, B=2, D=10, dtype="float64"):
    x = [te.placeholder((T, B, D), dtype, n) for n in ("xz", "xr", "xn")]
    U = [te.placeholder((D, D), dtype, n) for n in ("Uz", "Ur", "Un")]

    def prev(h, t, b, j, W):
        k = te.reduce_axis(D, "k")
        return te.select(t == 0, 0.0, te.sum(h[t - 1, b, k] * W[k, j], axis=k))

    def fn(h, t, b, j):
        z = te.sigmoid(x[0][t, b, j] + prev(h, t, b, j, U[0]))
        r = te.sigmoid(x[1][t, b, j] + prev(h, t, b, j, U[1]))
        n = te.tanh(x[2][t, b, j] + r * prev(h, t, b, j, U[2]))
        return (1.0 - z) * n + z * te.select(t == 0, 0.0, h[t - 1, b, j])
    h = te.recurrence((T, B, D), fn, name="h", dtype=dtype)
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal((T, B, D)) for _ in x] + \
        [rng.standard_normal((D, D)) * 0.3 for _ in U]
    return h, x + U, arrays


def test_a_tanh_rnn_runs_by_steps_and_agrees():
    h, ins, arrays = _rnn()
    f, (got,) = agree([h], ins, *arrays)
    assert f.schedule["h"].strategy == "steps"
    assert f.schedule["h_step0"].strategy == "rows"  # the step's sum: a row-tiled product
    plain = te.build(h, ins, options=te.ScheduleOptions(force={"h": "loops"}))
    # (the point-by-point loops sum in vector lanes: another association of each sum)
    np.testing.assert_allclose(plain(*arrays), got, rtol=1e-5, atol=1e-6)


def test_a_descending_recurrence_by_steps():
    # an adjoint runs its recurrence backwards: dh[t] reads dh[t + 1] in its sums
    h, ins, arrays = _rnn(T=5, B=2, D=8)
    H = te.placeholder(h.shape, name="H")
    grads = te.differentiate(h, ins, head=H)
    dh = grads.adjoints[h]
    assert dh.carry.step == -1
    g, _ = agree(list(grads), ins + [H], *arrays, rand(h.shape, seed=4), rtol=1e-4, atol=1e-5)
    assert g.schedule[dh.name].strategy == "steps"


def test_a_gru_forward_and_gradient_by_steps():
    h, ins, arrays = _gru()
    f, _ = agree([h], ins, *arrays)
    assert f.schedule["h"].param("step sums") == ("h_step0", "h_step1", "h_step2")
    H = te.placeholder(h.shape, "float64", "H")
    grads = te.differentiate(h, ins, head=H)
    g, _ = agree(list(grads), ins + [H], *arrays, rand(h.shape, "float64", seed=9))
    adjoint = g.schedule[grads.adjoints[h].name]
    assert adjoint.strategy == "steps"
    # each term's partials (sigmoids of the forward sums), which do not use the output
    # column, are computed once per position, before the steps (passes.hoist)
    assert {c.split("[")[0] for c in g.schedule.hoisted} >= {f"{adjoint.tensor}_h{k}"
                                                            for k in range(3)}


def _cell(step, T=5, B=2, D=6):
    """``h = te.recurrence(step(h, t, b, j, x, W, k))`` with its inputs and random arrays."""
    W = te.placeholder((D, D), name="W")
    x = te.placeholder((T, B, D), name="x")
    k = te.reduce_axis(D, name="k")
    h = te.recurrence((T, B, D), lambda h, t, b, j: step(h, t, b, j, x, W, k), name="h")
    return h, [x, W], [rand((T, B, D)), rand((D, D), seed=1) * 0.3]


def test_a_factor_that_needs_a_column_stays_and_a_select_moves_whole():
    h, ins, arrays = _cell(lambda h, t, b, j, x, W, k: x[t, b, j] + te.select(
        t == 0, 0.0, te.sum(te.exp(h[t - 1, b, k] + W[k, j]) * te.select(
            x[t, b, k] > 0, te.tanh(h[t - 1, b, k]), 1.0), axis=k)))
    p = recurrence_steps.plan(h)
    # exp uses the column j: it stays; the select (with its tanh) does not: it moves whole,
    # its condition with it (never its taken branch alone)
    assert [s.name for s in p.sums] == ["h_step0_h0", "h_step0"]
    moved = p.sums[0].body.a
    assert isinstance(moved, te.ir.Select) and moved.cond.a.tensor.name == "x"
    agree([h], ins, *arrays)


def test_a_sum_under_a_condition_on_another_axis_is_stored_where_it_holds():
    h, ins, arrays = _cell(lambda h, t, b, j, x, W, k: x[t, b, j] + te.select(
        (t > 0) & (j % 2 == 0), te.sum(h[t - 1, b, k] * W[k, j], axis=k), 0.0))
    (s,) = recurrence_steps.plan(h).sums
    assert "j % 2 == 0" in str(s.body.where).replace("(", "").replace(")", "")
    f, _ = agree([h], ins, *arrays)
    assert f.schedule["h"].strategy == "steps"


def test_a_sum_under_a_condition_reading_values_stays_point_by_point():
    h, ins, arrays = _cell(lambda h, t, b, j, x, W, k: x[t, b, j] + te.select(
        (t > 0) & (x[t, b, j] > 0), te.sum(h[t - 1, b, k] * W[k, j], axis=k), 0.0))
    assert recurrence_steps.plan(h) is None
    f, _ = agree([h], ins, *arrays)
    assert f.schedule["h"].strategy == "loops"


def test_a_state_of_parts_computes_each_sum_once_per_position():
    # an LSTM-like state s[t, b, w, j]: w = 0 the cell, w = 1 the output; the cell's sum
    # is read under w == 0 and under w != 0 (inside the output), the output gate's under
    # w != 0 only: each is a tensor over (b, j), computed once per step, not per w
    T, B, D = 6, 2, 8
    x = te.placeholder((T, B, D), "float64", "x")
    U = te.placeholder((D, D), "float64", "U")
    V = te.placeholder((D, D), "float64", "V")
    k = te.reduce_axis(D, name="k")

    def prev(s, t, b, j, W):
        return te.select(t == 0, 0.0, te.sum(s[t - 1, b, 1, k] * W[k, j], axis=k))

    def fn(s, t, b, w, j):
        c = te.tanh(x[t, b, j] + prev(s, t, b, j, U)) + 0.5 * te.select(
            t == 0, 0.0, s[t - 1, b, 0, j])
        return te.select(w == 0, c, te.sigmoid(prev(s, t, b, j, V)) * te.tanh(c))
    s = te.recurrence((T, B, 2, D), fn, name="s", dtype="float64")
    p = recurrence_steps.plan(s)
    assert [x.shape for x in p.sums] == [(B, D), (B, D)]
    assert all("w" not in str(x.body) for x in p.sums)
    f, _ = agree([s], [x, U, V], rand((T, B, D), "float64"), rand((D, D), "float64", 1) * 0.3,
                 rand((D, D), "float64", 2) * 0.3)
    assert f.schedule["s"].strategy == "steps"
    # its gradient: the adjoint's sum feeds the output part only (where w == 1): a
    # tensor over (b, j) too, and the gradients agree with the numpy backend
    H = te.placeholder((T, B, 2, D), "float64", "H")
    grads = te.differentiate(s, [x, U, V], head=H)
    (ds,) = [t for t in te.ir.topo_order(list(grads)) if getattr(t, "carry", None) is not None
             and t.carry.step < 0]
    assert [x.shape for x in recurrence_steps.plan(ds).sums][-1] == (B, D)
    f, _ = agree(list(grads), [x, U, V, H], rand((T, B, D), "float64"),
                 rand((D, D), "float64", 1) * 0.3, rand((D, D), "float64", 2) * 0.3,
                 rand((T, B, 2, D), "float64", 3))
    assert f.schedule[ds.name].strategy == "steps"


def test_a_where_on_the_step_and_the_sum_axis():
    h, ins, arrays = _rnn(where=lambda t, b, k: (k <= t) & (b + k < 14))
    f, _ = agree([h], ins, *arrays)
    assert f.schedule["h"].strategy == "steps"


def test_a_checkpointed_recurrence_by_steps_keeps_its_ring():
    T, B, D = 9, 2, 8
    W = te.placeholder((D, D), "float64", "W")
    x = te.placeholder((T, B, D), "float64", "x")
    k = te.reduce_axis(D, name="k")
    h = te.recurrence((T, B, D), lambda h, t, b, j: te.tanh(x[t, b, j] + te.select(
        t == 0, 0.0, te.sum(h[t - 1, b, k] * W[k, j], axis=k))), name="h", dtype="float64")
    last = te.compute((B, D), lambda b, j: h[T - 1, b, j] * 2.0, name="last")
    f, _ = agree([last], [x, W], rand((T, B, D), "float64"), rand((D, D), "float64", 1) * 0.3)
    assert f.schedule["h"].strategy == "steps" and f.schedule.checkpoint


def test_forcing_loops_on_a_recurrence_leaves_no_step_buffers():
    h, ins, arrays = _rnn()
    f = te.build(h, ins, options=te.ScheduleOptions(force={"h": "loops"}))
    assert f.schedule.strategies() == {"h": "loops"}
    assert "h_step0" not in f.source


def test_a_sum_on_both_branches_of_a_condition_on_the_step_is_computed_at_both():
    # one sum object under t == 2 and under its negation (as a let-bound value is): its
    # domain is what both paths share, t >= 2 (a domain of the first path found alone,
    # t != 2, read it as 0.0 at t == 2)
    def step(h, t, b, j, x, W, k):
        S = te.sum(h[t - 1, b, k] * W[k, j], axis=k)
        return x[t, b, j] + te.select(t < 2, 0.0, te.select(t == 2, S, 0.5 * te.tanh(S)))
    h, ins, arrays = _cell(step)
    f, _ = agree([h], ins, *arrays)
    assert f.schedule["h"].strategy == "steps"


def test_an_lstm_with_its_two_part_state_runs_by_steps():
    # s[t, b, 0] = c, s[t, b, 1] = h: the gate sums sit under select(w == 0, c,
    # o * tanh(c)), both branches reading c
    from benchmarks.recurrence_cells import te_cell
    ins, s, _ = te_cell("lstm", 5, 2, 6, 3, None, "float64")
    p = recurrence_steps.plan(s)
    # one sum per gate and unit (the part of the state w is not one of their axes)
    assert [x.shape for x in p.sums] == [(2, 6)] * 4
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(p.shape) * (0.3 if p.name[0] == "U" else 1.0) for p in ins]
    f, _ = agree([s], ins, *arrays)
    assert f.schedule["s"].strategy == "steps"
    H = te.placeholder(s.shape, "float64", "H")
    grads = te.differentiate(s, ins, head=H)
    agree(list(grads), ins + [H], *arrays, rand(s.shape, "float64", seed=2))


def test_a_sum_under_a_condition_on_an_axis_it_uses_is_computed_only_there():
    # (b < 1 is on an axis the sum reads at: the condition stays in the sum's domain)
    h, ins, arrays = _cell(lambda h, t, b, j, x, W, k: x[t, b, j] + te.select(
        (t > 0), te.select(b < 1, te.sum(h[t - 1, b, k] * W[k, j], axis=k), 0.0), 0.0))
    (s,) = recurrence_steps.plan(h).sums
    assert "b < 1" in str(s.body.where).replace("(", "").replace(")", "")
    f, _ = agree([h], ins, *arrays)
    assert f.schedule["h"].strategy == "steps"


def test_a_compared_sum_along_checkpointed_steps_keeps_written_order():
    # audit of compared sums (patterns.compared_sums) in the lowerings by steps: a max
    # over sums of a checkpointed recurrence's rows runs by step-rows, a step at a time,
    # and the max's tie test recomputes the sum in written order; a max over sums
    # *across* the steps keeps the full tape. Were the orders to differ, the gradient
    # would silently be 0 (no tie found): checked against central differences (float64)
    # and numpy, first and second order, both checkpoint modes (harness seeds 0..1)
    from tests.fuzz.harness import check
    T, K, B = 6, 5, 3
    x = te.placeholder((T, K), dtype="float64", name="x")
    W = te.placeholder((K, B), dtype="float64", name="W")
    h = te.recurrence((T, K), lambda h, t, c: te.select(
        t == 0, x[0, c], te.tanh(h[t - 1, c]) + x[t, c]), name="h", dtype="float64",
        checkpoints=2)
    k, j = te.reduce_axis(K, "k"), te.reduce_axis(B, "j")
    tt, jj = te.reduce_axis(T, "tt"), te.reduce_axis(K, "jj")
    within = te.compute((T,), lambda t: te.max(te.sum(h[t, k] * W[k, j], axis=k), axis=j),
                        name="M")
    across = te.compute((), lambda: te.max(te.sum(h[tt, jj] * x[tt, jj], axis=tt), axis=jj),
                        name="A")
    H = te.placeholder((T,), dtype="float64", name="H")
    f = te.build([within, *te.differentiate(within, [x, W], head=H)], [x, W, H])
    assert f.schedule["M_sum"].strategy == "step-rows"
    a = [rand((T, K), "float64"), rand((K, B), "float64", seed=1)]
    for seed in range(2):  # (CI time: each seed ~6 s)
        check(within, [x, W], a, seed=seed, second_order=True)
        check(across, [x], a[:1], seed=seed, second_order=True)


def test_a_compared_sum_run_by_steps_adds_in_written_order_in_its_step():
    # found by the fuzzer: a max over sums of a checkpointed recurrence's rows of 17
    # terms. Its tie test reads M_sum, run by step-rows; M_sum's step (M_sum_step0)
    # was no compared sum (nothing compares it: M_sum does) and added its 17 terms in
    # 16 lanes, M's step in order: no tie found, dx and dW silently wrong (by 1 to 15)
    from tests.fuzz.harness import check
    T, K, J = 4, 17, 2
    x = te.placeholder((T, K), dtype="float64", name="x")
    W = te.placeholder((K, J), dtype="float64", name="W")
    h = te.recurrence((T, K), lambda S, t, c: te.sin(
        x[t, c] + 0.5 * te.select(t >= 1, S[t - 1, c], 0.0)), name="h", dtype="float64",
        checkpoints=1)
    k, j = te.reduce_axis(K, "k"), te.reduce_axis(J, "j")
    M = te.compute((T,), lambda t: te.max(te.sum(h[t, k] * W[k, j], axis=k), axis=j),
                   name="M", dtype="float64")
    Y = te.compute((T, K), lambda t, c: 0.5 * h[t, c] + 0.5 * M[t], name="Y", dtype="float64")
    a = [rand((T, K), "float64"), rand((K, J), "float64", seed=1)]
    H = te.placeholder(Y.shape, dtype="float64", name="H")
    f = te.build([Y, *te.differentiate(Y, [x, W], head=H)], [x, W, H])
    assert f.schedule["M_sum"].strategy == "step-rows"
    for seed in range(2):
        check(Y, [x, W], a, seed=seed)

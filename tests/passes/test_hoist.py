"""Invariant hoisting (passes.hoist): what moves, what must stay, and that values do not change."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te
from passes.hoist import MIN_REDUNDANCY, hoist, invariant_parts

from .gradcheck import check_grads


def _both(outs, ins, arrays):
    """The C build with hoisting and without, and the numpy backend: all agree."""
    f = te.build(outs, ins)
    plain = te.build(outs, ins, options=te.ScheduleOptions(hoist=False))
    ref = te.build(outs, ins, backend="numpy")
    got, want, base = (np.asarray(g(*arrays)) for g in (f, ref, plain))
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got, base, rtol=1e-12, atol=1e-14)
    return f


def test_a_weight_gradient_of_a_recurrent_cell_reads_its_partials_stored():
    # dU[k, j] = sum_{t, b} dh[t, b, j] * sigmoid'(...)[t, b, j] * h[t - 1, b, k]: the
    # sigmoid does not use k, so it is stored once per (t, b, j), not once per k
    T, B, D = 5, 3, 6
    x = te.placeholder((T, B, D), "float64", "x")
    U = te.placeholder((D, D), "float64", "U")

    def cell(h, t, b, j):  # a gate: the sigmoid is not the cell's value
        k = te.reduce_axis(D, "k")
        return x[t, b, j] * te.sigmoid(te.select(t == 0, 0.0, te.sum(h[t - 1, b, k] * U[k, j],
                                                                     axis=k)))
    h = te.recurrence((T, B, D), cell, name="h", dtype="float64")
    Hd = te.placeholder((T, B, D), "float64", "Hd")
    grads = te.differentiate(h, [x, U], head=Hd)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((T, B, D)), rng.standard_normal((D, D)) * 0.4,
              rng.standard_normal((T, B, D))]
    f = _both([grads[1]], [x, U, Hd], arrays)
    # and the adjoint's partials inside its sum over a step (P[t + 1, b, j'] * U[j, j'])
    # are computed for every step before its sequential loop; both read the sigmoid,
    # stored once (passes.share)
    assert [line.split("[")[0] for line in f.schedule.hoisted] == ["dh_h0", "dU_h0", "dh_h0_s0"]
    r = [te.reduce_axis(n) for n in (T, B, D)]
    L = te.compute((), lambda: te.sum(h[r[0], r[1], r[2]] ** 2, axis=r), name="L",
                   dtype="float64")
    check_grads(L, [x, U], arrays[:2], backend="c", tol=1e-6)


def test_the_largest_invariant_part_moves_with_its_reduction_offset():
    X = te.placeholder((9, 4), "float64", "X")
    W = te.placeholder((9, 8), "float64", "W")
    t = te.reduce_axis((2, 9), "t")
    Y = te.compute((4, 8), lambda i, j: te.sum(te.exp(X[t, i]) * 0.5 * W[t, j], axis=t),
                   name="Y", dtype="float64")
    Y2, (G,) = hoist(Y)
    assert G.shape == (7, 4) and str(G.body) == "(exp(X[t + 2, i]) * 0.5d)"
    rng = np.random.default_rng(1)
    _both([Y], [X, W], [rng.standard_normal((9, 4)), rng.standard_normal((9, 8))])


def test_a_guarded_part_is_stored_only_where_its_guard_holds():
    # exp(X[k - 1]) is in range only where k > 0: stored over every k it would read X[-1]
    X = te.placeholder((8,), "float64", "X")
    W = te.placeholder((8, 8), "float64", "W")
    k = te.reduce_axis(8, "k")
    Y = te.compute((8,), lambda j: te.sum(te.select(k > 0, te.exp(X[k - 1]), 0.0) * W[k, j],
                                          axis=k), name="Y", dtype="float64")
    assert [(str(e), g) for e, g in invariant_parts(Y)] == [
        ("select(k > 0, exp(X[k - 1]), 0.0d)", ())]  # the select moves whole
    k2 = te.reduce_axis(8, "k")
    Z = te.compute((8,), lambda j: te.sum(te.exp(X[k2 - 1]) * W[k2, j], axis=k2, where=k2 > 0),
                   name="Z", dtype="float64")
    _, (G,) = hoist(Z)
    assert str(G.body) == "select(k > 0, exp(X[k - 1]), 0.0d)"  # under the sum's where
    k3 = te.reduce_axis(8, "k")
    # the guard uses j, which the part does not: projected onto k (some j > 2 exists for
    # every k), the part is stored for every k; a part under two different guards:
    # stored under neither
    V = te.compute((8,), lambda j: te.sum(te.select(j > 2, te.exp(X[k3]), 0.0) * W[k3, j],
                                          axis=k3), name="V", dtype="float64")
    k4 = te.reduce_axis(8, "k")
    e = te.exp(X[k4])
    U = te.compute((8,), lambda j: te.sum(te.select(k4 > 1, e, X[j]) * W[k4, j] + te.select(
        k4 < 5, e, X[j]) * W[j, k4], axis=k4), name="U", dtype="float64")
    assert [(str(e), g) for e, g in invariant_parts(V)] == [("exp(X[k])", ())]
    assert invariant_parts(U) == []
    rng = np.random.default_rng(2)
    _both([Y, Z, V, U], [X, W], [rng.standard_normal(8), rng.standard_normal((8, 8))])


def test_a_guard_on_an_axis_the_part_misses_is_projected_onto_its_axes():
    # exp(X[k - j]) is in range only where k >= j; the guard also uses i, which the part
    # does not: it is stored where some i satisfies the guard (k >= j + 2, from i <= 5)
    X = te.placeholder((8,), "float64", "X")
    W = te.placeholder((8, 8), "float64", "W")
    k = te.reduce_axis(8, "k")
    Y = te.compute((8, 8), lambda i, j: te.sum(
        te.select((k - j >= 0) & (k - j >= 7 - i) & (i <= 5), te.exp(X[k - j]), 0.0)
        * W[k, i], axis=k), name="Y", dtype="float64")
    ((e, conds),) = invariant_parts(Y)
    assert str(e) == "exp(X[k - j])"
    assert " & ".join(map(str, conds)) == "((k - j) >= 0) & (k >= (j + 2))"
    # a guard reading values cannot be projected: the part stays
    Z = te.compute((8, 8), lambda i, j: te.sum(
        te.select(X[i] + X[j] > 0, te.exp(X[k]), 0.0) * W[k, j], axis=k), name="Z", dtype="float64")
    assert invariant_parts(Z) == []
    rng = np.random.default_rng(3)
    _both([Y, Z], [X, W], [rng.standard_normal(8), rng.standard_normal((8, 8))])


def test_cheap_or_barely_repeated_parts_stay():
    X = te.placeholder((8, 8), "float64", "X")
    k = te.reduce_axis(8, "k")
    cheap = te.compute((8, 8), lambda i, j: te.sum(X[i, k] * 2.0 * X[k, j], axis=k))
    assert invariant_parts(cheap) == []
    n = MIN_REDUNDANCY - 1
    k2 = te.reduce_axis(8, "k")
    few = te.compute((8, n), lambda i, j: te.sum(te.exp(X[i, k2]) * X[k2, j], axis=k2))
    assert invariant_parts(few) == []
    recur = te.recurrence((8, 8), lambda r, t, j: te.select(
        t == 0, 0.0, te.exp(r[t - 1, 0]) + r[t - 1, j]), name="r", dtype="float64")
    assert invariant_parts(recur) == []  # a recurrence's own values stay in its body


def test_a_hoisted_tensor_has_its_own_parts_hoisted():
    # the invariant part holds a reduction whose body has an invariant part of its own
    X = te.placeholder((6, 5), "float64", "X")
    V = te.placeholder((5, 7), "float64", "V")
    k = te.reduce_axis(5, "k")
    m = te.reduce_axis(6, "m")
    Y = te.compute((6, 7), lambda i, j: te.sum(
        te.tanh(te.sum(te.exp(X[m, k]) * X[i, k], axis=k)) * V[(i + m) % 5, j], axis=m),
        name="Y", dtype="float64")
    rng = np.random.default_rng(3)
    f = _both([Y], [X, V], [rng.standard_normal((6, 5)), rng.standard_normal((5, 7))])
    assert len(f.schedule.hoisted) == 2, f.schedule.hoisted


def test_symbolic_sizes_hoist_and_agree_at_several_sizes():
    n = te.var("n")
    X = te.placeholder((n, 4), "float64", "X")
    W = te.placeholder((n, 16), "float64", "W")
    t = te.reduce_axis(n, "t")
    Y = te.compute((4, 16), lambda i, j: te.sum(te.tanh(X[t, i]) * W[t, j], axis=t),
                   name="Y", dtype="float64")
    f = te.build(Y, [X, W])
    assert f.schedule.hoisted
    ref = te.build(Y, [X, W], backend="numpy")
    rng = np.random.default_rng(4)
    for size in (1, 3, 17):
        a = [rng.standard_normal((size, 4)), rng.standard_normal((size, 16))]
        np.testing.assert_allclose(f(*a), ref(*a), rtol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_hoisted_value_is_the_one_computed_inline(dtype):
    # the stored part is the same expression in the same type: bit for bit
    X = te.placeholder((33, 20), dtype, "X")
    W = te.placeholder((33, 12), dtype, "W")
    t = te.reduce_axis(33, "t")
    Y = te.compute((20, 12), lambda i, j: te.sum(te.sigmoid(X[t, i]) * W[t, j], axis=t),
                   name="Y", dtype=dtype)
    Z = te.compute((20, 12), lambda i, j: te.sigmoid(X[3, i]) * W[5, j], name="Z", dtype=dtype)
    rng = np.random.default_rng(5)
    a = [rng.standard_normal((33, 20)).astype(dtype), rng.standard_normal((33, 12)).astype(dtype)]
    f = te.build([Z], [X, W])
    plain = te.build([Z], [X, W], options=te.ScheduleOptions(hoist=False))
    assert f.schedule.hoisted and not plain.schedule.hoisted
    np.testing.assert_array_equal(f(*a), plain(*a))
    ref = te.build(Y, [X, W], backend="numpy")
    np.testing.assert_allclose(te.build(Y, [X, W])(*a), ref(*a), rtol=1e-5 if dtype == "float32"
                               else 1e-12)


def test_several_sums_in_one_body_become_tensors_the_table_can_tile():
    # an LSTM's gates, x @ Wx + h @ Wh + b: two sums in one loop nest were two plain
    # dot products per element (forward 400 ms at B=64, I=Hd=256)
    B, I, Hd = 16, 24, 40
    x = te.placeholder((B, I), "float64", "x")
    h = te.placeholder((B, Hd), "float64", "h")
    Wx = te.placeholder((I, 4 * Hd), "float64", "Wx")
    Wh = te.placeholder((Hd, 4 * Hd), "float64", "Wh")
    b = te.placeholder((4 * Hd,), "float64", "b")
    kx, kh = te.reduce_axis(I, "kx"), te.reduce_axis(Hd, "kh")
    gates = te.compute((B, 4 * Hd), lambda i, j: te.sum(x[i, kx] * Wx[kx, j], axis=kx)
                       + te.sum(h[i, kh] * Wh[kh, j], axis=kh) + b[j], name="gates",
                       dtype="float64")
    assert [str(e).split(" (")[0] for e, _ in invariant_parts(gates)] == [
        "(sum_{kx in [0, 24)}", "(sum_{kh in [0, 40)}"]
    rng = np.random.default_rng(6)
    arrays = [rng.standard_normal(s) for s in ((B, I), (B, Hd), (I, 4 * Hd), (Hd, 4 * Hd),
                                               (4 * Hd,))]
    f = _both([gates], [x, h, Wx, Wh, b], arrays)
    assert f.schedule["gates_h0"].strategy == f.schedule["gates_h1"].strategy == "rows"
    # one sum with an epilogue is left to the table (rows with an epilogue), and so are
    # sums under conditions and a recurrence's sums (scheduled by steps)
    k = te.reduce_axis(I, "k")
    one = te.compute((B, 4 * Hd), lambda i, j: te.sum(x[i, k] * Wx[k, j], axis=k) + b[j])
    k2, k3 = te.reduce_axis(I, "k2"), te.reduce_axis(Hd, "k3")
    guarded = te.compute((B, 4 * Hd), lambda i, j: te.select(
        j > 3, te.sum(x[i, k2] * Wx[k2, j], axis=k2), te.sum(h[i, k3] * Wh[k3, j], axis=k3)))
    assert invariant_parts(one) == [] and invariant_parts(guarded) == []


def test_one_sum_written_twice_is_not_several():
    # sum_k X[i, k] * sum_k X[i, k]: the lowering computes the sum once; it stays so
    X = te.placeholder((5, 6), "float64", "X")
    k = te.reduce_axis(6, "k")
    S = te.compute((5,), lambda i: te.sum(X[i, k], axis=k) * te.sum(X[i, k], axis=k), name="sq",
                   dtype="float64")
    assert invariant_parts(S) == []


def test_a_sum_whose_value_is_compared_stays_where_it_is_written():
    # the fuzzer's program: min_{k2, k3} of a sum over (k4, k5) that does not use k2, k3.
    # Stored apart, the sum was added in another order than inline in the gradient's tie
    # test, which then found no tie: dX1 = 0 instead of 9
    n = te.var("n")
    X1 = te.placeholder((n,), dtype="float64", name="X1")
    k2, k3 = te.reduce_axis((0, 2), name="k2"), te.reduce_axis((0, n), name="k3")
    k4, k5 = te.reduce_axis((0, 3), name="k4"), te.reduce_axis((0, 3), name="k5")
    T2 = te.compute((n,), lambda i0: te.min(te.sum(te.select(
        i0 % 2 == 0, X1[i0], te.const(1.0, "float64")), axis=[k4, k5]), axis=[k2, k3],
        where=(i0 < i0) | ((k2 == 0) & (k3 == 0))), name="T2", dtype="float64")
    assert invariant_parts(T2) == []
    H = te.placeholder((n,), "float64", "H")
    (g,) = te.differentiate(T2, [X1], head=H)
    x, h = np.array([-0.5645056439685436]), np.array([1.0])
    assert te.build(g, [X1, H])(x, h) == te.build(g, [X1, H], backend="numpy")(x, h) == 9.0
    # a part without a sum is the same bits wherever it is computed: it still moves
    X = te.placeholder((4,), dtype="float64", name="X")
    k6 = te.reduce_axis((0, 8), name="k6")
    M = te.compute((4,), lambda i: te.max(te.exp(X[i]) * X[k6 % 4], axis=k6), name="M",
                   dtype="float64")
    assert [str(e) for e, _ in invariant_parts(M)] == ["exp(X[i])"]
    xs = np.random.default_rng(7).standard_normal(4)
    np.testing.assert_allclose(te.build(M, [X])(xs), te.build(M, [X], backend="numpy")(xs),
                               rtol=1e-14)


def test_a_product_is_regrouped_so_the_head_is_stored_with_the_partials():
    # dWh[k, c] of a GRU-like cell with gates read from one weight W[k, g*D + j]: the
    # adjoint writes dh * (P * h[t - 1, b, k]); regrouped as (dh * P) * h[t - 1, b, k],
    # the stored part holds the head too, laid out as its reads ([t, b, j]), and each
    # gate's piece of dWh is a contraction of two stored tensors
    T, B, D = 4, 3, 8
    x = te.placeholder((T, B, 2 * D), "float64", "x")
    W = te.placeholder((D, 2 * D), "float64", "W")

    def cell(h, t, b, j):
        def hw(g):
            k = te.reduce_axis(D, "k")
            return te.select(t == 0, 0.0, te.sum(h[t - 1, b, k] * W[k, g * D + j], axis=k))
        z = te.sigmoid(x[t, b, j] + hw(0))
        return z * te.tanh(x[t, b, D + j] + hw(1))
    h = te.recurrence((T, B, D), cell, name="h", dtype="float64")
    Hd = te.placeholder((T, B, D), "float64", "Hd")
    (dW,) = te.differentiate(h, [W], head=Hd)
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal((T, B, 2 * D)), rng.standard_normal((D, 2 * D)) * 0.4,
              rng.standard_normal((T, B, D))]
    f = _both([dW], [x, W, Hd], arrays)
    parts = [line for line in f.schedule.hoisted if line.startswith("dW_h")]
    assert parts and all("[t, b, j]" in line or "[t, b, i1]" in line for line in parts), parts
    assert [c.strategy for c in f.schedule.choices if c.tensor.startswith("dW[")] == ["rows"] * 2
    r = [te.reduce_axis(n) for n in (T, B, D)]
    L = te.compute((), lambda: te.sum(h[r[0], r[1], r[2]] ** 2, axis=r), name="L",
                   dtype="float64")
    check_grads(L, [x, W], arrays[:2], backend="c", tol=1e-6)


def test_a_part_over_a_symbolic_range_that_may_be_empty_has_no_negative_size():
    # exp(X[k]) over k in [2, n) is hoisted (the guard on i projects away); at n = 1 the
    # range is empty and its tensor has extent max(n - 2, 0), not n - 2 (fuzz seed 1127:
    # numpy refused a negative scratch size)
    n = te.var("n")
    X = te.placeholder((n,), "float64", "X")
    k = te.reduce_axis((2, n), "k")
    Y = te.compute((3, n), lambda i, j: te.sum(te.select(i >= 1, te.exp(X[k]), 0.0) * X[j],
                                               axis=k), name="Y", dtype="float64")
    _, new = hoist(Y)
    assert [str(d) for d in new[0].shape] == ["3", "max(n - 2, 0)"]
    for size in (1, 2, 5):
        _both([Y], [X], [np.random.default_rng(size).standard_normal(size)])

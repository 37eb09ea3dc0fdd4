"""Invariant factors out of sums (passes.factor_sums): the rewrite, where it must not
fire, and that gradients keep their values (float64 central differences, the numpy
backend, the C backend with and without the pass)."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import tensorexpr as te
from passes.differentiate import differentiate
from passes.factor_sums import compared_tensors, factor_all, factor_sums, flops
from tensorexpr.ir import Reduce, walk

from .gradcheck import numeric_grad, rel_err


def _pdist(N, M, D, dtype="float32"):
    A = te.placeholder((N, D), dtype, "A")
    B = te.placeholder((M, D), dtype, "B")
    k = te.reduce_axis(D, "k")
    Y = te.compute((N, M), lambda i, j: te.sum((A[i, k] - B[j, k]) * (A[i, k] - B[j, k]),
                                                axis=k), name="Y")
    return A, B, Y


def _operands():
    """``H`` (8 x 8), ``A`` and ``B`` (8 x 4), and a reduction axis ``j`` over 8."""
    return (te.placeholder((8, 8), name="H"), te.placeholder((8, 4), name="A"),
            te.placeholder((8, 4), name="B"), te.reduce_axis(8, "j"))


def _sums(e):
    return [x for x in walk(e, unique=True) if isinstance(x, Reduce)]


# {{{ the rewrite on small IR


def test_the_pdist_gradient_becomes_a_row_sum_and_a_contraction():
    A, B, Y = _pdist(8, 6, 4)
    H = te.placeholder((8, 6), name="H")
    dA, dB = differentiate(Y, [A, B], head=H)
    assert str(dA.body) == "(sum_{j in [0, 6)} (2.0 * (H[i0, j] * (A[i0, i1] - B[j, i1]))))"
    assert str(factor_sums(dA).body) == (
        "(2.0 * ((A[i0, i1] * (sum_{j in [0, 6)} H[i0, j])) - "
        "(sum_{j in [0, 6)} (H[i0, j] * B[j, i1]))))")
    assert str(dB.body) == "(sum_{i in [0, 8)} (2.0 * (H[i, i0] * (-(A[i, i1] - B[i0, i1])))))"
    assert str(factor_sums(dB).body) == (
        "(2.0 * ((B[i0, i1] * (sum_{i in [0, 8)} H[i, i0])) - "
        "(sum_{i in [0, 8)} (H[i, i0] * A[i, i1]))))")
    # fewer operations per point: 4 per j before; 3 per j and 3 outside after (the row
    # sum counted inline, as if it were not stored)
    assert flops(dA.body) == 4 * 6 and flops(factor_sums(dA).body) == 3 * 6 + 3


def test_a_weighted_squared_error_against_a_broadcast_target():
    # Y[i] = sum_k (A[i, k] - c[k])^2 * w[i]: dc[k] = -2 sum_i H w (A - c), whose term in
    # c[k] leaves its sum, a sum over i alone (a scalar, stored once)
    A = te.placeholder((32, 16), name="A")
    c = te.placeholder((16,), name="c")
    w = te.placeholder((32,), name="w")
    k = te.reduce_axis(16, "k")
    Y = te.compute((32,), lambda i: te.sum((A[i, k] - c[k]) * (A[i, k] - c[k]) * w[i], axis=k),
                   name="Y")
    H = te.placeholder((32,), name="H")
    dA, dc, dw = differentiate(Y, [A, c, w], head=H)
    assert str(factor_sums(dc).body) == (
        "(2.0 * ((c[i0] * (sum_{i in [0, 32)} (H[i] * w[i]))) - "
        "(sum_{i in [0, 32)} ((H[i] * w[i]) * A[i, i0]))))")
    # dA has no sum; dw's square stays a square (multiplied out it would cancel)
    assert factor_sums(dA) is dA and factor_sums(dw) is dw


def test_a_squared_error_against_a_broadcast_target():
    # per row: dc[k] = 2 (c[k] * sum_i H[i] - sum_i H[i] A[i, k]), the first sum a scalar
    A = te.placeholder((32, 16), name="A")
    c = te.placeholder((16,), name="c")
    k = te.reduce_axis(16, "k")
    Y = te.compute((32,), lambda i: te.sum((A[i, k] - c[k]) * (A[i, k] - c[k]), axis=k),
                   name="Y")
    H = te.placeholder((32,), name="H")
    dA, dc = differentiate(Y, [A, c], head=H)
    assert str(factor_sums(dc).body) == (
        "(2.0 * ((c[i0] * (sum_{i in [0, 32)} H[i])) - (sum_{i in [0, 32)} (H[i] * A[i, i0]))))")
    # summed to a scalar loss, dt's term in t[k] would only become a count beside a sum
    # over all of dt's axes: sum_i (X - t) as sum_i X - N t saves a few operations of a
    # loop that still reads X, and cancels where t is X's mean; left as written
    i2, k2 = te.reduce_axis(32, "i"), te.reduce_axis(16, "k")
    L = te.compute((), lambda: te.sum((A[i2, k2] - c[k2]) * (A[i2, k2] - c[k2]),
                                      axis=[i2, k2]), name="L")
    dA, dc = differentiate(L, [A, c])
    assert factor_sums(dc) is dc


def test_a_factor_of_a_broadcast_term_leaves_only_its_sum():
    H = te.placeholder((8, 8), name="H")
    A = te.placeholder((8, 4), name="A")
    s = te.placeholder((8,), name="s")
    B = te.placeholder((8, 4), name="B")
    j = te.reduce_axis(8, "j")
    G = te.compute((8, 4), lambda i, k: te.sum(H[i, j] * (A[i, k] * s[j] - B[j, k]), axis=j),
                   name="G")
    assert str(factor_sums(G).body) == (
        "((A[i, k] * (sum_{j in [0, 8)} (H[i, j] * s[j]))) - "
        "(sum_{j in [0, 8)} (H[i, j] * B[j, k])))")


def test_a_where_stays_with_every_term():
    H, A, B, j = _operands()
    G = te.compute((8, 4), lambda i, k: te.sum(H[i, j] * (A[i, k] - B[j, k]), axis=j,
                                               where=j <= i), name="G")
    got = factor_sums(G)
    assert str(got.body) == (
        "((A[i, k] * (sum_{j in [0, 8) if j <= i} H[i, j])) - "
        "(sum_{j in [0, 8) if j <= i} (H[i, j] * B[j, k])))")
    assert all(s.where is not None for s in _sums(got.body))


# }}}

# {{{ where it must not fire


def test_a_factor_a_where_keeps_in_range_is_not_moved():
    # X[i - 1, k] is read only where i >= 1: outside the sum it would be read at i = 0
    H, X, B, j = _operands()
    G = te.compute((8, 4), lambda i, k: te.sum(H[i, j] * (X[i - 1, k] - B[j, k]), axis=j,
                                               where=i >= 1), name="G")
    assert factor_sums(G) is G


def test_max_reductions_and_selects_on_data_are_left_alone():
    H, A, B, j = _operands()
    M = te.compute((8, 4), lambda i, k: te.max(H[i, j] * (A[i, k] - B[j, k]), axis=j), name="M")
    assert factor_sums(M) is M
    S = te.compute((8, 4), lambda i, k: te.sum(te.select(H[i, j] > 0.0, H[i, j], 0.0)
                                               * (A[i, k] - B[j, k]), axis=j), name="S")
    assert factor_sums(S) is S


def test_a_sum_whose_values_a_max_compares_is_left_as_written():
    H, A, B, j = _operands()
    S = te.compute((8, 4), lambda i, k: te.sum(H[i, j] * (A[i, k] - B[j, k]), axis=j), name="S")
    assert factor_sums(S) is not S  # alone, it would be rewritten
    k2 = te.reduce_axis(4, "k2")
    M = te.compute((8,), lambda i: te.max(S[i, k2], axis=k2), name="M")
    assert S.uid in compared_tensors([H, A, B, S, M])
    done, changed = factor_all([M])
    assert changed == [] and done[S.uid] is S


def test_a_recurrence_is_left_as_written():
    X = te.placeholder((6, 4), name="X")
    c = te.placeholder((4,), name="c")

    def cell(h, t, i):
        k = te.reduce_axis(4, "k")
        return te.select(t == 0, X[t, i], te.sum(h[t - 1, k] * (X[t, i] - c[k]), axis=k))
    h = te.recurrence((6, 4), cell, name="h")
    assert factor_sums(h) is h


def test_a_square_is_not_multiplied_out():
    # a variance: sum_k (X - mean)^2 is not E[X^2] - mean^2 (cancellation)
    X = te.placeholder((4, 16), name="X")
    m = te.placeholder((4,), name="m")
    k = te.reduce_axis(16, "k")
    V = te.compute((4,), lambda i: te.sum((X[i, k] - m[i]) * (X[i, k] - m[i]), axis=k), name="V")
    assert factor_sums(V) is V


def test_terms_of_zero_are_dropped_and_a_sum_of_zero_is_left_alone():
    # found by the fuzzer: sum_k 0.0 divided by a zero coefficient
    k = te.reduce_axis((0, 1), "k")
    Z = te.compute((), lambda: te.sum(0.0, axis=k), name="Z")
    assert factor_sums(Z) is Z
    H, A, B, j = _operands()
    Y = te.compute((8, 4), lambda i, c: te.sum(H[i, j] * (0.0 * B[j, c] + A[i, c] - B[j, c]),
                                                axis=j), name="Y")
    assert len(_sums(factor_sums(Y).body)) == 2  # a row sum of H and a contraction
    X = te.placeholder((), name="X")
    (g,) = te.differentiate(Z, [X])
    assert te.build(g, inputs=[X])(np.float32(0.4)) == 0


# }}}

# {{{ values


def _check(outs, ins, arrays):
    """The C build with the pass, the C build without it (hoist=False) and the numpy
    backend agree; the values they agree on."""
    f = te.build(outs, ins)
    plain = te.build(outs, ins, options=te.ScheduleOptions(hoist=False))
    ref = te.build(outs, ins, backend="numpy")
    got, base, want = (g(*arrays) for g in (f, plain, ref))
    for a, b, c in zip(got, base, want):
        np.testing.assert_allclose(a, c, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(b, c, rtol=1e-9, atol=1e-9)
    return got


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(N=st.integers(1, 9), M=st.integers(1, 9), D=st.integers(1, 7), seed=st.integers(0, 99))
def test_pdist_gradients_of_random_shapes(N, M, D, seed):
    A, B, Y = _pdist(N, M, D, "float64")
    H = te.placeholder((N, M), "float64", "H")
    grads = list(te.differentiate(Y, [A, B], head=H))
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal((N, D)), rng.standard_normal((M, D)),
              rng.standard_normal((N, M))]
    got = _check(grads, [A, B, H], arrays)
    fy = te.build(Y, inputs=[A, B], backend="numpy")

    def loss(a, b):
        return float((np.asarray(fy(a, b)) * arrays[2]).sum())
    for n in range(2):
        want = numeric_grad(loss, arrays[:2], n)
        assert rel_err(got[n], want) < 1e-6


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(N=st.integers(1, 8), K=st.integers(1, 8), J=st.integers(1, 9), seed=st.integers(0, 99),
       where=st.booleans())
def test_broadcast_term_gradients_of_random_shapes(N, K, J, seed, where):
    # G[i, k] = sum_j H[i, j] * (A[i, k] * s[j] - B[j, k]) (optionally over j <= i), and
    # its gradients (sums over i and over (i, k) of the same shape of terms)
    H = te.placeholder((N, J), "float64", "H")
    A = te.placeholder((N, K), "float64", "A")
    s = te.placeholder((J,), "float64", "s")
    B = te.placeholder((J, K), "float64", "B")
    j = te.reduce_axis(J, "j")
    G = te.compute((N, K), lambda i, k: te.sum(H[i, j] * (A[i, k] * s[j] - B[j, k]), axis=j,
                                               where=(j <= i) if where else None), name="G")
    W = te.placeholder((N, K), "float64", "W")
    ins = [H, A, s, B]
    grads = list(te.differentiate(G, ins, head=W))
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(tuple(d.value for d in t.dims)) for t in ins + [W]]
    _check([G], ins, arrays[:4])
    got = _check(grads, ins + [W], arrays)
    fg = te.build(G, inputs=ins, backend="numpy")

    def loss(*xs):
        return float((np.asarray(fg(*xs)) * arrays[4]).sum())
    for n in range(4):
        want = numeric_grad(loss, arrays[:4], n)
        assert rel_err(got[n], want) < 1e-6


def test_the_pdist_gradient_is_rewritten_in_the_c_program():
    A, B, Y = _pdist(64, 48, 16)
    H = te.placeholder((64, 48), name="H")
    grads = list(te.differentiate(Y, [A, B], head=H))
    f = te.build(grads, inputs=[A, B, H])
    hoisted = f.schedule.hoisted
    assert "dA: invariant factors out of its sums" in hoisted
    assert "dB: invariant factors out of its sums" in hoisted
    rng = np.random.default_rng(0)
    a, b, h = (rng.standard_normal(s).astype(np.float32) for s in ((64, 16), (48, 16), (64, 48)))
    dA, dB = f(a, b, h)
    a64, b64, h64 = (x.astype(np.float64) for x in (a, b, h))
    assert rel_err(dA, 2 * (a64 * h64.sum(1)[:, None] - h64 @ b64)) < 1e-5
    assert rel_err(dB, 2 * (b64 * h64.sum(0)[:, None] - h64.T @ a64)) < 1e-5


# }}}

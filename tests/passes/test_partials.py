"""Local partials: te.stop_gradient cuts the adjoint; gradients checked numerically."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te
from passes.partials import read_partials
from tensorexpr.ir import tensor_inputs, topo_order

from .gradcheck import numeric_grad, rel_err


def _softmax(X, stop):
    n, d = X.shape
    k1, k2 = te.reduce_axis(d, name="k1"), te.reduce_axis(d, name="k2")
    m = te.compute((n,), lambda i: te.max(X[i, k1], axis=k1), name="m")
    shift = (lambda e: te.stop_gradient(e)) if stop else (lambda e: e)
    ex = te.compute((n, d), lambda i, j: te.exp(X[i, j] - shift(m[i])), name="ex")
    s = te.compute((n,), lambda i: te.sum(ex[i, k2], axis=k2), name="s")
    return m, te.compute((n, d), lambda i, j: ex[i, j] / s[i], name="Y")


def test_no_partial_reaches_a_read_under_stop_gradient():
    X = te.placeholder((4,), name="X")
    W = te.placeholder((4,), name="W")
    T = te.compute((4,), lambda i: X[i] * te.stop_gradient(W[i] * X[i]), name="T")
    sites = read_partials(T.body)
    assert [s.read.tensor.name for s in sites] == ["X"]
    assert str(sites[0].factor) == "stop_gradient(W[i] * X[i])"


@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_stop_gradient_is_a_constant_to_differentiate(backend):
    # L = sum(x * sg(x)^2): dL/dx = sg(x)^2 = x^2, not 3 x^2
    X = te.placeholder((5,), dtype="float64", name="X")
    r = te.reduce_axis(5)
    L = te.compute((), lambda: te.sum(X[r] * te.stop_gradient(X[r] * X[r]), axis=r), name="L")
    (dX,) = te.differentiate(L, [X])
    x = np.linspace(-1.5, 2.0, 5)
    np.testing.assert_allclose(te.build(dX, backend=backend)(x), x * x, rtol=1e-12)


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (4, 7)])
def test_softmax_with_stopped_max_has_the_exact_gradient_and_no_tie_count(shape):
    rng = np.random.default_rng(sum(shape))
    X = te.placeholder(shape, dtype="float64", name="X")
    H = te.placeholder(shape, dtype="float64", name="H")
    m, Y = _softmax(X, stop=True)
    (dX,) = te.differentiate(Y, [X], head=H)
    program = topo_order([dX])
    # m's adjoint is zero: no tie count, no read of m anywhere in the gradient
    assert not any(t.name.endswith("_ties") for t in program)
    forward = {t.uid for t in topo_order([Y])}
    assert not any(p.uid == m.uid for t in program if t.uid not in forward
                   for p in tensor_inputs(t))
    x, h = rng.standard_normal(shape), rng.standard_normal(shape)
    x[:, 0] = x[:, -1] = x.max()  # tied maxima: the stopped shift does not care
    i, j = te.reduce_axis(shape[0]), te.reduce_axis(shape[1])
    L = te.compute((), lambda: te.sum(H[i, j] * Y[i, j], axis=[i, j]), name="L")
    fl = te.build(L, inputs=[X, H], backend="numpy")
    want = numeric_grad(fl, [x, h], 0)
    for backend in ("numpy", "c"):
        got = te.build(dX, inputs=[X, H], backend=backend)(x, h)
        assert rel_err(got, want) < 1e-7, backend
    # the same as the full gradient through m (its contribution is exactly zero)
    _, Y2 = _softmax(X, stop=False)
    (dX2,) = te.differentiate(Y2, [X], head=H)
    assert any(t.name.endswith("_ties") for t in topo_order([dX2]))
    np.testing.assert_allclose(te.build(dX2, backend="numpy")(x, h), got, atol=1e-12)


def test_stop_gradient_gradients_are_differentiable_again():
    X = te.placeholder((3,), dtype="float64", name="X")
    r = te.reduce_axis(3)
    L = te.compute((), lambda: te.sum(te.exp(X[r] - te.stop_gradient(X[r])) * X[r] ** 2,
                                      axis=r), name="L")
    (dX,) = te.differentiate(L, [X])
    r2 = te.reduce_axis(3)
    L2 = te.compute((), lambda: te.sum(dX[r2], axis=r2), name="L2")
    (ddX,) = te.differentiate(L2, [X])
    x = np.array([0.3, -1.2, 2.0])
    # dL/dx = exp(x - sg(x)) * (x^2 + 2x) = x^2 + 2x; differentiated again the exponential
    # still sees only its unstopped x: (x^2 + 2x) + (2x + 2)
    np.testing.assert_allclose(te.build(dX, backend="numpy")(x), x ** 2 + 2 * x, rtol=1e-12)
    np.testing.assert_allclose(te.build(ddX, backend="numpy")(x), x ** 2 + 4 * x + 2,
                               rtol=1e-12)


@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_pow_of_a_data_exponent_is_flat_where_its_base_or_exponent_is_zero(backend):
    # GeM pooling, mean(relu(x) ** p) ** (1 / p) with a learned p: every x <= 0 gives
    # 0 ** p, constant in p, whose slope p ** ... * log(0) was 0 * -inf = NaN and poisoned
    # dp; relu(x) ** relu(q) at x, q <= 0 is 0 ** 0 = 1, constant in x (0 * 0 ** -1 was NaN)
    X = te.placeholder((6,), dtype="float64", name="X")
    P = te.placeholder((), dtype="float64", name="P")
    Q = te.placeholder((6,), dtype="float64", name="Q")
    r, r2 = te.reduce_axis(6), te.reduce_axis(6)
    mean = te.compute((), lambda: te.sum(te.maximum(X[r], 0.0) ** P[()], axis=r) / 6.0,
                      name="mean")
    gem = te.compute((), lambda: mean[()] ** (1.0 / P[()]), name="gem")
    flat = te.compute((), lambda: te.sum(te.maximum(X[r2], 0.0) ** te.maximum(Q[r2], 0.0),
                                         axis=r2), name="flat")
    L = te.compute((), lambda: gem[()] + flat[()], name="L")
    x = np.array([0.7, -0.3, 1.9, -1.2, 0.4, -0.8])
    q = np.array([1.3, -0.5, 0.6, -0.2, -0.9, 0.8])  # x, q <= 0 together at 3 and 5
    arrays = [x, np.array(2.5), q]
    dX, dP, dQ = te.differentiate(L, [X, P, Q])
    got = te.build([dX, dP, dQ], inputs=[X, P, Q], backend=backend)(*arrays)
    fl = te.build(L, inputs=[X, P, Q], backend="numpy")
    for k, g in enumerate(got):
        want = numeric_grad(fl, arrays, k)
        assert np.isfinite(g).all(), (k, g)
        assert rel_err(g, want) < 1e-7, (k, g, want)
    # the slopes at the flat points are exactly 0, as torch's and jax's pow define them
    assert got[0][[1, 3, 5]].tolist() == [0.0, 0.0, 0.0]
    assert got[2][[1, 3, 5]].tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_a_max_or_min_passes_its_adjoint_on_once(op):
    # written into both branches of a select, the adjoint of nested maxima was copied
    # 2**depth times (a second-order gradient of max(x, 0) ** min(max(y, 0), 2): 1.5 MB
    # of C, then MemoryError)
    X = te.placeholder((2,), dtype="float64", name="X")
    A = te.placeholder((), dtype="float64", name="A")
    T = te.compute((), lambda: te.exp(A[()]) * getattr(te, op)(X[0], X[1]), name="T")
    sites = [s for s in read_partials(T.body) if s.read.tensor.name == "X"]
    assert len(sites) == 2
    for s in sites:
        assert str(s.factor).count("exp(A[])") == 1, str(s.factor)


@pytest.mark.parametrize("x0, x1, a, want", [
    (2.0, 1.0, np.inf, (np.inf, 0.0)),      # the loser gets 0, not 0 * inf
    (1.0, 2.0, np.nan, (0.0, np.nan)),
    (1.0, 1.0, 3.0, (1.5, 1.5)),            # a tie: half each
    (1.0, 1.0, -np.inf, (-np.inf, -np.inf)),
])
def test_max_adjoint_values_keep_inf_and_nan(x0, x1, a, want):
    X = te.placeholder((2,), dtype="float64", name="X")
    A = te.placeholder((), dtype="float64", name="A")
    L = te.compute((), lambda: A[()] * te.maximum(X[0], X[1]), name="L")
    g, = te.differentiate(L, [X])
    for backend in ("numpy", "c"):
        got = te.build(g, [X, A], backend)(np.array([x0, x1]), np.array(a))
        np.testing.assert_array_equal(got, np.array(want), err_msg=backend)


@pytest.mark.parametrize("op", ["maximum", "minimum"])
@pytest.mark.parametrize("x0, x1", [(np.nan, 1.0), (1.0, np.nan), (np.nan, np.nan),
                                    (np.nan, np.inf), (-np.inf, np.nan)])
def test_a_nan_operand_of_max_or_min_gets_no_adjoint_and_neither_does_the_other(op, x0, x1):
    # the result is NaN and equals neither operand: no arg-extremum, as a te.max row
    # holding a NaN (and as jnp.maximum; torch.maximum gives each the whole adjoint)
    X = te.placeholder((2,), dtype="float64", name="X")
    L = te.compute((), lambda: getattr(te, op)(X[0], X[1]) * 3.0, name="L")
    r = te.reduce_axis(2, name="r")
    R = te.compute((), lambda: getattr(te, op[:3])(X[r], axis=r) * 3.0, name="R")
    (g,), (gr,) = te.differentiate(L, [X]), te.differentiate(R, [X])
    x = np.array([x0, x1])
    for backend in ("numpy", "c"):
        np.testing.assert_array_equal(te.build(g, [X], backend)(x), [0.0, 0.0], err_msg=backend)
        np.testing.assert_array_equal(te.build(gr, [X], backend)(x), [0.0, 0.0], err_msg=backend)
        assert np.isnan(te.build(L, [X], backend)(x))


@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_max_or_min_of_infinities_ties_and_finite_values_keep_their_rule(op):
    X = te.placeholder((2, 4), dtype="float64", name="X")
    L = te.compute((4,), lambda j: getattr(te, op)(X[0, j], X[1, j]), name="L")
    H = te.placeholder((4,), dtype="float64", name="H")
    (g,) = te.differentiate(L, [X], head=H)
    x = np.array([[np.inf, 2.0, 1.0, -np.inf], [np.inf, 1.0, 3.0, -np.inf]])
    first = (x[0] > x[1]) if op == "maximum" else (x[0] < x[1])
    want0 = np.where(x[0] == x[1], 0.5, np.where(first, 1.0, 0.0))
    for backend in ("numpy", "c"):
        got = te.build(g, [X, H], backend)(x, np.ones(4))
        np.testing.assert_array_equal(got, [want0, 1.0 - want0], err_msg=backend)


@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_a_value_read_only_under_guards_passes_on_its_adjoint_only_where_one_holds(backend):
    # v reads Z[i], in range only where i < n; both selects reading v guard it, by
    # different conditions: v's own partial (cos(Z[i] * X[i]) * Z[i]) was evaluated
    # everywhere, an out-of-range read of Z (IndexError on a valid program)
    from .gradcheck import check_grads
    n = 2
    X = te.placeholder((4,), "float64", name="X")
    Z = te.placeholder((n,), "float64", name="Z")

    def body(i):
        v = te.sin(Z[i] * X[i])
        return te.select(i < n, v, 0.0) + te.select((i < n) & (X[i] > 0), v * v, 0.0)
    Y = te.compute((4,), body, name="Y")
    r = te.reduce_axis(4, name="r")
    L = te.compute((), lambda: te.sum(Y[r] * Y[r], axis=r), name="L")
    rng = np.random.default_rng(0)
    check_grads(L, [X, Z], [rng.standard_normal(4), rng.standard_normal(n)], backend=backend)

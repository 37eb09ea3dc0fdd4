"""te.differentiate against float64 central differences, first and second order."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import tensorexpr as te
from tensorexpr.ir import topo_order

from .gradcheck import (check_grads, has_scatter, largest_tensor, numeric_grad, rel_err,
                        second_order, sum_of_squares)

F = "float64"


def rand(*shape, seed=0, low=-1.0, high=1.0):
    return np.random.default_rng(seed + len(shape) * 7 + int(np.prod(shape))).uniform(
        low, high, shape)


# {{{ the patterns: each returns (inputs, output tensor Y, arrays, affine?)


def matmul():
    A = te.placeholder((3, 4), F, "A")
    B = te.placeholder((4, 2), F, "B")
    k = te.reduce_axis(4, "k")
    Y = te.compute((3, 2), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="Y")
    return [A, B], Y, [rand(3, 4), rand(4, 2, seed=1)], True


def conv2d(stride=1, dilation=1, pad=1, size=5):
    X = te.placeholder((1, 2, size, size), F, "X")
    W = te.placeholder((2, 2, 3, 3), F, "W")
    out = (size + 2 * pad - dilation * 2 - 1) // stride + 1
    c, kh, kw = te.reduce_axis(2, "c"), te.reduce_axis(3, "kh"), te.reduce_axis(3, "kw")

    def body(n, o, h, w):
        y, x = stride * h + dilation * kh - pad, stride * w + dilation * kw - pad
        if pad:
            inside = (y >= 0) & (y < size) & (x >= 0) & (x < size)
            v = te.select(inside, X[n, c, y, x], 0.0)
        else:
            v = X[n, c, y, x]
        return te.sum(v * W[o, c, kh, kw], axis=[c, kh, kw])

    Y = te.compute((1, 2, out, out), body, name="Y")
    return [X, W], Y, [rand(1, 2, size, size), rand(2, 2, 3, 3, seed=2)], True


def maxpool():
    X = te.placeholder((1, 2, 4, 4), F, "X")
    a, b = te.reduce_axis(2, "a"), te.reduce_axis(2, "b")
    Y = te.compute((1, 2, 2, 2), lambda n, c, h, w: te.max(X[n, c, 2 * h + a, 2 * w + b],
                                                           axis=[a, b]), name="Y")
    return [X], Y, [rand(1, 2, 4, 4)], True


def avgpool():
    X = te.placeholder((1, 1, 5, 5), F, "X")
    a, b = te.reduce_axis(3, "a"), te.reduce_axis(3, "b")
    Y = te.compute((1, 1, 3, 3), lambda n, c, h, w: te.sum(X[n, c, h + a, w + b],
                                                           axis=[a, b]) / 9.0, name="Y")
    return [X], Y, [rand(1, 1, 5, 5)], True


def flatten():
    X = te.placeholder((2, 2, 3, 4), F, "X")
    Y = te.compute((2, 24), lambda n, k: X[n, k // 12, (k // 4) % 3, k % 4], name="Y")
    return [X], Y, [rand(2, 2, 3, 4)], True


def transpose_bias():
    X = te.placeholder((3, 4), F, "X")
    b = te.placeholder((4,), F, "b")
    Y = te.compute((4, 3), lambda j, i: X[i, j] + b[j], name="Y")
    return [X, b], Y, [rand(3, 4), rand(4, seed=3)], True


def softmax():
    X = te.placeholder((2, 5), F, "X")
    k = te.reduce_axis(5, "k")
    m = te.reduce_axis(5, "m")
    M = te.compute((2,), lambda i: te.max(X[i, m], axis=m), name="M")
    S = te.compute((2,), lambda i: te.sum(te.exp(X[i, k] - M[i]), axis=k), name="S")
    Y = te.compute((2, 5), lambda i, j: te.exp(X[i, j] - M[i]) / S[i], name="Y")
    return [X], Y, [rand(2, 5)], True


def log_softmax():
    X = te.placeholder((2, 5), F, "X")
    k = te.reduce_axis(5, "k")
    Y = te.compute((2, 5), lambda i, j: X[i, j] - te.log(te.sum(te.exp(X[i, k]), axis=k)),
                   name="Y")
    return [X], Y, [rand(2, 5)], True


def layer_norm():
    X = te.placeholder((2, 6), F, "X")
    g = te.placeholder((6,), F, "gamma")
    b = te.placeholder((6,), F, "beta")
    k, k2 = te.reduce_axis(6, "k"), te.reduce_axis(6, "k2")
    mu = te.compute((2,), lambda i: te.sum(X[i, k], axis=k) / 6.0, name="mu")
    var = te.compute((2,), lambda i: te.sum((X[i, k2] - mu[i]) ** 2, axis=k2) / 6.0, name="var")
    Y = te.compute((2, 6), lambda i, j: (X[i, j] - mu[i]) / te.sqrt(var[i] + 1e-5) * g[j] + b[j],
                   name="Y")
    return [X, g, b], Y, [rand(2, 6), rand(6, seed=4), rand(6, seed=5)], True


def blur():
    n = 7
    X = te.placeholder((n,), F, "X")

    def c(e):
        return te.minimum(te.maximum(e, 0), n - 1)
    Y = te.compute((n,), lambda i: (X[c(i - 1)] + X[i] + X[c(i + 1)]) / 3.0, name="Y")
    return [X], Y, [rand(n)], True


def embedding():
    E = te.placeholder((5, 3), F, "E")
    idx = te.placeholder((4,), "int64", "idx")
    Y = te.compute((4, 3), lambda i, d: E[idx[i], d], name="Y")
    return [E, idx], Y, [rand(5, 3), np.array([1, 4, 1, 0])], False


def relu_select():
    X = te.placeholder((6,), F, "X")
    Y = te.compute((6,), lambda i: te.select(X[i] > 0, X[i] * X[i], 0.0), name="Y")
    return [X], Y, [rand(6) + np.array([0.1, -0.1] * 3)], True


def abs_op():
    X = te.placeholder((5,), F, "X")
    Y = te.compute((5,), lambda i: te.abs(X[i]) * te.tanh(X[i]) + te.sigmoid(X[i]), name="Y")
    return [X], Y, [rand(5) + 0.05], True


# Guards whose reads are in range only where the guard holds: the gradients' own guards
# (a window of a ragged pooling, a clamp's pieces, the left operand of `&`) must keep
# their reads from being evaluated elsewhere, on both backends.


def maxpool_ragged():
    """5x4 input, 2x2 windows at stride 2: row 4 is in no window, so dX's rows 4 read
    no Y (Y has 2 rows: Y[4 // 2] would be outside)."""
    X = te.placeholder((5, 4), F, "X")
    a, b = te.reduce_axis(2, "a"), te.reduce_axis(2, "b")
    Y = te.compute((2, 2), lambda i, j: te.max(X[2 * i + a, 2 * j + b], axis=[a, b]), name="Y")
    return [X], Y, [rand(5, 4)], True


def min_clamped():
    n = 6
    X = te.placeholder((n,), F, "X")
    r = te.reduce_axis(3, "r")
    Y = te.compute((n,), lambda i: te.min(X[te.minimum(te.maximum(i + r - 1, 0), n - 1)],
                                          axis=r), name="Y")
    return [X], Y, [rand(n)], True


def nested_select():
    X = te.placeholder((6,), F, "X")
    Y = te.compute((6,), lambda i: te.select(i >= 1, te.select(X[i - 1] > 0, X[i], 0.0), 0.0),
                   name="Y")
    return [X], Y, [rand(6) + np.array([0.1, -0.1] * 3)], True


def and_guard():
    X = te.placeholder((6,), F, "X")
    Y = te.compute((6,), lambda i: te.select((i >= 1) & (X[i - 1] > 0), X[i] * X[i], -X[i]),
                   name="Y")
    return [X], Y, [rand(6) + np.array([0.1, -0.1] * 3)], True


def or_guard():
    X = te.placeholder((6,), F, "X")
    Y = te.compute((6,), lambda i: te.select((i >= 5) | (X[i + 1] < 0), X[i] * X[i], -X[i]),
                   name="Y")
    return [X], Y, [rand(6) + np.array([0.1, -0.1] * 3)], True


def max_where_under_guard():
    """A reduction extracted from under a select keeps the select's condition, before
    its own where (which reads X[i - 1] too)."""
    X = te.placeholder((5, 4), F, "X")
    r = te.reduce_axis(4, "r")
    Y = te.compute((5,), lambda i: te.select(i >= 1, te.max(
        X[i - 1, r] * X[i, r], axis=r, where=X[i - 1, r] > -0.5), 0.0), name="Y")
    return [X], Y, [rand(5, 4)], True


def max_under_correlated_guard():
    """The guard of the reduction is over an enclosing axis k: extracted over i alone it
    is evaluated only where some k satisfies it (i >= 1)."""
    X = te.placeholder((5, 4), F, "X")
    r, k = te.reduce_axis(4, "r"), te.reduce_axis(5, "k")
    Y = te.compute((5,), lambda i: te.sum(te.select(k == i - 1, te.max(X[i - 1, r], axis=r)
                                                    * X[k, 0], 0.0), axis=k), name="Y")
    return [X], Y, [rand(5, 4)], True


PATTERNS = {
    "maxpool_ragged": maxpool_ragged, "min_clamped": min_clamped,
    "nested_select": nested_select, "and_guard": and_guard, "or_guard": or_guard,
    "max_where_under_guard": max_where_under_guard,
    "max_under_correlated_guard": max_under_correlated_guard,
    "matmul": matmul, "conv2d_pad1": conv2d, "conv2d_stride2": lambda: conv2d(stride=2, size=6),
    "conv2d_dilation2": lambda: conv2d(dilation=2, pad=0, size=7), "maxpool": maxpool,
    "avgpool": avgpool, "flatten": flatten, "transpose_bias": transpose_bias, "softmax": softmax,
    "log_softmax": log_softmax, "layer_norm": layer_norm, "blur": blur, "embedding": embedding,
    "relu_select": relu_select, "abs": abs_op,
}


def _float_inputs(inputs):
    return [k for k, t in enumerate(inputs) if t.dtype.startswith("float")]


# }}}


@pytest.mark.parametrize("backend", ["numpy", "c"])
@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_first_order(name, backend):
    inputs, Y, arrays, _ = PATTERNS[name]()
    H = te.placeholder(Y.shape, F, "H")
    L = sum_of_squares(Y) if name != "softmax" else sum_of_squares(Y, H)
    ins, arrs = (inputs + [H], arrays + [rand(*Y.shape, seed=9)]) if name == "softmax" \
        else (inputs, arrays)
    check_grads(L, ins, arrs, wrt=_float_inputs(inputs), backend=backend)


@pytest.mark.parametrize("backend", ["numpy", "c"])
@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_second_order(name, backend):
    inputs, Y, arrays, _ = PATTERNS[name]()
    L = sum_of_squares(Y)
    second_order(L, inputs, arrays, wrt=_float_inputs(inputs), backend=backend)


@pytest.mark.parametrize("name", sorted(k for k in PATTERNS if PATTERNS[k]()[3]))
def test_affine_gradients_have_no_scatter_and_no_large_intermediate(name):
    inputs, Y, arrays, _ = PATTERNS[name]()
    H = te.placeholder(Y.shape, F, "H")
    grads = te.differentiate(Y, inputs, head=H)
    assert not has_scatter(grads)
    biggest = max(largest_tensor([t]) for t in list(inputs) + [Y, H])
    assert largest_tensor(grads) <= biggest


def test_embedding_gradient_is_a_scatter_and_matches():
    inputs, Y, arrays, _ = embedding()
    H = te.placeholder(Y.shape, F, "H")
    (dE,) = te.differentiate(Y, [inputs[0]], head=H)
    assert has_scatter([dE])
    h = rand(*Y.shape, seed=3)
    got = te.build(dE, inputs=[inputs[1], H], backend="numpy")(arrays[1], h)
    want = np.zeros((5, 3))
    np.add.at(want, arrays[1], h)
    np.testing.assert_allclose(got, want)


def test_head_with_prefix():
    inputs, Y, arrays, _ = matmul()
    H = te.placeholder((2,) + Y.shape, F, "H")
    h = rand(2, *Y.shape, seed=11)
    dA, dB = te.differentiate(Y, inputs, head=H)
    assert dA.shape == (2, 3, 4) and dB.shape == (2, 4, 2)
    ga, gb = te.build([dA, dB], inputs=inputs + [H], backend="numpy")(*arrays, h)
    a, b = arrays
    for p in range(2):
        np.testing.assert_allclose(ga[p], h[p] @ b.T)
        np.testing.assert_allclose(gb[p], a.T @ h[p])


def test_head_none_builds_the_jacobian():
    X = te.placeholder((3,), F, "X")
    Y = te.compute((2,), lambda i: te.exp(X[i]) * X[i + 1], name="Y")
    (J,) = te.differentiate(Y, [X])
    assert J.shape == (2, 3)
    x = rand(3)
    got = te.build(J, inputs=[X], backend="numpy")(x)
    fy = te.build(Y, inputs=[X], backend="numpy")
    for r in range(2):
        want = numeric_grad(lambda v: fy(v)[r], [x], 0)
        np.testing.assert_allclose(got[r], want, rtol=1e-6, atol=1e-9)


def test_independent_input_gets_zero_gradient():
    X = te.placeholder((3,), F, "X")
    Z = te.placeholder((2, 2), F, "Z")
    i = te.reduce_axis(3)
    L = te.compute((), lambda: te.sum(X[i] * X[i], axis=i), name="L")
    dX, dZ = te.differentiate(L, [X, Z])
    assert dZ.shape == (2, 2)
    out = te.build(dZ, inputs=[Z], backend="numpy")(np.ones((2, 2)))
    assert np.all(out == 0)


def test_adjoints_of_intermediates():
    X = te.placeholder((3,), F, "X")
    Y = te.compute((3,), lambda i: X[i] * 2.0, name="Y")
    i = te.reduce_axis(3)
    L = te.compute((), lambda: te.sum(Y[i] * Y[i], axis=i), name="L")
    res = te.differentiate(L, [X])
    dY = res.adjoints[Y]
    x = rand(3)
    np.testing.assert_allclose(te.build(dY, inputs=[X], backend="numpy")(x), 2 * (2 * x))


def test_untaken_branch_never_contributes_nan():
    X = te.placeholder((4,), F, "X")
    Y = te.compute((4,), lambda i: te.select(X[i] > 0, te.log(X[i]), X[i]), name="Y")
    L = sum_of_squares(Y)
    (dX,) = te.differentiate(L, [X])
    x = np.array([-1.0, 2.0, -3.0, 0.5])
    g = te.build(dX, inputs=[X], backend="numpy")(x)
    assert np.all(np.isfinite(g))
    want = np.where(x > 0, 2 * np.log(np.abs(x)) / x, 2 * x)
    np.testing.assert_allclose(g, want)


def test_max_tie_rule_splits_evenly():
    X = te.placeholder((4,), F, "X")
    k = te.reduce_axis(4)
    M = te.compute((), lambda: te.max(X[k], axis=k), name="M")
    (dX,) = te.differentiate(M, [X])
    g = te.build(dX, inputs=[X], backend="numpy")(np.array([1.0, 3.0, 3.0, 0.0]))
    np.testing.assert_allclose(g, [0.0, 0.5, 0.5, 0.0])


def _square_override(Y, X, head):
    # d(x^2) = 2x, written by hand (so the test can tell it was used: factor 3 instead)
    return te.compute(X.shape, lambda i: head[i] * 3.0 * X[i], name="custom")


def test_override_whole_tensor_and_second_order():
    X = te.placeholder((3,), F, "X")
    Y = te.compute((3,), lambda i: X[i] * X[i], name="Y")
    L = sum_of_squares(Y)
    (dX,) = te.differentiate(L, [X], override={Y: _square_override})
    x = rand(3)
    g = te.build(dX, inputs=[X], backend="numpy")(x)
    np.testing.assert_allclose(g, 2 * x ** 2 * 3 * x)
    # the overridden gradient stays differentiable: d/dx sum(g) = d/dx 6 x^3 = 18 x^2
    i = te.reduce_axis(3)
    G = te.compute((), lambda: te.sum(dX[i], axis=i), name="G")
    (ddX,) = te.differentiate(G, [X])
    np.testing.assert_allclose(te.build(ddX, inputs=[X], backend="numpy")(x), 18 * x ** 2)


def test_override_one_edge():
    X = te.placeholder((3,), F, "X")
    W = te.placeholder((3,), F, "W")
    Y = te.compute((3,), lambda i: X[i] * W[i], name="Y")
    L = sum_of_squares(Y)
    dX, dW = te.differentiate(L, [X, W], override={(Y, X): lambda Y_, X_, h: te.compute(
        X_.shape, lambda i: h[i] * 0.0, name="zero")})
    x, w = rand(3), rand(3, seed=2)
    gx, gw = te.build([dX, dW], inputs=[X, W], backend="numpy")(x, w)
    np.testing.assert_allclose(gx, 0.0)
    np.testing.assert_allclose(gw, 2 * x * w * x)  # the other edge is untouched


def test_strided_conv_gradient_prints_its_gather():
    inputs, Y, _, _ = conv2d(stride=2, size=6)
    H = te.placeholder(Y.shape, F, "H")
    dX, _ = te.differentiate(Y, inputs, head=H)
    text = str(dX)
    assert "sum_{" in text and "% 2) == 0" in text and "kh in [0, 3)" in text


def test_override_one_edge_under_second_order():
    X = te.placeholder((3,), F, "X")
    W = te.placeholder((3,), F, "W")
    Y = te.compute((3,), lambda i: te.sin(X[i]) * W[i], name="Y")
    i = te.reduce_axis(3)
    L = te.compute((), lambda: te.sum(Y[i], axis=i), name="L")
    # hand-written edge Y -> X: cos(x) * w * head, the true rule, written by the user
    edge = {(Y, X): lambda Y_, X_, h: te.compute(
        X_.shape, lambda j: h[j] * te.cos(X_[j]) * W[j], name="edge")}
    dX, dW = te.differentiate(L, [X, W], override=edge)
    j = te.reduce_axis(3)
    G = te.compute((), lambda: te.sum(dX[j] * dX[j], axis=j), name="G")
    ddX, ddW = te.differentiate(G, [X, W])
    x, w = rand(3), rand(3, seed=2)
    gx, gw = te.build([ddX, ddW], inputs=[X, W], backend="numpy")(x, w)
    # G = sum (cos x * w)^2: dG/dx = -2 cos x sin x w^2, dG/dw = 2 cos^2 x w
    np.testing.assert_allclose(gx, -2 * np.cos(x) * np.sin(x) * w ** 2)
    np.testing.assert_allclose(gw, 2 * np.cos(x) ** 2 * w)


def _softmax_with_max():
    X = te.placeholder((3, 5), F, "X")
    k1, k2 = te.reduce_axis(5), te.reduce_axis(5)
    m = te.compute((3,), lambda i: te.max(X[i, k1], axis=k1), name="m")
    e = te.compute((3, 5), lambda i, j: te.exp(X[i, j] - m[i]), name="e")
    s = te.compute((3,), lambda i: te.sum(e[i, k2], axis=k2), name="s")
    Y = te.compute((3, 5), lambda i, j: e[i, j] / s[i], name="Y")
    return X, m, Y


@pytest.mark.parametrize("stop", [None, lambda Y_, X_, h: None], ids=["None", "fn->None"])
def test_override_none_stops_the_gradient(stop):
    # a softmax does not change with its shift m: stopping the gradient at m is exact,
    # and the gradient then needs neither m's tie count nor its adjoint
    X, m, Y = _softmax_with_max()
    H = te.placeholder((3, 5), F, "H")
    (dX,) = te.differentiate(Y, [X], head=H, override={m: stop})
    x = rand(3, 5) * 3
    x[1, 2] = x[1, 4] = 5.0  # a tie at the maximum
    h = rand(3, 5, seed=4)
    got = te.build(dX, inputs=[X, H], backend="numpy")(x, h)
    fl = te.build(Y, inputs=[X], backend="numpy")
    want = numeric_grad(lambda a: float(np.sum(fl(a) * h)), [x], 0)
    assert rel_err(got, want) < 1e-6
    names = {t.name for t in topo_order([dX])}
    assert "dm" not in names and not any("ties" in n for n in names), names


def test_override_none_on_one_edge_zeroes_it():
    X = te.placeholder((3,), F, "X")
    W = te.placeholder((3,), F, "W")
    Y = te.compute((3,), lambda i: X[i] * W[i], name="Y")
    dX, dW = te.differentiate(sum_of_squares(Y), [X, W], override={(Y, X): None})
    x, w = rand(3), rand(3, seed=2)
    gx, gw = te.build([dX, dW], inputs=[X, W], backend="numpy")(x, w)
    np.testing.assert_array_equal(gx, 0.0)
    np.testing.assert_allclose(gw, 2 * x * w * x)


# {{{ random guards (hypothesis): reads in range only where their guards hold

# Programs over X (N elements): nestings of select, &, |, ~, reductions with a where and
# clamped reads under sum/max/min. Each read X[i + s] is in range on (a superset of) the
# points where its guards let it be evaluated, and its shift s is drawn from the widest
# range that allows, so it is out of range elsewhere whenever it can be. X holds distinct
# values 0.1 off the tests' thresholds (multiples of 0.25): no ties, and no test changes
# value within central differences' steps.
N = 7


def _hull(*spans):
    spans = [(a, b) for a, b in spans if a < b]
    return (min(a for a, _ in spans), max(b for _, b in spans)) if spans else (0, 0)


def _implied(c, truth, span):
    """A superset of the points of ``span`` where condition recipe ``c`` equals ``truth``."""
    lo, hi = span
    match c:
        case ("ge", k):
            return (max(lo, k), hi) if truth else (lo, min(hi, k))
        case ("lt", k):
            return (lo, min(hi, k)) if truth else (max(lo, k), hi)
        case ("not", a):
            return _implied(a, not truth, span)
        case ("and", a, b):
            left = _implied(a, True, span)
            return _implied(b, True, left) if truth else \
                _hull(_implied(a, False, span), _implied(b, False, left))
        case ("or", a, b):
            left = _implied(a, False, span)
            return _hull(_implied(a, True, span), _implied(b, True, left)) if truth else \
                _implied(b, False, left)
    return span  # a data test: either value anywhere


def _shift(draw, span, extra=0):
    """A shift s with 0 <= i + s and i + s + extra < N for every i of ``span``."""
    lo, hi = span
    if lo >= hi:  # never evaluated: any shift, even one that is always outside
        return draw(st.integers(-3, 3))
    return draw(st.integers(-lo, N - hi - extra))


@st.composite
def guard_recipe(draw, span, depth):
    kind = draw(st.sampled_from(["ge", "lt", "x"] + (["and", "or", "not"] * 2 if depth else [])))
    if kind in ("ge", "lt"):
        return (kind, draw(st.integers(0, N)))
    if kind == "x":
        return ("x", _shift(draw, span), draw(st.sampled_from([-0.5, 0.0, 0.5])))
    a = draw(guard_recipe(span, depth - 1))
    if kind == "not":
        return ("not", a)
    return (kind, a, draw(guard_recipe(_implied(a, kind == "and", span), depth - 1)))


@st.composite
def value_recipe(draw, span, depth):
    kind = draw(st.sampled_from(["read", "clamped", "where"]
                                + (["select", "select", "add"] if depth else [])))
    if kind == "read":
        return ("read", _shift(draw, span), draw(st.sampled_from([-1.0, 0.5, 2.0])))
    if kind == "clamped":
        return ("clamped", draw(st.sampled_from(["sum", "max", "min"])), draw(st.integers(-2, 1)))
    if kind == "where":
        return ("where", draw(st.integers(-2, 1)), draw(st.sampled_from([-0.5, 0.0, 0.5])))
    if kind == "add":
        return ("add", draw(value_recipe(span, depth - 1)), draw(value_recipe(span, depth - 1)))
    c = draw(guard_recipe(span, 2))
    return ("select", c, draw(value_recipe(_implied(c, True, span), depth - 1)),
            draw(value_recipe(_implied(c, False, span), depth - 1)))


def _guard(c, X, i):
    match c:
        case ("ge", k):
            return i >= k
        case ("lt", k):
            return i < k
        case ("x", s, t):
            return X[i + s] > t
        case ("not", a):
            return ~_guard(a, X, i)
        case ("and", a, b):
            return _guard(a, X, i) & _guard(b, X, i)
        case ("or", a, b):
            return _guard(a, X, i) | _guard(b, X, i)


def _value(v, X, i):
    match v:
        case ("read", s, w):
            return X[i + s] * w
        case ("clamped", op, s):  # a window of 3 clamped at both ends
            r = te.reduce_axis(3)
            return getattr(te, op)(X[te.minimum(te.maximum(i + r + s, 0), N - 1)], axis=r)
        case ("where", s, t):  # the where's affine tests guard its own read
            r = te.reduce_axis(3)
            j = i + r + s
            return te.sum(X[j] * X[j], axis=r, where=(j >= 0) & (j < N) & (X[j] > t))
        case ("add", a, b):
            return _value(a, X, i) + _value(b, X, i)
        case ("select", c, a, b):
            return te.select(_guard(c, X, i), _value(a, X, i), _value(b, X, i))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                HealthCheck.data_too_large])
@given(recipe=value_recipe((0, N), 3), seed=st.integers(0, 2**16))
def test_random_guards_gradients_and_backends_agree(recipe, seed):
    """Forward on both backends, and gradients on both against float64 central
    differences, of a random nesting of guards whose reads are in range only where
    guarded."""
    X = te.placeholder((N,), F, "X")
    Y = te.compute((N,), lambda i: _value(recipe, X, i), name="Y")
    rng = np.random.default_rng(seed)
    x = (rng.permutation(N) - N // 2) / 4.0 + 0.1
    y = te.build(Y, backend="numpy")(x)
    np.testing.assert_allclose(te.build(Y)(x), y, rtol=1e-12, atol=1e-12)
    L = sum_of_squares(Y)
    for backend in ("numpy", "c"):
        check_grads(L, [X], [x], backend=backend)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(h=st.integers(3, 7), w=st.integers(2, 6), k=st.integers(2, 3), stride=st.integers(1, 3),
       op=st.sampled_from(["max", "min", "sum"]), seed=st.integers(0, 2**16))
def test_pooling_with_ragged_windows(h, w, k, stride, op, seed):
    """Pooling whose windows do not cover the input (rows and columns past the last window
    read no output); gradients on both backends against central differences."""
    oh, ow = (h - k) // stride + 1, (w - k) // stride + 1
    if oh < 1 or ow < 1:
        return
    X = te.placeholder((h, w), F, "X")
    a, b = te.reduce_axis(k, "a"), te.reduce_axis(k, "b")
    Y = te.compute((oh, ow), lambda i, j: getattr(te, op)(X[stride * i + a, stride * j + b],
                                                          axis=[a, b]), name="Y")
    x = np.random.default_rng(seed).permutation(h * w).reshape(h, w) / 4.0 + 0.1
    for backend in ("numpy", "c"):
        check_grads(sum_of_squares(Y), [X], [x], backend=backend)

# }}}

# {{{ nested reductions over ranges that do not start at 0

# Normalisation computes an inner reduction into a tensor over its free axes, which
# start at 0: it is read at each axis minus the axis's start.


def _nested(outer, inner, lo1, lo2, n1=2, n2=3):
    """``L = outer_{k1 in [lo1, lo1 + n1)} inner_{k2 in [lo2, lo2 + n2)} f(X[., .])``."""
    X = te.placeholder((5, 5), F, "X")
    k1 = te.reduce_axis((lo1, lo1 + n1), name="k1")
    k2 = te.reduce_axis((lo2, lo2 + n2), name="k2")
    red = {"sum": te.sum, "max": te.max, "min": te.min}
    L = te.compute((), lambda: red[outer](
        X[k1 - lo1 + 1, 4 - n1 + k1 - lo1] * red[inner](
            X[k2 - lo2, k1 - lo1 + 2] * X[k2 - lo2 + 1, 0], axis=k2), axis=k1), name="L")
    return X, L


def test_issue_nested_sum_whose_outer_axis_starts_at_1():
    X = te.placeholder((2, 2), F, "X")
    k1 = te.reduce_axis((1, 2), name="k1")
    k2 = te.reduce_axis((0, 2), name="k2")
    L = te.compute((), lambda: te.sum(te.sum(X[k2, k1 - 1], axis=k2), axis=k1), name="L")
    (dX,) = te.differentiate(L, [X])
    for backend in ("numpy", "c"):
        got = te.build(dX, inputs=[X], backend=backend)(rand(2, 2))
        np.testing.assert_array_equal(got, [[1.0, 0.0], [1.0, 0.0]])  # L = X00 + X10


@pytest.mark.parametrize("backend", ["numpy", "c"])
@pytest.mark.parametrize("outer,inner,lo1,lo2", [
    ("sum", "sum", 1, 0), ("sum", "sum", 3, 2), ("sum", "max", 2, 1),
    ("max", "sum", 0, 4), ("sum", "min", 5, 5), ("min", "max", 1, 2)])
def test_nested_reductions_with_shifted_axes(outer, inner, lo1, lo2, backend):
    X, L = _nested(outer, inner, lo1, lo2)
    check_grads(L, [X], [rand(5, 5, seed=lo1 * 3 + lo2)], backend=backend)


@settings(max_examples=15, deadline=None)
@given(outer=st.sampled_from(["sum", "max", "min"]), inner=st.sampled_from(["sum", "max", "min"]),
       lo1=st.integers(0, 6), lo2=st.integers(0, 6), n1=st.integers(1, 3), n2=st.integers(1, 4))
def test_nested_reductions_with_shifted_axes_hypothesis(outer, inner, lo1, lo2, n1, n2):
    X, L = _nested(outer, inner, lo1, lo2, n1, n2)
    check_grads(L, [X], [rand(5, 5, seed=abs(lo1 * 7 + lo2))])


@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_nested_reductions_with_symbolic_starts(backend):
    n = te.var("n")
    X = te.placeholder((n, 4), F, "X")
    k1 = te.reduce_axis((n - 3, n), name="k1")      # the last three rows
    k2 = te.reduce_axis((1, 4), name="k2")
    Y = te.compute((2,), lambda i: te.sum(X[k1, i] * te.max(X[k1 - 1, k2] * X[k1, k2 - 1],
                                                             axis=k2), axis=k1, where=k1 >= 1),
                   name="Y")
    check_grads(sum_of_squares(Y), [X], [rand(6, 4)], backend=backend)


def test_nested_reductions_with_shifted_axes_second_order():
    X, L = _nested("sum", "sum", 2, 1)
    second_order(L, [X], [rand(5, 5)])


# }}}

# {{{ extremum of a recomputed body: the arg-extremum test must see the forward's bits

# (op, reduce, where?): a max or min reduction of a math function of the input
_EXTREMA = [("exp", te.max, False), ("tanh", te.min, False), ("log", te.max, False),
            ("sigmoid", te.min, False), ("sin", te.max, False), ("exp", te.max, True),
            ("tanh", te.max, True), ("erf", te.min, False)]


def _extremum(fn, red, where, K, N, dtype):
    """``M[i] = red_k fn(X[k, i])`` (over even k with ``where``) and the gradient of
    ``sum(H * M)``."""
    X = te.placeholder((K, N), dtype, "X")
    H = te.placeholder((N,), dtype, "H")
    k = te.reduce_axis(K, "k")
    op = getattr(te, fn)
    arg = (lambda x: op(te.abs(x) + 0.5)) if fn == "log" else op
    M = te.compute((N,), lambda i: red(arg(X[k, i]), axis=k,
                                        where=(k % 2 == 0) if where else None), name="M")
    (dX,) = te.differentiate(M, [X], head=H)
    return X, H, M, dX


def _arg_extremum_grad(fn, red, where, x, h):
    """The exact gradient of ``sum(H * M)`` (no ties: random inputs), in float64."""
    x64 = x.astype(np.float64)
    op = {"exp": np.exp, "tanh": np.tanh, "sin": np.sin, "log": lambda v: np.log(np.abs(v) + 0.5),
          "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
          "erf": lambda v: np.frompyfunc(math.erf, 1, 1)(v).astype(np.float64)}[fn]
    d = {"exp": np.exp, "tanh": lambda v: 1 - np.tanh(v) ** 2, "sin": np.cos,
         "log": lambda v: np.sign(v) / (np.abs(v) + 0.5),
         "sigmoid": lambda v: np.exp(-v) / (1 + np.exp(-v)) ** 2,
         "erf": lambda v: 2 / np.sqrt(np.pi) * np.exp(-v * v)}[fn]
    vals = op(x64)
    if where:
        vals[1::2] = np.nan
    arg = (np.nanargmax if red is te.max else np.nanargmin)(vals, axis=0)
    cols = np.arange(x.shape[1])
    want = np.zeros_like(x64)
    want[arg, cols] = h * d(x64[arg, cols])
    return want


@pytest.mark.parametrize("fn,red,where", _EXTREMA)
@pytest.mark.parametrize("K,N", [(3, 5), (4, 1), (1, 4), (7, 37), (64, 3), (5, 100)])
def test_extremum_of_a_math_function_float32_on_c(fn, red, where, K, N):
    # The forward's value and the gradient's recomputed one came from vector and scalar
    # math (libmvec vs glibc) and differed in the last bits: a zero, doubled or infinite
    # gradient for about half of random inputs. Also through a separately built forward
    # whose values are given (saved forward values).
    X, H, M, dX = _extremum(fn, red, where, K, N, "float32")
    grad = te.build(dX, inputs=[X, H])
    fwd = te.build(M, inputs=[X])
    given = te.build(dX, inputs=[X, H, M])
    rng = np.random.default_rng(K * 100 + N)
    for trial in range(6):
        x = rng.uniform(-3, 3, (K, N)).astype(np.float32)
        h = rng.uniform(0.5, 1.5, N).astype(np.float32)
        want = _arg_extremum_grad(fn, red, where, x, h)
        np.testing.assert_allclose(grad(x, h), want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(given(x, h, fwd(x)), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fn,red,where", _EXTREMA)
@pytest.mark.parametrize("backend", ["c", "numpy"])
def test_extremum_of_a_math_function_central_differences(fn, red, where, backend):
    K, N = 5, 3
    X, H, M, dX = _extremum(fn, red, where, K, N, F)
    k = te.reduce_axis(N, "i2")
    L = te.compute((), lambda: te.sum(M[k] * H[k], axis=k), name="L")
    h = rand(N, seed=5) + 2.0
    for seed in range(3):
        x = rand(K, N, seed=seed, low=-2.0, high=2.0)
        check_grads(L, [X, H], [x, h], wrt=[0], backend=backend)


# }}}

# {{{ one reduce axis used by sibling reductions

# ``s = te.sum(X[k], axis=k)`` used three times, or a sum and a max over the same
# axis: each reduction binds its own k. A gradient substituting the gather's
# solution for k must leave the other reductions' k alone.


def _leaky(X):
    k = te.reduce_axis(X.shape[0], name="k")
    s = te.sum(X[k], axis=k)
    return te.compute((), lambda: te.select(s > 0, s, 0.1 * s), name="L")


@pytest.mark.parametrize("backend", ["numpy", "c"])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_issue_leaky_relu_of_a_sum_used_three_times(sign, backend):
    X = te.placeholder((4,), F, "X")
    x = sign * np.array([1.0, -0.5, 2.0, -1.0])
    (dX,) = te.differentiate(_leaky(X), [X])
    got = te.build(dX, inputs=[X], backend=backend)(x)
    np.testing.assert_allclose(got, np.full(4, 1.0 if sign > 0 else 0.1))
    assert "sum_{k in [0, 4)} X[i0]" not in str(dX)


def _siblings(kind):
    X = te.placeholder((3, 5), F, "X")
    k = te.reduce_axis(5, name="k")
    m = te.reduce_axis(5, name="m")
    if kind == "sum_over_max":
        fn = lambda i: te.sum(X[i, k] * X[i, k], axis=k) / (2.0 + te.max(X[i, k], axis=k))
    elif kind == "select":
        fn = lambda i: te.select(te.max(X[i, k], axis=k) > 0.3, te.sum(X[i, k] ** 2, axis=k),
                                 te.min(X[i, k], axis=k) * te.sum(X[i, k], axis=k))
    elif kind == "where":  # k both in the where's mean and in a sibling sum
        fn = lambda i: te.sum(X[i, m], axis=m, where=X[i, m] > te.sum(X[i, k], axis=k) / 5.0) \
            * te.sum(X[i, k] * X[i, k], axis=k)
    elif kind == "condition":  # the sum is a select's condition and both branches
        fn = lambda i: te.select(te.sum(X[i, k], axis=k) < 0.0, -te.sum(X[i, k], axis=k),
                                 te.tanh(te.sum(X[i, k] * X[i, 0], axis=k)))
    else:
        raise ValueError(kind)
    return X, te.compute((3,), fn, name="Y")


SIBLINGS = ["sum_over_max", "select", "where", "condition"]


@pytest.mark.parametrize("backend", ["numpy", "c"])
@pytest.mark.parametrize("kind", SIBLINGS)
def test_sibling_reductions_sharing_an_axis(kind, backend):
    X, Y = _siblings(kind)
    x = rand(3, 5, seed=len(kind))
    x[1] -= 0.4  # rows on both sides of the conditions
    check_grads(sum_of_squares(Y), [X], [x], backend=backend)


@pytest.mark.parametrize("kind", ["select", "condition"])
def test_sibling_reductions_sharing_an_axis_second_order(kind):
    X, Y = _siblings(kind)
    x = rand(3, 5, seed=len(kind))
    x[1] -= 0.4
    second_order(sum_of_squares(Y), [X], [x])


# }}}


@pytest.mark.parametrize("backend", ["c", "numpy"])
def test_modulo_gradient_uses_the_floor_quotient(backend):
    # d(a % b)/db = -(a // b); floor(a / b) is 10 at 1.0 % 0.1 where a // b is 9
    A = te.placeholder((4,), F, "A")
    B = te.placeholder((4,), F, "B")
    Y = te.compute((4,), lambda i: A[i] % B[i], name="Y")
    a = np.array([1.0, -1.0, 7.25, 0.3])
    b = np.array([0.1, 0.1, -2.0, 0.1])
    dA, dB = te.differentiate(sum_of_squares(Y), [A, B])
    ga, gb = te.build([dA, dB], inputs=[A, B], backend=backend)(a, b)
    y = a % b
    np.testing.assert_allclose(ga, 2 * y)
    np.testing.assert_allclose(gb, -2 * y * (a // b))
    # central differences away from the jumps (1.0 % 0.1 is a hair below the next one)
    check_grads(sum_of_squares(Y), [A, B], [np.array([1.05, -1.05, 7.25, 0.33]), b],
                backend=backend)

# {{{ several outputs at once, one head each


def _weighted(Y, H):
    """``sum(H * Y)``: the scalar whose gradient is the VJP of ``Y`` with head ``H``."""
    axes = [te.reduce_axis(s) for s in Y.shape]
    return te.compute((), lambda: te.sum(Y[tuple(axes)] * H[tuple(axes)], axis=axes))


@pytest.mark.parametrize("backend", ["numpy", "c"])
@pytest.mark.parametrize("name", ["matmul", "softmax", "layer_norm", "maxpool", "embedding"])
def test_several_outputs_sum_their_contributions(name, backend):
    # Y1 = the pattern, Y2 = a loss reading Y1 (outputs feed each other): the gradient
    # is that of sum(H1 * Y1) + Y2, against float64 central differences.
    inputs, Y, arrays, _ = PATTERNS[name]()
    Y2 = sum_of_squares(Y)
    H = te.placeholder(Y.shape, F, "H")
    h = rand(*Y.shape, seed=5)
    wrt = _float_inputs(inputs)
    grads = te.differentiate([Y, Y2], [inputs[k] for k in wrt], head=[H, None])
    got = te.build(list(grads), inputs=inputs + [H], backend=backend)(*arrays, h)
    got = got if isinstance(got, tuple) else (got,)
    L1 = te.build(_weighted(Y, H), inputs=inputs + [H], backend="numpy")
    L2 = te.build(Y2, inputs=inputs, backend="numpy")
    for g, k in zip(got, wrt):
        want = numeric_grad(lambda *a: L1(*a, h) + L2(*a), arrays, k)
        assert rel_err(g, want) < 1e-6, (inputs[k].name, rel_err(g, want))


def test_several_outputs_with_a_prefix_and_the_same_output_twice():
    X = te.placeholder((3, 4), F, "X")
    Y1 = te.compute((3, 4), lambda i, j: te.tanh(X[i, j]), name="Y1")
    k = te.reduce_axis(4, name="k")
    Y2 = te.compute((3,), lambda i: te.sum(X[i, k] * X[i, k], axis=k), name="Y2")
    H1 = te.placeholder((2, 3, 4), F, "H1")
    H2 = te.placeholder((2, 3), F, "H2")
    H3 = te.placeholder((2, 3, 4), F, "H3")
    (dX,) = te.differentiate([Y1, Y2, Y1], [X], head=[H1, H2, H3])
    assert dX.shape == (2, 3, 4)
    x, h1, h2, h3 = rand(3, 4), rand(2, 3, 4, seed=1), rand(2, 3, seed=2), rand(2, 3, 4, seed=3)
    for backend in ("numpy", "c"):
        got = te.build(dX, inputs=[X, H1, H2, H3], backend=backend)(x, h1, h2, h3)
        want = (h1 + h3) * (1 - np.tanh(x) ** 2) + 2 * x * h2[:, :, None]
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_several_outputs_one_program_and_single_output_unchanged():
    inputs, Y, arrays, _ = PATTERNS["softmax"]()
    H = te.placeholder(Y.shape, F, "H")
    (single,) = te.differentiate(Y, inputs[:1], head=H)
    (listed,) = te.differentiate([Y], inputs[:1], head=[H])
    # the list form of one output is the same program, printed the same
    assert te.build(single, backend="numpy").source == te.build(listed, backend="numpy").source
    # two outputs, one traversal: the shared forward and adjoint tensors appear once
    L = sum_of_squares(Y)
    (both,) = te.differentiate([Y, L], inputs[:1], head=[H, None])
    names = [t.name for t in topo_order([both])]
    assert names.count("dY") == 1 and len(names) == len(set(t.uid for t in topo_order([both])))


@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_several_outputs_through_a_recurrence_and_an_override(backend):
    # Y1 = an EWMA recurrence (head H), Y2 = a loss of its last row (head None) with a
    # stop-gradient on an edge: one program, against central differences of
    # sum(H * Y1) + Y2 with the stopped edge's input held constant.
    d = te.placeholder((2, 5), F, "d")
    s = te.placeholder((2,), F, "s")
    e = te.recurrence((5, 2), lambda e, t, r: te.select(
        t == 0, d[r, 0], 0.5 * d[r, t] + 0.5 * e[t - 1, r]), name="e", dtype=F)
    r = te.reduce_axis(2, "r")
    scaled = te.compute((2,), lambda q: e[4, q] * s[q], name="scaled")
    L = te.compute((), lambda: te.sum(scaled[r] * scaled[r], axis=r), name="L")
    H = te.placeholder((5, 2), F, "H")
    dd, ds = te.differentiate([e, L], [d, s], head=[H, None],
                              override={(scaled, e): None})
    dv, sv, hv = rand(2, 5), rand(2, seed=1), rand(5, 2, seed=2)
    got = te.build([dd, ds], inputs=[d, s, H], backend=backend)(dv, sv, hv)
    fe = te.build(e, inputs=[d], backend="numpy")
    fl = te.build(L, inputs=[d, s], backend="numpy")
    e_fixed = fe(dv)
    # through e only (the edge scaled <- e is stopped), and L through s only
    want_d = numeric_grad(lambda v: (fe(v) * hv).sum(), [dv], 0)
    want_s = 2 * e_fixed[4] ** 2 * sv
    np.testing.assert_allclose(got[0], want_d, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(got[1], want_s, rtol=1e-6)
    assert rel_err(got[1], numeric_grad(fl, [dv, sv], 1)) < 1e-6


def test_several_outputs_bad_heads():
    X = te.placeholder((3,), F, "X")
    Y = te.compute((3,), lambda i: X[i] * 2.0, name="Y")
    i = te.reduce_axis(3)
    L = te.compute((), lambda: te.sum(X[i], axis=i), name="L")
    with pytest.raises(TypeError, match="head= is a list of 2 heads"):
        te.differentiate([Y, L], [X], head=te.placeholder((3,), F, "H"))
    with pytest.raises(ValueError, match=r"'Y'.*each non-scalar one needs a head"):
        te.differentiate([Y, L], [X], head=[None, None])
    # a prefix (2,) on Y, none on L (head None): every head has the one prefix
    with pytest.raises(ValueError, match=r"'Y'.*'L'.*different prefixes \(2,\) and \(\)"):
        te.differentiate([Y, L], [X], head=[te.placeholder((2, 3), F, "Hp"), None])


# }}}

# {{{ head=None on a non-scalar output


def test_issue_forgotten_head_refuses_a_huge_jacobian():
    # 300x300 output of a 300x300 input: 8.1e9 elements, 32 GiB at call time.
    X = te.placeholder((300, 300), "float32", "X")
    Y = te.compute((300, 300), lambda i, j: X[i, j] * 2.0, name="Y")
    with pytest.raises(te.JacobianError) as err:
        te.differentiate(Y, [X])
    msg = str(err.value)
    for part in ("'Y'", "test_differentiate.py", "(300, 300) + (300, 300)", "8,100,000,000",
                 "head=", "jacobian=True"):
        assert part in msg, (part, msg)
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize("shape,ok", [((4, 4), True), ((64, 64), True), ((65, 64), False),
                                      ((4096,), True), ((4097,), False)])
def test_jacobian_limit_is_the_documented_count(shape, ok):
    # a (n,) output of the same input: n * n elements against JACOBIAN_LIMIT = 2**24
    from passes.differentiate import JACOBIAN_LIMIT
    size = int(np.prod(shape)) ** 2
    assert ok == (size <= JACOBIAN_LIMIT)
    X = te.placeholder(shape, F, "X")
    Y = te.compute(shape, lambda *ix: X[ix] * 3.0, name="Y")
    if ok:
        (J,) = te.differentiate(Y, [X])
        assert J.shape == shape + shape
    else:
        with pytest.raises(te.JacobianError):
            te.differentiate(Y, [X])
    (J,) = te.differentiate(Y, [X], jacobian=True)  # asked for: always built
    assert J.shape == shape + shape


def test_jacobian_of_symbolic_shape_needs_the_opt_in():
    n = te.var("n")
    X = te.placeholder((n,), F, "X")
    Y = te.compute((n,), lambda i: X[i] * X[i], name="Y")
    with pytest.raises(te.JacobianError, match="symbolic size"):
        te.differentiate(Y, [X])
    (J,) = te.differentiate(Y, [X], jacobian=True)
    x = rand(3)
    np.testing.assert_allclose(te.build(J, backend="numpy")(x), np.diag(2 * x))
    with pytest.raises(ValueError, match="jacobian=True"):
        te.differentiate(Y, [X], head=te.placeholder((n,), F, "H"), jacobian=True)


# }}}


# {{{ how gradients print


@pytest.mark.parametrize("exponent,want", [
    (2, "dx[i0] = dy[i0] * (2.0 * x[i0])"),
    (1, None),
    (3, "dx[i0] = dy[i0] * (3.0 * (x[i0] ** 2.0))"),
])
def test_issue_pow_gradient_prints_without_exponent_one(exponent, want):
    X = te.placeholder((3,), "float32", "x")
    Y = te.compute((3,), lambda i: X[i] ** exponent, name="y")
    H = te.placeholder((3,), "float32", "dy")
    (dx,) = te.differentiate(Y, [X], head=H)
    if want is None:  # x ** 1: the gradient is the head itself, no x ** 0.0 * ... left
        assert dx is H
        return
    assert str(dx).startswith(want + "    for"), str(dx)
    assert "** 1.0" not in str(dx) and "** 0.0" not in str(dx)
    x = np.array([-2.0, 0.0, np.nan], np.float32)
    h = np.ones(3, np.float32)
    for backend in ("numpy", "c"):
        got = te.build(dx, inputs=[X, H], backend=backend)(x, h)
        np.testing.assert_array_equal(got, exponent * np.power(x, exponent - 1))


def test_issue_derivatives_of_each_order_have_their_own_names():
    X = te.placeholder((3,), F, "x")
    Y = te.compute((3,), lambda i: X[i] ** 3, name="y")
    L = sum_of_squares(Y)
    (d1,) = te.differentiate(L, [X])
    (d2,) = te.differentiate(sum_of_squares(d1), [X])
    (d3,) = te.differentiate(sum_of_squares(d2), [X])
    assert (d1.name, d2.name, d3.name) == ("dx", "d2x", "d3x")
    names = [t.name for t in topo_order([d3])]
    assert len(names) == len(set(names)), names  # every tensor of the program: its own name
    x = rand(3)
    want = numeric_grad(te.build(sum_of_squares(d2), backend="numpy"), [x], 0)
    np.testing.assert_allclose(te.build(d3, backend="numpy")(x), want, rtol=1e-6)


# }}}


# {{{ a NaN in a max/min reduction's row


@pytest.mark.parametrize("backend", ["numpy", "c"])
@pytest.mark.parametrize("op", ["max", "min"])
def test_issue_nan_in_a_max_row_is_documented(op, backend):
    # Decided and documented (docs/guide.md, differentiate's docstring): the forward's
    # max of a row holding NaN is NaN, and NaN equals nothing, so that row has no
    # arg-extremum and its gradient is 0; the NaN shows in the forward value. (Sending
    # the adjoint to the NaN points cost the max-pooling VJP ~30% in the benchmark.)
    X = te.placeholder((3, 4), F, "X")
    k = te.reduce_axis(4)
    M = te.compute((3,), lambda i: getattr(te, op)(X[i, k], axis=k), name="M")
    H = te.placeholder((3,), F, "H")
    (dX,) = te.differentiate(M, [X], head=H)
    nan = np.nan
    x = np.array([[1, nan, 3, 2], [nan, 2, nan, 0], [1, 5, -5, 5]])
    h = np.array([2.0, 4.0, 6.0])
    m = te.build(M, backend=backend)(x)
    assert np.isnan(m[0]) and np.isnan(m[1]) and not np.isnan(m[2])
    g = te.build(dX, inputs=[X, H], backend=backend)(x, h)
    want = np.zeros((3, 4))
    want[2, [1, 3] if op == "max" else [2]] = 6.0 / (2 if op == "max" else 1)
    np.testing.assert_array_equal(g, want)


# }}}


@pytest.mark.parametrize("backend", ["numpy", "c"])
@pytest.mark.parametrize("links,reduce", [(20, False), (400, False), (300, True)])
def test_gradient_of_an_input_read_by_every_link_of_a_long_chain(backend, links, reduce):
    # dX collects one term per link; summed left to right they made an expression as
    # deep as the chain, and building it recursed past Python's limit (RecursionError).
    # With `reduce` every term is a sum over the same range, merged into one sum.
    X = te.placeholder((4,), dtype="float64", name="X")
    W = te.placeholder((4, 3), dtype="float64", name="W")
    k = te.reduce_axis(3, name="k")
    P = X
    for _ in range(links):
        P = (lambda P: te.compute((4,), lambda i: 0.5 * P[i] + (
            te.sum(W[i, k], axis=k) if reduce else X[i]) * 0.25, dtype="float64"))(P)
    L = sum_of_squares(P)
    rng = np.random.default_rng(links)
    check_grads(L, [X, W], [rng.uniform(-1, 1, 4), rng.uniform(-1, 1, (4, 3))],
                backend=backend)


def test_fuzzer_program_5789_tie_count_reads_inside_its_domain():
    # The tie count is split by residues of i1 (i1 = 2*q + r): q < count(r) must be tested
    # before the min's own condition, which reads X0[n - 1 - i1] (fuzz seed 27182).
    from tests.fuzz.harness import check
    n = te.var("n")
    X0 = te.placeholder((n,), dtype="float64", name="X0")
    X1 = te.placeholder((3, n), dtype="float64", name="X1")
    I0 = te.placeholder((1,), dtype="int32", name="I0")
    k0 = te.reduce_axis((0, n), name="k0")
    T0 = te.compute((2, n), lambda i0, i1: te.min(te.select(
        (i1 + -1 > k0) & (X0[n - (1) - (i1)] > -0.5),
        te.abs(te.select(2 <= n - (1), X1[te.minimum(I0[(2 * k0 + 0) % 1], 2), 2], 0.0)),
        te.select((te.select(1 <= n - (1), X0[1], 0.0) > -0.5)
                  & (X1[(i0 + 1) // 2, te.minimum(I0[0] % 3, n - (1))] > 0.5),
                  te.cast(k0, 'float64') * 0.5, te.cast(i1, 'float64') * 0.5)),
        axis=k0, where=((i1 % 2 == 0) & (i1 + 1 > 3)) | (k0 == 0)), name="T0", dtype="float64")
    k1 = te.reduce_axis((1, 3), name="k1")
    T1 = te.compute((1, 2, n), lambda i0, i1, i2: te.select(te.select(
        i0 + -1 >= 0, T0[(I0[te.minimum(n - (1) - (i2), 0)] % 3) % 2, i0 + -1], 0.0) > 0.0,
        (te.min(te.const(-1.5, 'float64'), axis=k1, where=(~(i1 + -1 < i2)) | (k1 == 1)))
        / (1.0 + (te.cos(te.const(1.0, 'float64'))) * (te.cos(te.const(1.0, 'float64')))),
        te.select((te.select(i1 + 2 <= n - (1), X0[i1 + 2], 0.0) > 0.5) | (i2 % 2 == 0),
                  te.sin(te.cast(i2, 'float64') * 0.5),
                  te.minimum(te.cast(i1, 'float64') * 0.5,
                             te.select(1 <= n - (1), T0[i2 % 2, 1], 0.0)))),
        name="T1", dtype="float64")
    check(T1, [X0, X1, I0], [
        np.array([-1.2835397703225562, 1.129668984013271, 1.3684573243586309]),
        np.array([[0.5819011155495022, 0.7353234808311235, 0.8278979229379715],
                  [1.4282957702909513, 0.7492221903395273, -0.2221403372522044],
                  [0.22919855599440275, -1.4875697961136072, 0.6031845175208117]]),
        np.array([3], dtype='int32')], second_order=False, seed=5789)


def test_fuzzer_program_15010_a_sum_inside_a_min_is_added_as_in_the_forward():
    # the min's tie test recomputes the sum over (k7, k8) in other loops than the
    # forward did: with lanes or partial sums it could round differently, and the
    # gradient of X1 was 0 (fuzz seed 27182); compared sums are added in written order
    from tests.fuzz.harness import check
    n = te.var("n")
    X0 = te.placeholder((n, 4), dtype="float64", name="X0")
    X1 = te.placeholder((n,), dtype="float64", name="X1")
    X2 = te.placeholder((4, 1), dtype="float64", name="X2")
    I0 = te.placeholder((2,), dtype="int32", name="I0")
    k0 = te.reduce_axis((0, 2), name="k0")
    k1 = te.reduce_axis((0, 4), name="k1")
    k2 = te.reduce_axis((1, 2), name="k2")
    T0 = te.compute((n, 4), lambda i0, i1: te.sum(te.sum(te.select(i0 % 2 == 0, X2[te.minimum(i0 + 1, 3), te.minimum(i0, 0)], X1[te.minimum(i0 + 1, n - (1))]), axis=k2), axis=[k0, k1], where=~(i0 % 2 == 0)), name="T0", dtype="float64")
    k3 = te.reduce_axis((0, 1), name="k3")
    k4 = te.reduce_axis((0, 1), name="k4")
    T1 = te.compute((n, 3, 1), lambda i0, i1, i2: -(-(te.const(1.0, 'float64'))) + te.sum(te.const(1.0, 'float64') + te.const(1.0, 'float64'), axis=[k3, k4], where=i0 % 2 == 0), name="T1", dtype="float64")
    k5 = te.reduce_axis((0, 2), name="k5")
    k6 = te.reduce_axis((0, n), name="k6")
    k7 = te.reduce_axis((0, 3), name="k7")
    k8 = te.reduce_axis((0, 3), name="k8")
    T2 = te.compute((n,), lambda i0: te.min(te.sum(te.select(i0 % 2 == 0, X1[te.minimum(0 + 2 * i0, n - (1))], te.const(1.0, 'float64')), axis=[k7, k8]), axis=[k5, k6], where=(i0 < i0) | ((k5 == 0) & (k6 == 0))), name="T2", dtype="float64")
    check(T2, [X0, X1, X2, I0], [
        np.array([[0.3176387595008572, -0.29096028453988, 1.4867107016921453, -1.3298589446859523], [-0.7174817172718575, -0.5698861205537532, -0.6009686683136184, -0.6752311360594899]], dtype='float64'),
        np.array([-0.6255260811853118, -0.4128981154363547], dtype='float64'),
        np.array([[1.4406866241535683], [0.4570847010735055], [-0.3937668769910072], [1.043057275446297]], dtype='float64'),
        np.array([0, 1], dtype='int32')],
          second_order=True, seed=15010)


def test_fuzzer_program_8145_nested_pieces_of_a_max():
    # T1_max is cut into pieces holding sums (max reductions), one of them again: the
    # inner pieces were stored without the outer piece's offset (fuzz seed 61001)
    from tests.fuzz.harness import check
    X0 = te.placeholder((1, 2), dtype="float64", name="X0")
    T0 = te.compute((1,), lambda i0: te.const(1.0, 'float64'), name="T0", dtype="float64")
    k0 = te.reduce_axis((0, 3), name="k0")
    k1 = te.reduce_axis((0, 1), name="k1")
    T1 = te.compute((), lambda : te.minimum(-(te.select((X0[0, 0] > 0.0) & (T0[0] > 0.0), te.const(1.0, 'float64'), X0[0, 0])), te.min(te.max(T0[te.minimum(k0, 0)], axis=k1, where=(k0 < 0) | (k1 == 0)), axis=k0, where=((k0 + 0 < k0) & (k0 % 2 == 0)) | (k0 == 0))), name="T1", dtype="float64")
    check(T1, [X0], [
        np.array([[-0.10006605901089083, -1.330559919816365]], dtype='float64')],
          second_order=True, seed=8145)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(2, 5), st.integers(1, 3), st.integers(2, 5))
def test_the_adjoint_multiplies_the_chain_outermost_first(T, B, D):
    # the adjoint of the tanh's input, dh * (1 - h^2), is formed before the weight
    # (read along the sum's axis k) multiplies it: sums over it (the step sums of dh,
    # dW) read one factor per lane and share that product (an RNN's VJP: 1.93 -> 1.42
    # ms, benchmarks case 27); elementwise factors stay whole (test_pow_gradient...)
    x = te.placeholder((T, B, D), "float64", "x")
    W = te.placeholder((D, D), "float64", "W")
    k = te.reduce_axis(D, "k")
    h = te.recurrence((T, B, D), lambda h, t, b, j: te.tanh(x[t, b, j] + te.select(
        t == 0, 0.0, te.sum(h[t - 1, b, k] * W[k, j], axis=k))), name="h", dtype="float64")
    r = [te.reduce_axis(n) for n in (T, B, D)]
    L = te.compute((), lambda: te.sum(h[r[0], r[1], r[2]] ** 2, axis=r), name="L",
                   dtype="float64")
    grads = te.differentiate(L, [x, W])
    dh = grads.adjoints[h]
    assert re.search(r"\(dh\[[^]]*\] \* \(1\.0d - \(h\[[^]]*\] \* h\[[^]]*\]\)\)\) \* W\[",
                     str(dh)), str(dh)
    rng = np.random.default_rng(T * 100 + B * 10 + D)
    arrays = [rng.standard_normal((T, B, D)), rng.standard_normal((D, D)) * 0.4]
    check_grads(L, [x, W], arrays, backend="c", tol=1e-6)

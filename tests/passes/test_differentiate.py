"""te.differentiate against float64 central differences, first and second order."""
from __future__ import annotations

import numpy as np
import pytest

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


PATTERNS = {
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


# {{{ extremum of a recomputed body: the arg-extremum test must see the forward's bits

# (op, reduce, where?): a max or min reduction of a math function of the input
_EXTREMA = [("exp", te.max, False), ("tanh", te.min, False), ("log", te.max, False),
            ("sigmoid", te.min, False), ("sin", te.max, False), ("exp", te.max, True),
            ("tanh", te.max, True)]


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
          "sigmoid": lambda v: 1 / (1 + np.exp(-v))}[fn]
    d = {"exp": np.exp, "tanh": lambda v: 1 - np.tanh(v) ** 2, "sin": np.cos,
         "log": lambda v: np.sign(v) / (np.abs(v) + 0.5),
         "sigmoid": lambda v: np.exp(-v) / (1 + np.exp(-v)) ** 2}[fn]
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

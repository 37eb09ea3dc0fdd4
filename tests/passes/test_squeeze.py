"""Unit axes of contractions (passes.squeeze): the sum is tiled over the other axes."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te
from passes.squeeze import squeezable, squeeze


def _agree(outs, ins, arrays, rtol=1e-5):
    f = te.build(outs, ins)
    ref = te.build(outs, ins, backend="numpy")
    got, want = f(*arrays), ref(*arrays)
    for a, b in zip(got if len(outs) > 1 else [got], want if len(outs) > 1 else [want]):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-5)
    return f


def test_a_1x1_convolutions_weight_gradient_is_a_tiled_contraction():
    N, F, C, S = 2, 16, 24, 6
    H = te.placeholder((N, F, S, S), name="H")
    X = te.placeholder((N, C, S, S), name="X")
    n, y, x = te.reduce_axis(N, "n"), te.reduce_axis(S, "y"), te.reduce_axis(S, "x")
    dW = te.compute((F, C, 1, 1), lambda f, c, a, b: te.sum(
        H[n, f, y, x] * X[n, c, y, x], axis=[n, y, x]), name="dW")
    rng = np.random.default_rng(0)
    f = _agree([dW], [H, X], [rng.standard_normal((N, F, S, S)).astype(np.float32),
                               rng.standard_normal((N, C, S, S)).astype(np.float32)])
    assert "dW_sq[f, c] from dW (unit axes)" in f.schedule.hoisted
    assert f.schedule["dW_sq"].strategy in ("rows", "jam")


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_unit_axes_anywhere_take_their_one_value(where):
    # a keepdims-style sum (4, 1) and unit axes that do not start at 0
    X = te.placeholder((4, 7), "float64", "X")
    k = te.reduce_axis(7, "k")
    if where == "last":
        Y = te.compute((4, 1), lambda i, j: te.sum(X[i, k] * (j + 1.0), axis=k), name="Y",
                       dtype="float64")
    elif where == "middle":
        Y = te.compute((4, 1, 1), lambda i, a, j: te.sum(X[i, k] + a, axis=k), name="Y",
                       dtype="float64")
    else:
        Y = te.compute((1, 4, 1), lambda a, i, j: te.sum(X[i, k], axis=k), name="Y",
                       dtype="float64")
    assert squeezable(Y)
    _agree([Y], [X], [np.random.default_rng(1).standard_normal((4, 7))])


def test_what_is_not_squeezed():
    X = te.placeholder((4, 4), name="X")
    k = te.reduce_axis(4, "k")
    assert not squeezable(te.compute((4, 1), lambda i, j: X[i, j] * 2.0))  # no sum
    assert not squeezable(te.compute((1, 1), lambda i, j: te.sum(X[i, k], axis=k)))  # all unit
    assert not squeezable(te.compute((1, 4), lambda i, j: te.sum(X[j, k], axis=k)))  # inner long
    h = te.recurrence((4, 1), lambda h, t, j: te.select(
        t == 0, 0.0, h[t - 1, j]) + te.sum(X[t, k], axis=k), name="h")
    assert not squeezable(h)
    assert squeeze([h])[1] == []


def test_gradients_through_a_squeezed_sum():
    X = te.placeholder((3, 5), "float64", "X")
    k = te.reduce_axis(5, "k")
    Y = te.compute((3, 1), lambda i, j: te.sum(te.exp(X[i, k]), axis=k), name="Y",
                   dtype="float64")
    Hd = te.placeholder((3, 1), "float64", "Hd")
    (dX,) = te.differentiate(Y, [X], head=Hd)
    rng = np.random.default_rng(2)
    _agree([Y, dX], [X, Hd], [rng.standard_normal((3, 5)), rng.standard_normal((3, 1))])

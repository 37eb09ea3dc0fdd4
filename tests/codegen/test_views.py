"""Outputs that are strided views of an input (codegen.views): returned as read-only numpy
views, without a kernel, and equal to what the numpy backend computes."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te
from codegen import views

from .util import agree, rand


def _is_view_of(out: np.ndarray, a: np.ndarray) -> bool:
    return np.shares_memory(out, a) and not out.flags.writeable


def test_a_flatten_written_with_floor_division_and_modulo_is_a_view():
    X = te.placeholder((2, 3, 4, 5), name="X")
    Y = te.compute((2, 60), lambda n, k: X[n, k // 20, (k // 5) % 4, k % 5], name="Y")
    x = rand((2, 3, 4, 5))
    f, _ = agree([Y], [X], x)
    y = f(x)
    assert _is_view_of(y, x)
    assert "no kernel" in f.source and "te_kernel" not in f.source
    with pytest.raises(ValueError):
        y[0, 0] = 1.0  # read-only: it would write into the caller's input


def test_transpose_slice_and_broadcast_are_views():
    X = te.placeholder((6, 4), name="X")
    b = te.placeholder((4,), name="b")
    T = te.compute((4, 6), lambda j, i: X[i, j], name="T")
    S = te.compute((3, 2), lambda i, j: X[2 * i + 1, 3 - j], name="S")  # strided, reversed
    B = te.compute((5, 4), lambda i, j: b[j], name="B")
    x, bb = rand((6, 4)), rand((4,), seed=1)
    f, _ = agree([T, S, B], [X, b], x, bb)
    t, s, bc = f(x, bb)
    assert _is_view_of(t, x) and _is_view_of(s, x) and _is_view_of(bc, bb)
    assert bc.strides[0] == 0


def test_a_view_output_beside_computed_outputs():
    X = te.placeholder((5, 7), name="X")
    k = te.reduce_axis((0, 7), name="k")
    T = te.compute((7, 5), lambda j, i: X[i, j], name="T")
    s = te.compute((5,), lambda i: te.sum(X[i, k], axis=k), name="s")
    x = rand((5, 7))
    f, _ = agree([s, T], [X], x)
    got_s, got_t = f(x)
    assert _is_view_of(got_t, x) and not np.shares_memory(got_s, x)
    assert "read-only view of X" in f.source and "te_kernel" in f.source


def test_the_bias_transpose_gradient_returns_the_head_transposed():
    X = te.placeholder((6, 4), name="X")
    b = te.placeholder((4,), name="b")
    Y = te.compute((4, 6), lambda j, i: X[i, j] + b[j], name="Y")
    H = te.placeholder(Y.shape, name="H")
    dX, db = te.differentiate(Y, [X, b], head=H)
    x, bb, h = rand((6, 4)), rand((4,), seed=1), rand((4, 6), seed=2)
    f, _ = agree([dX, db], [X, b, H], x, bb, h)
    gx, gb = f(x, bb, h)
    assert _is_view_of(gx, h)
    np.testing.assert_allclose(gb, h.sum(axis=1), rtol=1e-5)


@pytest.mark.parametrize("case", ["scaled", "cast", "jumps", "gather", "symbolic"])
def test_what_is_not_a_view_is_computed(case):
    X = te.placeholder((4, 8), name="X")
    idx = te.placeholder((3,), dtype="int32", name="idx")
    n = te.var("n")
    V = te.placeholder((n, 8), name="V")
    inputs, arrays = [X], [rand((4, 8))]
    if case == "scaled":
        Y = te.compute((4, 8), lambda i, j: X[i, j] * 2.0, name="Y")
    elif case == "cast":
        Y = te.compute((4, 8), lambda i, j: X[i, j].astype("float64"), name="Y")
    elif case == "jumps":  # k -> (k // 4) * 8 + k % 4: the first four of every row of 8
        Y = te.compute((16,), lambda k: X[k // 4, k % 4], name="Y")
    elif case == "gather":
        Y = te.compute((3, 8), lambda i, j: X[idx[i], j], name="Y")
        inputs, arrays = [X, idx], [rand((4, 8)), np.array([3, 0, 1], np.int32)]
    else:
        Y = te.compute((n, 8), lambda i, j: V[i, j], name="Y")
        inputs, arrays = [V], [rand((4, 8))]
    assert views.find([Y], inputs) == {}
    f, _ = agree([Y], inputs, *arrays)
    assert not np.shares_memory(f(*arrays), arrays[0])

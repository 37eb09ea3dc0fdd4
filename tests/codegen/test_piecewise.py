"""Index-set splitting (``codegen.piecewise``): where the pieces fall, what their bodies keep,
and the C backend against the numpy backend on clamped stencils, their gradients and
random tests on the innermost index."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

import tensorexpr as te
from codegen import piecewise
from tensorexpr.ir import Binary, Select, walk

from .util import agree, rand, without_comments


def spans(t):
    return [(lo, hi) for lo, hi, _ in piecewise.pieces(t.body, t.axes[-1])]


def has_tests(e) -> bool:
    return any(isinstance(x, Select) or isinstance(x, Binary) and x.op in ("max", "min", "eq",
                                                                           "ge", "lt")
               for x in walk(e))


def blur(n):
    X = te.placeholder((n,), name="X")
    Y = te.compute((n,), lambda i: (X[te.maximum(i - 1, 0)] + X[i]
                                    + X[te.minimum(i + 1, n - 1)]) / 3.0, name="Y")
    return X, Y


def test_clamped_blur_and_its_gradient_split_at_both_ends():
    X, Y = blur(50)
    assert spans(Y) == [(0, 1), (1, 49), (49, 50)]
    H = te.placeholder((50,), name="H")
    dX = te.differentiate(Y, [X], head=H)[0]
    cut = piecewise.pieces(dX.body, dX.axes[-1])
    assert [(lo, hi) for lo, hi, _ in cut] == [(0, 1), (1, 49), (49, 50)]
    assert has_tests(dX.body) and not has_tests(cut[1][2])  # the middle: three plain reads


def test_equality_isolates_its_point_and_roots_may_fall_between_integers():
    X = te.placeholder((12,), name="X")
    Y = te.compute((12,), lambda i: te.select(i == 5, 0.0, X[i]), name="Y")
    assert spans(Y) == [(0, 5), (5, 6), (6, 12)]
    # 2i >= 7 from i = 4; 10 - i > 3 until i = 6 (a decreasing difference)
    Z = te.compute((12,), lambda i: te.select(2 * i >= 7, X[i], 1.0)
                   + te.select(10 - i > 3, X[i], 2.0), name="Z")
    assert spans(Z) == [(0, 4), (4, 7), (7, 12)]


def test_tests_that_are_not_on_the_axis_alone_stay():
    X = te.placeholder((6, 9), name="X")
    # on the row axis, on both axes, and not affine: none gives pieces
    for f in (lambda y, x: te.select(y >= 1, X[y, x], 0.0),
              lambda y, x: te.select(x + y >= 4, X[y, x], 0.0),
              lambda y, x: te.select(x // 4 >= 1, X[y, x], 0.0),
              lambda y, x: te.select(X[y, x] > 0.0, X[y, x], 0.0)):
        assert piecewise.pieces(te.compute((6, 9), f).body, te.compute((6, 9), f).axes[-1]) is None


def test_too_many_pieces_leave_the_loop_whole():
    X = te.placeholder((20,), name="X")
    Y = te.compute((20,), lambda i: sum((te.select(i == k, X[i], 0.0) for k in (2, 5, 8, 11)),
                                        X[i]), name="Y")
    assert piecewise.pieces(Y.body, Y.axes[0]) is None  # 9 pieces > MAX_PIECES


def test_clamped_blur_runs_without_tests_in_c():
    X, Y = blur(1000)
    H = te.placeholder((1000,), name="H")
    dX = te.differentiate(Y, [X], head=H)[0]
    x, h = rand((1000,)), rand((1000,), seed=1)
    fc, _ = agree([Y], [X], x)
    assert "?" not in without_comments(fc.source).split("te_kernel")[-1]
    fc, _ = agree([dX], [X, H], x, h)
    assert "?" not in without_comments(fc.source).split("te_kernel")[-1]


def test_2d_clamp_on_columns_with_outer_rows_threaded():
    X = te.placeholder((64, 40), name="X")
    Y = te.compute((64, 40), lambda y, x: X[y, te.maximum(x - 2, 0)]
                   * te.select(x < 37, 2.0, X[te.minimum(y + 1, 63), x]), name="Y")
    H = te.placeholder(Y.shape, name="H")
    dX = te.differentiate(Y, [X], head=H)[0]
    agree([Y, dX], [X, H], rand(X.shape), rand(Y.shape, seed=1))


@st.composite
def stencil(draw):
    """A random 1-d expression over X of n elements: clamped reads and selects on
    affine tests of the index."""
    n = draw(st.integers(2, 40))
    terms = []
    for _ in range(draw(st.integers(1, 4))):
        a, b = draw(st.sampled_from([1, 2, -1])), draw(st.integers(-6, 6))
        c = draw(st.integers(-3, 45))
        op = draw(st.sampled_from(["ge", "lt", "eq", "ne", "clamp"]))
        terms.append((a, b, c, op, draw(st.floats(-2, 2).map(lambda v: round(v * 2) / 2))))
    return n, terms


def _build(n, terms):
    X = te.placeholder((n,), name="X")

    def body(i):
        out = X[i]
        for a, b, c, op, k in terms:
            d = a * i + b
            if op == "clamp":
                out = out + X[te.minimum(te.maximum(d, 0), n - 1)]
                continue
            test = {"ge": d >= c, "lt": d < c, "eq": d == c, "ne": d != c}[op]
            out = out + te.select(test, X[te.minimum(i + 1, n - 1)] * k, X[te.maximum(i - 1, 0)])
        return out
    return X, te.compute((n,), body, name="Y")


@settings(max_examples=40, deadline=None)
@given(stencil())
def test_random_tests_on_the_index_agree_with_numpy(spec):
    n, terms = spec
    X, Y = _build(n, terms)
    H = te.placeholder((n,), name="H")
    dX = te.differentiate(Y, [X], head=H)[0]
    # inputs in halves: every sum is exact, whatever the order
    x = np.round(rand((n,)) * 2).astype(np.float32) / 2
    h = np.round(rand((n,), seed=1) * 2).astype(np.float32) / 2
    agree([Y, dX], [X, H], x, h, rtol=0, atol=0)


def test_pieces_holding_sums_are_tensors_lowered_by_the_table():
    # the gradient of a weight read as gates W[k, g*H + j]: one contraction per gate,
    # each row-tiled, written into its part of dW (not a dot product per element)
    B, K, H = 24, 16, 40
    X = te.placeholder((B, K), name="X")
    W = te.placeholder((K, 3 * H), name="W")
    k = te.reduce_axis(K, name="k")
    Y = te.compute((B, H), lambda b, j: te.sigmoid(te.sum(X[b, k] * W[k, j], axis=k))
                   * te.tanh(te.sum(X[b, k] * W[k, H + j], axis=k))
                   + te.sum(X[b, k] * W[k, 2 * H + j], axis=k), name="Y")
    Hd = te.placeholder(Y.shape, name="Hd")
    (dW,) = te.differentiate(Y, [W], head=Hd)
    f, _ = agree([dW], [X, W, Hd], rand((B, K)), rand((K, 3 * H), seed=1),
                 rand((B, H), seed=2), rtol=1e-4)
    parts = [c for c in f.schedule.choices if c.tensor.startswith("dW[")]
    assert [c.tensor for c in parts] == ["dW[0:40]", "dW[40:80]", "dW[80:120]"]
    assert all(c.strategy == "rows" for c in parts), parts


def test_pieces_of_a_piece_store_at_both_offsets():
    # a piece holding a sum is a tensor of its own, which may be cut into pieces again:
    # their shifts add up (the fuzzer's program 0, seed 61001, stored at the wrong place)
    X0 = te.placeholder((1, 1), dtype="float64", name="X0")
    T0 = te.compute((1, 3, 1), lambda i0, i1, i2: -(X0[i0, i0]), name="T0", dtype="float64")
    k1 = te.reduce_axis((0, 1), name="k1")
    T2 = te.compute((3,), lambda i0: te.select(
        ~(i0 % 2 == 0), T0[te.minimum(i0 + 1, 0), i0, te.minimum(0 + 2 * i0, 0)],
        te.sum(-(te.cast(i0, 'float64') * 0.5), axis=k1)), name="T2", dtype="float64")
    f, (got,) = agree([T2], [X0], np.array([[0.41]]))
    assert [c.tensor for c in f.schedule.choices if c.strategy == "pieces"] == ["T2", "T2[1:3]"]
    np.testing.assert_array_equal(got, [0.0, -0.41, -1.0])

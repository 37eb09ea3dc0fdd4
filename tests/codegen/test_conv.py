"""Convolutions and their gradients on the C backend against the numpy backend: padded
(full-tile masked row loops, ``codegen.rowsum_masked``), strided (residue splits of the
input gradient, ``codegen.rowsum_residues``), dilated, ragged and symbolic sizes."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te
from codegen import rowsum_masked, rowsum_residues, tapsum
from tensorexpr.ir import Reduce, walk

from .util import agree, assert_same, rand


def conv2d(X, W, s=1, pad=0, dil=1):
    """``Y[n, f, y, x] = sum_{c, ky, kx} X[n, c, y*s + ky*dil - pad, x*s + kx*dil - pad]
    * W[f, c, ky, kx]`` with zero padding as a select (as the benchmark writes it)."""
    N, C, H, Wd = X.shape
    F, _, KH, KW = W.shape
    oh = (H + 2 * pad - dil * (KH - 1) - 1) // s + 1
    ow = (Wd + 2 * pad - dil * (KW - 1) - 1) // s + 1
    c, ky, kx = (te.reduce_axis((0, n), name=nm) for n, nm in ((C, "c"), (KH, "ky"), (KW, "kx")))

    def body(n, f, y, x):
        iy, ix = y * s + ky * dil - pad, x * s + kx * dil - pad
        term = X[n, c, iy, ix] * W[f, c, ky, kx]
        if pad:
            term = te.select((iy >= 0) & (iy < H) & (ix >= 0) & (ix < Wd), term, 0.0)
        return te.sum(term, axis=[c, ky, kx])
    return te.compute((N, F, oh, ow), body, name="Y")


def check(shape_x, shape_w, **kw):
    X = te.placeholder(shape_x, name="X")
    W = te.placeholder(shape_w, name="W")
    Y = conv2d(X, W, **kw)
    H = te.placeholder(Y.shape, name="H")
    dX, dW = te.differentiate(Y, [X, W], head=H)
    x, w, h = rand(shape_x), rand(shape_w, seed=1), rand(Y.shape, seed=2)
    fy, _ = agree([Y], [X, W], x, w)
    fg, _ = agree([dX, dW], [X, W, H], x, w, h, rtol=1e-4)
    return fy.source, fg.source


@pytest.mark.parametrize("s,pad,dil,hw", [
    (1, 1, 1, (9, 11)),    # padded: full-tile masked rows
    (2, 0, 1, (11, 9)),    # stride 2, odd sizes: residues of unequal length
    (3, 1, 1, (10, 13)),   # stride 3 and padding
    (1, 0, 2, (12, 10)),   # dilation 2: the input gradient is padding-like
    (2, 2, 2, (13, 14)),   # everything at once
])
def test_conv_forward_and_gradients(s, pad, dil, hw):
    fwd, grad = check((2, 3) + hw, (5, 3, 3, 3), s=s, pad=pad, dil=dil)
    if (pad or dil > 1) and s == 1:  # taps move the row's bounds: whole tiles, masked
        assert rowsum_masked.MARK in fwd + grad
    if s > 1:  # the input gradient's reads step by 1 along q (no stepped loops over x)
        assert f"//{s}" in grad


def test_conv_wide_rows_are_tiled_and_masked():
    # rows longer than a tile: the masked loop runs over each tile
    fwd, grad = check((1, 2, 3, 70), (9, 2, 3, 3), s=1, pad=1)
    assert rowsum_masked.MARK in fwd


def test_conv_with_symbolic_sizes():
    n, h, w = te.var("n"), te.var("h"), te.var("w")
    X = te.placeholder((n, 2, h, w), name="X")
    W = te.placeholder((4, 2, 3, 3), name="W")
    c, ky, kx = te.reduce_axis((0, 2)), te.reduce_axis((0, 3)), te.reduce_axis((0, 3))
    Y = te.compute((n, 4, h, w), lambda b, f, y, x: te.sum(te.select(
        (y + ky - 1 >= 0) & (y + ky - 1 < h) & (x + kx - 1 >= 0) & (x + kx - 1 < w),
        X[b, c, y + ky - 1, x + kx - 1] * W[f, c, ky, kx], 0.0), axis=[c, ky, kx]), name="Y")
    H = te.placeholder((n, 4, h, w), name="H")
    dX, dW = te.differentiate(Y, [X, W], head=H)
    fc = te.build([Y, dX, dW], inputs=[X, W, H])
    fn = te.build([Y, dX, dW], inputs=[X, W, H], backend="numpy")
    for nn, hh, ww in [(1, 1, 1), (2, 5, 9), (1, 4, 40)]:
        args = rand((nn, 2, hh, ww)), rand((4, 2, 3, 3), seed=1), rand((nn, 4, hh, ww), seed=2)
        for g, e in zip(fc(*args), fn(*args)):
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4)


def test_strided_gradient_with_symbolic_width():
    w = te.var("w")
    Hd = te.placeholder((3, w), name="Hd")
    k = te.reduce_axis((0, 3), name="k")
    # the input gradient of a stride-2 1-d convolution of width 2*w + 1
    D = te.compute((3, 2 * w + 1), lambda i, x: te.sum(
        Hd[i, (x - k) // 2], axis=k,
        where=((x - k) % 2 == 0) & (x - k >= 0) & ((x - k) // 2 < w)), name="D")
    fc, fn = te.build(D), te.build(D, backend="numpy")
    for ww in (1, 4, 9):
        hd = rand((3, ww))
        np.testing.assert_allclose(fc(hd), fn(hd), rtol=1e-5, atol=1e-5)
    assert "//2" in fc.source


def test_masked_points_are_never_evaluated():
    # padding: the untaken branch reads outside X and multiplies by an infinite weight;
    # neither may reach the result (0 * inf would be NaN). By default the sum reads a
    # zero-padded copy, its exact version a masked row sum (inside which the weights'
    # test is decided: codegen.finite_flags); without copies the masked row sum runs
    # with its own unmasked version for finite weights.
    from codegen.schedule import Options
    X = te.placeholder((1, 1, 4, 20), name="X")
    W = te.placeholder((1, 1, 3, 3), name="W")
    Y = conv2d(X, W, pad=1)
    for options in (Options(), Options(copies=False)):
        w = np.ones((1, 1, 3, 3), np.float32)
        w[0, 0, 1, 0] = np.inf  # kx = 0 is outside the image at x = 0
        x = rand((1, 1, 4, 20), low=1, high=2)
        fc = te.build(Y, inputs=[X, W], options=options)
        y = fc(x, w)
        assert_same(y, te.build(Y, inputs=[X, W], backend="numpy")(x, w))
        assert np.isfinite(y[0, 0, :, 0]).all() and np.isinf(y[0, 0, :, 1:]).all()
        if options.copies:
            assert fc.schedule["Y"].strategy == "padded-copy"
        else:
            # the unmasked fast path (staged row, zeros outside) only for finite weights
            assert rowsum_masked.MARK in fc.source and "(full tile, unmasked)" in fc.source
        w[0, 0, 1, 0] = np.nan
        y = fc(x, w)
        assert np.isfinite(y[0, 0, :, 0]).all() and np.isnan(y[0, 0, :, 1:]).all()
        w[0, 0, 1, 0] = 1.0
        x[0, 0, :, -1] = np.nan  # only taps that reach the last column see it
        y, want = fc(x, w), te.build(Y, inputs=[X, W], backend="numpy")(x, w)
        np.testing.assert_allclose(y, want, rtol=1e-5, equal_nan=True)


def test_residue_rewrites_floor_division_exactly():
    H = te.placeholder((4, 8), name="H")
    k = te.reduce_axis((0, 3), name="k")
    D = te.compute((4, 17), lambda i, x: te.sum(H[i, (x - k) // 2], axis=k,
                                                where=((x - k) % 2 == 0) & (x >= k)
                                                & (x - k < 16)), name="D")
    red = next(e for e in walk(D.body) if isinstance(e, Reduce))
    sp = rowsum_residues.split(D, red)
    assert sp is not None and sp.s == 2 and [a.name for a in sp.tensor.axes] == ["i", "x%2", "x//2"]
    # the read moves with q alone: H[i, q + (r - k) // 2]
    (read,) = [e for e in walk(sp.red.body) if hasattr(e, "indices")]
    assert str(read.indices[1]).startswith("(x//2 + ")
    # no floor division or modulo of the split axis remains
    for e in walk(sp.tensor.body):
        if getattr(e, "op", None) in ("floordiv", "mod"):
            assert all(getattr(a, "uid", None) != sp.q.uid for a in walk(e))


def test_residue_leaves_mixed_divisors_alone():
    X = te.placeholder((4, 12), name="X")
    k = te.reduce_axis((0, 2), name="k")
    D = te.compute((4, 12), lambda i, x: te.sum(X[i, x // 2] + X[i, x // 3], axis=k), name="D")
    red = next(e for e in walk(D.body) if isinstance(e, Reduce))
    assert rowsum_residues.factor(D, red) is None
    agree([D], [X], rand((4, 12)))


def test_weight_gradient_by_taps():
    X = te.placeholder((2, 3, 9, 12), name="X")
    W = te.placeholder((8, 3, 3, 3), name="W")
    Y = conv2d(X, W, pad=1)
    H = te.placeholder(Y.shape, name="H")
    dW = te.differentiate(Y, [W], head=H)[0]
    red = next(e for e in walk(dW.body) if isinstance(e, Reduce))
    plan = tapsum.plan(dW)
    assert plan is not None and plan[0] is red and plan[1] == 2
    assert dW.axes[plan[2]].hi.value == 8  # f is blocked: the X reads serve the block
    h = rand(Y.shape, seed=2)
    h[:, :, 0, 0] = np.inf  # tap (0, 0) never reaches (y, x) = (0, 0): X[.., -1, -1]
    fc, (dw,) = agree([dW], [X, W, H], rand((2, 3, 9, 12)), rand((8, 3, 3, 3), seed=1), h)
    assert np.isfinite(dw[:, :, 0, 0]).all() and not np.isfinite(dw[:, :, 1, 1]).any()
    assert "part0[" in fc.source


def test_taps_need_a_float_sum_and_a_long_last_axis():
    A = te.placeholder((6, 20), dtype="int32", name="A")
    k = te.reduce_axis((0, 20), name="k")
    S = te.compute((6, 3), lambda i, d: te.sum(A[i, k] * d, axis=k), name="S")
    assert tapsum.plan(S) is None  # an integer sum
    B = te.placeholder((6, 5), name="B")
    r = te.reduce_axis((0, 5), name="r")
    T = te.compute((6, 3), lambda i, d: te.sum(B[i, r] * d, axis=r), name="T")
    assert tapsum.plan(T) is None  # 5 lanes
    agree([S], [A], rand((6, 20), dtype="int32"))
    agree([T], [B], rand((6, 5)))


def test_taps_with_a_symbolic_outer_axis():
    n = te.var("n")
    X = te.placeholder((n, 16), name="X")
    k = te.reduce_axis((0, 16), name="k")
    # a 1-d correlation's weight gradient shape: taps d, lanes k, outer i symbolic
    G = te.compute((n, 3), lambda i, d: te.sum(X[i, k] * X[i, (k + d) % 16], axis=k), name="G")
    assert tapsum.plan(G) is not None
    fc, fn = te.build(G), te.build(G, backend="numpy")
    for nn in (1, 5):
        x = rand((nn, 16))
        np.testing.assert_allclose(fc(x), fn(x), rtol=1e-5, atol=1e-5)



@pytest.mark.parametrize("n", [7, None])
def test_residue_rows_test_their_range_before_the_sums_condition(n):
    # x = 2*q + r: the last q of an odd x range is outside it for r = 1. The sum's
    # condition first reads X[I[0]] (checked: it may fail), then Y[i, x]; the range test
    # must come before both, or Y is read at x = m (found by the fuzzer in a min's tie count).
    m = te.var("m") if n is None else n
    X = te.placeholder((m,), dtype="float64", name="X")
    I = te.placeholder((1,), dtype="int32", name="I")
    Y = te.placeholder((3, m), dtype="float64", name="Y")
    k = te.reduce_axis((0, m), name="k")
    D = te.compute((3, m), lambda i, x: te.sum(te.const(1.0, "float64"), axis=k, where=(
        ((x % 2) == 0) | (k == 0)) & (X[I[0]] * k == Y[i, x])), name="D")
    (red,) = [e for e in walk(D.body, unique=True) if isinstance(e, Reduce)]
    assert rowsum_residues.factor(D, red) == 2
    rng = np.random.default_rng(0)
    y = rng.standard_normal((3, 7))
    y[:, ::3] = 0.0  # ties with k = 0
    fc, _ = agree([D], [X, I, Y], rng.standard_normal(7), np.array([2], "int32"), y)
    if n is None:  # (a constant 7 is not split)
        assert "x//2" in fc.source


def conv2d_nhwc(X, W, pad=0, s=1, dil=1):
    """``Y[n, y, x, f] = sum_{ky, kx, c} X[n, y*s + ky*dil - pad, x*s + kx*dil - pad, c]
    * W[ky, kx, c, f]``: channels last, as TensorFlow and JAX users write it."""
    N, H, Wd, C = X.shape
    KH, KW, _, F = W.shape
    oh = (H + 2 * pad - dil * (KH - 1) - 1) // s + 1
    ow = (Wd + 2 * pad - dil * (KW - 1) - 1) // s + 1
    ky, kx, c = te.reduce_axis(KH, "ky"), te.reduce_axis(KW, "kx"), te.reduce_axis(C, "c")

    def body(n, y, x, f):
        iy, ix = y * s + ky * dil - pad, x * s + kx * dil - pad
        term = X[n, iy, ix, c] * W[ky, kx, c, f]
        if pad:
            term = te.select((iy >= 0) & (iy < H) & (ix >= 0) & (ix < Wd), term, 0.0)
        return te.sum(term, axis=[ky, kx, c])
    return te.compute((N, oh, ow, F), body, name="Y")


@pytest.mark.parametrize("pad,hw,cf", [(0, (6, 7), (8, 16)), (1, (5, 9), (3, 17)), (0, (4, 4), (16, 9))])
def test_channels_last_input_gradient_is_a_dot_product_sum(pad, hw, cf):
    # dX[n, y, x, c] = sum_{f, ky, kx if y - ky, x - kx inside H} H[n, y-ky, x-kx, f] W[ky, kx, c, f]:
    # its tests move with y and x, not with the innermost c, so it runs as a sum of dot
    # products over f (with W transposed once) instead of scalar loops (3 channels:
    # too few to tile; checked for its values only)
    C, F = cf
    X = te.placeholder((2,) + hw + (C,), name="X")
    W = te.placeholder((3, 3, C, F), name="W")
    Y = conv2d_nhwc(X, W, pad)
    H = te.placeholder(Y.shape, name="H")
    dX, dW = te.differentiate(Y, [X, W], head=H)
    x, w, h = rand(X.shape), rand(W.shape, seed=1), rand(Y.shape, seed=2)
    agree([Y], [X, W], x, w)
    fg, _ = agree([dX, dW], [X, W, H], x, w, h, rtol=1e-4)
    line = next(ln for ln in str(fg.schedule).splitlines() if ln.startswith("dX:"))
    assert C < 8 or not line.startswith("dX: loops"), str(fg.schedule)

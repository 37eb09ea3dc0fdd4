"""Convolution input gradients over a zero-padded copy (``codegen.padcopy``) against the
numpy backend: dilated, ragged widths (not a multiple of 16), flat tiles and the flat
axis, non-finite weights (the exact path), and the cases the rewrite leaves alone; 1-D
convolutions (NCW, padded along one axis) forward and gradients, with random shapes."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

import tensorexpr as te
from codegen import padcopy

from .test_conv import conv2d
from .util import agree, assert_same, rand


def grad_x(shape_x, shape_w, **kw):
    X = te.placeholder(shape_x, name="X")
    W = te.placeholder(shape_w, name="W")
    Y = conv2d(X, W, **kw)
    H = te.placeholder(Y.shape, name="H")
    dX, = te.differentiate(Y, [X], head=H)
    return X, W, H, Y, dX


@pytest.mark.parametrize("hw,dil", [
    ((12, 10), 2),   # 12x10 = 120: no tile of 16 or 32 divides it, the flat axis alone
    ((16, 21), 2),   # rows of 21 (not a multiple of 16): 336 = 21 tiles of 16
    ((20, 20), 3),   # dilation 3: 400 = 25 tiles of 16
    ((6, 20), 1),    # stride 1, no dilation: dX is a "full" convolution of H
])
def test_padded_copy_matches(hw, dil):
    X, W, H, Y, dX = grad_x((2, 3) + hw, (5, 3, 3, 3), dil=dil)
    x, w, h = rand(X.shape), rand(W.shape, seed=1), rand(Y.shape, seed=2)
    fc, _ = agree([dX], [X, W, H], x, w, h, rtol=1e-4)
    assert "X_padded" not in fc.schedule.copies and "H_padded" in fc.schedule.copies


def test_non_finite_weights_take_the_exact_path():
    X, W, H, Y, dX = grad_x((1, 2, 16, 21), (3, 2, 3, 3), dil=2)
    x, w, h = rand(X.shape), rand(W.shape, seed=1), rand(Y.shape, seed=2)
    w[1, 0, 2, 1] = np.inf
    w[2, 1, 0, 0] = np.nan
    fc, (got,) = agree([dX], [X, W, H], x, w, h, rtol=1e-4)
    assert "H_padded" in fc.schedule.copies
    # padding terms 0 * inf would have made every element NaN
    assert np.isfinite(got).any()


@pytest.mark.parametrize("shape_x,shape_w,kw", [
    ((2, 3, 8, 8), (5, 3, 3, 3), dict(pad=1)),           # the copy: 10 wide, 1 zero each side
    ((1, 2, 16, 32), (4, 2, 3, 3), dict(pad=1)),         # whole tiles of 16 along x
    ((2, 2, 11, 13), (3, 2, 5, 5), dict(pad=2)),         # 5 x 5, ragged rows
    ((1, 3, 12, 10), (2, 3, 3, 3), dict(pad=2, dil=2)),  # padding and dilation
])
def test_padded_convolutions_sum_over_wider_rows(shape_x, shape_w, kw):
    # the copy's rows are wider than dX's (reads left of 0 and past the last column): the
    # sum keeps its rows and reads the copy as a "valid" convolution
    X, W, H, Y, dX = grad_x(shape_x, shape_w, **kw)
    p = padcopy.plan(dX, dX.body)
    assert p.sum.shape == dX.shape and p.fill.shape[-1] > dX.shape[-1]
    x, w, h = rand(X.shape), rand(W.shape, seed=1), rand(Y.shape, seed=2)
    fc, _ = agree([dX], [X, W, H], x, w, h, rtol=1e-4)
    assert "H_padded" in fc.schedule.copies
    w[0, 0, 0, 0] = np.inf  # non-finite weights: the exact sum
    h[0, 0, 0, 0] = np.nan
    agree([dX], [X, W, H], x, w, h, rtol=1e-4)


def test_plan_declines():
    # strided: the reads go through // 2
    *_, dX = grad_x((1, 2, 9, 9), (3, 2, 3, 3), s=2)
    assert padcopy.plan(dX, dX.body) is None


def test_symbolic_batch_falls_back_and_agrees():
    n = te.var("n")
    H = te.placeholder((n, 3, 6, 6), name="H")
    W = te.placeholder((3, 2, 3, 3), name="W")
    f, ky, kx = te.reduce_axis(3), te.reduce_axis(3), te.reduce_axis(3)
    dX = te.compute((n, 2, 10, 10), lambda b, c, y, x: te.sum(
        H[b, f, y - 2 * ky, x - 2 * kx] * W[f, c, ky, kx], axis=[f, ky, kx],
        where=(y - 2 * ky >= 0) & (y - 2 * ky < 6) & (x - 2 * kx >= 0) & (x - 2 * kx < 6)),
        name="dX")
    h, w = rand((2, 3, 6, 6)), rand((3, 2, 3, 3), seed=1)
    agree([dX], [H, W], h, w, rtol=1e-4)


def test_a_condition_the_padding_does_not_imply_is_kept():
    H = te.placeholder((2, 3, 8, 8), name="H")
    W = te.placeholder((3, 2, 3, 3), name="W")
    f, ky, kx = te.reduce_axis(3), te.reduce_axis(3), te.reduce_axis(3)
    # only taps ky < 2 and f != 1 count: no padding implies that
    dX = te.compute((2, 2, 12, 12), lambda b, c, y, x: te.sum(
        H[b, f, y - 2 * ky, x - 2 * kx] * W[f, c, ky, kx], axis=[f, ky, kx],
        where=(y - 2 * ky >= 0) & (y - 2 * ky < 8) & (x - 2 * kx >= 0) & (x - 2 * kx < 8)
        & (ky < 2) & (f != 1)), name="dX")
    h, w = rand(H.shape), rand(W.shape, seed=1)
    fc, _ = agree([dX], [H, W], h, w, rtol=1e-4)
    assert "H_padded" in fc.schedule.copies


def test_tests_on_x_that_padding_does_not_imply_decline():
    H = te.placeholder((1, 2, 8, 8), name="H")
    W = te.placeholder((2, 2, 3, 3), name="W")
    f, ky, kx = te.reduce_axis(2), te.reduce_axis(3), te.reduce_axis(3)
    dX = te.compute((1, 2, 12, 12), lambda b, c, y, x: te.sum(
        H[b, f, y - 2 * ky, x - 2 * kx] * W[f, c, ky, kx], axis=[f, ky, kx],
        where=(y - 2 * ky >= 0) & (y - 2 * ky < 8) & (x - 2 * kx >= 0) & (x - 2 * kx < 8)
        & (x < 9)), name="dX")
    assert padcopy.plan(dX, dX.body) is None
    h, w = rand(H.shape), rand(W.shape, seed=1)
    got = te.build(dX, inputs=[H, W])(h, w)
    assert_same(got, te.build(dX, inputs=[H, W], backend="numpy")(h, w), rtol=1e-4)


# {{{ 1-D convolutions (NCW): the copy padded along the last axis alone

def conv1d(X, W, s=1, pad=0, dil=1):
    """``Y[n, f, t] = sum_{c, k} X[n, c, t*s + k*dil - pad] * W[f, c, k]``, zero padding
    as a select (as benchmark case 20 writes it)."""
    N, C, L = X.shape
    F, _, K = W.shape
    lo = (L + 2 * pad - dil * (K - 1) - 1) // s + 1
    c, k = te.reduce_axis((0, C), name="c"), te.reduce_axis((0, K), name="k")

    def body(n, f, t):
        i = t * s + k * dil - pad
        term = X[n, c, i] * W[f, c, k]
        if pad:
            term = te.select((i >= 0) & (i < L), term, 0.0)
        return te.sum(term, axis=[c, k])
    return te.compute((N, F, lo), body, name="Y")


def conv1d_grads(shape_x, shape_w, dtype="float32", **kw):
    X = te.placeholder(shape_x, dtype=dtype, name="X")
    W = te.placeholder(shape_w, dtype=dtype, name="W")
    Y = conv1d(X, W, **kw)
    H = te.placeholder(Y.shape, dtype=dtype, name="H")
    dX, dW = te.differentiate(Y, [X, W], head=H)
    return X, W, H, Y, dX, dW


def check_conv1d(shape_x, shape_w, dtype="float32", pad=0, dil=1, copies=True):
    """Forward and both gradients, C against numpy; the copies the plans promise (if
    ``copies``; else no copy without padding: tiny programs may take other strategies)."""
    X, W, H, Y, dX, dW = conv1d_grads(shape_x, shape_w, dtype, pad=pad, dil=dil)
    x, w = rand(X.shape, dtype), rand(W.shape, dtype, seed=1)
    h = rand(Y.shape, dtype, seed=2)
    fy, _ = agree([Y], [X, W], x, w)
    fg, _ = agree([dX, dW], [X, W, H], x, w, h)
    K = shape_w[-1]
    # the forward reads outside X iff padded; dX reads outside H unless pad = dil*(K-1)
    for f, name, padded in ((fy, "X_padded", pad > 0), (fg, "H_padded", pad < dil * (K - 1))):
        made = name in f.schedule.copies
        assert made == padded if copies else made <= padded, str(f.schedule)
    if pad and copies:
        assert "Y: padded-copy" in str(fy.schedule)
    return fy, fg


@pytest.mark.parametrize("L,K,pad,dil", [
    (40, 5, 2, 1),    # case 20's shape, small
    (37, 5, 2, 1),    # odd length, not a multiple of the vector width
    (21, 3, 1, 1),
    (19, 4, 3, 1),    # pad = K - 1: dX is a valid sum (no copy for it)
    (33, 5, 0, 1),    # unpadded forward: dX alone pads H
    (50, 3, 2, 2),    # dilation 2
    (29, 5, 3, 2),    # dilation 2, odd, pad between
    (64, 7, 3, 1),    # rows of whole vectors
])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_conv1d_padded_copy_matches(L, K, pad, dil, dtype):
    check_conv1d((2, 3, L), (4, 3, K), dtype, pad=pad, dil=dil)


def test_conv1d_forward_sums_in_registers():
    # case 20's forward at a size a tile of 32 divides: a masked staged row before
    fy, _ = check_conv1d((2, 8, 128), (16, 8, 5), pad=2)
    line = next(s for s in str(fy.schedule).splitlines() if "finite weights" in s
                and "non-finite" not in s)
    assert "register tile=" in line, str(fy.schedule)


@pytest.mark.parametrize("K,pad,dil", [(5, 2, 1), (3, 2, 2), (4, 1, 1)])
def test_conv1d_gradients_against_central_differences(K, pad, dil):
    from tests.passes.gradcheck import check_grads, sum_of_squares
    X = te.placeholder((2, 3, 11), dtype="float64", name="X")
    W = te.placeholder((2, 3, K), dtype="float64", name="W")
    Y = conv1d(X, W, pad=pad, dil=dil)
    H = te.placeholder(Y.shape, dtype="float64", name="H")
    L = sum_of_squares(Y, H)
    arrays = [rand(X.shape, "float64"), rand(W.shape, "float64", seed=1),
              rand(Y.shape, "float64", seed=2)]
    check_grads(L, [X, W, H], arrays, wrt=[0, 1], backend="c")


def test_conv1d_non_finite_weights_take_the_exact_path():
    X, W, H, Y, dX, dW = conv1d_grads((2, 3, 37), (4, 3, 5), pad=2)
    x, w, h = rand(X.shape), rand(W.shape, seed=1), rand(Y.shape, seed=2)
    w[1, 0, 0] = np.inf    # edge taps: the first (last) positions never use them
    w[2, 1, 0] = np.nan
    w[3, 2, 4] = -np.inf
    fy, (y,) = agree([Y], [X, W], x, w)
    fg, (gx,) = agree([dX], [X, W, H], x, w, h)
    assert "X_padded" in fy.schedule.copies and "H_padded" in fg.schedule.copies
    # padding terms 0 * inf would have made these NaN
    assert np.isfinite(y[:, 1:3, :2]).all() and np.isfinite(y[:, 3, -2:]).all()
    assert np.isfinite(gx[:, 0, -2:]).all()


def test_conv1d_plan_declines():
    # strided: the read moves by 2 per output position
    *_, Y, dX, dW = conv1d_grads((1, 2, 21), (3, 2, 3), s=2, pad=1)
    assert padcopy.plan(Y, Y.body) is None
    # unpadded: every read inside X (nothing to gain from a copy)
    *_, Y, dX, dW = conv1d_grads((1, 2, 21), (3, 2, 3))
    assert padcopy.plan(Y, Y.body) is None
    # a matmul: its reads never leave the operands
    A, B = te.placeholder((8, 6), name="A"), te.placeholder((6, 10), name="B")
    k = te.reduce_axis(6)
    C = te.compute((8, 10), lambda i, j: te.sum(A[i, k] * B[k, j], axis=[k]), name="C")
    assert padcopy.plan(C, C.body) is None


@settings(max_examples=12, deadline=None)
@given(n=st.integers(1, 2), c=st.integers(1, 4), f=st.integers(1, 5), L=st.integers(1, 45),
       K=st.integers(1, 6), dil=st.integers(1, 2), padf=st.floats(0, 1),
       dtype=st.sampled_from(["float32", "float64"]))
def test_conv1d_random_shapes(n, c, f, L, K, dil, padf, dtype):
    pad = round(padf * dil * (K - 1))
    assume(L + 2 * pad - dil * (K - 1) >= 1)
    check_conv1d((n, c, L), (f, c, K), dtype, pad=pad, dil=dil, copies=False)

# }}}


# {{{ channels last (NHWC, NWC): the padded dimensions are not the last ones

@settings(max_examples=12, deadline=None)
@given(hw=st.tuples(st.integers(3, 9), st.integers(3, 9)), c=st.sampled_from([3, 8, 16, 19]),
       f=st.sampled_from([4, 16]), k=st.sampled_from([1, 2, 3]), pad=st.integers(0, 2))
def test_channels_last_convolution_pads_its_spatial_dimensions(hw, c, f, k, pad):
    from .test_conv import conv2d_nhwc
    assume(min(hw) + 2 * pad >= k)
    X = te.placeholder((2,) + hw + (c,), name="X")
    W = te.placeholder((k, k, c, f), name="W")
    Y = conv2d_nhwc(X, W, pad)
    H = te.placeholder(Y.shape, name="H")
    dX, dW = te.differentiate(Y, [X, W], head=H)
    # a 3 x 3 convolution of an image of at least 5 x 5 pixels (6 x 6 unpadded: a 3 x 3
    # H padded to 7 x 7 is more than MAX_GROWTH times H): its input gradient sums over
    # a copy of H padded along dimensions 1 and 2 (other shapes may pad one dimension,
    # or none: their values are checked all the same)
    p = padcopy.plan(dX, dX.body)
    if k == 3 and min(hw) >= 5 + (pad == 0) and pad <= 1:
        assert p is not None and p.padded == (1, 2) and p.sum.shape == dX.shape
    x, w, h = rand(X.shape), rand(W.shape, seed=1), rand(Y.shape, seed=2)
    agree([Y], [X, W], x, w)
    agree([dX, dW], [X, W, H], x, w, h, rtol=1e-4)
    w[0, 0, 0, 0] = np.inf  # non-finite weights: the exact sum
    agree([dX], [X, W, H], x, w, h, rtol=1e-4)


def test_channels_last_copy_says_which_dimensions_it_pads():
    from .test_conv import conv2d_nhwc
    X = te.placeholder((1, 6, 7, 16), name="X")
    W = te.placeholder((3, 3, 16, 8), name="W")
    Y = conv2d_nhwc(X, W)
    H = te.placeholder(Y.shape, name="H")
    dX, = te.differentiate(Y, [X], head=H)
    p = padcopy.plan(dX, dX.body)
    assert p.fill.shape == (1, 8, 9, 8) and p.before == (2, 2)
    assert p.note() == ("H_padded (scratch: dimensions (1, 2) padded to 8, 9, "
                        "2, 2 zeros before)")

# }}}

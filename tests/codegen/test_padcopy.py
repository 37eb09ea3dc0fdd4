"""Convolution input gradients over a zero-padded copy (``codegen.padcopy``) against the
numpy backend: dilated, ragged widths (not a multiple of 16), flat tiles and the flat
axis, non-finite weights (the exact path), and the cases the rewrite leaves alone."""
from __future__ import annotations

import numpy as np
import pytest

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

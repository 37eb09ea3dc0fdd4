"""Residue splits of strided gathers on the C backend against the numpy backend: the
gradients of transposed convolutions (both), strided convolutions' forward, with strides
2 and 3, odd sizes, padding and symbolic batches; what the schedule prints."""
from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tensorexpr as te
from codegen import residues
from codegen.schedule import Options

from .test_conv import conv2d
from .util import agree, assert_same, rand


def conv_transpose(X, W, s, pad):
    """``Y[n, f, y, x] = sum_{c, ky, kx} X[n, c, (y + pad - ky) / s, ...] * W[c, f, ky, kx]``
    where the offset divides by ``s`` and lands inside ``X`` (the gather form the
    benchmark writes)."""
    N, C, H, Wd = X.shape
    _, F, K, _ = W.shape
    oh, ow = (H - 1) * s - 2 * pad + K, (Wd - 1) * s - 2 * pad + K
    c = te.reduce_axis((0, C), "c")
    ky, kx = te.reduce_axis((0, K), "ky"), te.reduce_axis((0, K), "kx")

    def body(n, f, y, x):
        ty, tx = y + pad - ky, x + pad - kx
        hit = ((ty % s == 0) & (tx % s == 0) & (ty >= 0) & (ty < H * s)
               & (tx >= 0) & (tx < Wd * s))
        return te.sum(X[n, c, ty // s, tx // s] * W[c, f, ky, kx], axis=[c, ky, kx], where=hit)
    return te.compute((N, F, oh, ow), body, name="Y")


def grads_of(make, shape_x, shape_w, **kw):
    X, W = te.placeholder(shape_x, name="X"), te.placeholder(shape_w, name="W")
    Y = make(X, W, **kw)
    H = te.placeholder(Y.shape, name="H")
    dX, dW = te.differentiate(Y, [X, W], head=H)
    return X, W, H, Y, dX, dW



def test_transposed_convolution_gradients_read_planes():
    # the benchmark's case 21, smaller: both gradients split, H read as planes
    X, W, H, Y, dX, dW = grads_of(conv_transpose, (2, 8, 8, 8), (8, 8, 4, 4), s=2, pad=1)
    args = rand(X.shape), rand(W.shape, seed=1), rand(H.shape, seed=2)
    f, _ = agree([dX, dW], [X, W, H], *args, rtol=1e-4)
    lines = f.schedule.residues
    assert [line.split(":")[0] for line in lines] == ["dX", "dW"]
    assert "fixed by the outer point" in lines[1] and "dW_r00, dW_r01, dW_r10, dW_r11" in lines[1]
    assert all(line.endswith("reads H_planes") for line in lines)
    assert f.schedule["dW_r00"].param("partial sums") == "registers"
    assert "H_planes" in f.schedule.copies
    off = te.build([dX, dW], [X, W, H], options=Options(residues=False))
    assert off.schedule.residues == ()
    for a, b in zip(f(*args), off(*args)):
        assert_same(a, b, rtol=1e-4)


def test_strided_forward_reads_planes_of_its_input():
    X = te.placeholder((2, 3, 33, 33), name="X")
    W = te.placeholder((4, 3, 3, 3), name="W")
    Y = conv2d(X, W, s=2)
    f, _ = agree([Y], [X, W], rand(X.shape), rand(W.shape, seed=1))
    assert f.schedule.residues == ("Y: ky = 2*ky//2 + ky%2, kx = 2*kx//2 + kx%2; reads X_planes",)


def test_gathers_along_taps_or_dilations_are_left_alone():
    # a strided convolution's weight gradient steps along its lanes by a tap, not by a
    # reduction axis; a dilated one's reads are contiguous along the lanes (the strided
    # one's input gradient is split into residue classes: codegen.residue_classes)
    for kw in (dict(s=2), dict(dil=2)):
        X, W, H, Y, dX, dW = grads_of(conv2d, (2, 3, 33, 33), (4, 3, 3, 3), **kw)
        f = te.build([dW, dX], [X, W, H])
        assert not any(line.startswith("dW") for line in f.schedule.residues)
        f = te.build([dW, dX], [X, W, H], options=Options(residue_classes=False))
        assert f.schedule.residues == () and f.schedule.classes == ()


def test_little_reuse_copies_nothing():
    # each element of H read about once per output element: no copy pays, no split
    X, W, H, Y, dX, dW = grads_of(conv_transpose, (1, 1, 8, 8), (1, 1, 2, 2), s=2, pad=0)
    f = te.build([dW], [X, W, H])
    assert f.schedule.residues == ()


def test_symbolic_batch():
    n = te.var("n")
    X, W = te.placeholder((n, 8, 9, 9), name="X"), te.placeholder((8, 8, 4, 4), name="W")
    Y = conv_transpose(X, W, s=2, pad=1)
    H = te.placeholder((n, 8, 18, 18), name="H")
    dX, dW = te.differentiate(Y, [X, W], head=H)
    fc = te.build([dX, dW], [X, W, H])
    fn = te.build([dX, dW], [X, W, H], backend="numpy")
    assert len(fc.schedule.residues) == 2
    for nn in (1, 3):
        args = rand((nn, 8, 9, 9)), rand((8, 8, 4, 4), seed=1), rand((nn, 8, 18, 18), seed=2)
        for a, b in zip(fc(*args), fn(*args)):
            assert_same(a, b, rtol=1e-4)


def test_a_forced_strategy_keeps_the_sum_whole():
    X, W, H, Y, dX, dW = grads_of(conv_transpose, (2, 8, 8, 8), (8, 8, 4, 4), s=2, pad=1)
    f = te.build([dW], [X, W, H], options=Options(force={"dW": "taps"}))
    assert f.schedule.residues == () and f.schedule["dW"].strategy == "taps"


@st.composite
def transposed(draw):
    s = draw(st.integers(2, 3))
    k = draw(st.integers(1, 5))
    pad = draw(st.integers(0, max(k - 1, 0)))
    h, w = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    if (h - 1) * s - 2 * pad + k < 1 or (w - 1) * s - 2 * pad + k < 1:
        pad = 0
    return dict(n=draw(st.integers(1, 2)), c=draw(st.integers(1, 3)), f=draw(st.integers(1, 3)),
                h=h, w=w, k=k, s=s, pad=pad)


@settings(max_examples=25, deadline=None)
@given(transposed())
def test_transposed_convolutions_agree_with_numpy(p):
    # every copy pays here (MIN_REUSE 1), so the small shapes take the rewrite too
    X, W, H, Y, dX, dW = grads_of(conv_transpose, (p["n"], p["c"], p["h"], p["w"]),
                                  (p["c"], p["f"], p["k"], p["k"]), s=p["s"], pad=p["pad"])
    args = (rand(X.shape), rand(W.shape, seed=1), rand(H.shape, seed=2))
    with mock.patch.object(residues, "MIN_REUSE", 1):
        agree([Y, dX, dW], [X, W, H], *args, rtol=1e-4)


@settings(max_examples=15, deadline=None)
@given(s=st.integers(2, 3), k=st.integers(1, 4), pad=st.integers(0, 2),
       h=st.integers(3, 12), w=st.integers(3, 12))
def test_strided_convolutions_agree_with_numpy(s, k, pad, h, w):
    if h + 2 * pad < k or w + 2 * pad < k:
        return
    X, W = te.placeholder((2, 2, h, w), name="X"), te.placeholder((3, 2, k, k), name="W")
    Y = conv2d(X, W, s=s, pad=pad)
    H = te.placeholder(Y.shape, name="H")
    dX, dW = te.differentiate(Y, [X, W], head=H)
    args = (rand(X.shape), rand(W.shape, seed=1), rand(H.shape, seed=2))
    with mock.patch.object(residues, "MIN_REUSE", 1):
        agree([Y, dX, dW], [X, W, H], *args, rtol=1e-4)


@pytest.mark.parametrize("s,k,pad,hw", [(2, 4, 1, (16, 16)), (3, 5, 2, (9, 11)),
                                       (2, 3, 0, (9, 13))])
def test_benchmark_like_transposed_convolutions(s, k, pad, hw):
    X, W, H, Y, dX, dW = grads_of(conv_transpose, (2, 16) + hw, (16, 8, k, k), s=s, pad=pad)
    args = (rand(X.shape), rand(W.shape, seed=1), rand(H.shape, seed=2))
    f, _ = agree([dX, dW], [X, W, H], *args, rtol=1e-4)
    assert {line.split(":")[0] for line in f.schedule.residues} == {"dX", "dW"}


def test_values_are_the_sums_terms_not_a_blend_of_zeros():
    # an infinite H next to zeros of the planes' padding must not make NaNs elsewhere
    X, W, H, Y, dX, dW = grads_of(conv_transpose, (1, 8, 7, 7), (8, 8, 3, 3), s=2, pad=1)
    x, w, h = rand(X.shape), rand(W.shape, seed=1), rand(H.shape, seed=2)
    h[0, 0, 3, 4] = np.inf
    agree([dX, dW], [X, W, H], x, w, h, rtol=1e-4)


def test_sums_with_checked_reads_are_left_whole():
    # a data-dependent index is checked at run time: its error must name the tensor the
    # user wrote, so the sum is not split into parts
    H = te.placeholder((8, 64), name="H")
    X = te.placeholder((8, 16, 32), name="X")
    J = te.placeholder((32,), dtype="int32", name="J")
    n, y = te.reduce_axis(8, "n"), te.reduce_axis(64, "y")
    dW = te.compute((16, 4), lambda c, k: te.sum(
        H[n, y] * X[n, c, J[(y + 1 - k) // 2]], axis=[n, y],
        where=((y + 1 - k) % 2 == 0) & (y + 1 >= k) & (y + 1 - k < 64)), name="dW")
    j = np.random.default_rng(0).integers(0, 32, 32).astype(np.int32)
    f, _ = agree([dW], [H, X, J], rand(H.shape), rand(X.shape, seed=1), j, rtol=1e-4)
    assert f.schedule.residues == ()
    good = te.compute((16, 4), lambda c, k: te.sum(
        H[n, y] * X[n, c, (y + 1 - k) // 2], axis=[n, y],
        where=((y + 1 - k) % 2 == 0) & (y + 1 >= k) & (y + 1 - k < 64)), name="dW")
    assert len(te.build([good], [H, X]).schedule.residues) == 1


@pytest.mark.parametrize("op", ["avg", "max"])
def test_strided_pooling_and_its_gradient(op):
    # each input element is read by about (k/s)^2 windows: no copy pays, the forward
    # stays as written; the gradient's residue moves with its output row, which the
    # rows schedule splits (codegen.rowsum_residues)
    X = te.placeholder((2, 8, 33, 33), name="X")
    ky, kx = te.reduce_axis(3, "ky"), te.reduce_axis(3, "kx")
    red = te.sum if op == "avg" else te.max
    Y = te.compute((2, 8, 16, 16), lambda n, c, y, x: red(X[n, c, 2 * y + ky, 2 * x + kx],
                                                         axis=[ky, kx]), name="Y")
    H = te.placeholder(Y.shape, name="H")
    (dX,) = te.differentiate(Y, [X], head=H)
    f, _ = agree([Y, dX], [X, H], rand(X.shape), rand(H.shape, seed=1), rtol=1e-4)
    assert f.schedule.residues == ()
    assert f.schedule["dX"].param("residues of") == "i3 // 2"

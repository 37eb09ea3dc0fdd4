"""Residue splits of reduction axes (``codegen.residue_split``): the rewritten sums keep
every value (numpy backend, the rewrite against the sum as written), and which sums
are split."""
from __future__ import annotations


import numpy as np
from hypothesis import given, settings, strategies as st

import tensorexpr as te
from codegen.residue_split import split
from tensorexpr.ir import Binary, Reduce, walk

from .test_conv import conv2d
from .test_residues import conv_transpose, grads_of
from .util import assert_same, rand



def same_values(t, sp, inputs, *arrays):
    want = te.build([t], inputs, backend="numpy")(*arrays)
    got = te.build([sp.final], inputs, backend="numpy")(*arrays)
    assert_same(got, want, rtol=1e-5)


@settings(max_examples=30, deadline=None)
@given(s=st.integers(2, 3), k=st.integers(1, 6), pad=st.integers(0, 3),
       h=st.integers(1, 6), w=st.integers(1, 6))
def test_transposed_convolution_gradients_keep_their_values(s, k, pad, h, w):
    pad = min(pad, k - 1) if (h - 1) * s - 2 * min(pad, k - 1) + k >= 1 else 0
    if (w - 1) * s - 2 * pad + k < 1 or (h - 1) * s - 2 * pad + k < 1:
        return
    X, W, H, Y, dX, dW = grads_of(conv_transpose, (2, 2, h, w), (2, 3, k, k), s=s, pad=pad)
    arrays = rand(X.shape), rand(W.shape, seed=1), rand(H.shape, seed=2)
    for t in (dX, dW):
        sp = split(t)
        if sp is not None:
            same_values(t, sp, [X, W, H], *arrays)


def test_weight_gradient_parts_are_stride_one_sums():
    X, W, H, Y, dX, dW = grads_of(conv_transpose, (2, 4, 8, 8), (4, 4, 4, 4), s=2, pad=1)
    sp = split(dW)
    assert [p.name for p in sp.parts] == ["dW_r00", "dW_r01", "dW_r10", "dW_r11"]
    assert all(x.fixed is not None for x in sp.residues) and sp.kept == ()
    for p in sp.parts:
        red = p.body
        # no modulo left, no floor division: the residues folded to constants
        assert not any(isinstance(e, Binary) and e.op in ("mod", "floordiv")
                       for e in walk(p.body))
        assert [a.name for a in red.axes] == ["n", "y//2", "x//2"]
    same_values(dW, sp, [X, W, H], rand(X.shape), rand(W.shape, seed=1), rand(H.shape, seed=2))


def test_input_gradient_keeps_its_residues_as_reduction_axes():
    X, W, H, Y, dX, dW = grads_of(conv_transpose, (2, 4, 9, 9), (4, 4, 4, 4), s=2, pad=1)
    sp = split(dX)
    assert sp.parts == () and sp.final.uid == dX.uid
    assert [a.name for a in sp.final.body.axes] == ["f", "ky%2", "kx%2", "ky//2", "kx//2"]
    assert [x.c0 for x in sp.residues] == [-1, -1]   # H's index is 2*(...) + ky%2
    same_values(dX, sp, [X, W, H], rand(X.shape), rand(W.shape, seed=1), rand(H.shape, seed=2))


def test_strided_forward_splits_its_taps_by_the_stride():
    X, W = te.placeholder((1, 2, 21, 21), name="X"), te.placeholder((3, 2, 3, 3), name="W")
    Y = conv2d(X, W, s=2)
    sp = split(Y)
    assert [str(x) for x in sp.residues] == ["ky = 2*ky//2 + ky%2", "kx = 2*kx//2 + kx%2"]
    same_values(Y, sp, [X, W], rand(X.shape), rand(W.shape, seed=1))


def test_long_output_axes_are_left_to_the_rows_residues():
    # a strided convolution's input gradient: the residue moves with the output row,
    # which codegen.rowsum_residues splits at lowering
    X, W, H, Y, dX, dW = grads_of(conv2d, (1, 2, 17, 17), (3, 2, 3, 3), s=2)
    assert split(dX) is None and split(dW) is None


def test_only_float_sums_are_split():
    X = te.placeholder((4, 32), name="X")
    y = te.reduce_axis(32, "y")
    M = te.compute((4, 3), lambda i, k: te.max(X[i, y], axis=y, where=(y - k) % 2 == 0),
                   name="M")
    assert split(M) is None
    S = te.compute((4, 3), lambda i, k: te.sum(X[i, y], axis=y, where=(y - k) % 2 == 0),
                   name="S")
    sp = split(S)
    assert sp is not None and len(sp.parts) == 2
    same_values(S, sp, [X], rand(X.shape))


def test_an_epilogue_is_kept_around_the_sum():
    X = te.placeholder((4, 31), name="X")
    y = te.reduce_axis(31, "y")
    S = te.compute((4, 3), lambda i, k: te.exp(te.sum(X[i, y], axis=y,
                                                       where=(y + k + 1) % 3 == 0)) * 0.5,
                   name="S")
    sp = split(S)
    assert len(sp.parts) == 3 and all(any(isinstance(e, Reduce) for e in walk(p.body))
                                       for p in sp.parts)
    same_values(S, sp, [X], rand(X.shape, low=-1, high=1))


def test_mixed_divisors_are_left_alone():
    X = te.placeholder((4, 12), name="X")
    y = te.reduce_axis(24, "y")
    S = te.compute((4, 3), lambda i, k: te.sum(X[i, y // 2], axis=y, where=(y - k) % 3 == 0),
                   name="S")
    assert split(S) is None


def test_values_with_an_uneven_last_quotient():
    # 7 points split by 3: the last q has one residue; K shorter than the stride
    X = te.placeholder((2, 7), name="X")
    H = te.placeholder((2, 3), name="H")
    y = te.reduce_axis(7, "y")
    S = te.compute((2, 2), lambda i, k: te.sum(X[i, y] * H[i, (y - k) // 3], axis=y,
                                               where=((y - k) % 3 == 0) & (y >= k)), name="S")
    sp = split(S)
    assert sp is not None
    same_values(S, sp, [X, H], rand(X.shape), np.arange(6, dtype=np.float32).reshape(2, 3))

"""Residue classes of strided gathers (``codegen.residue_classes``): the input gradients of
strided convolutions (NCHW, NHWC, NCW) and transposed convolutions' forward, each class
a dense sum, on the C backend against the numpy backend over hypothesis-drawn strides,
kernels, paddings, dilations, odd and even sizes and both float types; what the schedule
prints; the option that turns it off; a wrong interleaving caught."""
from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tensorexpr as te
from codegen import residue_classes, residue_split
from codegen.schedule import Options

from .test_conv import conv2d, conv2d_nhwc
from .test_padcopy import conv1d
from .test_residues import conv_transpose
from .util import agree, assert_same, rand


LAYOUTS = {
    "nchw": (conv2d, lambda n, c, f, h, w, k: ((n, c, h, w), (f, c, k, k))),
    "nhwc": (conv2d_nhwc, lambda n, c, f, h, w, k: ((n, h, w, c), (k, k, c, f))),
    "ncw": (conv1d, lambda n, c, f, h, w, k: ((n, c, w), (f, c, k))),
}


def check(layout, s, k, pad, dil, h, w, dtype="float32", c=3, f=8, options=None,
          spoil=False):
    """Forward and both gradients of a strided convolution agree with numpy (with a
    weight made infinite and one NaN when ``spoil``); returns the gradients' build
    (None when the shape has no output)."""
    make, shapes = LAYOUTS[layout]
    sx, sw = shapes(2, c, f, h, w, k)
    X, W = te.placeholder(sx, dtype, "X"), te.placeholder(sw, dtype, "W")
    Y = make(X, W, s=s, pad=pad, dil=dil)
    if min(Y.shape) < 1:
        return None
    H = te.placeholder(Y.shape, dtype, "H")
    dX, dW = te.differentiate(Y, [X, W], head=H)
    x, wv, hv = rand(sx, dtype), rand(sw, dtype, seed=1), rand(Y.shape, dtype, seed=2)
    if spoil:
        wv.flat[0], wv.flat[-1] = np.inf, np.nan
    tol = 1e-4 if dtype == "float32" else 1e-10
    agree([Y], [X, W], x, wv, rtol=tol)
    fc = te.build([dX, dW], [X, W, H], options=options or Options())
    fn = te.build([dX, dW], [X, W, H], backend="numpy")
    for got, want in zip(fc(x, wv, hv), fn(x, wv, hv)):
        assert_same(got, want, rtol=tol)
    return fc


def extent(size, k, s, pad, dil):
    return (size + 2 * pad - dil * (k - 1) - 1) // s + 1


@settings(max_examples=40, deadline=None)
@given(layout=st.sampled_from(sorted(LAYOUTS)), s=st.integers(2, 3), k=st.integers(1, 5),
       pad=st.integers(0, 2), dil=st.integers(1, 2), h=st.integers(5, 14), w=st.integers(5, 14),
       dtype=st.sampled_from(["float32", "float64"]))
def test_strided_convolutions_on_random_shapes(layout, s, k, pad, dil, h, w, dtype):
    if extent(w, k, s, pad, dil) < 1 or (layout != "ncw" and extent(h, k, s, pad, dil) < 1):
        return
    # every class split taken where it folds, whatever it costs (channels last too)
    with mock.patch.object(residue_classes, "pays", lambda sp: bool(sp.classes)):
        check(layout, s, k, pad, dil, h, w, dtype)


@pytest.mark.parametrize("layout", ["nchw", "ncw"])
def test_input_gradients_of_stride_two_run_as_classes(layout):
    f = check(layout, 2, 3, 0, 1, 17, 17, c=4, f=16)
    assert f.schedule.classes == (
        ("dX (s=2: 4 classes, taps 2x2/2x1/1x2/1x1)",) if layout == "nchw" else
        ("dX (s=2: 2 classes, taps 2/1)",))
    # each class a dense sum: no residue of the row left for the rows to split
    assert not any(c.param("residues of") for c in f.schedule.choices), f.schedule


def test_the_benchmark_shape_reads_padded_copies_with_register_tiles():
    # case 3 (smaller batch): each class a "valid" convolution over a zero-padded copy
    f = check("nchw", 2, 3, 0, 1, 33, 33, c=16, f=32)
    assert f.schedule["dX_r00"].strategy == "padded-copy"
    assert any(c.tensor == "dX_r00" and c.param("register tile") for c in f.schedule.choices)
    assert f.schedule["dX"].strategy == "split"   # interleaving the classes back


def test_transposed_convolution_forward_runs_as_classes():
    X, W = te.placeholder((2, 8, 8, 8), name="X"), te.placeholder((8, 6, 4, 4), name="W")
    Y = conv_transpose(X, W, s=2, pad=1)
    f, _ = agree([Y], [X, W], rand(X.shape), rand(W.shape, seed=1), rtol=1e-4)
    assert f.schedule.classes == ("Y (s=2: 4 classes, taps 2x2/2x2/2x2/2x2)",)


def test_channels_last_keeps_its_dense_rows():
    # the residues move with y and x, outer axes: the rows over the channels are dense
    # already (classes measured 3-4 times slower there)
    f = check("nhwc", 2, 3, 0, 1, 17, 17, c=16, f=16)
    assert f.schedule.classes == ()
    with mock.patch.object(residue_classes, "MIN_TERMS", 0):
        f = check("nhwc", 2, 3, 0, 1, 17, 17, c=16, f=16)
    assert f.schedule.classes == ()


def test_the_option_turns_it_off_and_keeps_the_values():
    f = check("nchw", 2, 3, 1, 1, 15, 15, f=16)
    off = check("nchw", 2, 3, 1, 1, 15, 15, f=16, options=Options(residue_classes=False))
    assert f.schedule.classes and not off.schedule.classes
    # the rows split per residue instead
    assert any(c.param("residues of") for c in off.schedule.choices), off.schedule


def test_light_sums_are_not_split():
    # a channel and a kernel of the stride's size: one term per output point, where the
    # extra pass over the output would cost more than the classes save
    f = check("nchw", 2, 2, 0, 1, 12, 12, c=1, f=1)
    assert f.schedule.classes == ()


def test_a_wrong_interleaving_is_caught(monkeypatch):
    # the check above must see a class read back at the wrong place: swap the classes
    real = residue_split._gather

    def swapped(t, parts, taps):
        return real(t, list(zip([b for b, _ in parts], [p for _, p in parts][::-1])), taps)
    monkeypatch.setattr(residue_split, "_gather", swapped)
    with pytest.raises(AssertionError):
        check("ncw", 2, 3, 0, 1, 16, 16)


def test_classes_without_taps_are_zero():
    # dilation 2 with stride 2: the odd class has no tap (odd rows get nothing); stride 3
    # and a kernel of 5 past the end of the image: the last points get nothing either
    for s, k, dil in ((2, 3, 2), (3, 5, 1)):
        X, W = te.placeholder((1, 16, 21), name="X"), te.placeholder((24, 16, k), name="W")
        Y = conv1d(X, W, s=s, pad=0, dil=dil)
        H = te.placeholder(Y.shape, name="H")
        dX, = te.differentiate(Y, [X], head=H)
        f, (got,) = agree([dX], [X, W, H], rand(X.shape), rand(W.shape, seed=1),
                          rand(Y.shape, seed=2), rtol=1e-4)
        assert f.schedule.classes, f.schedule
        reached = {t * s + j * dil for t in range(Y.shape[2]) for j in range(k)}
        untouched = [x for x in range(X.shape[2]) if x not in reached]
        assert untouched and not got[..., untouched].any()

"""Convolution weight gradients with partial sums in registers (``codegen.tapsum_registers``):
the C backend against the numpy backend for padded, strided, dilated, ragged, long
and symbolic shapes, non-finite values on either side, and the sums it leaves alone."""
from __future__ import annotations

import doctest

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tensorexpr as te
from codegen import tapsum_registers, target
from codegen.schedule import Options
from codegen.target import Target

from .test_conv import conv2d
from .util import agree, rand

#: vector widths the lanes follow (``codegen.target``); the C runs on any x86-64
TARGETS = {"avx512": Target(64, 32, True), "avx2": Target(32, 16, True)}

#: the note of the lanes loop that keeps the partial sums in registers
FAST = "(lanes; registers across"


def _choice(fc, name="dW"):
    return fc.schedule[name]


def _in_registers(fc, name="dW") -> bool:
    """The weight gradient ran by taps with its partial sums in registers (its schedule)."""
    c = fc.schedule[name]
    return c.strategy == "taps" and c.param("partial sums") == "registers"


def weight_gradient(shape_x, shape_w, dtype="float32", **kw):
    X = te.placeholder(shape_x, dtype=dtype, name="X")
    W = te.placeholder(shape_w, dtype=dtype, name="W")
    Y = conv2d(X, W, **kw)
    H = te.placeholder(Y.shape, dtype=dtype, name="H")
    (dW,) = te.differentiate(Y, [W], head=H)
    return X, W, H, dW


@pytest.mark.parametrize("s,pad,dil,hw,f", [
    (1, 1, 1, (9, 20), 4),     # padded, a ragged row (16 + 4 lanes)
    (2, 0, 1, (11, 37), 5),    # stride 2: columns deinterleaved; 5 rows: a block of 1 after 2s
    (1, 0, 2, (12, 21), 6),    # dilation 2
    (3, 1, 1, (10, 40), 4),    # stride 3 and padding
    (2, 2, 2, (13, 36), 4),    # everything at once
])
def test_weight_gradient_in_registers(s, pad, dil, hw, f):
    X, W, H, dW = weight_gradient((2, 3) + hw, (f, 3, 3, 3), s=s, pad=pad, dil=dil)
    h = rand(H.shape, seed=2)
    fc, _ = agree([dW], [X, W, H], rand(X.shape), rand(W.shape, seed=1), h, rtol=1e-4)
    assert _in_registers(fc) and "finite" not in fc.source  # no pass over H before


@pytest.mark.parametrize("height,width,loop,tiles", [
    (3, 80, False, False), (3, 320, True, False), (70, 70, False, True)])
def test_long_rows_and_tall_images(height, width, loop, tiles):
    # more vectors than one lanes loop holds (a lanes loop per group of them; for very
    # long rows a loop over the vectors); a tall image whose copies do not fit the L1
    # cache runs by tiles of y (and its rows, 70 columns, by vectors, a ragged last one)
    X, W, H, dW = weight_gradient((1, 2, height, width), (4, 2, 3, 3), pad=1)
    fc, _ = agree([dW], [X, W, H], rand(X.shape), rand(W.shape, seed=1),
                  rand(H.shape, seed=2), rtol=1e-4)
    assert _in_registers(fc) and (_choice(fc).param("vector loop") is True) == loop
    assert (_choice(fc).param("y tile") is not None) == tiles


def test_float64_and_a_symbolic_batch():
    n = te.var("n")
    X, W, H, dW = weight_gradient((n, 2, 6, 17), (4, 2, 3, 3), dtype="float64", pad=1)
    fc = te.build([dW], inputs=[X, W, H])
    fn = te.build([dW], inputs=[X, W, H], backend="numpy")
    assert _in_registers(fc)
    for nn in (1, 3):
        args = (rand((nn, 2, 6, 17), "float64"), rand((4, 2, 3, 3), "float64", seed=1),
                rand((nn, 4, 6, 17), "float64", seed=2))
        np.testing.assert_allclose(fc(*args), fn(*args), rtol=1e-12, atol=1e-12)


def test_non_finite_values_give_the_exact_results():
    X, W, H, dW = weight_gradient((1, 2, 6, 18), (4, 2, 3, 3), pad=1)
    x, w, h = rand(X.shape), rand(W.shape, seed=1), rand(H.shape, seed=2)
    h[0, 1, 0, 0] = np.inf   # tap (0, 0) meets it in the padding only: 0 * inf must not count
    h[0, 2, 3, 17] = np.nan  # the last column
    fc, (dw,) = agree([dW], [X, W, H], x, w, h)
    assert np.isfinite(dw[1, :, 0, 0]).all() and not np.isfinite(dw[1, :, 1, 1]).any()
    h = rand(H.shape, seed=2)
    x[0, 1, 2, 0] = -np.inf  # X's first column: the copies hold it, padding around it
    agree([dW], [X, W, H], x, w, h)
    x = rand(X.shape)
    x[0, 0, 1, 5] = np.nan
    h[0, 3, 2, 7] = -np.inf
    agree([dW], [X, W, H], x, w, h)
    # no padding: the same, by stride 2
    X, W, H, dW = weight_gradient((1, 2, 9, 37), (4, 2, 3, 3), s=2)
    h = rand(H.shape, seed=2)
    h[0, 0, 1, 17] = np.inf
    fc, _ = agree([dW], [X, W, H], rand(X.shape), rand(W.shape, seed=1), h)
    assert _in_registers(fc)


def test_a_one_dimensional_convolution():
    # no reduction axis moves the rows: the lanes loop has no inner loop
    X = te.placeholder((3, 5, 40), name="X")
    H = te.placeholder((3, 4, 38), name="H")
    n, x = te.reduce_axis((0, 3), name="n"), te.reduce_axis((0, 38), name="x")
    dW = te.compute((4, 5, 3), lambda f, c, k: te.sum(H[n, f, x] * X[n, c, x + k],
                                                     axis=[n, x]), name="dW")
    fc, _ = agree([dW], [X, H], rand((3, 5, 40)), rand((3, 4, 38), seed=1))
    assert "x (lanes)" in fc.source


def test_other_domains_are_left_to_the_exact_loops():
    # the domain is not "the read is inside X": the zeros of a copy would not express it
    X = te.placeholder((2, 2, 8, 20), name="X")
    H = te.placeholder((2, 4, 6, 18), name="H")
    n, y, x = (te.reduce_axis((0, e), name=nm) for e, nm in ((2, "n"), (6, "y"), (18, "x")))
    dW = te.compute((4, 2, 3, 3), lambda f, c, ky, kx: te.sum(
        H[n, f, y, x] * X[n, c, y + ky, x + kx], axis=[n, y, x], where=(x + kx) % 2 == 0),
        name="dW")
    # (without residue splits: they turn this sum into two stride-1 sums over planes of
    # X and H, which do run in registers: tests/codegen/test_residues.py)
    fc = te.build([dW], [X, H], options=Options(residues=False))
    assert _choice(fc).param("partial sums") == "memory"
    fc, _ = agree([dW], [X, H], rand((2, 2, 8, 20)), rand((2, 4, 6, 18), seed=1))
    assert [_choice(fc, p).param("partial sums") for p in ("dW_r0", "dW_r1")] == [
        "registers", "registers"]
    # three rows of the block axis: fewer than MIN_ROWS reads of each image
    assert tapsum_registers.MIN_ROWS > 3
    X2, W2, H2, dW2 = weight_gradient((1, 2, 6, 18), (3, 2, 3, 3), pad=1)
    fc, _ = agree([dW2], [X2, W2, H2], rand(X2.shape), rand(W2.shape, seed=1),
                  rand(H2.shape, seed=2))
    assert not _in_registers(fc)


def test_docstring_examples():
    result = doctest.testmod(tapsum_registers)
    assert result.failed == 0 and result.attempted > 0


def test_one_channel_shares_rows_of_f_among_the_threads():
    # one value of c to share: the rows of f are split into groups, the threads take those
    X, W, H, dW = weight_gradient((2, 1, 9, 20), (8, 1, 3, 3), pad=1)
    fc, _ = agree([dW], [X, W, H], rand(X.shape), rand(W.shape, seed=1),
                  rand(H.shape, seed=2), rtol=1e-4)
    assert _in_registers(fc) and _choice(fc).param("groups", 1) > 1


def test_exact_loops_with_a_symbolic_batch():
    # codegen.tapsum' own loops (a domain the copies cannot express) over a symbolic batch
    b = te.var("b")
    X = te.placeholder((b, 2, 8, 20), name="X")
    H = te.placeholder((b, 4, 6, 18), name="H")
    n, y, x = te.reduce_axis((0, b), name="n"), te.reduce_axis(6, "y"), te.reduce_axis(18, "x")
    dW = te.compute((4, 2, 3, 3), lambda f, c, ky, kx: te.sum(
        H[n, f, y, x] * X[n, c, y + ky, x + kx], axis=[n, y, x], where=(y + ky) % 2 == 0),
        name="dW")
    fc = te.build([dW], inputs=[X, H])
    fn = te.build([dW], inputs=[X, H], backend="numpy")
    assert _choice(fc).param("partial sums") == "memory"
    for nb in (1, 3):
        args = rand((nb, 2, 8, 20)), rand((nb, 4, 6, 18), seed=1)
        np.testing.assert_allclose(fc(*args), fn(*args), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("k,s,pad,hw", [(5, 1, 2, (9, 20)), (7, 2, 3, (15, 37))])
def test_larger_kernels_take_passes_over_groups_of_taps(k, s, pad, hw):
    # 25 or 49 taps: more accumulators than AVX2's 16 registers hold, so each pass over y
    # sums a group (an AVX-512 machine's 32 registers may hold them all: AVX2 is pinned)
    with target.use(TARGETS["avx2"]):
        X, W, H, dW = weight_gradient((2, 3) + hw, (4, 3, k, k), s=s, pad=pad)
        h = rand(H.shape, seed=2)
        h[0, 1, 0, 0] = np.inf  # in the padding for most taps: those are summed again exactly
        fc, _ = agree([dW], [X, W, H], rand(X.shape), rand(W.shape, seed=1), h, rtol=1e-4)
    assert fc.source.count(FAST) > 2


@pytest.mark.parametrize("k,s,pad,hw", [(3, 1, 1, (150, 150)), (7, 2, 3, (120, 120))])
def test_large_images_copy_by_tiles_of_y(k, s, pad, hw):
    # copies of a whole image would not fit the stack: each tile of y copies its rows
    X, W, H, dW = weight_gradient((1, 2) + hw, (4, 2, k, k), s=s, pad=pad)
    fc, _ = agree([dW], [X, W, H], rand(X.shape), rand(W.shape, seed=1),
                  rand(H.shape, seed=2), rtol=1e-4)
    assert _in_registers(fc) and "y tiles" in fc.source
    loop = fc.source.index("y tiles")
    assert fc.source.index("copy of the image", loop) > loop  # filled inside the tiles


def test_arithmetic_around_the_sum():
    # a weight update: W - 0.1 * dW, with the sum inside the element's expression
    X = te.placeholder((2, 3, 8, 20), name="X")
    W = te.placeholder((4, 3, 3, 3), name="W")
    H = te.placeholder((2, 4, 6, 18), name="H")
    n, y, x = te.reduce_axis(2, "n"), te.reduce_axis(6, "y"), te.reduce_axis(18, "x")
    U = te.compute((4, 3, 3, 3), lambda f, c, ky, kx: W[f, c, ky, kx] - 0.1 * te.sum(
        H[n, f, y, x] * X[n, c, y + ky, x + kx], axis=[n, y, x]), name="U")
    fc, _ = agree([U], [X, W, H], rand((2, 3, 8, 20)), rand((4, 3, 3, 3), seed=1),
                  rand((2, 4, 6, 18), seed=2))
    assert _in_registers(fc, "U")


@pytest.mark.parametrize("hw,dil", [((9, 20), 1), ((8, 8), 1), ((12, 21), 2)])
@pytest.mark.parametrize("tgt", ["avx512", "avx2"])
def test_ragged_rows_run_over_flat_positions(hw, dil, tgt):
    # rows of 20, 8 or 17 columns (not whole vectors of 16: the AVX-512 target): the lanes
    # run over y * width + x, the last vector partly past the image (H read as 0 there,
    # the copies padded). With AVX2's 8 lanes a row of 8 is a whole vector: rows then.
    with target.use(TARGETS[tgt]):
        _ragged_rows(hw, dil, TARGETS[tgt].lanes("float32"))


def _ragged_rows(hw, dil, lanes):
    X, W, H, dW = weight_gradient((2, 3) + hw, (4, 3, 3, 3), pad=1 if dil == 1 else 0, dil=dil)
    flat = H.shape[-1] % lanes != 0
    x, h = rand(X.shape), rand(H.shape, seed=2)
    fc, _ = agree([dW], [X, W, H], x, rand(W.shape, seed=1), h, rtol=1e-4)
    assert (_choice(fc).param("lanes") == "flat positions") == flat
    assert _in_registers(fc)
    x[1, 2, -1, -1] = np.inf  # the last element: next to the lanes past the image
    h[0, 0, 0, 0] = np.nan
    agree([dW], [X, W, H], x, rand(W.shape, seed=1), h, rtol=1e-4)


def test_rows_shorter_than_the_lanes_check():
    # a 7 x 7 image: rows too short for codegen.tapsum' own loops, flat positions here
    # (AVX-512: 16 lanes; AVX2's 8 lanes hold a row and one lane past it)
    for tgt, flat in (("avx512", True), ("avx2", False)):
        with target.use(TARGETS[tgt]):
            X, W, H, dW = weight_gradient((2, 3, 7, 7), (4, 3, 3, 3), pad=1)
            fc, _ = agree([dW], [X, W, H], rand(X.shape), rand(W.shape, seed=1),
                          rand(H.shape, seed=2), rtol=1e-4)
        assert (_choice(fc).param("lanes") == "flat positions") == flat
        assert _in_registers(fc)


def conv1d_weight_gradient(n, c, f, length, k, pad, s=1):
    """The weight gradient of a 1-D convolution written as in ``benchmarks.cases`` (a
    select for the padding), by ``te.differentiate``."""
    X = te.placeholder((n, c, length), name="X")
    W = te.placeholder((f, c, k), name="W")
    cr, kr = te.reduce_axis((0, c), name="c"), te.reduce_axis((0, k), name="k")
    out = (length + 2 * pad - k) // s + 1

    def body(nn, ff, t):
        i = s * t + kr - pad
        return te.sum(te.select((i >= 0) & (i < length), X[nn, cr, i] * W[ff, cr, kr], 0.0),
                      axis=[cr, kr])
    Y = te.compute((n, f, out), body, name="Y")
    H = te.placeholder(Y.shape, name="H")
    (dW,) = te.differentiate(Y, [W], head=H)
    return X, W, H, dW


@settings(max_examples=8, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(4, 9), st.integers(70, 300),
       st.integers(2, 5), st.integers(0, 2), st.integers(1, 2))
def test_long_one_dimensional_rows_run_over_flat_positions(n, c, f, length, k, pad, s):
    # a 1-D convolution's rows longer than one lanes loop holds: one lanes loop over the
    # whole row keeps the accumulators in registers (no y to hold them across)
    X, W, H, dW = conv1d_weight_gradient(n, c, f, length, k, pad, s)
    fc, _ = agree([dW], [X, W, H], rand(X.shape), rand(W.shape, seed=1),
                  rand(H.shape, seed=2), rtol=1e-4)
    lanes = target.current().lanes("float32")
    if s == 1:
        assert _in_registers(fc)
    if _in_registers(fc) and -(-H.shape[-1] // lanes) > tapsum_registers.MAX_VECTORS:
        assert _choice(fc).param("lanes") == "flat positions"


def test_flat_one_dimensional_rows_with_non_finite_values():
    X, W, H, dW = conv1d_weight_gradient(2, 2, 4, 100, 5, 2)
    x, w, h = rand(X.shape), rand(W.shape, seed=1), rand(H.shape, seed=2)
    h[0, 1, 0] = np.inf      # tap 0 meets it in the padding only: 0 * inf must not count
    h[1, 2, 99] = np.nan     # the last position, past which the lanes read H as 0
    x[1, 0, 99] = -np.inf
    fc, (dw,) = agree([dW], [X, W, H], x, w, h)
    assert _choice(fc).param("lanes") == "flat positions"
    assert np.isfinite(dw[1, :, 0]).all() and not np.isfinite(dw[1, :, 2]).any()

"""Register tiles of row sums (codegen.rowsum_tiles, lower.compute_rows): whole tiles apart
from the ragged last one; C against the numpy backend at sizes that are not multiples of
the tile or of the row block, symbolic sizes, float64."""
from __future__ import annotations

import re

import numpy as np
import pytest

import tensorexpr as te
from codegen import patterns, rowsum, target
from codegen.target import Target

from .util import agree, rand

W = rowsum.row_tile_blocked("float32")
R = patterns.row_block()


def _product(form, M, K, N, dtype="float32"):
    """``C`` (M x N) = a matrix product of two placeholders in layout ``form``."""
    k = te.reduce_axis((0, K), name="k")
    if form == "AB":
        A, B = te.placeholder((M, K), dtype, "A"), te.placeholder((K, N), dtype, "B")
        C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    elif form == "AtB":
        A, B = te.placeholder((K, M), dtype, "A"), te.placeholder((K, N), dtype, "B")
        C = te.compute((M, N), lambda i, j: te.sum(B[k, j] * A[k, i], axis=k), name="C")
    else:  # ABt: a transposed copy of B makes it a row sum (codegen.layout)
        A, B = te.placeholder((M, K), dtype, "A"), te.placeholder((N, K), dtype, "B")
        C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[j, k], axis=k), name="C")
    return A, B, C


def _lane_loops(source: str, note: str):
    """The bound of every loop over ``j`` inside the loop over tiles noted ``note``."""
    out = []
    for block in source.split(f"/* {note} */")[1:]:
        m = re.search(r"for \(int64_t (\w+) = ([^;]+); \1 < ([^;]+);[^)]*\) \{  /\* j \*/", block)
        out.append(m.group(3))
    return out


@pytest.mark.parametrize("form", ["AB", "AtB", "ABt"])
@pytest.mark.parametrize("M,K,N", [(2 * R + 3, 7, 2 * W + 5), (R - 3, 5, W + 1),
                                   (3 * R, 3, 3 * W + W - 1)])
def test_ragged_products_agree(form, M, K, N):
    A, B, C = _product(form, M, K, N)
    f, _ = agree([C], [A, B], rand(A.shape, seed=1), rand(B.shape, seed=2))
    # fewer rows than two blocks: one row at a time over the whole width (no tiles)
    split = f.schedule["C"].param("whole tiles apart") is True
    assert split == (M >= 2 * R)


def test_whole_tiles_keep_their_accumulators_in_registers():
    """The point of the split: inside whole tiles the loop over the lanes is ``W`` long
    (isl proves j < n there), so it becomes whole vectors whose accumulators stay in
    registers (codegen.rowsum_registers); only the last tile is bounded by ``min``."""
    A, B, C = _product("AB", 2 * R, 9, 3 * W + 7)
    f = te.build([C], inputs=[A, B])
    src = f.source
    whole = src.split("/* j_tile (whole tiles) */")[1].split("/* j_tile (last tile) */")[0]
    last = src.split("/* j_tile (last tile) */")[1]
    k_loop = whole.split("/* k */")[1].split("}")[0]
    assert "te_vfma_" in k_loop and "for (" not in k_loop and "acc" not in k_loop, k_loop
    # the last tile: isl's bound, the end of the row (3 W + 7), not a tile's width
    assert _lane_loops("/* L */" + last, "L")[0] == str(3 * W + 7)


def test_exact_sizes_have_one_loop_over_tiles():
    A, B, C = _product("AB", 2 * R, 9, 4 * W)
    src = te.build([C], inputs=[A, B]).source
    assert "whole tiles" not in src and "last tile" not in src


def test_symbolic_sizes_agree_at_every_size():
    m, n = te.var("m"), te.var("n")
    A = te.placeholder((m, 6), name="A")
    B = te.placeholder((6, n), name="B")
    k = te.reduce_axis((0, 6), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    fc = te.build([C], inputs=[A, B])
    fn = te.build([C], inputs=[A, B], backend="numpy")
    assert "j_tile (whole tiles)" in fc.source
    for rows, cols in [(1, 1), (R - 1, W - 1), (R, W), (R + 1, W + 1), (2 * R + 5, 3 * W + 2)]:
        a, b = rand((rows, 6), seed=rows), rand((6, cols), seed=cols)
        np.testing.assert_allclose(fc(a, b), fn(a, b), rtol=1e-5, atol=1e-4)


def test_float64_with_an_epilogue():
    """A perceptron layer (bias and tanh after the sum) at a ragged width, in float64."""
    M, K, N = 2 * R + 5, 11, W + 9
    X = te.placeholder((M, K), "float64", "X")
    Wt = te.placeholder((K, N), "float64", "W")
    b = te.placeholder((N,), "float64", "b")
    k = te.reduce_axis((0, K), name="k")
    h = te.compute((M, N), lambda i, j: te.tanh(te.sum(X[i, k] * Wt[k, j], axis=k) + b[j]),
                   name="h")
    f, _ = agree([h], [X, Wt, b], rand((M, K), "float64", 1), rand((K, N), "float64", 2),
                 rand((N,), "float64", 3))
    assert "double acc" in f.source and f.schedule["h"].param("whole tiles apart") is True


def test_max_over_ragged_tiles():
    """A max reduction by rows with a row block (not a sum): the last tile's lanes beyond
    the width are never stored."""
    M, K, N = 2 * R + 1, 5, 2 * W + 3
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.max(A[i, k] + B[k, j], axis=k), name="C")
    agree([C], [A, B], rand((M, K), seed=4), rand((K, N), seed=5))


@pytest.mark.parametrize("dtype,M,N", [("float32", 2 * R + 3, 9000), ("float64", 2 * R, 4203)])
def test_large_operands_run_in_chunks_of_tiles(dtype, M, N):
    """``B`` over 2 MB: the tiles run in chunks (the parallel loop), each with all row
    blocks inside; a ragged last tile falls in the last chunk only."""
    K = 64
    A, B, C = _product("AB", M, K, N, dtype)
    f, _ = agree([C], [A, B], rand(A.shape, dtype, 1), rand(B.shape, dtype, 2))
    src = f.source
    assert "chunks of" in src and "j_tile (whole tiles)" in src
    assert src.index("chunks of") < src.index("/* i */")  # the rows inside the chunks


def test_small_operands_are_not_chunked():
    A, B, C = _product("AB", 2 * R, 64, 1000)  # B: 250 KB
    assert te.build([C], inputs=[A, B]).schedule["C"].param("panel chunks") is None


def test_chunks_with_a_symbolic_row_count():
    m = te.var("m")
    A = te.placeholder((m, 40), name="A")
    B = te.placeholder((40, 14000), name="B")  # 2.2 MB
    k = te.reduce_axis((0, 40), name="k")
    C = te.compute((m, 14000), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    fc = te.build([C], inputs=[A, B])
    fn = te.build([C], inputs=[A, B], backend="numpy")
    assert fc.schedule["C"].param("panel chunks") is not None
    b = rand((40, 14000), seed=3)
    for rows in (1, R - 1, 2 * R + 1):
        a = rand((rows, 40), seed=rows)
        np.testing.assert_allclose(fc(a, b), fn(a, b), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("form", ["AB", "AtB"])
@pytest.mark.parametrize("dtype,N", [("float32", 10), ("float32", 13)])
def test_narrow_rows_read_zero_padded_copies(form, dtype, N):
    """Fewer outputs per row than a vector holds (but at least patterns.ROW_MIN, below which
    rows take another schedule; so never float64: 8 per vector): the operand along the
    row is read from a copy padded with zeros to a whole vector; the extra lanes are
    never stored."""
    M, K = 2 * R + 3, 9
    A, B, C = _product(form, M, K, N, dtype)
    f, _ = agree([C], [A, B], rand(A.shape, dtype, 1), rand(B.shape, dtype, 2))
    assert "B_pad" in f.schedule.copies
    lanes = 64 // np.dtype(dtype).itemsize
    assert f"float acc0[{lanes * R}]" in f.source or f"double acc0[{lanes * R}]" in f.source


def test_padded_lanes_with_infinities_and_an_epilogue():
    """The lanes beyond the row compute inf * 0 = NaN: never stored, so the outputs match
    the reference, infinities and NaNs included (a perceptron's last layer, with bias)."""
    M, K, N = 2 * R, 6, 10
    h = te.placeholder((M, K), name="h")
    W2 = te.placeholder((K, N), name="W2")
    b2 = te.placeholder((N,), name="b2")
    k = te.reduce_axis((0, K), name="k")
    Y = te.compute((M, N), lambda i, o: te.sum(h[i, k] * W2[k, o], axis=k) + b2[o], name="Y")
    a = rand((M, K), seed=1)
    a[3, 2] = np.inf
    a[5, 0] = np.nan
    f, (y,) = agree([Y], [h, W2, b2], a, rand((K, N), seed=2), rand((N,), seed=3))
    assert "W2_pad" in f.schedule.copies and np.isinf(y).any() and np.isnan(y).any()


def test_no_padding_for_wide_rows_branches_or_few_rows():
    A, B, C = _product("AB", 2 * R, 5, 16)  # a whole vector already
    assert not te.build([C], inputs=[A, B]).schedule.copies
    with target.use(Target(32, 16, True)):  # AVX2: a row tile of 8 doubles
        A, B, C = _product("AB", 2 * R, 5, 10, "float64")  # wider than a row tile
        assert not te.build([C], inputs=[A, B]).schedule.copies
    A, B, C = _product("AB", R, 5, 10)  # too few rows to block: one row at a time
    assert not te.build([C], inputs=[A, B]).schedule.copies
    X = te.placeholder((2 * R, 5), name="X")
    Wt = te.placeholder((5, 10), name="W")
    k = te.reduce_axis((0, 5), name="k")
    S = te.compute((2 * R, 10), lambda i, j: te.sum(
        te.select(X[i, k] > 0, X[i, k] * Wt[k, j], 1.0), axis=k), name="S")
    f, _ = agree([S], [X, Wt], rand((2 * R, 5), seed=1), rand((5, 10), seed=2))
    assert not f.schedule.copies


def test_narrow_rows_with_a_symbolic_row_count():
    m = te.var("m")
    A = te.placeholder((m, 12), name="A")
    B = te.placeholder((12, 9), name="B")
    k = te.reduce_axis((0, 12), name="k")
    C = te.compute((m, 9), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    fc = te.build([C], inputs=[A, B])
    fn = te.build([C], inputs=[A, B], backend="numpy")
    assert "B_pad" in fc.schedule.copies
    b = rand((12, 9), seed=3)
    for rows in (1, R - 1, 2 * R + 3):
        a = rand((rows, 12), seed=rows)
        np.testing.assert_allclose(fc(a, b), fn(a, b), rtol=1e-5, atol=1e-4)


def test_a_large_operand_read_down_its_columns_is_copied_transposed():
    """``A^T B`` with ``A`` over 1 MB and its rows a page long: the row blocks read a
    transposed copy of ``A`` along its rows (codegen.layout); small ``A`` is read as is."""
    M, K, N = 1030, 260, 40  # A: 260 x 1030 floats, 1 MB, rows of 4 KB
    A, B, C = _product("AtB", M, K, N)
    f, _ = agree([C], [A, B], rand(A.shape, seed=1), rand(B.shape, seed=2))
    assert "A_T" in f.schedule.copies
    A, B, C = _product("AtB", 64, K, N)
    assert "A_T" not in te.build([C], inputs=[A, B]).schedule.copies


def test_a_static_remainder_of_rows_is_one_block():
    """M % ROW_BLOCK rows left over (here 5) run as one block of 5 rows, not one by one."""
    M, K, N = 2 * R + 5, 7, W + 3
    A, B, C = _product("AB", M, K, N)
    f, _ = agree([C], [A, B], rand(A.shape, seed=1), rand(B.shape, seed=2))
    assert re.search(rf"< {M}; \w+ \+= 5\) {{  /\* i \(remainder\) \*/", f.source)


def test_a_large_image_is_not_chunked():
    """A convolution over 4 MB of images: each sweep of the row blocks (filters) reads a
    few rows of one image, which stay cached; its tiles are not chunked."""
    X = te.placeholder((8, 8, 128, 128), name="X")
    Wt = te.placeholder((16, 8, 3, 3), name="W")
    c, ky, kx = (te.reduce_axis((0, n), name=s) for n, s in ((8, "c"), (3, "ky"), (3, "kx")))
    Y = te.compute((8, 16, 126, 126), lambda n, f, y, x: te.sum(
        X[n, c, y + ky, x + kx] * Wt[f, c, ky, kx], axis=[c, ky, kx]), name="Y")
    src = te.build([Y], inputs=[X, Wt]).source
    assert "x_tile (whole tiles)" in src and "chunks of" not in src

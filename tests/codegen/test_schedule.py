"""Schedule transformations of the C backend (codegen.lower): reductions computed a row
at a time, ``select(c, x, 0)`` under a sum turned into a loop bound, vector-lane
(``omp simd``) loops. Each is checked against the numpy backend at sizes that hit
tile remainders and with symbolic sizes."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te
from codegen.rowsum import ROW_TILE
from codegen.patterns import JAM, row_block

from .util import agree, rand, without_comments

ROW_BLOCK = row_block()  # this machine's register tile (codegen.target)


def _matmul(A, B, K):
    k = te.reduce_axis((0, K), name="k")
    return te.compute((A.shape[0], B.shape[1]), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k),
                      name="C")


@pytest.mark.parametrize("m,k,n", [(3, 5, 9), (7, 3, ROW_TILE + 3), (1, 17, 2 * ROW_TILE)])
def test_matmul_by_rows_at_odd_sizes(m, k, n):
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    C = _matmul(A, B, k)
    f, _ = agree([C], [A, B], rand((m, k)), rand((k, n), seed=1))
    assert f.schedule["C"].strategy == "rows"  # the row accumulator is used


def test_matmul_by_rows_with_symbolic_sizes():
    m, n = te.var("m"), te.var("n")
    A = te.placeholder((m, 6), name="A")
    B = te.placeholder((6, n), name="B")
    C = _matmul(A, B, 6)
    fc = te.build(C)
    fn = te.build(C, backend="numpy")
    for mm, nn in [(1, 1), (5, 9), (3, ROW_TILE + 1), (ROW_TILE, 2)]:
        a, b = rand((mm, 6)), rand((6, nn), seed=2)
        np.testing.assert_allclose(fc(a, b), fn(a, b), rtol=1e-5, atol=1e-5)
    assert fc.schedule["C"].strategy == "rows"


def test_rows_keep_the_epilogue_and_compute_the_reduction_once():
    A = te.placeholder((4, 6), name="A")
    B = te.placeholder((6, 20), name="B")
    b = te.placeholder((20,), name="b")
    k = te.reduce_axis((0, 6), name="k")
    C = te.compute((4, 20), lambda i, j: te.tanh(te.sum(A[i, k] * B[k, j], axis=k) + b[j]),
                   name="C")
    f, _ = agree([C], [A, B, b], rand((4, 6)), rand((6, 20), seed=1), rand(20, seed=2))
    code = without_comments(f.source)
    # one accumulation loop (a fused multiply-add per term): the epilogue reads the row
    assert code.count("] += ") + code.count("= fmaf(") == 1


def test_rows_of_max_propagate_nan_and_empty_rows():
    X = te.placeholder((5, 12), name="X")
    r = te.reduce_axis((0, 5), name="r")
    Y = te.compute((12,), lambda j: te.max(X[r, j], axis=r, where=r < j), name="Y")
    x = rand((5, 12))
    x[2, 7] = np.nan
    f, (y,) = agree([Y], [X], x)
    assert y[0] == -np.inf and np.isnan(y[7])
    assert f.schedule["Y"].strategy == "rows"


def test_where_on_the_row_axis_and_a_select_in_the_body():
    # conv-like: zero padding written as a select, a where that bounds j by the
    # reduction axis; both become loop bounds of the row loop.
    n = te.var("n")
    X = te.placeholder((n,), name="X")
    W = te.placeholder((3,), name="W")
    r = te.reduce_axis((0, 3), name="r")
    Y = te.compute((n,), lambda j: te.sum(te.select((j + r - 1 >= 0) & (j + r - 1 < n),
                                                    X[j + r - 1] * W[r], 0.0),
                                          axis=r, where=j >= r), name="Y")
    fc = te.build(Y)
    fn = te.build(Y, backend="numpy")
    for size in (1, 2, 9, ROW_TILE + 5):
        x, w = rand(size), rand(3, seed=1)
        np.testing.assert_allclose(fc(x, w), fn(x, w), rtol=1e-6, atol=1e-6)
    assert "?" not in without_comments(fc.source).split("acc0[")[2]  # no select in the nest


def test_select_under_a_sum_stays_exact_with_negative_zero():
    # sum(select(c, x, 0.0)) skipping untaken points equals adding +0.0: results match
    # numpy bit for bit, including the sign of zero.
    X = te.placeholder((4, 10), name="X")
    r = te.reduce_axis((0, 4), name="r")
    Y = te.compute((10,), lambda j: te.sum(te.select(X[r, j] < 0, X[r, j], 0.0), axis=r),
                   name="Y")
    x = np.full((4, 10), 1.0, dtype=np.float32)
    x[:, 3] = -0.0
    x[1, 5] = -2.0
    _, (y,) = agree([Y], [X], x)
    assert not np.signbit(y[3]) and y[5] == -2.0


def test_data_dependent_read_in_a_row_is_checked():
    E = te.placeholder((6, 16), name="E")
    idx = te.placeholder((3,), dtype="int64", name="idx")
    r = te.reduce_axis((0, 3), name="r")
    Y = te.compute((16,), lambda d: te.sum(E[idx[r], d], axis=r), name="Y")
    f, _ = agree([Y], [E, idx], rand((6, 16)), np.array([0, 5, 2]))
    with pytest.raises(IndexError):
        f(rand((6, 16)), np.array([0, 6, 2]))


def test_strided_rows_stay_point_by_point():
    # j in a non-last index: computing by rows would read with a stride
    # (rows longer than a window, which would be written out: lower_expr.window)
    A = te.placeholder((16, 40), name="A")
    k = te.reduce_axis((0, 40), name="k")
    Y = te.compute((16,), lambda j: te.sum(A[j, k], axis=k), name="Y")
    f, _ = agree([Y], [A], rand((16, 40)))
    # a sum of its own per point, in lanes the C spells out (codegen.loopast.lane_sums)
    assert "acc0" not in f.source and "the lanes, in order" in f.source
    assert "reduction(+:" not in f.source


def test_simd_math_within_float32_tolerance():
    X = te.placeholder((3, 37), name="X")
    Y = te.compute((3, 37), lambda i, j: te.exp(X[i, j]) + te.tanh(X[i, j]) * te.log(
        te.abs(X[i, j]) + 1.0) + te.sigmoid(X[i, j]), name="Y")
    f, _ = agree([Y], [X], rand((3, 37)), rtol=1e-5, atol=1e-5)
    assert "#pragma omp simd" in f.source
    # codegen.mathlib's functions, which vectorize and give the same bits in scalar code
    assert "te_expf(" in f.source and "declare simd" not in f.source


@pytest.mark.parametrize("fn", ["exp", "log", "tanh", "sin", "cos", "sigmoid"])
def test_vector_math_over_a_wide_range(fn):
    # codegen.mathlib's functions (about 1 ulp) against numpy, in float32 and float64
    for dtype, tol in (("float32", 2e-6), ("float64", 1e-13)):
        X = te.placeholder((1000,), dtype=dtype, name="X")
        op = getattr(te, fn)
        Y = te.compute((1000,), lambda i: op(te.abs(X[i]) + 1e-3 if fn == "log" else X[i]),
                       name="Y")
        x = np.linspace(-20, 20, 1000).astype(dtype)
        agree([Y], [X], x, rtol=tol, atol=tol)


def test_recurrence_carried_loop_is_not_simd():
    x = te.placeholder((50,), name="x")
    y = te.recurrence((50,), lambda y, t: te.select(t == 0, x[0], y[t - 1] * 0.5 + x[t]),
                      name="y")
    f, _ = agree([y], [x], rand(50))
    assert "omp simd" not in f.source


@pytest.mark.parametrize("m", [2 * ROW_BLOCK, 2 * ROW_BLOCK + 1, 2 * ROW_BLOCK + 3])
def test_row_blocks_with_remainder_rows(m):
    # ROW_BLOCK rows share each read of B; the last m % ROW_BLOCK rows run one by one
    A = te.placeholder((m, 7), name="A")
    B = te.placeholder((7, 40), name="B")
    b = te.placeholder((40,), name="b")
    k = te.reduce_axis((0, 7), name="k")
    C = te.compute((m, 40), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k) * 2.0 + b[j],
                   name="C")
    f, _ = agree([C], [A, B, b], rand((m, 7)), rand((7, 40), seed=1), rand(40, seed=2))
    assert f.schedule["C"].param("row block") == f"i x {ROW_BLOCK}"
    assert "(remainder)" in f.source


def test_row_blocks_with_symbolic_rows_and_columns():
    m, n = te.var("m"), te.var("n")
    A = te.placeholder((m, 5), name="A")
    B = te.placeholder((5, n), name="B")
    C = _matmul(A, B, 5)
    fc, fn = te.build(C), te.build(C, backend="numpy")
    assert fc.schedule["C"].param("row block") == f"i x {ROW_BLOCK}"
    for mm, nn in [(1, 1), (4, 33), (7, 64), (13, 70)]:
        a, b = rand((mm, 5)), rand((5, nn), seed=3)
        np.testing.assert_allclose(fc(a, b), fn(a, b), rtol=1e-5, atol=1e-5)


def test_floor_division_of_nonnegative_indices_uses_c_division():
    X = te.placeholder((7, 9), name="X")
    Y = te.compute((14, 18), lambda i, j: X[i // 2, j // 2] + X[i % 7, (j - 9) // 2 % 9], name="Y")
    f, _ = agree([Y], [X], rand((7, 9)))
    code = without_comments(f.source)
    assert "i0 / 2" in code or "/ 2]" in code
    assert "te_floordiv_i64" in code  # (j - 9) may be negative: floor semantics kept


def test_partial_sums_of_a_dot_product():
    # dA = H B^T: the inner sum over j is contiguous in both reads; partial sums per j
    n = te.var("n")
    H = te.placeholder((n, 40), name="H")
    B = te.placeholder((6, 40), name="B")
    k = te.reduce_axis((0, 40), name="k")
    r = te.reduce_axis((0, 3), name="r")
    D = te.compute((n, 6), lambda i, j: te.sum(H[i, k] * B[j, k] * (r + 1.0), axis=[r, k]),
                   name="D")
    fc, fn = te.build(D), te.build(D, backend="numpy")
    assert "part0[" in fc.source
    for size in (1, 5):
        h, b = rand((size, 40)), rand((6, 40), seed=1)
        np.testing.assert_allclose(fc(h, b), fn(h, b), rtol=1e-5, atol=1e-4)


def test_transpose_in_blocks_at_odd_and_symbolic_sizes():
    m = te.var("m")
    X = te.placeholder((m, 37), name="X")
    b = te.placeholder((37,), name="b")
    Y = te.compute((37, m), lambda j, i: X[i, j] + b[j], name="Y")
    fc, fn = te.build(Y), te.build(Y, backend="numpy")
    assert fc.schedule["Y"].strategy == "blocks"
    for size in (1, 9, 40):
        x, bb = rand((size, 37)), rand(37, seed=1)
        np.testing.assert_array_equal(fc(x, bb), fn(x, bb))


@pytest.mark.parametrize("c", [2, 3])
def test_innermost_axis_split_by_its_divisor(c):
    # maxpool-gradient-like reads at j // c and j % c: j = c*q + r with r unrolled
    X = te.placeholder((3, 4 * c), name="X")
    P = te.placeholder((3, 4), name="P")
    Y = te.compute((3, 4 * c), lambda i, j: te.select(X[i, j] > P[i, j // c],
                                                      P[i, j // c] * (j % c + 1.0), 0.0),
                   name="Y")
    f, _ = agree([Y], [X, P], rand((3, 4 * c)), rand((3, 4), seed=1))
    assert f.schedule["Y"].strategy == "split" and f.schedule["Y"].param("factor") == c
    assert "te_floordiv" not in without_comments(f.source)


def test_cheap_intermediates_are_computed_where_read():
    X = te.placeholder((6, 10), name="X")
    idx = te.placeholder((4,), dtype="int64", name="idx")
    P = te.compute((6, 10), lambda i, j: X[i, j] * 2.0 + 1.0, name="P")  # inlined
    r = te.reduce_axis((0, 3), name="r")
    # read under a where, in a select branch, and at a data-dependent row
    S = te.compute((6, 10), lambda i, j: te.sum(P[i - r, j], axis=r, where=i >= r), name="S")
    T = te.compute((4, 10), lambda a, j: te.select(S[idx[a], j] > 0, P[idx[a], j], -1.0),
                   name="T")
    f, _ = agree([T, S], [X, idx], rand((6, 10)), np.array([0, 5, 2, 3]))
    assert "[computed where it is read]" in f.source
    with pytest.raises(IndexError, match="idx|T"):
        f(rand((6, 10)), np.array([0, 6, 2, 3]))


def test_outputs_and_costly_intermediates_are_stored():
    X = te.placeholder((8,), name="X")
    P = te.compute((8,), lambda i: X[i] + 1.0, name="P")
    Q = te.compute((8,), lambda i: te.exp(X[i]), name="Q")
    Y = te.compute((8,), lambda i: P[i] * Q[i] + Q[7 - i], name="Y")  # Q read twice
    f, _ = agree([Y, P], [X], rand(8))
    assert "[computed where it is read]" not in f.source


def test_a_costly_intermediate_read_once_in_place_is_computed_there():
    # exp is computed once per element either way: inlining only saves the buffer
    X = te.placeholder((8, 16), name="X")
    Q = te.compute((8, 16), lambda i, j: te.exp(X[i, j]) / (X[i, 0] + X[i, 1] + 3.0), name="Q")
    Y = te.compute((8, 16), lambda i, j: Q[i, j] * 2.0, name="Y")
    k = te.reduce_axis((0, 16), name="k")
    R = te.compute((8, 16), lambda i, j: te.exp(X[i, j]) + X[i, 2] + X[i, 3], name="R")
    S = te.compute((8,), lambda i: te.sum(R[i, k], axis=k), name="S")  # read in a sum: stored
    f, _ = agree([Y, S], [X], rand((8, 16)))
    comments = {line.split("/* ")[1].split("[")[0]: line for line in f.source.splitlines()
                if line.strip().startswith("/* ") and "] = " in line}
    assert "[computed where it is read]" in comments["Q"]
    assert "[computed where it is read]" not in comments["R"]


@pytest.mark.parametrize("op", ["max", "min"])
def test_max_and_min_in_lanes_keep_nan_and_infinities(op):
    n = te.var("n")
    X = te.placeholder((n, 96), name="X")
    k = te.reduce_axis((0, 96), name="k")
    Y = te.compute((n,), lambda i: getattr(te, op)(X[i, k] * 2.0, axis=k), name="Y")
    x = rand((4, 96))
    x[1, 50] = np.nan
    x[2, 95] = np.inf
    x[3, 0] = -np.inf
    f, (y,) = agree([Y], [X], x)
    assert "part0[16]" in f.source and np.isnan(y[1])


def test_one_accumulator_per_phase_of_a_moving_row_bound():
    # a gradient-like gather: j's bounds move with the short reduction axis r
    n = te.var("n")
    H = te.placeholder((5, n), name="H")
    W = te.placeholder((5, 3), name="W")
    f = te.reduce_axis((0, 5), name="f")
    r = te.reduce_axis((0, 3), name="r")
    D = te.compute((n + 2,), lambda x: te.sum(H[f, x - r] * W[f, r], axis=[f, r],
                                              where=(x >= r) & (x - r < n)), name="D")
    fc, fn = te.build(D), te.build(D, backend="numpy")
    assert fc.schedule["D"].param("accumulators per tap") == 3  # three phases of r
    for size in (1, 7, 40):
        h, w = rand((5, size)), rand((5, 3), seed=1)
        np.testing.assert_allclose(fc(h, w), fn(h, w), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [2 * JAM, 2 * JAM + 3])
def test_dot_products_reduced_together(n):
    # dA = H B^T: JAM columns share each load of H's row; remainder columns one by one
    # (B read backwards along k: codegen.layout moves only plain-axis reads to a
    # transposed copy, so this sum keeps the jam schedule)
    m = te.var("m")
    H = te.placeholder((m, 33), name="H")
    B = te.placeholder((n, 33), name="B")
    k = te.reduce_axis((0, 33), name="k")
    D = te.compute((m, n), lambda i, j: te.sum(H[i, k] * B[j, 32 - k], axis=k) + 1.0,
                   name="D")
    fc, fn = te.build(D), te.build(D, backend="numpy")
    assert fc.schedule["D"].strategy == "jam"
    assert fc.schedule["D"].param("jam") == f"{JAM} x {JAM}"
    # each accumulator in lanes the C spells out, not a reduction clause (loopast.lane_sums)
    assert "(remainder)" in fc.source and "the lanes, in order" in fc.source
    assert "reduction(+:" not in fc.source
    for size in (1, 6, 2 * JAM + 1):  # rows JAM at a time, then the remainder rows
        h, b = rand((size, 33)), rand((n, 33), seed=1)
        np.testing.assert_allclose(fc(h, b), fn(h, b), rtol=1e-5, atol=1e-5)


def test_select_branches_are_blended_only_where_valid_without_the_condition():
    X = te.placeholder((4, 40), name="X")
    m = te.placeholder((4,), name="m")
    d = te.placeholder((4,), name="d")
    # both branches read in range anyway: blended (computed both, then selected)
    Y = te.compute((4, 40), lambda i, j: te.select(X[i, j] == m[i], 1.0 / d[i], X[i, j]),
                   name="Y")
    x = rand((4, 40))
    x[1, 3] = 2.0
    mm = np.array([0.5, 2.0, 9.0, -1.0], dtype=np.float32)
    f, _ = agree([Y], [X, m, d], x, mm, np.array([1.0, 0.0, 2.0, 4.0], dtype=np.float32))
    assert "? t" in without_comments(f.source)
    # a branch that is only in range under its condition stays guarded
    Z = te.compute((5,), lambda i: te.select(i < 4, m[te.minimum(i, 3)] + X[i % 4, 39], 0.0),
                   name="Z")
    W = te.compute((5,), lambda i: te.select(i < 4, m[i - 0] * 2.0, -1.0), name="W")
    agree([Z, W], [X, m], x, mm)


def test_a_gather_checks_its_row_index_once_per_row():
    E = te.placeholder((9, 40), name="E")
    idx = te.placeholder((6,), "int64", name="idx")
    Y = te.compute((6, 40), lambda i, d: E[idx[i], d] * 2.0 + E[idx[5 - i], d], name="Y")
    ids = np.array([3, 0, 8, 8, 1, 2], np.int64)
    f, _ = agree([Y], [E, idx], rand((9, 40)), ids)
    fast = without_comments(f.source).split("} else {")[-1]
    assert "#pragma omp simd" in fast and "te_fail" not in fast
    with pytest.raises(IndexError, match="index 9 in dimension 0"):
        f(rand((9, 40)), np.array([3, 0, 9, 8, 1, 2], np.int64))


def test_a_gather_under_a_select_is_not_hoisted_out_of_its_condition():
    E = te.placeholder((9, 40), name="E")
    idx = te.placeholder((6,), "int64", name="idx")
    # a negative index is never read: the select's condition guards it
    Y = te.compute((6, 40), lambda i, d: te.select(idx[i] >= 0, E[idx[i], d], 0.0), name="Y")
    ids = np.array([3, -1, 8, -5, 1, 2], np.int64)
    agree([Y], [E, idx], rand((9, 40)), ids)


def test_an_index_affine_only_on_its_box_is_read_without_division():
    X = te.placeholder((3, 4, 5, 6), name="X")
    Y = te.compute((3, 120), lambda n, k: X[n, k // 30, (k // 6) % 5, k % 6] * 2.0, name="Y")
    # not affine: the second half of each row of 12 is skipped
    Z = te.compute((3, 60), lambda n, k: X[n, k // 15, (k // 3) % 5, k % 3], name="Z")
    f, _ = agree([Y, Z], [X], rand((3, 4, 5, 6)))
    code = without_comments(f.source)
    assert "b0[i0 * 120 + i1] * 2.0f" in code
    assert "/ 3" in code or "% 3" in code or "te_floordiv" in code

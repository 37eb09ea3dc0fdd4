"""The C backend against the numpy reference backend on whole programs."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tensorexpr as te
from codegen.cemit import sanitize
from tensorexpr.ir import Axis, Compute, Const, ScatterAdd, SelfRef, fresh_uid
from tensorexpr.recurrence import verify_order

from .util import NP, agree, assert_same, rand, same_bits, without_comments

# {{{ elementwise operations and types


def _binary_ops(X, Y, dt):
    ops = {
        "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
        "div": lambda a, b: a / b, "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b,
        "max": te.maximum, "min": te.minimum, "neg": lambda a, b: -a,
        "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
        "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
        "weak_scalar": lambda a, b: 3 - a * 2 + 1,
        "select": lambda a, b: te.select(a > b, a, b),
    }
    return [te.compute(X.shape, lambda i, fn=fn: fn(X[i], Y[i]), name=name)
            for name, fn in ops.items()]


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_float_elementwise_ops_match_numpy(dt):
    x = np.array([-3.5, -1.0, -0.0, 0.0, 0.5, 2.0, 7.25, np.inf, -np.inf, np.nan, 1e30, 3.0], dt)
    y = np.array([2.0, -0.5, 1.0, -3.0, 0.0, 2.0, -2.5, 1.0, np.inf, 1.0, 1e30, np.nan], dt)
    X, Y = te.placeholder((12,), dt, name="X"), te.placeholder((12,), dt, name="Y")
    outs = _binary_ops(X, Y, dt)
    for fn in (te.exp, te.log, te.sqrt, te.tanh, te.sigmoid, te.sin, te.cos, te.abs, te.floor,
               te.ceil):
        outs.append(te.compute((12,), lambda i, fn=fn: fn(X[i]), name=fn.__name__))
    outs.append(te.compute((12,), lambda i: X[i] ** Y[i], name="pow"))
    agree(outs, [X, Y], x, y)


@pytest.mark.parametrize("dt", ["int32", "int64"])
def test_integer_elementwise_ops_match_numpy(dt):
    info = np.iinfo(NP[dt])
    big = int(info.max) // 2 + 3
    x = np.array([-7, -3, -1, 0, 1, 2, 5, 7, big, -big, info.min, info.min, 9], dt)
    y = np.array([2, -2, 0, 3, -1, 0, 3, -2, 3, 7, -1, 5, 0], dt)
    X, Y = te.placeholder((13,), dt, name="X"), te.placeholder((13,), dt, name="Y")
    outs = _binary_ops(X, Y, dt)  # // and % by 0 give 0; MIN // -1 wraps like numpy
    outs.append(te.compute((13,), lambda i: te.abs(X[i]), name="abs"))
    outs.append(te.compute((13,), lambda i: X[i] ** (Y[i] * Y[i] % 5), name="pow"))
    outs.append(te.compute((13,), lambda i: te.sqrt(X[i]), name="sqrt_of_int"))
    agree(outs, [X, Y], x, y)


def test_boolean_ops_match_numpy():
    a = np.array([True, True, False, False])
    b = np.array([True, False, True, False])
    A, B = te.placeholder((4,), "bool", name="A"), te.placeholder((4,), "bool", name="B")
    outs = [te.compute((4,), lambda i, fn=fn: fn(A[i], B[i]), name=name) for name, fn in {
        "and": lambda p, q: p & q, "or": lambda p, q: p | q, "not": lambda p, q: ~p,
        "eq": lambda p, q: p == q, "ne": lambda p, q: p != q, "max": te.maximum,
        "min": te.minimum, "select": lambda p, q: te.select(p, q, ~q),
        "count": lambda p, q: p + q, "as_float": lambda p, q: p.astype("float32") * 2.5,
    }.items()]
    agree(outs, [A, B], a, b)


_CAST_VALUES = {
    "float32": [-2.7, -0.5, -0.0, 0.9, 3.99, 1e10, -1e10, 3e9, np.nan, np.inf, -np.inf, 1e-45],
    "float64": [-2.7, -0.5, -0.0, 0.9, 3.99, 1e10, -1e10, 1e19, np.nan, np.inf, -np.inf, 1e-300],
    "int32": [-5, 0, 1, 2**31 - 1, -2**31, 16777217, 3, 7, -1, 2, 100, 0],
    "int64": [-5, 0, 1, 2**40 + 7, -2**63, 2**53 + 1, 2**31, -2**31 - 1, 3, 9, 1, 0],
    "bool": [True, False] * 6,
}


@pytest.mark.parametrize("src", list(_CAST_VALUES))
def test_casts_match_numpy_astype(src):
    x = np.array(_CAST_VALUES[src], dtype=NP[src])
    X = te.placeholder((12,), src, name="X")
    outs = [te.compute((12,), lambda i, dt=dt: X[i].astype(dt), name=f"to_{dt}")
            for dt in NP if dt != src]
    agree(outs, [X], x)


def test_nan_propagates_through_max_and_min_like_numpy():
    x = np.array([[1.0, np.nan, 3.0], [np.nan, np.nan, 0.0], [1.0, 2.0, 3.0]], np.float32)
    X = te.placeholder((3, 3), name="X")
    k = te.reduce_axis(3, name="k")
    outs = [te.compute((3,), lambda i: te.max(X[i, k], axis=k), name="rowmax"),
            te.compute((3,), lambda i: te.min(X[i, k], axis=k), name="rowmin"),
            te.compute((3, 3), lambda i, j: te.maximum(X[i, j], X[j, i]), name="pairmax"),
            te.compute((3, 3), lambda i, j: te.minimum(2.0, X[i, j]), name="clip")]
    _, (mx, mn, _, _) = agree(outs, [X], x)
    assert np.isnan(mx[:2]).all() and mx[2] == 3.0 and np.isnan(mn[:2]).all()


_SPECIAL = (-0.0, 0.0, 1.0, -1.0, np.nan, np.inf, -np.inf)


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 40), st.integers(0, 2**31 - 1), st.sampled_from(["float32", "float64"]))
def test_max_and_min_of_zeros_ties_nans_and_infinities_are_numpys_bit_for_bit(n, seed, dt):
    # a tie gives the first operand (-0.0 or 0.0 as it is), a NaN of either wins; a row's
    # extreme is numpy's
    rng = np.random.default_rng(seed)
    a, b = (rng.choice(_SPECIAL, (3, n)).astype(dt) for _ in range(2))
    A, B = te.placeholder((3, n), dt, "A"), te.placeholder((3, n), dt, "B")
    k = te.reduce_axis(n, name="k")
    outs = [te.compute((3, n), lambda i, j: te.maximum(A[i, j], B[i, j]), name="mx"),
            te.compute((3, n), lambda i, j: te.minimum(A[i, j], B[i, j]), name="mn"),
            te.compute((3,), lambda i: te.max(A[i, k], axis=k), name="rowmax"),
            te.compute((3,), lambda i: te.min(A[i, k], axis=k), name="rowmin")]
    got = te.build(outs, inputs=[A, B])(a, b)
    want = te.build(outs, inputs=[A, B], backend="numpy")(a, b)
    for g, w in zip(got, want):  # (numpy's own zero sign on a tie varies with its loops)
        assert ((g == w) | (np.isnan(g) & np.isnan(w))).all(), (a, b, g, w)
    with np.errstate(invalid="ignore"):
        exact = (np.where((a >= b) | np.isnan(a), a, b), np.where((a <= b) | np.isnan(a), a, b))
    for g, w in zip(got[:2], exact):
        assert same_bits(g, w).all(), (a, b, g, w)


@settings(max_examples=15, deadline=None)
@given(st.integers(64, 200), st.integers(0, 199), st.booleans())
def test_max_and_min_along_rows_of_any_length_in_lanes_like_numpy(n, at, nan):
    # whole passes of 16 lanes, the rest in the first lanes; the extreme (or a NaN)
    # anywhere, the rest too
    x = rand((3, n))
    x[1, at % n] = np.nan if nan else 100.0
    x[2, n - 1] = -100.0
    X = te.placeholder((3, n), name="X")
    k = te.reduce_axis(n, name="k")
    outs = [te.compute((3,), lambda i: te.max(X[i, k], axis=k), name="rowmax"),
            te.compute((3,), lambda i: te.min(X[i, k], axis=k), name="rowmin")]
    f, _ = agree(outs, [X], x)
    assert "part" in f.source


# }}}

# {{{ reductions


def test_sum_max_min_with_affine_and_data_dependent_where():
    x = rand((6, 8), seed=1)
    X = te.placeholder((6, 8), name="X")
    k = te.reduce_axis(8, name="k")
    outs = [
        te.compute((6,), lambda i: te.sum(X[i, k], axis=k, where=k % 3 != 1), name="sum_mod"),
        te.compute((6,), lambda i: te.max(X[i, k], axis=k, where=k > i + 3), name="max_tri"),
        te.compute((6,), lambda i: te.min(X[i, k], axis=k, where=k < i), name="min_tri"),
        te.compute((6,), lambda i: te.sum(X[i, k], axis=k, where=(X[i, k] > 0) & (k >= 2)),
                   name="sum_pos"),
        te.compute((6,), lambda i: te.sum(X[i, k] > 0, axis=k), name="count_pos"),
        te.compute((6,), lambda i: te.sum(X[i, k], axis=k, where=k > 20), name="empty_sum"),
    ]
    _, got = agree(outs, [X], x)
    assert got[1][-1] == -np.inf and got[2][0] == np.inf  # empty max / min
    assert got[4].dtype == np.int64  # a sum of booleans counts


@pytest.mark.parametrize("dt", ["int32", "int64", "float64"])
def test_reductions_of_other_types(dt):
    x = rand((4, 5), dt, seed=2)
    X = te.placeholder((4, 5), dt, name="X")
    k = te.reduce_axis(5, name="k")
    outs = [te.compute((4,), lambda i, op=op: op(X[i, k], axis=k, where=k < i + 1),
                       name=op.__name__) for op in (te.sum, te.max, te.min)]
    outs.append(te.compute((4,), lambda i: te.max(X[i, k], axis=k, where=k > 9), name="empty"))
    agree(outs, [X], x)


def test_reductions_nested_anywhere_in_a_body():
    x = rand((5, 6), seed=3)
    X = te.placeholder((5, 6), name="X")
    k, l = te.reduce_axis(6, name="k"), te.reduce_axis(5, name="l")
    m = te.reduce_axis(6, name="m")
    outs = [
        te.compute((5,), lambda i: te.sum(X[i, k], axis=k) / 9.0, name="mean_ish"),
        te.compute((5,), lambda i: -te.sum(X[i, k] * X[i, k], axis=k), name="neg_sum"),
        te.compute((5,), lambda i: te.max(X[i, k], axis=k) - te.min(X[i, k], axis=k), name="range"),
        # the inner reduction uses the outer reduction's axis
        te.compute((5,), lambda i: te.sum(X[i, k] * te.max(X[l, k], axis=l), axis=k),
                   name="nested"),
        te.compute((5, 6), lambda i, j: te.exp(X[i, j] - te.max(X[i, m], axis=m)), name="shifted"),
    ]
    agree(outs, [X], x)


def test_a_repeated_reduction_is_computed_once():
    # (a row longer than a window, which would be written out: lower_expr.window)
    X = te.placeholder((5, 40), name="X")
    k = te.reduce_axis(40, name="k")
    S = te.compute((5,), lambda i: te.sum(X[i, k], axis=k) * te.sum(X[i, k], axis=k), name="sq")
    f, _ = agree([S], [X], rand((5, 40)))
    assert f.source.count("/* k */") == 1


def test_where_with_modulo_gets_a_strided_loop_from_isl():
    # The shape of a stride-2 transposed convolution (what the gradient of a
    # stride-2 convolution is): y = 2 h + kh, so kh runs over one parity.
    H = te.var("H")
    X = te.placeholder((H,), name="X")
    W = te.placeholder((3,), name="W")
    kh = te.reduce_axis(3, name="kh")
    G = te.compute((2 * H + 1,), lambda y: te.sum(
        X[(y - kh) // 2] * W[kh], axis=kh,
        where=((y - kh) % 2 == 0) & ((y - kh) // 2 >= 0) & ((y - kh) // 2 < H)), name="G")
    f = te.build(G)
    fn = te.build(G, backend="numpy")
    body = without_comments(f.source.split("/* G[y]")[1].split("*/", 1)[1])
    assert "+= 2)" in body  # the kh loop steps by 2 ...
    assert "% 2" not in body.replace("te_mod_i64(i0 + 1, 2)", "")  # ... not testing parity
    w = rand(3, seed=4)
    for n in (1, 4, 7):  # one build, several sizes
        x = rand(n, seed=n)
        assert_same(f(x, w), fn(x, w))


def test_conv2d_gradient_shape_where_in_two_dims():
    H, W = 5, 4
    X = te.placeholder((H, W), name="X")
    K = te.placeholder((3, 3), name="K")
    kh, kw = te.reduce_axis(3, name="kh"), te.reduce_axis(3, name="kw")
    dX = te.compute((2 * H + 2, 2 * W + 2), lambda y, x: te.sum(
        X[(y - kh) // 2, (x - kw) // 2] * K[kh, kw], axis=[kh, kw],
        where=((y - kh) % 2 == 0) & ((x - kw) % 2 == 0) & ((y - kh) // 2 >= 0)
        & ((y - kh) // 2 < H) & ((x - kw) // 2 >= 0) & ((x - kw) // 2 < W)), name="dX")
    f, _ = agree([dX], [X, K], rand((H, W)), rand((3, 3), seed=1))
    # both tap loops step by 2 (in each version of the nest: codegen.rowsum_masked's unmasked
    # one for finite weights, and the masked one)
    versions = 2 if "(full tile, unmasked)" in f.source else 1
    assert f.source.count("+= 2)") == 2 * versions


# }}}

# {{{ classic programs


def test_matmul_with_symbolic_rows_at_two_sizes():
    n = te.var("n")
    A = te.placeholder((n, 6), name="A")
    B = te.placeholder((6, 5), name="B")
    k = te.reduce_axis(6, name="k")
    C = te.compute((n, 5), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    f = te.build(C)
    b = rand((6, 5), seed=1)
    for rows in (1, 7):
        a = rand((rows, 6), seed=rows)
        np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-5, atol=1e-6)
    agree([C], [A, B], rand((3, 6)), b)


def _conv2d(X, Wt, stride, pad, dil, padding_by):
    N, C, H, Wd = X.shape
    O, _, KH, KW = Wt.shape
    OH = (H + 2 * pad - dil * (KH - 1) - 1) // stride + 1
    OW = (Wd + 2 * pad - dil * (KW - 1) - 1) // stride + 1
    c, kh, kw = (te.reduce_axis(C, name="c"), te.reduce_axis(KH, name="kh"),
                 te.reduce_axis(KW, name="kw"))

    def body(n, o, y, x):
        h, w = y * stride + kh * dil - pad, x * stride + kw * dil - pad
        inside = (h >= 0) & (h < H) & (w >= 0) & (w < Wd)
        if padding_by == "select":
            return te.sum(te.select(inside, X[n, c, h, w] * Wt[o, c, kh, kw], 0.0),
                          axis=[c, kh, kw])
        return te.sum(X[n, c, h, w] * Wt[o, c, kh, kw], axis=[c, kh, kw], where=inside)
    return te.compute((N, O, OH, OW), body, name="conv")


@pytest.mark.parametrize("stride,pad,dil", [(1, 1, 1), (2, 1, 1), (1, 2, 2), (2, 0, 2)])
@pytest.mark.parametrize("padding_by", ["select", "where"])
def test_conv2d(stride, pad, dil, padding_by):
    X = te.placeholder((2, 3, 7, 6), name="X")
    Wt = te.placeholder((4, 3, 3, 3), name="Wt")
    out = _conv2d(X, Wt, stride, pad, dil, padding_by)
    agree([out], [X, Wt], rand((2, 3, 7, 6)), rand((4, 3, 3, 3), seed=1))


def test_pooling():
    X = te.placeholder((2, 6, 7), name="X")
    i, j = te.reduce_axis(2, name="i"), te.reduce_axis(2, name="j")
    mp = te.compute((2, 3, 3), lambda c, y, x: te.max(X[c, 2 * y + i, 2 * x + j], axis=[i, j]),
                    name="maxpool")
    a, b = te.reduce_axis(3, name="a"), te.reduce_axis(3, name="b")
    inside = lambda y, x: (y + a - 1 >= 0) & (y + a - 1 < 6) & (x + b - 1 >= 0) & (x + b - 1 < 7)
    ap = te.compute((2, 6, 7), lambda c, y, x: te.sum(
        X[c, y + a - 1, x + b - 1], axis=[a, b], where=inside(y, x))
        / te.sum(te.const(1.0), axis=[a, b], where=inside(y, x)), name="avgpool")
    agree([mp, ap], [X], rand((2, 6, 7)))


def test_flatten_and_unflatten_with_floordiv_and_mod():
    X = te.placeholder((2, 3, 4), name="X")
    F = te.compute((24,), lambda f: X[f // 12, (f // 4) % 3, f % 4], name="flat")
    U = te.compute((4, 6), lambda p, q: F[p * 6 + q] * 2.0, name="unflat")
    x = rand((2, 3, 4))
    _, (flat, unflat) = agree([F, U], [X], x)
    np.testing.assert_array_equal(flat, x.ravel())


def test_clamped_blur_at_two_sizes():
    n = te.var("n")
    X = te.placeholder((n,), name="X")
    B = te.compute((n,), lambda i: (X[te.maximum(i - 1, 0)] + X[i] + X[te.minimum(i + 1, n - 1)])
                   / 3.0, name="blur")
    for size in (1, 2, 9):
        agree([B], [X], rand(size, seed=size))


def test_softmax_pipeline_with_intermediates():
    X = te.placeholder((3, 5), name="X")
    k, k2 = te.reduce_axis(5, name="k"), te.reduce_axis(5, name="k2")
    M = te.compute((3,), lambda i: te.max(X[i, k], axis=k), name="M")
    E = te.compute((3, 5), lambda i, j: te.exp(X[i, j] - M[i]), name="E")
    S = te.compute((3,), lambda i: te.sum(E[i, k2], axis=k2), name="S")
    P = te.compute((3, 5), lambda i, j: E[i, j] / S[i], name="P")
    _, (p,) = agree([P], [X], rand((3, 5)))
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-5)


def test_zero_dimensional_output_and_input():
    X = te.placeholder((4, 3), name="X")
    s0 = te.placeholder((), name="s0")
    i, j = te.reduce_axis(4, name="i"), te.reduce_axis(3, name="j")
    s = te.compute((), lambda: te.sum(X[i, j] * X[i, j], axis=[i, j]) + s0[()], name="s")
    _, (got,) = agree([s], [X, s0], rand((4, 3)), np.array(0.5, np.float32))
    assert got.shape == ()


def test_outputs_may_repeat_and_include_an_input():
    A = te.placeholder((3,), name="A")
    A2 = te.placeholder((3,), name="A")  # same name, another input
    B = te.compute((3,), lambda i: A[i] - A2[i], name="B")
    f, (a, b, b2) = agree([A, B, B], [A, A2], rand(3), rand(3, seed=1))
    a_in = rand(3)
    assert f(a_in, a_in)[0] is not a_in


# }}}

# {{{ data-dependent reads, selects, run-time errors


def test_embedding_lookup_and_out_of_range_index():
    E = te.placeholder((6, 3), name="E")
    idx = te.placeholder((5,), "int32", name="idx")
    out = te.compute((5, 3), lambda l, d: E[idx[l], d], name="lookup")
    f, _ = agree([out], [E, idx], rand((6, 3)), np.array([0, 5, 2, 2, 1], np.int32))
    e = rand((6, 3))
    for bad in (6, -1):
        with pytest.raises(IndexError) as info:
            f(e, np.array([0, 1, bad, 2, 3], np.int32))
        msg = str(info.value)
        for part in ("'lookup'", "'E'", f"index {bad}", "dimension 0", "size 6"):
            assert part in msg, (part, msg)


def test_out_of_range_index_inside_a_parallel_loop():
    n = 40000
    E = te.placeholder((10, 2), name="E")
    idx = te.placeholder((n,), "int64", name="idx")
    out = te.compute((n, 2), lambda l, d: E[idx[l], d] * 2.0, name="big_lookup")
    f = te.build(out)
    assert "#pragma omp parallel for" in f.source
    ids = np.arange(n, dtype=np.int64) % 10
    e = rand((10, 2))
    np.testing.assert_array_equal(f(e, ids), e[ids] * 2)
    ids[31234] = 12
    with pytest.raises(IndexError, match="index 12 in dimension 0, outside its size 10"):
        f(e, ids)


def test_untaken_select_branch_is_never_evaluated():
    E = te.placeholder((4,), name="E")
    idx = te.placeholder((3, 2), "int64", name="idx")
    take = te.placeholder((3,), "bool", name="take")
    k = te.reduce_axis(2, name="k")
    # both the data-dependent read and the reduction are only evaluated where taken
    G = te.compute((3,), lambda i: te.select(idx[i, 0] >= 0, E[idx[i, 0]], -1.0), name="guarded")
    R = te.compute((3,), lambda i: te.select(take[i], te.sum(E[idx[i, k]], axis=k), 0.0),
                   name="red")
    ids = np.array([[0, 3], [-1, 9], [2, 2]], np.int64)
    f, (g, r) = agree([G, R], [E, idx, take], rand(4), ids, np.array([True, False, True]))
    assert g[1] == -1.0 and r[1] == 0.0
    with pytest.raises(IndexError, match="'red'.*index -1 in dimension 0"):
        f(rand(4), ids, np.array([True, True, True]))


def test_affine_read_that_isl_cannot_prove_is_checked_at_run_time():
    # Passes build tensors from the IR directly (te.compute would reject this
    # statically): the guard of X[i - 1] is data-dependent, so the read is checked.
    X = te.placeholder((4,), name="X")
    flag = te.placeholder((4,), "bool", name="flag")
    i = Axis("i", Const(0, "int64"), Const(4, "int64"), fresh_uid())
    T = Compute("shift", (Const(4, "int64"),), "float32", fresh_uid(), "test", axes=(i,),
                body=te.select(flag[i], X[i - 1], te.const(0.0)))
    f, _ = agree([T], [X, flag], rand(4), np.array([False, True, True, True]))
    assert "te_fail" in f.source
    with pytest.raises(IndexError, match=r"'shift'.*'X' at index -1 in dimension 0, outside its "
                                         r"size 4 \(in X\[i - 1\]\)$"):
        f(rand(4), np.array([True, True, False, False]))


def test_proven_reads_are_not_checked():
    X = te.placeholder((6, 5), name="X")
    k = te.reduce_axis(5, name="k")
    S = te.compute((6,), lambda i: te.sum(te.select(i > 0, X[i - 1, k], 0.0), axis=k, where=k < i)
                   + X[te.minimum(i + 1, 5), 0], name="S")
    f, _ = agree([S], [X], rand((6, 5)))
    assert "te_fail" not in f.source


def test_right_operand_of_and_or_runs_only_where_it_decides():
    """`a & b` runs b (its checked loads, its reductions) only where a holds, `a | b`
    only where a fails; an affine read in b is proven under a and needs no check."""
    E = te.placeholder((4,), name="E")
    X = te.placeholder((6,), name="X")
    idx = te.placeholder((5,), "int64", name="idx")
    k = te.reduce_axis(2, name="k")
    A = te.compute((5,), lambda i: te.select((idx[i] >= 0) & (E[idx[i]] > 0), E[idx[i]], -1.0),
                   name="and_checked")
    O = te.compute((5,), lambda i: te.select((idx[i] < 0) | (te.sum(E[idx[i] + k], axis=k,
                                                                     where=idx[i] + k < 4) > 0),
                                             1.0, 0.0), name="or_reduce")
    P = te.compute((6,), lambda i: te.select((i >= 1) & (X[i - 1] > 0), X[i], 0.0), name="shift")
    e = np.array([1.0, -2.0, 3.0, 0.5], np.float32)
    ids = np.array([0, -1, 1, -7, 3])
    f, (a, o) = agree([A, O], [E, idx], e, ids)
    np.testing.assert_array_equal(a, [1, -1, -1, -1, 0.5])
    np.testing.assert_array_equal(o, [0, 1, 1, 1, 1])
    with pytest.raises(IndexError, match="'and_checked'.*index 4 in dimension 0"):
        f(e, np.array([0, 4, 1, 1, 1]))
    g, _ = agree([P], [X], rand(6))
    assert "te_fail" not in g.source


def test_temporaries_of_a_split_loop_are_its_own():
    """An innermost axis read through j // 2 is lowered once per remainder: a checked
    load's temporary from another lowering must not be reused (it is not declared)."""
    E = te.placeholder((3,), name="E")
    idx = te.placeholder((4,), "int32", name="idx")
    Y = te.compute((8,), lambda j: E[idx[j // 2]] * 2.0, name="Y")
    Z = te.compute((2, 8), lambda i, j: te.select((i == 1) & (E[idx[j // 2]] > 0), 1.0, 0.0),
                   name="Z")
    agree([Y, Z], [E, idx], np.arange(3, dtype=np.float32), np.array([0, 2, 1, 0], np.int32))


def test_hoisted_row_indices_come_only_from_what_every_point_evaluates():
    """A data-dependent index loaded once per row must be one the row always evaluates:
    idx[i - 1] in the right operand of `&` is read only where i >= 1."""
    E = te.placeholder((3, 8), name="E")
    idx = te.placeholder((4,), "int32", name="idx")
    Y = te.compute((4, 8), lambda i, j: te.select((i >= 1) & (E[idx[i - 1], j] > 0), 1.0, 0.0),
                   name="Y")
    Z = te.compute((4, 8), lambda i, j: te.select(i >= 1, E[idx[i - 1], j], 0.0), name="Z")
    agree([Y, Z], [E, idx], rand((3, 8)), np.array([0, 2, 1, 0], np.int32))


def test_padding_by_select_reads_outside_only_in_the_untaken_branch():
    X = te.placeholder((5,), name="X")
    P = te.compute((9,), lambda i: te.select((i >= 2) & (i < 7), X[i - 2], 0.0), name="pad")
    _, (p,) = agree([P], [X], rand(5))
    assert (p[:2] == 0).all() and (p[7:] == 0).all()


# }}}

# {{{ recurrences and scatter-add


def test_ewma_recurrence():
    T, R = 8, 4
    d = te.placeholder((R, T), name="d")
    e = te.recurrence((T, R), lambda e, t, r: te.select(
        t == 0, d[r, 0], 0.5 * d[r, t] + 0.5 * e[t - 1, r]), name="e")
    f, (got,) = agree([e], [d], rand((R, T)))
    assert "(sequential)" in f.source


def test_descending_recurrence_and_symbolic_length():
    # te.recurrence runs forward; descending ones come from differentiate, built like this.
    n = te.var("n")
    x = te.placeholder((n,), name="x")
    t = Axis("t", Const(0, "int64"), n, fresh_uid())
    me = SelfRef("suffix", (n,), "float32", fresh_uid(), "test")
    body = te.select(t == n - 1, x[t], me[t + 1] * 0.5 + x[t])
    c = verify_order(Compute("suffix", (n,), "float32", fresh_uid(), "test", axes=(t,),
                             body=body, self_ref=me), steps=(-1,))
    assert c.carry.step == -1
    f, _ = agree([c], [x], rand(5))
    assert "-= 1)" in f.source
    agree([c], [x], rand(1))


def test_recurrence_runs_its_other_axis_in_parallel():
    T, R = 3, 40000
    d = te.placeholder((T, R), name="d")
    e = te.recurrence((T, R), lambda e, t, r: te.select(t == 0, d[0, r], e[t - 1, r] + d[t, r]),
                      name="cumsum")
    f, (got,) = agree([e], [d], rand((T, R)))
    src = f.source
    assert src.index("(sequential)") < src.index("#pragma omp parallel for")
    np.testing.assert_allclose(got, np.cumsum(rand((T, R)), axis=0), rtol=1e-5, atol=1e-5)


def _scatter(G, idx, V, D, where=None):
    L = G.shape[0]
    z = Const(0, "int64")
    l = Axis("l", z, Const(L, "int64"), fresh_uid())
    d = Axis("d", z, Const(D, "int64"), fresh_uid())
    return ScatterAdd("S", (Const(V, "int64"), Const(D, "int64")), "float32", fresh_uid(), "test",
                      axes=(l, d), where=None if where is None else where(l, d),
                      indices=(idx[l], d), value=G[l, d] * 2.0)


def test_scatter_add_built_from_the_ir():
    G = te.placeholder((5, 3), name="G")
    idx = te.placeholder((5,), "int64", name="idx")
    ids = np.array([1, 4, 1, 0, 1], np.int64)
    g = rand((5, 3))
    plain = _scatter(G, idx, 6, 3)
    affine = _scatter(G, idx, 6, 3, where=lambda l, d: d < 2)
    data = _scatter(G, idx, 6, 3, where=lambda l, d: G[l, d] > 0)
    f, (s, _, _) = agree([plain, affine, data], [G, idx], g, ids)
    want = np.zeros((6, 3), np.float32)
    np.add.at(want, ids, 2 * g)
    np.testing.assert_allclose(s, want, rtol=1e-6)
    with pytest.raises(IndexError, match="'S'.*scatters to index 7 in dimension 0"):
        f(g, np.array([1, 7, 1, 0, 1], np.int64))


def test_an_embedding_gradient_checks_each_row_once_and_adds_it_in_vector_lanes():
    E = te.placeholder((7, 5, 16), name="E")
    idx = te.placeholder((3, 4), "int64", name="idx")
    Y = te.compute((3, 4, 5, 16), lambda a, b, c, d: E[idx[a, b], c, d], name="Y")
    H = te.placeholder(Y.shape, name="H")
    [dE] = te.differentiate(Y, [E], head=H)
    ids = np.array([[1, 6, 1, 0], [2, 1, 1, 3], [0, 0, 6, 5]], np.int64)
    h = rand((3, 4, 5, 16))
    f, (got,) = agree([dE], [E, idx, H], rand((7, 5, 16)), ids, h)
    want = np.zeros((7, 5, 16), np.float32)
    np.add.at(want, ids, h)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    body = f.source.split("zero-fill")[1]
    assert body.count("te_fail(") == 1 and "#pragma omp simd" in body
    with pytest.raises(IndexError, match="scatters to index 7 in dimension 0"):
        f(rand((7, 5, 16)), np.where(ids == 5, 7, ids), h)


# }}}

# {{{ generated source


def test_source_has_a_comment_per_tensor():
    A = te.placeholder((4, 3), name="A")
    k = te.reduce_axis(3, name="k")
    S = te.compute((4,), lambda i: te.sum(A[i, k], axis=k, where=k > 0), name="S")
    T = te.compute((4,), lambda i: S[i] * 2.0, name="T")
    src = te.build(T).source
    for t in (S, T):
        assert f"/* {sanitize(str(t))} */" in src
    assert "restrict" in src


def test_hostile_names_reach_only_sanitized_comments():
    evil = 'a; system("rm -rf /"); */ int pwned = 1; /* \n#include <stdio.h>\x00\x07'
    n = te.var("n */ evil(); /*")
    A = te.placeholder((n,), name=evil)
    B = te.compute((n,), lambda i: A[i] + 1.0, name=evil + "B")
    f = te.build(B)
    code = without_comments(f.source)
    for bad in ("system", "pwned", "evil", "stdio", "rm -rf"):
        assert bad not in code
    assert evil not in f.source and "*/ int" not in f.source
    assert all(32 <= ord(ch) < 127 or ch == "\n" for ch in f.source)
    x = rand(4)
    np.testing.assert_allclose(f(x), x + 1)


def test_parallel_loop_for_large_tensors_only():
    big = te.placeholder((300, 300), name="big")
    small = te.placeholder((4, 4), name="small")
    Y = te.compute((300, 300), lambda i, j: big[i, j] * 2.0 + big[j, i], name="Y")
    Z = te.compute((4, 4), lambda i, j: small[i, j] * 2.0, name="Z")
    n = te.var("n")
    V = te.placeholder((n,), name="V")
    W = te.compute((n,), lambda i: V[i] + 1.0, name="W")
    assert te.build(Y).source.count("#pragma omp parallel for") == 1
    assert "#pragma omp parallel" not in te.build(Z).source
    # symbolic work is compared at run time with the measured threshold (codegen.threads)
    assert "#pragma omp parallel for simd if(parallel: n0 >= te_min_work)" in te.build(W).source
    agree([Y], [big], rand((300, 300)))


# }}}

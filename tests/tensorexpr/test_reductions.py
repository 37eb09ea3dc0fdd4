"""te.sum / te.max / te.min: axes, where=, empty sets, nesting, 0-d results."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te

from .util import BACKENDS, check, rand, run

REDUCERS = {"sum": (te.sum, np.sum), "max": (te.max, np.max), "min": (te.min, np.min)}


def masked(np_fn, x, mask, axis, dtype):
    """``np_fn`` over ``axis`` of the entries where ``mask`` holds, identities if none."""
    name = np_fn.__name__
    if name == "sum":
        return np.where(mask, x, 0).sum(axis=axis).astype(dtype)
    if np.dtype(dtype).kind == "f":
        ident = -np.inf if name == "max" else np.inf
    else:
        info = np.iinfo(dtype)
        ident = info.min if name == "max" else info.max
    return np_fn(np.where(mask, x, ident), axis=axis).astype(dtype)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_reductions_over_one_and_two_axes(op, backend):
    te_fn, np_fn = REDUCERS[op]
    X = te.placeholder((3, 4, 5), name="X")
    k = te.reduce_axis(5, name="k")
    j, l = te.reduce_axis(4, name="j"), te.reduce_axis((0, 5), name="l")
    lo = te.reduce_axis((1, 4), name="lo")  # lo != 0
    one = te.compute((3, 4), lambda a, b: te_fn(X[a, b, k], axis=k), name="one")
    two = te.compute((3,), lambda a: te_fn(X[a, j, l], axis=[j, l]), name="two")
    off = te.compute((3, 5), lambda a, c: te_fn(X[a, lo, c], axis=lo), name="off")
    x = rand(3, 4, 5)
    g1, g2, g3 = run(backend, [one, two, off], x)
    check(g1, np_fn(x, axis=2))
    check(g2, np_fn(x, axis=(1, 2)))
    check(g3, np_fn(x[:, 1:4, :], axis=1))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_where_and_empty_reductions(op, dtype, backend):
    """where= restricts the set; an empty set gives 0, -inf / +inf (int: least / greatest)."""
    te_fn, np_fn = REDUCERS[op]
    X = te.placeholder((4, 6), dtype=dtype, name="X")
    k = te.reduce_axis(6, name="k")
    e = te.reduce_axis((3, 3), name="e")
    affine = te.compute((4,), lambda i: te_fn(X[i, k], axis=k, where=k > i + 1), name="affine")
    data = te.compute((4,), lambda i: te_fn(X[i, k], axis=k, where=X[i, k] > 0), name="data")
    empty = te.compute((4,), lambda i: te_fn(X[i, e], axis=e), name="empty")
    never = te.compute((4,), lambda i: te_fn(X[i, k], axis=k, where=k > 7), name="never")
    x = rand(4, 6, dtype=dtype, low=-5, high=5)
    x[1] = -np.abs(x[1]) - 1  # row 1: the data-dependent where is empty
    ks = np.arange(6)[None, :]
    ga, gd, ge, gn = run(backend, [affine, data, empty, never], x)
    check(ga, masked(np_fn, x, ks > np.arange(4)[:, None] + 1, 1, dtype))  # row 3 empty
    check(gd, masked(np_fn, x, x > 0, 1, dtype))
    none = np.zeros((4, 6), bool)
    check(ge, masked(np_fn, x, none, 1, dtype))
    check(gn, masked(np_fn, x, none, 1, dtype))
    if op != "sum":
        ident = masked(np_fn, x, none, 1, dtype)[0]
        assert ident == (np.iinfo(dtype).min if dtype.startswith("int") and op == "max" else
                         np.iinfo(dtype).max if dtype.startswith("int") else
                         (-np.inf if op == "max" else np.inf))


@pytest.mark.parametrize("backend", BACKENDS)
def test_reductions_inside_bodies(backend):
    X = te.placeholder((3, 9), name="X")
    k = te.reduce_axis(9, name="k")
    a, b = te.reduce_axis(3, name="a"), te.reduce_axis(9, name="b")
    mean = te.compute((3,), lambda i: te.sum(X[i, k], axis=k) / 9.0, name="mean")
    neg = te.compute((3,), lambda i: -te.sum(X[i, k], axis=k), name="neg")
    mix = te.compute((3,), lambda i: te.max(X[i, k], axis=k) - te.min(X[i, k], axis=k) * 2,
                     name="mix")
    # a reduction nested in another's body, and one in a select branch
    nested = te.compute((), lambda: te.max(te.sum(X[a, b], axis=b), axis=a), name="nested")
    inner = te.compute((3,), lambda i: te.sum(X[i, b] * te.sum(X[a, b], axis=a), axis=b),
                       name="inner")
    branch = te.compute((3,), lambda i: te.select(i == 1, te.sum(X[i, k], axis=k), X[i, 0]),
                        name="branch")
    # a reduction whose where= uses the outer axis: a prefix sum over rows
    prefix = te.compute((3,), lambda i: te.sum(X[a, b], axis=[a, b], where=a <= i), name="prefix")
    x = rand(3, 9)
    got = run(backend, [mean, neg, mix, nested, inner, branch, prefix], x)
    check(got[0], x.sum(1) / np.float32(9))
    check(got[1], -x.sum(1))
    check(got[2], x.max(1) - x.min(1) * 2)
    check(got[3], np.float32(x.sum(1).max()))
    check(got[4], x @ x.sum(0))
    check(got[5], np.where(np.arange(3) == 1, x.sum(1), x[:, 0]))
    check(got[6], np.cumsum(x.sum(1)).astype(np.float32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_dimensional_tensors(backend):
    X = te.placeholder((3, 4), name="X")
    S = te.placeholder((), name="S")  # a 0-d input
    i, j = te.reduce_axis(3), te.reduce_axis(4)
    total = te.compute((), lambda: te.sum(X[i, j] * X[i, j], axis=[i, j]), name="total")
    scaled = te.compute((3,), lambda r: X[r, 0] * S[()] + total[()], name="scaled")
    x = rand(3, 4)
    t, s = run(backend, [total, scaled], x, np.float32(1.5))
    assert t.shape == () and s.shape == (3,)
    check(t, np.float32((x * x).sum()))
    check(s, x[:, 0] * np.float32(1.5) + np.float32((x * x).sum()))
    # a 0-d ndarray and a Python float are accepted too
    check(run(backend, scaled, x, np.array(2.0, np.float32)), x[:, 0] * 2 + (x * x).sum())
    check(run(backend, scaled, x, 2.0), x[:, 0] * 2 + (x * x).sum())


@pytest.mark.parametrize("backend", BACKENDS)
def test_boolean_bodies_count(backend):
    """A reduction of booleans counts (int64), like numpy's sum of a mask."""
    X = te.placeholder((3, 5), name="X")
    k = te.reduce_axis(5, name="k")
    pos = te.compute((3,), lambda i: te.sum(X[i, k] > 0, axis=k), name="pos")
    anyp = te.compute((3,), lambda i: te.max(X[i, k] > 0, axis=k), name="anyp")
    assert pos.dtype == "int64" and anyp.dtype == "int64"
    x = rand(3, 5)
    x[2] = -1
    p, a = run(backend, [pos, anyp], x)
    check(p, (x > 0).sum(1))
    check(a, (x > 0).max(1).astype(np.int64))


@pytest.mark.parametrize("backend", BACKENDS)
def test_symbolic_reduction_range(backend):
    n = te.var("n")
    X = te.placeholder((n,), name="X")
    r = te.reduce_axis((1, n), name="r")  # empty when n == 1
    tail = te.compute((), lambda: te.sum(X[r], axis=r), name="tail")
    top = te.compute((), lambda: te.max(X[r], axis=r), name="top")
    f = te.build([tail, top], backend=backend)
    for size in (1, 2, 7):
        x = rand(size)
        t, m = f(x)
        check(t, np.float32(x[1:].sum()))
        check(m, np.float32(x[1:].max() if size > 1 else -np.inf))

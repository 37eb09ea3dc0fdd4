"""Random programs (hypothesis): the C backend agrees with the numpy backend.

A program is a random expression tree over three small placeholders, built as
a plain-data *recipe* first (so hypothesis can shrink it) and then turned into
a ``te.compute`` of shape (3, 4). Trees mix elementwise operations, selects,
guarded shifted reads, data-dependent reads and reductions (sum/max/min) with
affine, strided and data-dependent ``where`` conditions, nested anywhere.

Inputs are multiples of 0.5, so sums and products are exact in floating point
and the order of additions cannot matter; floor division and modulo (whose
result jumps at integers) only see such exact operands.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import tensorexpr as te

from .util import NP, assert_same

ROWS, COLS = 3, 4
_EXACT_BIN = ["add", "sub", "mul", "max", "min"]
_FLOOR_BIN = ["floordiv", "mod"]
_INEXACT_UN = ["exp", "tanh", "sin", "sqrt_abs", "div"]


@st.composite
def recipe(draw, depth: int, nrow: int, ncol: int, dtype: str):
    """``(tree, exact)``: a random expression over ``nrow`` row axes and ``ncol`` column axes
    in scope (index 0: the compute's own axes, later ones: enclosing reduction axes)."""
    isf = dtype.startswith("float")
    row, col = st.integers(0, nrow - 1), st.integers(0, ncol - 1)
    if depth > 0 and draw(st.integers(0, 3)) > 0:  # mostly inner nodes while depth lasts
        kind = draw(st.sampled_from(["bin", "bin", "un", "select", "reduce", "reduce",
                                     "shiftsum"]))
    else:
        kind = draw(st.sampled_from(["read", "read", "yread", "const", "axis", "guarded",
                                     "indirect"]))
    if kind == "read":
        return ("read", draw(row), draw(col)), True
    if kind == "yread":
        return ("yread", draw(col)), True
    if kind == "indirect":
        return ("indirect", draw(row)), True
    if kind == "const":
        return ("const", draw(st.integers(-6, 6)) / (2 if isf else 1)), True
    if kind == "axis":
        return ("axis", draw(st.booleans()), draw(row), draw(col)), True
    if kind == "guarded":
        return ("guarded", draw(row), draw(st.integers(-2, 2)), draw(col),
                draw(st.integers(-2, 2))), True
    if kind == "bin":
        a, ea = draw(recipe(depth - 1, nrow, ncol, dtype))
        b, eb = draw(recipe(depth - 1, nrow, ncol, dtype))
        ops = _EXACT_BIN + (_FLOOR_BIN if ea and eb else [])
        if isf:
            ops = ops + ["div"]
        op = draw(st.sampled_from(ops))
        return ("bin", op, a, b), ea and eb and op != "div"
    if kind == "un":
        a, ea = draw(recipe(depth - 1, nrow, ncol, dtype))
        ops = ["neg", "abs"] + (["floor", "exp", "tanh", "sin", "sqrt_abs"] if isf else [])
        op = draw(st.sampled_from(ops))
        return ("un", op, a), ea and op in ("neg", "abs", "floor")
    if kind == "select":
        c1, _ = draw(recipe(depth - 1, nrow, ncol, dtype))
        c2, _ = draw(recipe(depth - 1, nrow, ncol, dtype))
        a, ea = draw(recipe(depth - 1, nrow, ncol, dtype))
        b, eb = draw(recipe(depth - 1, nrow, ncol, dtype))
        return ("select", c1, c2, a, b), ea and eb
    if kind == "shiftsum":
        op = draw(st.sampled_from(["sum", "max", "min"]))
        return ("shiftsum", op, draw(st.integers(-2, 2)), draw(col), draw(row)), True
    # a reduction over a new row (extent 3) or column (extent 4) axis
    on_rows = draw(st.booleans())
    op = draw(st.sampled_from(["sum", "max", "min"]))
    where = draw(st.sampled_from(["none", "mod", "le", "parity", "data", "mod_data"]))
    outer = draw(row if on_rows else col)
    body, eb = draw(recipe(depth - 1, nrow + on_rows, ncol + (not on_rows), dtype))
    return ("reduce", op, on_rows, where, outer, body), eb


class _Builder:
    def __init__(self, X, Y, I, dtype, rows):
        self.X, self.Y, self.I, self.dtype, self.rows = X, Y, I, dtype, rows

    def build(self, r, rows, cols):
        X, Y, dt = self.X, self.Y, self.dtype
        kind = r[0]
        if kind == "read":
            return X[rows[r[1]], cols[r[2]]]
        if kind == "yread":
            return Y[cols[r[1]]]
        if kind == "indirect":  # a data-dependent read, checked at run time
            return Y[self.I[rows[r[1]]]]
        if kind == "const":
            return te.const(r[1], dt)
        if kind == "axis":
            return (rows[r[2]] if r[1] else cols[r[3]]).astype(dt)
        if kind == "guarded":  # padding: the read outside X is in the untaken branch
            _, ri, s, ci, fill = r
            h = rows[ri] + s
            return te.select((h >= 0) & (h < self.rows), X[h, cols[ci]], te.const(fill, dt))
        if kind == "bin":
            a, b = self.build(r[2], rows, cols), self.build(r[3], rows, cols)
            return {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
                    "div": lambda: a / b, "floordiv": lambda: a // b, "mod": lambda: a % b,
                    "max": lambda: te.maximum(a, b), "min": lambda: te.minimum(a, b)}[r[1]]()
        if kind == "un":
            a = self.build(r[2], rows, cols)
            if r[1] == "sqrt_abs":
                return te.sqrt(te.abs(a))
            if r[1] == "neg":
                return -a
            return getattr(te, r[1])(a)
        if kind == "select":
            c = self.build(r[1], rows, cols) < self.build(r[2], rows, cols)
            return te.select(c, self.build(r[3], rows, cols), self.build(r[4], rows, cols))
        if kind == "shiftsum":  # a shifted window kept inside X by an affine where
            _, op, s, ci, ri = r
            k = te.reduce_axis(self.rows, name="ks")
            return getattr(te, op)(X[k + s, cols[ci]], axis=k,
                                   where=(k + s >= 0) & (k + s < self.rows) & (k <= rows[ri] + 1))
        _, op, on_rows, where, outer, body = r
        k = te.reduce_axis(self.rows if on_rows else COLS, name="k")
        rows2, cols2 = (rows + [k], cols) if on_rows else (rows, cols + [k])
        o = (rows if on_rows else cols)[outer]
        data = (X[k, cols[0]] if on_rows else X[rows[0], k]) > 0
        cond = {"none": None, "mod": k % 2 == 0, "le": k <= o, "parity": (k + o) % 2 == 1,
                "data": data, "mod_data": (k % 2 == 1) & data}[where]
        return getattr(te, op)(self.build(body, rows2, cols2), axis=k, where=cond)


def _check(tree, dtype, seed, symbolic_rows=False):
    """Build the program of ``tree`` (with a symbolic row count: run it at 1..4 rows)."""
    rows = te.var("n") if symbolic_rows else ROWS
    X = te.placeholder((rows, COLS), dtype, name="X")
    Y = te.placeholder((COLS,), dtype, name="Y")
    I = te.placeholder((rows,), "int32", name="I")
    b = _Builder(X, Y, I, dtype, rows)
    R = te.compute((rows, COLS), lambda i, j: b.build(tree, [i], [j]), name="R")
    fn, fc = te.build(R, inputs=[X, Y, I], backend="numpy"), te.build(R, inputs=[X, Y, I])
    rng = np.random.default_rng(seed)
    den = 2 if dtype.startswith("float") else 1
    for n in (range(1, 5) if symbolic_rows else [ROWS]):
        x = (rng.integers(-6, 7, (n, COLS)) / den).astype(NP[dtype])
        y = (rng.integers(-6, 7, COLS) / den).astype(NP[dtype])
        ids = rng.integers(0, COLS, n).astype(np.int32)
        # float32 math functions may differ from numpy's in the last bits
        assert_same(fc(x, y, ids), fn(x, y, ids), rtol=1e-5 if dtype == "float32" else 1e-9)


_SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


@settings(max_examples=40, **_SETTINGS)
@given(st.data())
def test_random_float64_programs(data):
    tree, _ = data.draw(recipe(3, 1, 1, "float64"))
    _check(tree, "float64", data.draw(st.integers(0, 99)))


@settings(max_examples=20, **_SETTINGS)
@given(st.data())
def test_random_float32_programs(data):
    tree, _ = data.draw(recipe(3, 1, 1, "float32"))
    _check(tree, "float32", data.draw(st.integers(0, 99)))


@settings(max_examples=20, **_SETTINGS)
@given(st.data())
def test_random_programs_with_a_symbolic_size(data):
    tree, _ = data.draw(recipe(3, 1, 1, "float64"))
    _check(tree, "float64", data.draw(st.integers(0, 99)), symbolic_rows=True)


@settings(max_examples=20, **_SETTINGS)
@given(st.data())
def test_random_int64_programs(data):
    tree, _ = data.draw(recipe(3, 1, 1, "int64"))
    _check(tree, "int64", data.draw(st.integers(0, 99)))


def test_a_recipe_exercises_nested_reductions_and_where():
    # one fixed deep program, so the interesting features are always covered
    tree = ("reduce", "sum", True, "parity", 0,
            ("bin", "mul", ("reduce", "max", False, "mod_data", 0, ("read", 1, 1)),
             ("select", ("read", 0, 0), ("const", 0.5), ("guarded", 1, -1, 0, 1.0),
              ("shiftsum", "min", 1, 0, 1))))
    _check(tree, "float64", 0)
    with pytest.raises(AssertionError):  # the comparison is not vacuous
        assert_same(np.zeros(2), np.ones(2))

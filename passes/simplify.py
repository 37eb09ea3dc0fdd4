"""Algebraic clean-up of scalar expressions: constant folding and identities.

Rules are local and exact for integers; for floats ``x * 0 -> 0`` and
``x - x``-style cancellations assume finite ``x``, the usual convention of
automatic differentiation (a gradient term multiplied by an exact zero
contributes nothing).
"""
from __future__ import annotations

import numpy as np

from tensorexpr.ir import Binary, Cast, Const, Expr, Reduce, Select, Unary, is_float, same
from tensorexpr.transform import bottom_up

_NP = {"bool": np.bool_, "int32": np.int32, "int64": np.int64,
       "float32": np.float32, "float64": np.float64}


def _c(v, dtype: str) -> Const:
    if dtype == "bool":
        return Const(bool(v), dtype)
    if is_float(dtype):
        return Const(float(_NP[dtype](v)), dtype)
    return Const(int(v), dtype)


def _is(e: Expr, v) -> bool:
    return isinstance(e, Const) and e.dtype != "bool" and e.value == v


def _fold_binary(op: str, x, y, dtype: str):
    from tensorexpr.transform import eval_int
    if is_float(dtype) or (op in ("lt", "le", "eq", "ne", "gt", "ge") and isinstance(x, float)):
        with np.errstate(all="ignore"):
            a, b = _NP["float64"](x), _NP["float64"](y)
            r = {"add": a + b, "sub": a - b, "mul": a * b, "div": a / b if b else None,
                 "max": max(a, b), "min": min(a, b), "pow": a ** b,
                 "lt": a < b, "le": a <= b, "eq": a == b, "ne": a != b, "gt": a > b,
                 "ge": a >= b}.get(op)
        return r
    return eval_int(Binary(op, Const(x, dtype), Const(y, dtype), dtype))


def simplify(e: Expr) -> Expr:
    """``e`` with constants folded and trivial operations removed.

    >>> import tensorexpr as te
    >>> from tensorexpr.ir import Axis, Const
    >>> i = Axis("i", Const(0, "int64"), Const(4, "int64"), 1)
    >>> simplify((i + 0) * 1)
    i
    >>> X = te.placeholder((4,), name="x")
    >>> print(simplify(2.0 * X[i] ** 1.0))
    (2.0 * x[i])
    """
    return bottom_up(e, _rule)


def simplify_each(exprs) -> list:
    """:func:`simplify` of each of ``exprs``, a node they share simplified once for all
    (and shared by the results): the partials of one body are such a family.

    >>> import tensorexpr as te
    >>> X = te.placeholder((4,), name="x")
    >>> a, b = simplify_each([X[0] * 1.0, (X[0] * 1.0) + 0.0])
    >>> print(a, b)
    x[0] x[0]
    """
    memo: dict = {}
    exprs = list(exprs)  # alive until the end: no id in memo is reused
    return [bottom_up(e, _rule, memo=memo) for e in exprs]


def _rule(e: Expr) -> Expr:
    match e:
        case Binary(op, Const(x, _), Const(y, _), dt) if op not in ("and", "or"):
            r = _fold_binary(op, x, y, e.a.dtype if dt == "bool" else dt)
            return e if r is None else _c(r, dt)
        case Binary("add", a, b, _):
            if _is(b, 0):
                return a
            if _is(a, 0):
                return b
            if hash(a) == hash(b) and same(a, b):
                return _rule(Binary("mul", _c(2, e.dtype), a, e.dtype))
            if isinstance(b, Unary) and b.op == "neg":
                return Binary("sub", a, b.a, e.dtype)
        case Binary("sub", a, b, _):
            if _is(b, 0):
                return a
            if _is(a, 0):
                return Unary("neg", b, e.dtype)
            if isinstance(b, Unary) and b.op == "neg":
                return Binary("add", a, b.a, e.dtype)
        case Binary("mul", a, b, _):
            if _is(a, 0) or _is(b, 0):
                return _c(0, e.dtype)
            if _is(b, 1):
                return a
            if _is(a, 1):
                return b
            if _is(a, -1):
                return _rule(Unary("neg", b, e.dtype))
            if _is(b, -1):
                return _rule(Unary("neg", a, e.dtype))
            if isinstance(a, Unary) and a.op == "neg" and isinstance(b, Unary) and b.op == "neg":
                return Binary("mul", a.a, b.a, e.dtype)
        case Binary("div", a, b, _):
            if _is(b, 1):
                return a
        case Binary("pow", a, b, _):
            # exact for every value, NaN and infinities included (C pow and numpy agree)
            if _is(b, 1):
                return a
            if _is(b, 0):
                return _c(1, e.dtype)
        case Binary("and", a, b, _):
            if isinstance(a, Const):
                return b if a.value else a
            if isinstance(b, Const):
                return a if b.value else b
        case Binary("or", a, b, _):
            if isinstance(a, Const):
                return a if a.value else b
            if isinstance(b, Const):
                return b if b.value else a
        case Unary("neg", Const(v, dt), _) if dt != "bool":
            return _c(-v, dt)
        case Unary("neg", Unary("neg", a, _), _):
            return a
        case Unary("not", Const(v, _), _):
            return Const(not v, "bool")
        case Cast(Const(v, _), dt):
            return _c(v, dt) if not (isinstance(v, float) and not np.isfinite(v) and not is_float(dt)) else e
        case Select(Const(v, "bool"), a, b, _):
            return a if v else b
        case Select(_, a, b, _) if _is(a, 0) and _is(b, 0):
            return a
        case Reduce("sum", body, _, _, dt) if _is(body, 0):
            return _c(0, dt)
        case Reduce(op, _, _, Const(False, "bool"), dt) if op == "sum" or is_float(dt):
            # no point: the identity (a piece of a gradient where another piece's sum is)
            return _c(0 if op == "sum" else (-np.inf if op == "max" else np.inf), dt)
        case Reduce(op, body, axes, Const(True, "bool"), dt):
            return Reduce(op, body, axes, None, dt)
    return e

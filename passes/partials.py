"""Local linearisation: the partial derivative of a scalar body w.r.t. each read in it.

``read_partials(body)`` walks ``body`` in reverse mode and returns, for every
read of a floating-point tensor, the factor by which an incoming adjoint is
multiplied on its way to that read, and the ``select`` conditions under which
the read was taken. The untaken branch of a select never contributes: its
condition becomes a guard of the contribution (a domain, not a multiplication
by a 0/1 mask), so a NaN or inf in the untaken branch cannot leak in.
Integer and boolean values carry no gradient.

Tie rule for ``maximum``/``minimum``: where both operands are equal each gets
half of the adjoint (the average of the two one-sided derivatives).
"""
from __future__ import annotations

from typing import List, NamedTuple, Tuple

from tensorexpr import api
from tensorexpr.ir import Binary, Cast, Const, Expr, Read, Reduce, Select, Unary, is_float

from .simplify import simplify


class Site(NamedTuple):
    """One read of a tensor inside a body: contribution = adjoint * factor, under guards."""

    read: Read
    factor: Expr
    guards: Tuple[Expr, ...]
    axes: Tuple = ()  # reduction axes bound around the read (an inline sum)


def _one(dtype: str) -> Const:
    return api.const(1.0, dtype)


def read_partials(body: Expr) -> List[Site]:
    """Reverse-mode partials of ``body`` w.r.t. every float read (reductions excluded).

    >>> import tensorexpr as te
    >>> X = te.placeholder((4,), name="X")
    >>> from tensorexpr.ir import Axis, Const
    >>> i = Axis("i", Const(0, "int64"), Const(4, "int64"), 1)
    >>> [str(s.factor) for s in read_partials(X[i] * X[i])]
    ['X[i]', 'X[i]']
    """
    out: List[Site] = []
    if is_float(body.dtype):
        _back(body, _one(body.dtype), (), out)
    return [Site(s.read, simplify(s.factor), s.guards, s.axes) for s in out]


def _back(e: Expr, adj: Expr, guards: tuple, out: list, axes: tuple = ()) -> None:
    """Push ``adj`` (the adjoint of ``e``) down to the reads in ``e``.

    ``axes`` are the reduction axes bound around ``e`` (non-empty only inside an
    inline sum); every call below passes them on.
    """
    if not is_float(e.dtype):
        return
    m = api._binary
    match e:
        case Read():
            out.append(Site(e, adj, guards, axes))
        case Binary("add", a, b, _):
            _back(a, adj, guards, out, axes)
            _back(b, adj, guards, out, axes)
        case Binary("sub", a, b, _):
            _back(a, adj, guards, out, axes)
            _back(b, -adj, guards, out, axes)
        case Binary("mul", a, b, _):
            _back(a, m("mul", adj, b), guards, out, axes)
            _back(b, m("mul", adj, a), guards, out, axes)
        case Binary("div", a, b, _):
            _back(a, m("div", adj, b), guards, out, axes)
            _back(b, -m("div", m("mul", adj, e), b), guards, out, axes)
        case Binary("pow", a, b, _):
            if isinstance(b, Const):
                _back(a, m("mul", adj, m("mul", b, m("pow", a, b.value - 1))), guards, out, axes)
            else:
                _back(a, m("mul", adj, m("mul", b, m("pow", a, m("sub", b, 1)))), guards, out, axes)
                _back(b, m("mul", adj, m("mul", e, api.log(a))), guards, out, axes)
        case Binary("max" | "min", a, b, _):
            win = m("gt", a, b) if e.op == "max" else m("lt", a, b)
            lose = m("lt", a, b) if e.op == "max" else m("gt", a, b)
            half = m("mul", adj, 0.5)
            share_a = api.select(win, adj, api.select(lose, 0.0, half))
            share_b = api.select(lose, adj, api.select(win, 0.0, half))
            _back(a, share_a, guards, out, axes)
            _back(b, share_b, guards, out, axes)
        case Binary("mod", a, b, _):
            # a - b * (a // b), a // b locally constant; not floor(a / b), which rounds
            # up at 1.0 % 0.1 (10, where a // b is 9)
            _back(a, adj, guards, out, axes)
            _back(b, -m("mul", adj, m("floordiv", a, b)), guards, out, axes)
        case Binary():
            return  # floordiv is piecewise constant; comparisons/logic are not floats
        case Unary("stop_gradient"):
            return  # a constant to differentiation: nothing reaches the reads inside
        case Unary("neg", a, _):
            _back(a, -adj, guards, out, axes)
        case Unary("exp", a, _):
            _back(a, m("mul", adj, e), guards, out, axes)
        case Unary("log", a, _):
            _back(a, m("div", adj, a), guards, out, axes)
        case Unary("sqrt", a, _):
            _back(a, m("div", m("mul", adj, 0.5), e), guards, out, axes)
        case Unary("tanh", a, _):
            _back(a, m("mul", adj, m("sub", 1.0, m("mul", e, e))), guards, out, axes)
        case Unary("sigmoid", a, _):
            _back(a, m("mul", adj, m("mul", e, m("sub", 1.0, e))), guards, out, axes)
        case Unary("sin", a, _):
            _back(a, m("mul", adj, api.cos(a)), guards, out, axes)
        case Unary("cos", a, _):
            _back(a, -m("mul", adj, api.sin(a)), guards, out, axes)
        case Unary("abs", a, _):
            sign = api.select(m("gt", a, 0.0), 1.0, api.select(m("lt", a, 0.0), -1.0, 0.0))
            _back(a, m("mul", adj, sign), guards, out, axes)
        case Unary():
            return  # floor, ceil: zero almost everywhere
        case Cast(a, _):
            if is_float(a.dtype):
                _back(a, api.cast(adj, a.dtype), guards, out, axes)
        case Select(c, a, b, _):
            _back(a, adj, guards + (c,), out, axes)
            _back(b, adj, guards + (api._unary("not", c),), out, axes)
        case Reduce("sum", body, raxes, where, _):
            # Only left inline where extraction is impossible (a recurrence's sum
            # over its own earlier values): the read's domain grows by the axes.
            inner = axes + tuple(raxes)
            _back(body, adj, guards if where is None else guards + (where,), out, inner)
        case Reduce(op=op):
            from tensorexpr.errors import TensorExprError
            raise TensorExprError(
                f"cannot differentiate a {op} reduction over a recurrence's own earlier "
                f"values; compute it as a sum, or restructure the recurrence")

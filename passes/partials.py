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

import math
from typing import List, NamedTuple, Tuple

from tensorexpr import api
from tensorexpr.ir import (Binary, Cast, Const, Expr, Read, Reduce, Select, Unary, binary, is_float,
                           unary)

from .simplify import simplify


class Site(NamedTuple):
    """One read of a tensor inside a body: contribution = adjoint * factor, under guards."""

    read: Read
    factor: Expr
    guards: Tuple[Expr, ...]
    axes: Tuple = ()  # reduction axes bound around the read (an inline sum)


def _one(dtype: str) -> Const:
    return api.const(1.0, dtype)


def read_partials(body: Expr, owner=None) -> List[Site]:
    """Reverse-mode partials of ``body`` w.r.t. every float read (reductions excluded).

    ``owner`` is the tensor ``body`` defines: errors name it and its source line.

    >>> import tensorexpr as te
    >>> X = te.placeholder((4,), name="X")
    >>> from tensorexpr.ir import Axis, Const
    >>> i = Axis("i", Const(0, "int64"), Const(4, "int64"), 1)
    >>> [str(s.factor) for s in read_partials(X[i] * X[i])]
    ['X[i]', 'X[i]']
    """
    out: List[Site] = []
    if is_float(body.dtype):
        _back(body, _one(body.dtype), out, owner)
    return [Site(s.read, simplify(s.factor), s.guards, s.axes) for s in out]


def _back(root: Expr, adj: Expr, out: list, owner=None) -> None:
    """Push ``adj`` (the adjoint of ``root``) down to the reads in ``root``.

    ``root`` is a DAG: a sub-expression shared by several parents (``x`` in
    ``tanh(x) * 0.5 + x``) receives the sum of their contributions and passes it
    on once, so the work and the partials grow with the DAG, not with its
    (possibly exponential) tree. A node is keyed with the select conditions and
    reduction axes around it: under other guards it is another contribution.
    Nodes are visited parents first (reverse post-order, with an explicit stack);
    on a tree this is the pre-order, so the sites come in reading order. A read
    gets one site per contribution.
    """
    rules: dict = {}

    def rules_of(e: Expr) -> list:
        if id(e) not in rules:
            rules[id(e)] = _rules(e, owner) if is_float(e.dtype) else []
        return rules[id(e)]

    def key(e, guards, axes):
        return (id(e), tuple(id(g) for g in guards), tuple(a.uid for a in axes))

    # Discover the (node, guards, axes) keys and order them parents first.
    where = {}
    post = []
    stack = [((root, (), ()), False)]
    while stack:
        (e, guards, axes), expanded = stack.pop()
        k = key(e, guards, axes)
        if expanded:
            post.append(k)
            continue
        if k in where:
            continue
        where[k] = (e, guards, axes)
        stack.append(((e, guards, axes), True))
        if not isinstance(e, Read):
            for child, _, g, ax in rules_of(e):
                stack.append(((child, guards + g, axes + ax), False))
    pending = {key(root, (), ()): [adj]}
    for k in reversed(post):
        e, guards, axes = where[k]
        contribs = pending.pop(k, [])
        if isinstance(e, Read):
            if is_float(e.dtype):
                out.extend(Site(e, c, guards, axes) for c in contribs)
            continue
        if not contribs:
            continue
        total = contribs[0]
        for c in contribs[1:]:
            total = binary("add", total, c)
        for child, fn, g, ax in rules_of(e):
            pending.setdefault(key(child, guards + g, axes + ax), []).append(fn(total))


def _rules(e: Expr, owner=None) -> list:
    """``(child, adjoint -> child's contribution, added guards, added axes)`` for the
    float children of ``e`` through which an adjoint flows."""
    m = binary
    match e:
        case Binary("add", a, b, _):
            return [(a, lambda adj: adj, (), ()), (b, lambda adj: adj, (), ())]
        case Binary("sub", a, b, _):
            return [(a, lambda adj: adj, (), ()), (b, lambda adj: -adj, (), ())]
        case Binary("mul", a, b, _):
            return [(a, lambda adj: m("mul", adj, b), (), ()),
                    (b, lambda adj: m("mul", adj, a), (), ())]
        case Binary("div", a, b, _):
            # the divisor's partial times 1 / b, not divided by b: a divisor shared by a
            # sum's points (a normalization's per-channel sqrt(var + eps)) then has its
            # reciprocal hoisted out of the sum (passes.hoist), one division per channel
            # instead of one per element (batch norm's dvar divided each point three
            # times: 0.20 ms against PyTorch's 0.12, 0.15 so); one more rounding
            return [(a, lambda adj: m("div", adj, b), (), ()),
                    (b, lambda adj: -m("mul", m("mul", adj, e), m("div", 1.0, b)), (), ())]
        case Binary("pow", a, b, _):
            if isinstance(b, Const):
                return [(a, lambda adj: m("mul", adj, m("mul", b, m("pow", a, b.value - 1))),
                         (), ())]
            # Where a formula is 0 * inf the function is locally constant: a ** 0 is 1 for
            # every a (b * a ** (b - 1) is 0 * inf at a = 0), and 0 ** b is 0 for every
            # b > 0 (a ** b * log(a) is 0 * -inf): their slopes are 0, as in torch and jax
            # (a GeM pooling's relu(x) ** p would otherwise send NaN to p from every x <= 0)
            flat_in_a = m("eq", b, 0.0)
            flat_in_b = m("and", m("eq", a, 0.0), m("ge", b, 0.0))
            return [(a, lambda adj: api.select(flat_in_a, 0.0, m("mul", adj, m("mul", b, m(
                        "pow", a, m("sub", b, 1))))), (), ()),
                    (b, lambda adj: api.select(flat_in_b, 0.0, m("mul", adj, m(
                        "mul", e, api.log(a)))), (), ())]
        case Binary("max" | "min", a, b, _):
            win = m("gt", a, b) if e.op == "max" else m("lt", a, b)
            lose = m("lt", a, b) if e.op == "max" else m("gt", a, b)

            # the adjoint once, scaled by 1 (exact, NaN and inf kept), 0.5 or nothing:
            # written in two branches, nested maxima copied it 2**depth times (their
            # second-order gradients: megabytes of C, MemoryError)
            def share(first, second):
                return lambda adj: api.select(second, 0.0, m("mul", adj, api.select(
                    first, 1.0, 0.5)))
            return [(a, share(win, lose), (), ()), (b, share(lose, win), (), ())]
        case Binary("mod", a, b, _):
            # a - b * (a // b), a // b locally constant; not floor(a / b), which rounds
            # up at 1.0 % 0.1 (10, where a // b is 9)
            return [(a, lambda adj: adj, (), ()),
                    (b, lambda adj: -m("mul", adj, m("floordiv", a, b)), (), ())]
        case Binary():
            return []  # floordiv is piecewise constant; comparisons/logic are not floats
        case Unary("stop_gradient"):
            return []  # a constant to differentiation: nothing reaches the reads inside
        case Unary("neg", a, _):
            return [(a, lambda adj: -adj, (), ())]
        case Unary("exp", a, _):
            return [(a, lambda adj: m("mul", adj, e), (), ())]
        case Unary("log", a, _):
            return [(a, lambda adj: m("div", adj, a), (), ())]
        case Unary("sqrt", a, _):
            # (0.5 / sqrt(a): a factor hoisted where a is invariant, as for a divisor)
            return [(a, lambda adj: m("mul", adj, m("div", 0.5, e)), (), ())]
        case Unary("tanh", a, _):
            return [(a, lambda adj: m("mul", adj, m("sub", 1.0, m("mul", e, e))), (), ())]
        case Unary("sigmoid", a, _):
            return [(a, lambda adj: m("mul", adj, m("mul", e, m("sub", 1.0, e))), (), ())]
        case Unary("sin", a, _):
            return [(a, lambda adj: m("mul", adj, api.cos(a)), (), ())]
        case Unary("erf", a, _):
            slope = m("mul", 2.0 / math.sqrt(math.pi), api.exp(-m("mul", a, a)))
            return [(a, lambda adj: m("mul", adj, slope), (), ())]
        case Unary("cos", a, _):
            return [(a, lambda adj: -m("mul", adj, api.sin(a)), (), ())]
        case Unary("abs", a, _):
            sign = api.select(m("gt", a, 0.0), 1.0, api.select(m("lt", a, 0.0), -1.0, 0.0))
            return [(a, lambda adj: m("mul", adj, sign), (), ())]
        case Unary():
            return []  # floor, ceil: zero almost everywhere
        case Cast(a, _):
            return [(a, lambda adj: api.cast(adj, a.dtype), (), ())] if is_float(a.dtype) else []
        case Select(c, a, b, _):
            return [(a, lambda adj: adj, (c,), ()),
                    (b, lambda adj: adj, (unary("not", c),), ())]
        case Reduce("sum", body, raxes, where, _):
            # Only left inline where extraction is impossible (a recurrence's sum
            # over its own earlier values): the read's domain grows by the axes.
            return [(body, lambda adj: adj, () if where is None else (where,), tuple(raxes))]
        case Reduce(op=op, axes=raxes):
            # Extraction into a tensor of its own (how a max is differentiated) is
            # impossible when it reads the recurrence being defined.
            from tensorexpr.errors import TensorExprError, describe
            from tensorexpr.printer import expr_str
            what = describe(owner) if owner is not None else "a recurrence"
            text = expr_str(e)
            axes = raxes[0].name if len(raxes) == 1 else "[" + ", ".join(a.name for a in raxes) + "]"
            smooth = {"max": f"te.log(te.sum(te.exp(x), axis={axes}))",
                      "min": f"-te.log(te.sum(te.exp(-x), axis={axes}))"}.get(op, "a sum")
            raise TensorExprError(
                f"{what}: cannot differentiate the {op} reduction "
                f"{text if len(text) <= 120 else text[:117] + '...'} over the recurrence's "
                f"own earlier values. Write it with te.{op}imum of the individual reads "
                f"(a short axis), as the smooth {smooth}, or wrap it in "
                f"te.stop_gradient(...) if no gradient should flow through it")
    return []

"""Local linearisation: the partial derivative of a scalar body w.r.t. each read in it.

``read_partials(body)`` walks ``body`` in reverse mode and returns, for every
read of a floating-point tensor, the factor by which an incoming adjoint is
multiplied on its way to that read, and the ``select`` conditions under which
the read was taken. The untaken branch of a select never contributes: its
condition becomes a guard of the contribution (a domain, not a multiplication
by a 0/1 mask), so a NaN or inf in the untaken branch cannot leak in.
Integer and boolean values carry no gradient.

Tie rule for ``maximum``/``minimum``: where both operands are equal each gets
half of the adjoint (the average of the two one-sided derivatives); where either is
NaN (so is the result) neither gets any, as ``jnp.maximum`` and as a ``te.max``
reduction's row holding a NaN.
"""
from __future__ import annotations

import math
from typing import List, NamedTuple, Optional, Tuple

from tensorexpr import api
from tensorexpr.ir import (Binary, Cast, Const, Expr, Read, Reduce, Select, Unary, binary, is_float,
                           unary)

from .simplify import simplify_each


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
    factors = simplify_each(s.factor for s in out)
    return [Site(s.read, f, s.guards, s.axes) for s, f in zip(out, factors)]


def _back(root: Expr, adj: Expr, out: list, owner=None) -> None:
    """Push ``adj`` (the adjoint of ``root``) down to the reads in ``root``.

    ``root`` is a DAG: a sub-expression shared by several parents (``x`` in
    ``tanh(x) * 0.5 + x``) receives the sum of their contributions and passes it
    on once, so the work and the partials grow with the DAG, not with its
    (possibly exponential) tree. A node is keyed with the reduction axes around it
    (under other axes it is another contribution). Its guards are the select
    conditions common to every path reaching it (:func:`_common_guards`); a
    contribution arriving under more (``x`` in both branches of ``select(c, f(x),
    g(x))``) keeps them as a select around itself, ``select(c, from_f, from_g)``:
    a chain of such selects then has one adjoint per node, not one per path
    through it (2**depth). Nodes are visited parents first (reverse post-order,
    with an explicit stack); on a tree this is the pre-order, so the sites come in
    reading order. A read, a leaf, gets one site per contribution, under that
    contribution's own guards (a domain, not a multiplication by a 0/1 mask).
    """
    rules: dict = {}

    def rules_of(e: Expr) -> list:
        if id(e) not in rules:
            rules[id(e)] = _rules(e, owner) if is_float(e.dtype) else []
        return rules[id(e)]

    def key(e, axes):
        return (id(e), tuple(a.uid for a in axes))

    # Discover the (node, axes) keys and order them parents first.
    where = {}
    post = []
    stack = [((root, ()), False)]
    while stack:
        (e, axes), expanded = stack.pop()
        k = key(e, axes)
        if expanded:
            post.append(k)
            continue
        if k in where:
            continue
        where[k] = (e, axes)
        stack.append(((e, axes), True))
        if not isinstance(e, Read):
            for child, _, _, ax in rules_of(e):
                stack.append(((child, axes + ax), False))
    # (guards of the edge, contribution) per key, in arrival order
    pending = {key(root, ()): [((), adj)]}
    for k in reversed(post):
        e, axes = where[k]
        arrived = pending.pop(k, [])
        if isinstance(e, Read):
            if is_float(e.dtype):
                out.extend(Site(e, c, g, axes) for g, c in arrived)
            continue
        if not arrived:
            continue
        guards = _common_guards([g for g, _ in arrived])
        total = _guarded_sum([(g[len(guards):], c) for g, c in arrived])
        # Where no contribution arrives, the node is not evaluated by the forward
        # either (``v`` in ``select(i < n, v, 0) + select(c, v * v, 0)``, reading
        # ``Z[i]``): its own partials may read out of range there, so its children's
        # contributions are guarded by where some arrived.
        live = _reached([g[len(guards):] for g, _ in arrived])
        if live is not None:
            guards = guards + (live,)
        for child, fn, g, ax in rules_of(e):
            pending.setdefault(key(child, axes + ax), []).append((guards + g, fn(total)))


def _common_guards(paths: List[Tuple[Expr, ...]]) -> Tuple[Expr, ...]:
    """The longest common prefix (by node identity) of the guard tuples ``paths``.

    >>> from tensorexpr.ir import Const
    >>> a, b, c = Const(True, "bool"), Const(False, "bool"), Const(True, "bool")
    >>> _common_guards([(a, b), (a, c)]) == (a,)
    True
    """
    first = paths[0]
    n = len(first)
    for p in paths[1:]:
        n = min(n, len(p))
        for i in range(n):
            if p[i] is not first[i]:
                n = i
                break
    return first[:n]


def _guarded_sum(parts: List[Tuple[Tuple[Expr, ...], Expr]]) -> Expr:
    """The sum of the contributions ``parts``, each ``(guards, value)`` counting only
    where its guards hold: ``value`` itself when it has none, else inside selects (the
    untaken branch is not evaluated, so a NaN or inf there cannot leak in). Parts under
    one condition and under its ``not`` (a select's two branches) share one select,
    ``select(c, a, b)``.

    >>> import tensorexpr as te
    >>> from tensorexpr.ir import Const, unary
    >>> c = Const(True, "bool")
    >>> x, y = te.const(1.0, "float64"), te.const(2.0, "float64")
    >>> print(_guarded_sum([((c,), x), ((unary("not", c),), y)]))
    select(true, 1.0d, 2.0d)
    """
    total = None
    for v in [v for g, v in parts if not g]:
        total = v if total is None else binary("add", total, v)
    for c, _, pos, neg in _by_first_condition([(g, v) for g, v in parts if g]):
        dtype = (pos or neg)[0][1].dtype
        a = _guarded_sum(pos) if pos else api.const(0.0, dtype)
        b = _guarded_sum(neg) if neg else api.const(0.0, dtype)
        term = api.select(c, a, b)
        total = term if total is None else binary("add", total, term)
    return total


def _reached(paths: List[Tuple[Expr, ...]]) -> Optional[Expr]:
    """Where at least one of the guard tuples ``paths`` holds (each the conjunction of
    its conditions), or None where that is everywhere: some path has no guard, or
    the paths cover both branches of a select (``(c,)`` and ``(not c,)``), as those
    through a value both branches read.

    >>> import tensorexpr as te
    >>> from tensorexpr.ir import unary
    >>> X = te.placeholder((4,), name="X")
    >>> c, d = X[0] > 0.0, X[1] > 0.0
    >>> _reached([(c,), (unary("not", c),)]) is None
    True
    >>> print(_reached([(c,), (d, c)]))
    ((X[0] > 0.0) | ((X[1] > 0.0) & (X[0] > 0.0)))
    """
    if any(not p for p in paths):
        return None
    out = None
    for c, not_c, pos, neg in _by_first_condition([(p, None) for p in paths]):
        pos, neg = [r for r, _ in pos], [r for r, _ in neg]
        a = _reached(pos) if pos else api.const(False, "bool")
        b = _reached(neg) if neg else api.const(False, "bool")
        if a is None and b is None:
            return None  # both branches of a select: everywhere the paths meet
        parts = []
        if pos:
            parts.append(c if a is None else binary("and", c, a))
        if neg:
            n = not_c if not_c is not None else unary("not", c)
            parts.append(n if b is None else binary("and", n, b))
        for x in parts:
            out = x if out is None else binary("or", out, x)
    return out


def _by_first_condition(items: list) -> list:
    """``items`` (``(guards, payload)``, guards not empty) grouped by their first
    condition, a condition and its ``not`` in one group (a select's two branches), in
    order of appearance: ``[(c, the not of c met or None, [(rest, payload)] under c,
    [(rest, payload)] under not c)]``."""
    groups: dict = {}
    for g, v in items:
        c, taken = (g[0].a, False) if _is_not(g[0]) else (g[0], True)
        entry = groups.setdefault(id(c), [c, None, [], []])
        if not taken:
            entry[1] = g[0]
        entry[2 if taken else 3].append((g[1:], v))
    return list(groups.values())


def _is_not(c: Expr) -> bool:
    return isinstance(c, Unary) and c.op == "not"


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
            # a reaches the result where it wins or ties; a NaN operand makes the result
            # NaN, which neither operand equals, so neither gets anything (as jnp.maximum,
            # and as te.max's row holding a NaN): not a half each as at a tie
            wins_a, wins_b = ("gt", "lt") if e.op == "max" else ("lt", "gt")
            reach_a, reach_b = ("ge", "le") if e.op == "max" else ("le", "ge")

            # the adjoint once, scaled by 1 (exact, NaN and inf kept), 0.5 or nothing:
            # written in two branches, nested maxima copied it 2**depth times (their
            # second-order gradients: megabytes of C, MemoryError)
            def share(wins, reaches):
                return lambda adj: api.select(m(reaches, a, b), m("mul", adj, api.select(
                    m(wins, a, b), 1.0, 0.5)), 0.0)
            return [(a, share(wins_a, reach_a), (), ()), (b, share(wins_b, reach_b), (), ())]
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

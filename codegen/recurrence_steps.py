"""Recurrences whose step holds sums over the previous step (RNN, GRU, LSTM cells), by steps.

``h[t, b, j] = f(x[t, b, j], sum_k h[t-1, b, k] * W[k, j], ...)`` lowered point by
point computes every sum as a dot product down a column of ``W`` for each element
of each step: a strided, scalar loop, ``B*D`` of them per step. By steps instead,
each step first computes each such sum for all its positions at once, as a tensor
of its own over the step's other axes (and the costly factors of its terms that do
not use all of them once per position rather than once per column:
``passes.hoist``) (``S[b, j]``, a matrix product the strategy table lowers by row
tiles), then the rest of the body reads ``S`` elementwise.
Every element's sum still adds the same terms in the same order as the IR says.

:func:`plan` finds the sums: reductions of the body, outside any other, that read
the recurrence (so they depend on the step), guarded only by conditions on the
carried axis (``select(t == 0, 0.0, sum(...))``: the guard becomes part of the
sum's domain, a condition on the step alone). The step is a size variable of the
sums (``Plan.step``, the step plus one: isl takes size variables to be positive),
bound while they are lowered, so isl sees it as a parameter whose range the sums'
domains state.

>>> import tensorexpr as te
>>> W = te.placeholder((4, 4), name="W"); x = te.placeholder((5, 2, 4), name="x")
>>> k = te.reduce_axis(4, name="k")
>>> h = te.recurrence((5, 2, 4), lambda h, t, b, j: te.tanh(x[t, b, j] + te.select(
...     t == 0, 0.0, te.sum(h[t - 1, b, k] * W[k, j], axis=k))), name="h")
>>> p = plan(h)
>>> [s.name for s in p.sums], p.sums[0].shape
(['h_step0'], (2, 4))
>>> print(p.rest.body)
tanh(x[t, b, j] + select(t == 0, 0.0, h_step0[b, j]))
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Sequence, Tuple

from tensorexpr.ir import (Axis, Binary, Compute, Const, Expr, Read, Reduce, Select, SizeVar, Tensor,
                           Unary, children, fresh_uid, reads, same, walk)
from tensorexpr.transform import replace_subexpr, substitute
from passes.hoist import hoist

from .adjoint_sums import step_axes

I64 = "int64"


@dataclass(frozen=True)
class Plan:
    """How :func:`plan` runs the recurrence ``t`` by steps: the step's size variable,
    the per-step sums (tensors over ``t``'s other axes) and ``rest``, ``t`` reading
    them (same axes, carry and buffer as ``t``). ``axis``: the steps' axis (the carried
    one, or a step axis of a tensor that is no recurrence: :func:`plan_rows`)."""
    t: Compute
    step: str  # the size variable the sums read the step from: the step plus one
    sums: Tuple[Compute, ...]
    rest: Compute
    axis: int = 0


def _on_carry_only(c: Expr, carry: Axis) -> bool:
    """A condition on the carried axis and constants (sizes) alone."""
    return all(not isinstance(x, (Axis, Read, Reduce)) or (isinstance(x, Axis) and
               x.uid == carry.uid) for x in walk(c, unique=True))


def _sums(body: Expr, carry: Axis, self_uid: Optional[int]
          ) -> Optional[List[Tuple[Reduce, List[Expr]]]]:
    """The reductions of ``body`` that read the recurrence (``self_uid``; None: every
    reduction), outside any other, each with the conditions under which it is computed
    (its domain); None when one of them sits in the right operand of ``&``/``|``
    (evaluated under its left operand: kept point by point), or under a condition that
    is neither on the carried axis alone nor free of the axes it uses.

    A condition on axes the sum does not use (besides the step) is dropped: its value
    is the same wherever it is computed (an LSTM's cell state, read by both parts of
    the step's state: ``select(w == 0, c, o * tanh(c))``). A sum reached by several
    paths (a shared, let-bound value) is computed at the steps of any of them."""
    paths: Dict[int, Tuple[Reduce, List[List[Expr]]]] = {}
    stack: List[Tuple[Expr, List[Expr]]] = [(body, [])]
    seen = set()
    nots: Dict[int, Expr] = {}  # one negation per condition: paths are keyed by identity
    while stack:
        e, guards = stack.pop()
        key = (id(e), tuple(id(g) for g in guards))
        if key in seen:
            continue
        seen.add(key)
        if isinstance(e, Reduce):
            if self_uid is None or any(r.tensor.uid == self_uid for r in reads(e)):
                paths.setdefault(id(e), (e, []))[1].append(guards)
            continue
        if isinstance(e, Select):
            stack.append((e.cond, guards))
            stack.append((e.a, guards + [e.cond]))
            neg = nots.setdefault(id(e), Unary("not", e.cond, "bool"))
            stack.append((e.b, guards + [neg]))
        elif isinstance(e, Binary):
            if e.op in ("and", "or") and any(isinstance(x, Reduce) for x in walk(e.b)):
                return None
            stack.extend([(e.a, guards), (e.b, guards)])
        elif isinstance(e, Unary):
            stack.append((e.a, guards))
        elif isinstance(e, Read):
            stack.extend((i, guards) for i in e.indices)
        else:
            stack.extend((c, guards) for c in children(e))
    found: List[Tuple[Reduce, List[Expr]]] = []
    for r, ways in paths.values():
        used = _axes_of(r) - {carry.uid}
        kept = []  # each path's conditions on the step
        for w in ways:
            if any(any(isinstance(x, (Read, Reduce)) or (isinstance(x, Axis) and x.uid in used)
                       for x in walk(g, unique=True)) for g in w if not _on_carry_only(g, carry)):
                return None
            kept.append([g for g in w if _on_carry_only(g, carry)])
        if all(same(tuple(k), tuple(kept[0])) for k in kept):
            found.append((r, kept[0]))
            continue
        if any(not k for k in kept):  # a path without one: every step
            found.append((r, []))
            continue
        # (the steps of any path)
        either = None
        for k in kept:
            both = k[0]
            for g in k[1:]:
                both = Binary("and", both, g, "bool")
            either = both if either is None else Binary("or", either, both, "bool")
        found.append((r, [either]))
    # one tensor per distinct sum (a sum used twice is computed once)
    unique: List[Tuple[Reduce, List[Expr]]] = []
    for r, g in found:
        if not any(r is u for u, _ in unique):
            unique.append((r, g))
    return unique


def _axes_of(r: Reduce) -> set:
    """uids of the axes ``r`` depends on (its body, domain and bounds)."""
    return {x.uid for x in walk(r, unique=True) if isinstance(x, Axis)}


def plan(t: Compute) -> Optional[Plan]:
    """The by-steps form of the recurrence ``t`` (see the module docstring), or None when
    its body has no sum over earlier steps of its own, or one under a condition on
    more than the carried axis.
    """
    if t.carry is None or t.self_ref is None or t.body is None:
        return None
    return _by_steps(t, t.carry.axis, t.self_ref.uid)


def plan_rows(t: Compute, axis: int) -> Optional[Plan]:
    """The by-steps form of ``t`` (no recurrence) along its step axis ``axis``: every
    sum of its body, outside any other, a tensor of one step; None when it has none,
    or one under a condition on more than ``axis``. A checkpointed gradient computes
    such a tensor a step (a row) at a time, and so does every build of its program
    (``rewrite_rows``): each step is then the same C in both.

    >>> import tensorexpr as te
    >>> h = te.placeholder((5, 2, 4), name="h"); U = te.placeholder((4, 4), name="U")
    >>> k = te.reduce_axis(4, name="k")
    >>> s = te.compute((5, 2, 4), lambda t, b, j: te.sum(h[t, b, k] * U[k, j], axis=k),
    ...                name="s")
    >>> p = plan_rows(s, 0)
    >>> [x.name for x in p.sums], p.sums[0].shape, p.axis
    (['s_step0'], (2, 4), 0)
    """
    if t.carry is not None or t.body is None:
        return None
    return _by_steps(t, axis, None)


def _by_steps(t: Compute, axis: int, self_uid: Optional[int]) -> Optional[Plan]:
    carry = t.axes[axis]
    found = _sums(t.body, carry, self_uid)
    if not found:
        return None
    step = f"{t.name}__step"  # deterministic: it is printed in the C comments
    # isl takes a size variable to be >= 1: the variable is the step plus one
    sv = Binary("sub", SizeVar(step, I64), Const(1, I64), I64)
    others = [a for k, a in enumerate(t.axes) if k != axis]
    sums: List[Compute] = []
    rest = t.body
    for n, (r, guards) in enumerate(found):
        # over the axes it uses: an LSTM's gate sums are one per unit, not one per
        # unit and part of the state
        used = _axes_of(r)
        mine = [a for a in others if a.uid in used]
        fresh = [Axis(a.name, a.lo, a.hi, fresh_uid()) for a in mine]
        mapping: Dict[Expr, Expr] = {carry: sv}
        mapping.update({a: f for a, f in zip(mine, fresh)})
        # the step's range and the guards become the sum's domain: conditions on the
        # step alone, so the sum is the identity (and reads nothing) where the body
        # would not evaluate it
        inside = [Binary("ge", sv, carry.lo, "bool"), Binary("lt", sv, carry.hi, "bool")]
        conds = inside + [substitute(g, {carry: sv}) for g in guards]
        where = conds[0]
        for c in conds[1:] + ([substitute(r.where, mapping)] if r.where is not None else []):
            where = Binary("and", where, c, "bool")
        moved = substitute(r, mapping)
        body = Reduce(moved.op, moved.body, moved.axes, where, moved.dtype)
        s = Compute(f"{t.name}_step{n}", tuple(a.hi for a in mine), r.dtype, fresh_uid(),
                    t.origin, axes=tuple(fresh), body=body)
        # costly factors of its terms that do not use an output axis (a function of the
        # previous step's state, tanh(h[t - 1, b, k]) * W[k, j]) are computed once per
        # step and position, not once per column: tensors of the step of their own
        s, factors = hoist(s)
        sums += factors + [s]
        rest = replace_subexpr(rest, r, Read(s, tuple(mine), r.dtype))
    return Plan(t, step, tuple(sums), replace(t, uid=fresh_uid(), body=rest), axis)


def rewrite(computed: Sequence[Tensor], options) -> Tuple[List[Tuple[Tensor, str]],
                                                          Dict[int, Plan]]:
    """The program rewrite: ``(scratch, plans)``: the per-step sums of every recurrence
    :func:`plan` runs by steps (scratch tensors of the program: one step's worth each),
    and its plan by uid; none for a recurrence ``options`` force to another strategy.

    >>> import tensorexpr as te
    >>> from codegen.schedule import DEFAULT
    >>> W = te.placeholder((4, 4), name="W"); x = te.placeholder((5, 2, 4), name="x")
    >>> k = te.reduce_axis(4, name="k")
    >>> h = te.recurrence((5, 2, 4), lambda h, t, b, j: x[t, b, j] + te.select(
    ...     t == 0, 0.0, te.sum(h[t - 1, b, k] * W[k, j], axis=k)), name="h")
    >>> scratch, plans = rewrite([h], DEFAULT)
    >>> [note for _, note in scratch]
    ['h_step0 (scratch: the sum of one step of h)']
    """
    scratch: List[Tuple[Tensor, str]] = []
    plans: Dict[int, Plan] = {}
    for t in computed:
        if not isinstance(t, Compute) or options.forced(t.name) not in (None, "steps"):
            continue
        p = plan(t)
        if p is None:
            continue
        plans[t.uid] = p
        scratch += [(s, f"{s.name} (scratch: the sum of one step of {t.name})") for s in p.sums]
    return scratch, plans


def rewrite_rows(computed: Sequence[Tensor], options, taken=()) -> Tuple[
        List[Tuple[Tensor, str]], Dict[int, Plan]]:
    """``(scratch, plans)`` as :func:`rewrite`, for the tensors (no recurrences) holding
    sums that run along the steps of a checkpointed recurrence's gradient (step axes as
    ``codegen.adjoint_sums.step_axes`` finds them, forward steps included): a
    checkpointed gradient computes them a step at a time (``codegen.checkpoint``), so
    every build of such a program does, each step lowered as in the other. None in a
    program without one, for the tensors of ``taken`` (uids: sums added a step at a
    time) and for those ``options`` force to another strategy.

    >>> from codegen.schedule import DEFAULT
    >>> rewrite_rows([], DEFAULT)
    ([], {})
    """
    # only where a checkpointed recurrence has an adjoint (elsewhere nothing runs a
    # step at a time, and one sum over all steps is faster)
    recurrences = [t for t in computed if isinstance(t, Compute) and t.carry is not None]
    if not (any(t.checkpoints is not None and t.carry.step > 0 for t in recurrences)
            and any(t.carry.step < 0 for t in recurrences)):
        return [], {}
    axes = step_axes(computed, forward=True)
    scratch: List[Tuple[Tensor, str]] = []
    plans: Dict[int, Plan] = {}
    for t in computed:
        if (not isinstance(t, Compute) or t.carry is not None or t.uid not in axes
                or t.uid in taken or options.forced(t.name) not in (None, "step-rows")):
            continue
        p = plan_rows(t, axes[t.uid])
        if p is None:
            continue
        plans[t.uid] = p
        scratch += [(s, f"{s.name} (scratch: the sum of one step of {t.name})") for s in p.sums]
    return scratch, plans

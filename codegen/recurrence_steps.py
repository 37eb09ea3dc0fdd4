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
the recurrence (so they depend on the step), under conditions that read no value
(``select(t == 0, 0.0, sum(...))``: the guard becomes part of the sum's domain, a
condition on the step). Each sum is a tensor over the axes it uses; conditions on
other axes (an LSTM's ``select(w == 0, c, o * tanh(c))``) are projected onto them
exactly (``polyhedral.seen_from``), and a sum reached by several paths is computed
wherever any of them evaluates it. :func:`plan_rows` does the same for a tensor that
is no recurrence, along a step axis (a checkpointed gradient runs it a step at a time). The step is a size variable of the
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
                           Unary, children, fresh_uid, is_float, reads, same, walk)
from tensorexpr.polyhedral import conjuncts, seen_from
from tensorexpr.transform import free_axes, replace_subexpr, substitute
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


def _plain(c: Expr) -> bool:
    """A condition on axes and constants (sizes) alone: no value read."""
    return not any(isinstance(x, (Read, Reduce)) for x in walk(c, unique=True))


def _sums(body: Expr, self_uid: Optional[int]
          ) -> Optional[List[Tuple[Reduce, List[List[Expr]]]]]:
    """The reductions of ``body`` that read the recurrence (``self_uid``; None: every
    reduction), outside any other,
    each with the conditions under which each of its occurrences is evaluated (a sum
    shared by two branches, an LSTM's cell state ``c`` in both parts of its state,
    has two); None when one of them sits under a condition that reads values, or in
    the right operand of ``&``/``|`` (evaluated under its left operand: kept point by
    point)."""
    found: Dict[int, Tuple[Reduce, List[List[Expr]]]] = {}
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
                if not all(_plain(g) for g in guards):
                    return None
                found.setdefault(id(e), (e, []))[1].append(guards)
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
    # one tensor per distinct sum (a sum used twice is computed once)
    return list(found.values())


def _domain(occurrences: List[List[Expr]], keep: List[Axis]) -> Optional[List[Expr]]:
    """The conditions under which a per-step sum over the axes ``keep`` (the carried
    axis and the axes it uses) is evaluated: those every occurrence shares and that use
    only ``keep`` as written; the rest (a condition on a part of the state the sum does
    not depend on: ``w == 0``, or different conditions per occurrence) projected
    exactly onto ``keep`` by isl, so that the sum is computed once per point of its
    own axes wherever some occurrence evaluates it. None when that projection is not
    exact (a condition isl cannot represent)."""
    common = [g for g in occurrences[0] if all(any(same(g, h) for h in o) for o in occurrences)]
    rest = [[g for g in o if not any(same(g, c) for c in common)] for o in occurrences]
    if all(rest):  # else some occurrence needs no more than the common conditions
        either = _all(rest[0])
        for o in rest[1:]:
            either = Binary("or", either, _all(o), "bool")
        common.append(either)
    return seen_from(common, keep)


def _all(conds: Sequence[Expr]) -> Expr:
    out = conds[0]
    for c in conds[1:]:
        out = Binary("and", out, c, "bool")
    return out


def _lift(r: Reduce, carry: Axis) -> Tuple[Reduce, List[Expr]]:
    """``r`` without the conjuncts of its where that use none of its axes but some axis
    of the step (not the carried one: those stay conditions of the step's sum) and
    read no value, and those conjuncts (float sums only: where they fail, the sum is 0)."""
    if r.where is None or r.op != "sum" or not is_float(r.dtype):
        return r, []
    own = {a.uid for a in r.axes}
    lifted, kept = [], []
    for c in conjuncts(r.where):
        uses = {a.uid for a in free_axes(c)}
        (lifted if _plain(c) and not own & uses and uses - {carry.uid} else kept).append(c)
    if not lifted:
        return r, []
    return Reduce(r.op, r.body, r.axes, _all(kept) if kept else None, r.dtype), lifted


def plan(t: Compute) -> Optional[Plan]:
    """The by-steps form of the recurrence ``t`` (see the module docstring), or None when
    its body has no sum over earlier steps of its own, or one under a condition that
    reads values or that isl cannot project onto the sum's axes.
    """
    if t.carry is None or t.self_ref is None or t.body is None:
        return None
    return _by_steps(t, t.carry.axis, t.self_ref.uid)


def plan_rows(t: Compute, axis: int) -> Optional[Plan]:
    """The by-steps form of ``t`` (no recurrence) along its step axis ``axis``: every
    sum of its body, outside any other, a tensor of one step; None when it has none,
    or one under a condition that reads values. A checkpointed gradient computes such
    a tensor a step (a row) at a time, and so does every build of its program
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
    found = _sums(t.body, self_uid)
    if not found:
        return None
    step = f"{t.name}__step"  # deterministic: it is printed in the C comments
    # isl takes a size variable to be >= 1: the variable is the step plus one
    sv = Binary("sub", SizeVar(step, I64), Const(1, I64), I64)
    others = [a for k, a in enumerate(t.axes) if k != axis]
    sums: List[Compute] = []
    rest = t.body
    for n, (r, occurrences) in enumerate(found):
        # conditions of a sum's where on the step's axes alone (an adjoint's sum feeding
        # one part of the state, w == 1) are conditions around it: a sum over fewer axes
        red = r
        r, lifted = _lift(r, carry)
        occurrences = [o + lifted for o in occurrences]
        # the sum is a tensor over the axes it uses: one it does not use (the part of an
        # LSTM's state, [c, h]) would only compute it again
        used = {a.uid for a in free_axes(r)}
        kept = [a for a in others if a.uid in used]
        guards = _domain(occurrences, [carry] + kept)
        if guards is None:
            return None
        fresh = [Axis(a.name, a.lo, a.hi, fresh_uid()) for a in kept]
        mapping: Dict[Expr, Expr] = {carry: sv}
        mapping.update({a: f for a, f in zip(kept, fresh)})
        # the step's range and the guards become the sum's domain: conditions on the
        # step and the sum's axes, so the sum is the identity (and reads nothing) where
        # the body would not evaluate it
        inside = [Binary("ge", sv, carry.lo, "bool"), Binary("lt", sv, carry.hi, "bool")]
        conds = inside + [substitute(g, mapping) for g in guards]
        where = _all(conds + ([substitute(r.where, mapping)] if r.where is not None else []))
        moved = substitute(r, mapping)
        body = Reduce(moved.op, moved.body, moved.axes, where, moved.dtype)
        s = Compute(f"{t.name}_step{n}", tuple(a.hi for a in kept), r.dtype, fresh_uid(),
                    t.origin, axes=tuple(fresh), body=body)
        # costly factors of its terms that do not use an output axis (a function of the
        # previous step's state, tanh(h[t - 1, b, k]) * W[k, j]) are computed once per
        # step and position, not once per column: tensors of the step of their own
        s, factors = hoist(s)
        sums += factors + [s]
        value: Expr = Read(s, tuple(kept), r.dtype)
        if lifted:
            value = Select(_all(lifted), value, Const(0.0, r.dtype), r.dtype)
        rest = replace_subexpr(rest, red, value)
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

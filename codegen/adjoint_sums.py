"""Sums over the steps of an adjoint (weight gradients), added a step at a time.

A weight gradient of a recurrence sums over its steps:
``dW[k, j] = sum_{t, b} dh[t, b, j] * ... * h[t - 1, b, k]``, where ``dh`` (the adjoint)
runs from the last step down. A checkpointed gradient (``codegen.checkpoint``) has
``dh[t]`` one step at a time, last first, and can only add step ``t``'s terms then. For
its sum to be the full tape's bit for bit, every build of a program holding a
checkpointed recurrence (``checkpoints=k``) adds them the same way: such a
sum is lowered as ``dW = 0; for t from the last step down: dW += P_t`` where ``P_t``
(:attr:`Plan.term`, a tensor of ``dW``'s shape) sums the terms of step ``t`` over the
other reduction axes, lowered by the strategy table like any sum. The full tape runs
that loop whole (the ``adjoint-steps`` strategy), a checkpointed gradient one step per
turn of its schedule (:meth:`codegen.lower.Lowerer.adjoint_step`): the same C for each
step, in the same order.

The step axis of a sum is a reduction axis (constant bounds, or expressions of the
size variables: a symbolic number of steps) that indexes the
*step axis* of a tensor it reads: the carried axis of a descending recurrence, or the
axis of a tensor computed from one that reads it at that axis (:func:`step_axes`).

>>> import tensorexpr as te
>>> x = te.placeholder((4, 2), name="x")
>>> h = te.recurrence((4, 2), lambda h, t, b: te.select(t == 0, x[0, b], h[t - 1, b] * x[t, b]),
...                   name="h")
>>> r = te.reduce_axis(2)
>>> L = te.compute((), lambda: te.sum(h[3, r], axis=r), name="L")
>>> (dx,) = te.differentiate(L, [x])
>>> t, b = te.reduce_axis(4, name="t"), te.reduce_axis(2, name="b")
>>> S = te.compute((), lambda: te.sum(dx[t, b] * 2.0, axis=[t, b]), name="S")
>>> order = te.ir.topo_order([S])
>>> p = plan(S, step_axes(order))
>>> p.axis.name, str(p.term.body)  # doctest: +NORMALIZE_WHITESPACE
('t', '(sum_{b in [0, 2) if ((S__step - 1) >= 0) & ((S__step - 1) < 4)}
       (dx[S__step - 1, b] * 2.0))')
>>> p.params()  # in the build's schedule
(('step', 't'),)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from tensorexpr.ir import (Axis, Binary, Compute, Const, Expr, Read, Reduce, Select, SizeVar,
                           Tensor, fresh_uid, walk)
from tensorexpr.transform import substitute

I64 = "int64"


@dataclass(frozen=True)
class Plan:
    """How the sum ``t`` is added a step at a time: its step ``axis``, the size variable
    ``step`` (the step plus one: isl takes size variables to be positive), ``term``
    (one step's terms, ``t``'s shape) and ``add`` (``t + term``, stored into ``t``)."""
    t: Compute
    axis: Axis
    step: str
    term: Compute
    add: Compute

    def steps(self) -> Tuple[int, int]:
        """``(lo, hi)``: the steps the sum adds, when its bounds are constant."""
        return int(self.axis.lo.value), int(self.axis.hi.value)

    def bounds(self) -> Tuple[Expr, Expr]:
        """``(lo, hi)``: the steps the sum adds, constants or expressions of the size
        variables (an RNN of a symbolic length ``T``: ``[0, T)``)."""
        return self.axis.lo, self.axis.hi

    def params(self) -> Tuple[Tuple[str, str], ...]:
        """The sum's parameters in a build's schedule (its step axis), whether the full
        tape adds the steps in one loop or a checkpointed gradient at its turns."""
        return (("step", self.axis.name),)


def step_axes(order: Sequence[Tensor], forward: bool = False) -> Dict[int, int]:
    """uid -> step axis of every tensor of ``order`` that runs along an adjoint's
    steps: descending recurrences (their carried axis), and tensors reading one of
    those at an index that is one of their own axes (that axis, plus a constant).
    ``forward``: the checkpointed recurrences' steps too (and the tensors reading them).

    >>> import tensorexpr as te
    >>> u = te.placeholder((5, 3), name="u")
    >>> h = te.recurrence((5, 3), lambda h, t, b: te.select(t == 0, u[0, b],
    ...                   te.sin(h[t - 1, b]) + u[t, b]), name="h")
    >>> r = te.reduce_axis(3)
    >>> L = te.compute((), lambda: te.sum(h[4, r], axis=r), name="L")
    >>> (du,) = te.differentiate(L, [u])
    >>> g = te.compute((3, 5), lambda b, t: du[t, b] * 2.0, name="g")
    >>> sorted((x.name, a) for x in te.ir.topo_order([g])
    ...        for uid, a in step_axes(te.ir.topo_order([g])).items() if x.uid == uid)
    [('dh', 0), ('du', 0), ('g', 1)]
    """
    out: Dict[int, int] = {}
    for x in order:
        if not isinstance(x, Compute) or x.body is None:
            continue
        if x.carry is not None:
            if x.carry.step < 0 or (forward and x.checkpoints is not None):
                out[x.uid] = x.carry.axis
            continue
        pos = {a.uid: k for k, a in enumerate(x.axes)}
        for r in walk(x.body, unique=True):
            if isinstance(r, Read) and r.tensor.uid in out:
                a = _axis_of(r.indices[out[r.tensor.uid]])
                if a is not None and a.uid in pos:
                    out[x.uid] = pos[a.uid]
                    break
    return out


def _axis_of(ix: Expr) -> Optional[Axis]:
    """The axis of an index ``a`` or ``a +- c``, else None."""
    if isinstance(ix, Axis):
        return ix
    if isinstance(ix, Binary) and ix.op in ("add", "sub") and isinstance(ix.b, Const) \
            and isinstance(ix.a, Axis):
        return ix.a
    return None


def plan(x: Tensor, steps: Dict[int, int]) -> Optional[Plan]:
    """The step-at-a-time form of the sum ``x`` (see the module docstring), or None when
    ``x`` is not a float sum (its body the sum itself) over the steps of a tensor of
    ``steps`` (:func:`step_axes`)."""
    if not isinstance(x, Compute) or x.carry is not None or not isinstance(x.body, Reduce):
        return None
    red = x.body
    if red.op != "sum" or not red.dtype.startswith("float"):
        return None
    ra = _step_axis(red, steps)
    if ra is None:
        return None
    step = f"{x.name}__step"  # deterministic: it is printed in the C comments
    sv = Binary("sub", SizeVar(step, I64), Const(1, I64), I64)
    axes = tuple(Axis(a.name, a.lo, a.hi, fresh_uid()) for a in x.axes)
    mapping: Dict[Expr, Expr] = {ra: sv}
    mapping.update({a: f for a, f in zip(x.axes, axes)})
    body = substitute(red.body, mapping)
    # the step's range joins the domain (a condition on the step alone, as in
    # codegen.recurrence_steps): isl then knows every read at the step is in range
    where: Expr = Binary("and", Binary("ge", sv, ra.lo, "bool"), Binary("lt", sv, ra.hi, "bool"),
                         "bool")
    if red.where is not None:
        where = Binary("and", where, substitute(red.where, mapping), "bool")
    rest = tuple(a for a in red.axes if a.uid != ra.uid)
    zero = Const(0.0, red.dtype)
    if rest:
        term_body: Expr = Reduce("sum", body, rest, where, red.dtype)
    else:  # one term per step (adding +0.0 where it is excluded changes no running sum)
        term_body = Select(where, body, zero, red.dtype)
    term = Compute(f"{x.name}_term", x.dims, x.dtype, fresh_uid(), x.origin, axes=axes,
                   body=term_body)
    add_axes = tuple(Axis(a.name, a.lo, a.hi, fresh_uid()) for a in x.axes)
    add = Compute(f"{x.name}_add", x.dims, x.dtype, fresh_uid(), x.origin, axes=add_axes,
                  body=Binary("add", Read(x, add_axes, x.dtype), Read(term, add_axes, x.dtype),
                              x.dtype))
    return Plan(x, ra, step, term, add)


def _step_axis(red: Reduce, steps: Dict[int, int]) -> Optional[Axis]:
    for ra in red.axes:
        for r in walk(red.body, unique=True):
            if isinstance(r, Read) and r.tensor.uid in steps:
                a = _axis_of(r.indices[steps[r.tensor.uid]])
                if a is not None and a.uid == ra.uid:
                    return ra
    return None


def rewrite(computed: Sequence[Tensor], options) -> Tuple[List[Tuple[Tensor, str]],
                                                          Dict[int, Plan]]:
    """``(scratch, plans)``: the per-step term of every sum :func:`plan` adds a step at a
    time (a scratch tensor of the program) and its plan by uid; none for a sum
    ``options`` force to another strategy.

    >>> from codegen.schedule import DEFAULT
    >>> rewrite([], DEFAULT)
    ([], {})
    """
    # Only a program with a checkpointed recurrence needs this order: elsewhere a weight
    # gradient is one row-tiled sum over all steps (an RNN's VJP 13% faster that way)
    if not any(isinstance(t, Compute) and t.checkpoints is not None for t in computed):
        return [], {}
    steps = step_axes(computed)
    scratch: List[Tuple[Tensor, str]] = []
    plans: Dict[int, Plan] = {}
    for t in computed:
        if options.forced(t.name) not in (None, "adjoint-steps"):
            continue
        p = plan(t, steps)
        if p is None:
            continue
        plans[t.uid] = p
        scratch.append((p.term, f"{p.term.name} (scratch: the terms of one step of {t.name})"))
    return scratch, plans

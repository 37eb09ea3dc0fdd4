"""Recurrences: checking that a self-referential tensor can be evaluated in order.

A recurrence may read itself only at points that are strictly earlier along one
axis (the *carried* axis); isl proves it over the points where each self-read
is evaluated. The other axes are then independent within a step.
"""
from __future__ import annotations

import dataclasses

from .errors import RecurrenceError, describe
from .ir import Carry, Compute, SelfRef


def verify_order(t: Compute, steps=(1,)) -> Compute:
    """Return ``t`` with ``carry`` set, or raise :class:`RecurrenceError`.

    A user's recurrence runs forward (``steps=(1,)``): every self-read must be at
    a smaller index of one axis. Adjoints of recurrences, built by
    ``te.differentiate``, run backwards and are verified with ``steps=(-1,)``.

    >>> import tensorexpr as te
    >>> x = te.placeholder((5,), name="x")
    >>> c = te.recurrence((5,), lambda c, t: te.select(t == 0, x[0], c[t - 1] + x[t]), name="c")
    >>> c.carry.axis, c.carry.step
    (0, 1)
    """
    from .printer import expr_str
    # isl is imported on first use: `import tensorexpr` (which imports this module) stays light
    from .bounds import guard_set, read_sites
    from .polyhedral import NotAffine, Space, dim_name, params_of
    sites = [(r, g, ax) for r, g, ax in read_sites(t.body)
             if isinstance(r.tensor, SelfRef) and r.tensor.uid == t.self_ref.uid]
    if not sites:
        return dataclasses.replace(t, self_ref=None, carry=None)
    deltas = []  # per site: (space, domain, [p_c - q_c as PwAff for each axis c])
    for read, guards, raxes in sites:
        axes = tuple(t.axes) + tuple(raxes)
        space = Space(axes, params_of(list(t.dims) + list(read.indices) + list(guards)))
        dom = space.box()
        for g in guards:
            # A superset of the points where the read is evaluated is sound; widening only
            # the data-dependent conjuncts keeps the affine ones (``(t >= 1) & (X[t] > 0)``).
            dom = dom & guard_set(space, g)
        try:
            diffs = [space.vars[dim_name(ax)] - space.aff(ix) for ax, ix in zip(t.axes, read.indices)]
        except NotAffine:
            raise RecurrenceError(
                f"{describe(t)} reads itself at {expr_str(read)}, a data-dependent point; "
                f"a recurrence may only read itself at affine, strictly earlier points") from None
        deltas.append((read, space, dom, diffs))
    for c in range(len(t.axes)):
        for step in steps:
            ok = True
            for read, space, dom, diffs in deltas:
                d = diffs[c] if step > 0 else -diffs[c]
                # earlier along c means d >= 1 at every evaluated point
                if not (dom & d.lt_set(space.vars[0] + 1)).is_empty():
                    ok = False
                    break
            if ok:
                return dataclasses.replace(t, carry=Carry(c, step))
    # Name the first read that is not strictly earlier along any single axis.
    read = deltas[0][0]
    for read, space, dom, diffs in deltas:
        if all(not (dom & (d if s > 0 else -d).lt_set(space.vars[0] + 1)).is_empty()
               for d in diffs for s in steps):
            break
    raise RecurrenceError(
        f"{describe(t)} reads itself at {expr_str(read)}, which is not strictly "
        f"{'earlier' if steps == (1,) else 'later' if steps == (-1,) else 'earlier or later'} than "
        f"the point being defined along one axis (e.g. {t.self_ref.name}[t - 1, ...] under "
        f"te.select(t > 0, ...)); reading the same or a later point has no evaluation order")

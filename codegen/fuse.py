"""Row fusion: consecutive tensors that share their first axis run in one loop over slabs.

Every ``#pragma omp parallel for`` wakes the thread team and ends in a barrier;
here that costs tens of microseconds, more than a softmax row takes. A softmax
(row max, exponentials, row sum, quotient), a layer norm or a two-layer
perceptron is a chain of tensors in which each reads the previous ones only at
its own row. Such a chain is lowered as one parallel loop over slabs of rows::

    for (s = 0; s < n; s += S)          // parallel
        rows [s, min(s + S, n)) of t1   // each member by its own schedule
        rows [s, min(s + S, n)) of t2   // reads rows of t1 written just above
        ...

which also keeps each slab of an intermediate in cache between its writer and
its readers.

When a group may fuse: its members are consecutive stored tensors of the
program (cheap inlined intermediates between them do not count), none a
recurrence or scatter, all with the same first axis ``[lo, hi)``, and every read
of an earlier member by a later one (looking through inlined intermediates)
indexes its first dimension by exactly the reader's first axis. Then row ``r``
of every member depends only on rows ``r`` of earlier members, which the same
slab iteration has already written, and on tensors computed before the group.

Each member is lowered by the ordinary schedule with its first axis narrowed to
``[max(lo, s), min(hi, s + S))``, written with two size variables (``s + 1``
and ``s + S``: isl takes sizes to be positive) that isl treats like any other parameter, so run-time checks are proved away exactly as
for the whole range. A member whose schedule does not put that axis outermost
(a blocked transpose over it) ends the group instead.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Optional, Sequence

from tensorexpr.ir import (Axis, Binary, Compute, Const, Expr, Read, SizeVar, Tensor,
                           INDEX_DTYPE, same, walk)
from tensorexpr.transform import const_value, substitute

from .loopast import Block, Comment, Decl, For, If, Lit, Op, Stmt, Var, flat, total_work

I64 = INDEX_DTYPE

#: a slab has a multiple of this many rows (the row blocking of ``lower.ROW_BLOCK``)
SLAB_ALIGN = 8
#: aim for about this many slabs, so every thread gets several
SLABS = 32

#: names of the size variables that bound a slab (not valid user identifiers)
SLAB_LO, SLAB_HI = "te_slab_lo__", "te_slab_hi__"


def plan(tensors: Sequence[Tensor], inline: set) -> List[List[Tensor]]:
    """The tensors to lower, in order, as groups (a group of one is lowered alone).

    >>> import tensorexpr as te
    >>> X = te.placeholder((4, 8), name="X")
    >>> k = te.reduce_axis((0, 8), name="k")
    >>> m = te.compute((4,), lambda i: te.max(X[i, k], axis=k), name="m")
    >>> Y = te.compute((4, 8), lambda i, j: te.exp(X[i, j] - m[i]), name="Y")
    >>> [[t.name for t in g] for g in plan([m, Y], set())]
    [['m', 'Y']]
    """
    groups: List[List[Tensor]] = []
    current: List[Tensor] = []  # in program order; inlined tensors ride along
    stored: List[Tensor] = []
    inlined: Dict[int, Compute] = {}
    for t in tensors:
        if t.uid in inline:
            inlined[t.uid] = t
            current.append(t)
            continue
        if stored and _joins(t, stored, inlined):
            current.append(t)
            stored.append(t)
            continue
        if current:
            groups.append(current)
        current, stored = [t], [t]
    if current:
        groups.append(current)
    return groups


def _candidate(t: Tensor) -> bool:
    from . import layout  # its transposed copies are read across rows: never fused
    return (isinstance(t, Compute) and t.carry is None and t.self_ref is None and t.ndim >= 1
            and not layout.is_copy(t))


def _joins(t: Tensor, group: List[Tensor], inlined: Dict[int, Compute]) -> bool:
    first = group[0]
    if not (_candidate(t) and _candidate(first)):
        return False
    a, b = t.axes[0], first.axes[0]
    if not (same(a.lo, b.lo) and same(a.hi, b.hi)):
        return False
    members = {m.uid for m in group}
    for r in _reads(t.body, inlined):
        if r.tensor.uid in members:
            x = r.indices[0]
            if not (isinstance(x, Axis) and x.uid == a.uid):
                return False
    return True


def _reads(e: Expr, inlined: Dict[int, Compute], depth: int = 0) -> List[Read]:
    """The reads ``e`` performs, with reads of inlined intermediates replaced by the
    reads of their bodies at the read's indices (where the value really comes from)."""
    out: List[Read] = []
    for x in walk(e):
        if not isinstance(x, Read):
            continue
        src = inlined.get(x.tensor.uid)
        if src is None or depth > 32:
            out.append(x)
            continue
        body = substitute(src.body, dict(zip(src.axes, x.indices)))
        out.extend(_reads(body, inlined, depth + 1))
    return out


def slab_rows(extent: Expr) -> int:
    """Rows per slab for a first axis of ``extent`` points.

    >>> slab_rows(Const(256, "int64")), slab_rows(Const(8, "int64"))
    (8, 1)
    """
    n = const_value(extent)
    if n is None:
        return SLAB_ALIGN
    rows = -(-n // SLABS)
    if rows >= SLAB_ALIGN:
        rows = -(-rows // SLAB_ALIGN) * SLAB_ALIGN
    return max(rows, 1)


def lower_group(lowerer, group: List[Compute]) -> Optional[List[Stmt]]:
    """``group`` as one loop over slabs of its first axis (see the module docstring), or
    None when some member's schedule does not run that axis outermost."""
    stored = [t for t in group if t.uid not in lowerer.inline]
    if len(stored) < 2:
        return None
    ax = stored[0].axes[0]
    lo_c, hi_c = const_value(ax.lo), const_value(ax.hi)
    rows = slab_rows(Const(hi_c - lo_c, I64) if lo_c is not None and hi_c is not None
                     else Binary("sub", ax.hi, ax.lo, I64))
    lo_var, hi_var = lowerer.fresh("s", I64), lowerer.fresh("s", I64)
    lo_size, hi_size = SizeVar(SLAB_LO), SizeVar(SLAB_HI)
    saved_sizes = dict(lowerer.sizes)
    saved_params = lowerer.params
    saved_counters = dict(lowerer.counters)
    saved_sites = len(lowerer.sites)
    lowerer.sizes[SLAB_LO], lowerer.sizes[SLAB_HI] = lo_var, hi_var
    lowerer.params = tuple(saved_params) + (SLAB_LO, SLAB_HI)
    body: List[Stmt] = []
    works = []
    try:
        for t in group:
            if t.uid in lowerer.inline:
                body.append(Comment(f"{t} [computed where it is read]"))
                continue
            a = t.axes[0]
            # isl takes every size variable to be >= 1: the slab's first row is SLAB_LO - 1
            first = Binary("sub", lo_size, Const(1, I64), I64)
            narrow = replace(a, lo=Binary("max", a.lo, first, I64),
                             hi=Binary("min", a.hi, hi_size, I64))
            member = replace(t, axes=(narrow,) + tuple(t.axes[1:]))
            lowerer._owner = t
            works.append(lowerer.work(t, list(t.axes)))
            stmts = lowerer.compute(member)
            if not _outermost(stmts, lo_var, hi_var):
                raise _Unfusable(t)
            body.append(Block((_comment(t),) + tuple(_serial(s) for s in stmts)))
    except _Unfusable:
        lowerer.counters = saved_counters
        del lowerer.sites[saved_sites:]
        return None
    finally:
        lowerer.sizes = saved_sizes
        lowerer.params = saved_params
    lo, hi = lowerer.size_expr(ax.lo), lowerer.size_expr(ax.hi)
    start = lowerer.fresh("i", I64)
    end = Op("min", (Op("add", (start, Lit(rows, I64)), I64), hi), I64)
    head = (Decl(lo_var, Op("add", (start, Lit(1, I64)), I64)), Decl(hi_var, end))
    work = total_work(works)
    names = ", ".join(t.name for t in stored)
    return [For(start, lo, hi, rows, Block(head + tuple(body)),
                parallel=work is not False, work=None if work is False else work,
                note=f"{ax.name}: slabs of {rows} rows of {names}")]


class _Unfusable(Exception):
    pass


def _comment(t: Tensor) -> Comment:
    return Comment(str(t))


def _mentions(x, var: Var) -> bool:
    match x:
        case Var():
            return x == var
        case Op(_, args, _):
            return any(_mentions(a, var) for a in args)
    return False


def _outermost(stmts: List[Stmt], lo: Var, hi: Var) -> bool:
    """Do the member's loops start at the slab's first row and end at its last (its
    first axis outermost, in one loop or a main loop and a remainder)?"""
    loops = [s for s in flat(stmts) if isinstance(s, For)]
    if not loops or any(not isinstance(s, (For,)) and not _harmless(s) for s in flat(stmts)):
        return False
    return _mentions(loops[0].lo, lo) and _mentions(loops[-1].hi, hi)


def _harmless(s) -> bool:
    return isinstance(s, Comment)


def _serial(s: Stmt) -> Stmt:
    """``s`` with no loop marked parallel (it runs inside the slab loop's threads)."""
    match s:
        case Block(stmts):
            return Block(tuple(_serial(x) for x in stmts))
        case For():
            return replace(s, parallel=False, work=None, body=_serial(s.body))
        case If():
            return replace(s, then=_serial(s.then),
                           orelse=None if s.orelse is None else _serial(s.orelse))
    return s

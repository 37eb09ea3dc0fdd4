"""Loop interchange of a recurrence: its independent axes outermost, its carried axis inside.

The ``loops`` strategy runs a recurrence's carried axis outermost and every other
axis inside it, the last innermost in vector lanes: right for a scan down the rows
of a matrix (``t`` first), wrong for one along them. A cumulative sum along the last
axis, ``c[r, t] = c[r, t - 1] + X[r, t]``, then walks ``X`` and ``c`` down stride-``N``
columns ``N`` times over, and its per-step loop over ``r`` is too small to thread.

An axis is *independent* when every read the recurrence makes of itself is at that
axis's own index (``c[r, t - 1]``: ``r``): the points of one value of it never read
those of another, so its loop may run outside the carried one, and in parallel.
(The carried loop still finishes one step, over every other axis, before the next.)
:func:`plan` orders the loops by that and by the layout (row-major: the last axis is
the contiguous one):

* carried axis not the last: the independent axes before the last run outside it
  (the first threaded); the last stays innermost, in vector lanes;
* carried axis the last: the last independent axis runs outside it in blocks of
  ``rows`` rows, and the rows of a block innermost, inside the carried loop: each
  step is then ``rows`` independent chains (the carried axis alone, innermost, is one
  chain of dependent additions), and the block walks ``rows`` rows along, a cache
  line of each at a time.

When, besides, every self-read is the point's own row at the previous step
(``c[r, t - 1]``) and the block's rows are the only loop inside the carried one, the
previous step's values of the block are *carried in registers*: a local array of
``rows`` elements, written with each point's value and read back at the next step,
which the C compiler keeps in registers. Read back from the output instead, each step
waited for its store to reach the load (and ``X[r, t]`` and ``c[r, t - 1]``, 4 KiB apart
in rows of 1024 floats, alias in the store buffer): a cumulative sum along rows of
2048 floats, 512 rows, one thread, ran 1.20 ms reading ``c`` back, 0.33 ms carried.

Every point still computes the same expression from the same values as the IR says.

>>> import tensorexpr as te
>>> X = te.placeholder((64, 100), name="X")
>>> c = te.recurrence((64, 100), lambda c, r, t: te.select(t == 0, X[r, 0],
...     c[r, t - 1] + X[r, t]), name="c")
>>> print(plan(c, 16))
r (blocks of 16), t (sequential, previous step in registers), r
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np

from tensorexpr.ir import Axis, Compute, Read, SelfRef, reads
from tensorexpr.polyhedral import offset_range
from tensorexpr.transform import const_value

from .cexpr import I64, add, cast, zero
from .loopast import Block, Decl, For, Lit, Load, Local, Op, Stmt, Store, simd_safe
from .scope import Scope

#: a set of the L1 data cache holds this many lines, and consecutive 64-byte lines fall
#: in consecutive sets of :data:`L1_SETS` (4 KiB apart: the same set); x86 cores have 8
#: ways or more
L1_WAYS, L1_SETS, LINE = 8, 64, 64

#: below this many iterations of the loops outside the carried one (when their sizes
#: are known), a carried axis that is not the last stays outermost: its per-step
#: parallel loop has more iterations (a carried last axis is interchanged whatever the
#: number of rows: its per-step loop walks down a column)
MIN_OUTER = 8


@dataclass(frozen=True)
class Order:
    """The loops of an interchanged recurrence ``t``, by axis position: ``outer`` run
    outside the carried loop, in order (the first threaded), ``inner`` inside it,
    innermost last. ``block``: an axis of ``outer`` run in blocks of ``rows`` (its
    block loop in ``outer``'s place), whose rows are the last of ``inner``.
    ``carried``: the previous step's values of a block are kept in a local array
    (registers) for the next step, not read back from ``t`` (:func:`previous_step_reads`)."""
    t: Compute
    outer: Tuple[int, ...]
    inner: Tuple[int, ...]
    block: Optional[int] = None
    rows: int = 1
    carried: bool = False

    def __str__(self):
        axes = self.t.axes
        out = [axes[k].name + (f" (blocks of {self.rows})" if k == self.block else "")
               for k in self.outer]
        out.append(axes[self.t.carry.axis].name + (
            " (sequential, previous step in registers)" if self.carried else " (sequential)"))
        return ", ".join(out + [axes[k].name for k in self.inner])


def independent(t: Compute) -> List[int]:
    """The axes of the recurrence ``t`` (not the carried one) at which every read of
    itself is at the point's own index (or that have a single point).

    >>> import tensorexpr as te
    >>> X = te.placeholder((4, 5, 6), name="X")
    >>> h = te.recurrence((4, 5, 6), lambda h, t, b, j: te.select(t == 0, X[0, b, j],
    ...     h[t - 1, b, j] + h[t - 1, b, (j + 1) % 6]), name="h")
    >>> independent(h)
    [1]
    """
    own = self_reads(t)
    # (an axis of one point has only the point's own index: simplified to a constant)
    return [k for k, ax in enumerate(t.axes) if k != t.carry.axis and (
        const_value(t.dims[k]) == 1 or
        all(isinstance(r.indices[k], Axis) and r.indices[k].uid == ax.uid for r in own))]


def self_reads(t: Compute) -> List[Read]:
    """The reads the recurrence ``t``'s body makes of itself.

    >>> import tensorexpr as te
    >>> X = te.placeholder((4, 6), name="X")
    >>> c = te.recurrence((4, 6), lambda c, r, t: te.select(t == 0, X[r, 0],
    ...     c[r, t - 1] + X[r, t]), name="c")
    >>> [str(r) for r in self_reads(c)]
    ['c[r, t - 1]']
    """
    return [r for r in reads(t.body) if isinstance(r.tensor, SelfRef)
            and r.tensor.uid == t.self_ref.uid]


def previous_step_reads(t: Compute) -> Optional[List[Read]]:
    """The self-reads of the recurrence ``t`` when every one is of the point's own
    index on each axis but the carried one, and of the previous step on that (``t -
    1`` ascending, ``t + 1`` descending); else None.

    >>> import tensorexpr as te
    >>> X = te.placeholder((4, 6), name="X")
    >>> c = te.recurrence((4, 6), lambda c, r, t: te.select(t == 0, X[r, 0],
    ...     c[r, t - 1] * 0.5 + X[r, t]), name="c")
    >>> [str(r) for r in previous_step_reads(c)]
    ['c[r, t - 1]']
    >>> d = te.recurrence((4, 6), lambda d, r, t: te.select(t < 2, X[r, t],
    ...     d[r, t - 2] + X[r, t]), name="d")
    >>> previous_step_reads(d) is None   # two steps back: not the value just computed
    True
    """
    own = self_reads(t)
    c = t.carry.axis
    ax = t.axes[c]
    for r in own:
        if any(k != c and not (isinstance(x, Axis) and x.uid == a.uid)
               for k, (x, a) in enumerate(zip(r.indices, t.axes))):
            return None
        if offset_range([ax], (), r.indices[c], ax) != (-t.carry.step, -t.carry.step):
            return None
    return own if own else None


def block_rows(t: Compute, block: int, lanes: int) -> int:
    """Rows of a block of axis ``block`` of ``t``: ``lanes`` (one vector's worth of
    chains), halved while the lines a step touches, one per row of each array read or
    written, would not fit the L1 sets they fall in. Rows ``2**k * 64`` bytes apart
    fall in few sets (all in one from 4 KiB on): a cumulative sum along rows of 2048
    floats ran 16 rows at 24 ms, 4 at 1.2 ms (rows of 2000: 16 at 0.33 ms, 4 at 0.83 ms).

    >>> import tensorexpr as te
    >>> X = te.placeholder((64, 2048), name="X")
    >>> c = te.recurrence((64, 2048), lambda c, r, t: te.select(t == 0, X[r, 0],
    ...     c[r, t - 1] + X[r, t]), name="c")
    >>> block_rows(c, 0, 16)     # X and c: 2 lines per row, all rows in one set
    4
    """
    stride = 1
    for d in t.dims[block + 1:]:
        n = const_value(d)
        if n is None:
            return lanes
        stride *= n
    stride *= np.dtype(t.dtype).itemsize
    if stride % LINE:
        return lanes  # rows start at different offsets within lines: spread over the sets
    sets = L1_SETS // math.gcd(stride // LINE % L1_SETS, L1_SETS)
    arrays = 1 + len({r.tensor.uid for r in reads(t.body) if not isinstance(r.tensor, SelfRef)})
    rows = lanes
    while rows > 1 and arrays * -(-rows // min(rows, sets)) > L1_WAYS:
        rows //= 2
    return rows


def plan(t: Compute, lanes: int) -> Optional[Order]:
    """The interchanged loop order of the recurrence ``t`` (see the module docstring;
    ``lanes``: a vector's elements of ``t``'s type, the most rows of a block when the
    carried axis is the last: :func:`block_rows`), or None when the
    carried loop stays outermost: no independent axis may leave it, or (the carried
    axis not the last) the loops outside it would have fewer than :data:`MIN_OUTER`
    iterations.

    >>> import tensorexpr as te
    >>> X = te.placeholder((50, 16, 32), name="X")
    >>> h = te.recurrence((50, 16, 32), lambda h, t, b, j: te.select(t == 0, X[0, b, j],
    ...     h[t - 1, b, j] * 0.5 + X[t, b, j]), name="h")
    >>> print(plan(h, 16))
    b, t (sequential), j
    >>> s = te.recurrence((50, 32), lambda s, t, j: te.select(t == 0, X[0, 0, j],
    ...     s[t - 1, j] + X[t, 0, j]), name="s")
    >>> plan(s, 16) is None   # only the innermost axis is independent: stays inside
    True
    """
    if t.carry is None or t.self_ref is None or t.body is None:
        return None
    c, last = t.carry.axis, t.ndim - 1
    free = independent(t)
    block, rows = None, 1
    if c == last:
        if not free:
            return None
        block = free[-1]
        rows = block_rows(t, block, lanes)
        outer = tuple(free)
        inner = tuple(k for k in range(t.ndim) if k not in free and k != c) + (block,)
    else:
        outer = tuple(k for k in free if k != last)
        if not outer:
            return None
        inner = tuple(k for k in range(t.ndim) if k not in outer and k != c)
    if block is None:
        n = 1
        for k in outer:
            size = const_value(t.dims[k])
            n *= size if size is not None else MIN_OUTER
        if n < MIN_OUTER:
            return None
    carried = block is not None and inner == (block,) and previous_step_reads(t) is not None
    return Order(t, outer, inner, block, rows, carried)


def lower(lw, t: Compute, order: Order) -> List[Stmt]:
    """``t``'s loops in ``order`` (``lw``: the :class:`codegen.lower.Lowerer`): the
    first outer loop threaded over the whole nest's work, the carried loop sequential
    in its direction, the innermost in vector lanes unless it is a block's rows."""
    axes = list(t.axes)
    c = t.carry.axis
    vars_ = {k: lw.fresh("i", I64) for k in range(len(axes))}
    scope = Scope({axes[k].uid: vars_[k] for k in range(len(axes))}, tuple(axes), (), {})
    stmts: List[Stmt] = []
    start = lw.fresh("i", I64) if order.block is not None else None
    carry = None
    if order.carried:
        # the previous step's value of row i is carry[i - start] (a read of the first
        # step's previous one is on a branch the body's select does not take, or
        # blended away: the array starts at zero, not uninitialised)
        carry = lw.fresh("carry", t.dtype)
        slot = Op("sub", (vars_[order.block], start), I64)
        for r in previous_step_reads(t):
            scope.memo[r] = Load(carry.name, slot, t.dtype)
    value = cast(lw.expr(t.body, scope, stmts), t.dtype)
    if carry is not None:
        v = lw.fresh("t", t.dtype)
        stmts += [Decl(v, value), Store(carry.name, slot, v)]
        value = v
    stmts.append(Store(lw.buf[t.uid].name, lw.offset(t.uid, [vars_[k] for k in range(len(axes))]),
                       value))
    body = Block(tuple(stmts))
    work = lw.work(t, axes)
    lw.record.note("order", str(order))
    # inside the carried loop: the block's rows innermost (scalar: its lanes would be
    # gathers down a column), else the last axis in vector lanes
    inner = list(order.inner)
    for n, k in enumerate(reversed(inner)):
        ax = axes[k]
        if k == order.block:
            hi = Op("min", (add(start, Lit(order.rows, I64)), lw.size_expr(ax.hi)), I64)
            body = Block((For(vars_[k], start, hi, 1, body, note=ax.name),))
        else:
            body = Block((For(vars_[k], lw.size_expr(ax.lo), lw.size_expr(ax.hi), 1, body,
                              note=ax.name, simd=n == 0 and simd_safe(body)),))
    ax = axes[c]
    body = Block((For(vars_[c], lw.size_expr(ax.lo), lw.size_expr(ax.hi), 1, body,
                      descending=t.carry.step < 0, note=ax.name + " (sequential)"),))
    if carry is not None:
        k = lw.fresh("i", I64)
        body = Block((Local(carry.name, t.dtype, order.rows),
                      For(k, Lit(0, I64), Lit(order.rows, I64), 1,
                          Block((Store(carry.name, k, zero(t.dtype)),)))) + body.stmts)
    for k in reversed(order.outer):
        ax = axes[k]
        first = k == order.outer[0] and work is not False
        extra = dict(parallel=True, work=work) if first else {}
        if k == order.block:
            body = Block((For(start, lw.size_expr(ax.lo), lw.size_expr(ax.hi), order.rows, body,
                              note=f"{ax.name} (blocks of {order.rows})", **extra),))
        else:
            body = Block((For(vars_[k], lw.size_expr(ax.lo), lw.size_expr(ax.hi), 1, body,
                              note=ax.name, **extra),))
    return list(body.stmts)

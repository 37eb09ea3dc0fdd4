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
program (cheap inlined intermediates between them do not count; a later tensor
that would join, everything it reads computed, is taken ahead of one that would end
the group: ``plan``), none a
recurrence or scatter, all with the same first axis ``[lo, hi)``, and every read
of an earlier member by a later one (looking through inlined intermediates)
indexes its first dimension by exactly the reader's first axis. Then row ``r``
of every member depends only on rows ``r`` of earlier members, which the same
slab iteration has already written, and on tensors computed before the group.

Each member is lowered by the ordinary schedule with its first axis narrowed to
``[max(lo, s), min(hi, s + S))``, written with two size variables (``s + 1``
and ``s + S``: isl takes sizes to be positive) that isl treats like any other
parameter, so run-time checks are proved away exactly as for the whole range. A
member whose schedule does not put that axis outermost (a blocked transpose over
it) ends the group instead.

Slabs of planes. When every member has three or more axes, the same first two,
and reads earlier members only at its own point of both (``(n, c)`` of an NCHW
max-pool gradient: the tie count, then ``dX``), a slab can be a block of the
second axis within one row of the first: a few channel planes of one image::

    for (q = 0; q < N * B; q++)            // parallel
        planes [c0, c1) of row q / B of t1    // c0 = (q % B) * P, c1 = min(c0 + P, C)
        planes [c0, c1) of row q / B of t2
        ...

with ``P`` planes per block chosen from the bytes the members write and read per
plane (about SLAB_BYTES a slab) and enough blocks for SLABS slabs in all. That
is used when slabs of rows would be larger than SLAB_BYTES or fewer than SLABS:
a few images of many channels otherwise give 2 threads 3 slabs (one idles a
third of the time) or slabs larger than the cache. The second axis is narrowed
like the first, by two more size variables, and a member whose schedule does not
run it next inside the first falls back to slabs of rows.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from tensorexpr.ir import (Axis, Binary, Compute, Const, Expr, Read, SizeVar, Tensor,
                           INDEX_DTYPE, same, walk)
from tensorexpr.transform import const_value, substitute

from . import strategies, target
from .copies import is_copy
from .loopast import Block, Comment, Decl, For, If, Lit, Op, Stmt, Var, flat, total_work

I64 = INDEX_DTYPE


def slab_align() -> int:
    """A slab has a multiple of this many rows: the register tile's rows on this target
    (``lower.row_block``; slabs of 8 rows on AVX2's 6-row tiles ran every slab's
    products as a block of 6 rows and a latency-bound one of 2)."""
    return target.current().row_block

#: aim for about this many slabs, so every thread gets several
SLABS = 32

#: a slab of planes (two axes) holds about this many bytes of its members' data, well
#: inside a core's L2 cache (1 MiB here): the group's passes over a slab then hit cache
SLAB_BYTES = 256 * 1024

#: names of the size variables that bound a slab (not valid user identifiers)
SLAB_LO, SLAB_HI = "te_slab_lo__", "te_slab_hi__"


#: Stored members of one group at most. A group is one loop, and so one C function's
#: worth of code (codegen.cemit splits a kernel only between top-level loops): a chain
#: of 1,000 tensors in one slab loop took the C compiler 15 s (value-range and
#: register-allocation passes grow faster than linearly), 32 members per slab already
#: wake the threads once per 32 tensors.
MAX_MEMBERS = 32
#: how far ahead of a tensor that ends a group ``plan`` looks for one that would join it
LOOKAHEAD = 16


def plan(tensors: Sequence[Tensor], inline: set, fixed: set = frozenset()
         ) -> List[List[Tensor]]:
    """The tensors to lower, in order, as groups (a group of one is lowered alone).

    A tensor that would end a group lets a later one join it first when everything the
    later one reads is computed (it moves up, with the inlined intermediates it reads);
    tensors whose uids are in ``fixed`` never move (a checkpointed gradient's order).

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
    pending = list(tensors)
    done: set = set()
    listed = {t.uid for t in tensors}
    while pending:
        t = pending.pop(0)
        if t.uid in inline:
            inlined[t.uid] = t
            current.append(t)
            done.add(t.uid)
            continue
        if stored and len(stored) < MAX_MEMBERS and not _joins(t, stored, inlined):
            # a later tensor that would join, all it reads already computed (a batch
            # norm's dgamma and dbeta after dX, which ends the group of dvar and dmean):
            # taken first, it reads its slab where the group just read it, in one
            # parallel loop instead of a second pass over its inputs
            ahead = {u.uid: u for u in pending[:LOOKAHEAD]}
            for u in pending[:LOOKAHEAD]:
                if u.uid in inline or u.uid in fixed:
                    continue
                moved = _ready(u, ahead, inline, listed, done)
                if moved is None:
                    continue
                ride = {x.uid: x for x in moved if x is not u}
                if _joins(u, stored, {**inlined, **ride}):
                    ids = {x.uid for x in moved}
                    rest = [x for x in pending if x.uid not in ids]
                    pending[:] = moved[1:] + [t] + rest
                    t = moved[0]
                    break
        if t.uid in inline:  # an intermediate a moved tensor reads, moved with it
            pending.insert(0, t)
            continue
        done.add(t.uid)
        if stored and len(stored) < MAX_MEMBERS and _joins(t, stored, inlined):
            current.append(t)
            stored.append(t)
            continue
        if current:
            groups.append(current)
        current, stored = [t], [t]
    if current:
        groups.append(current)
    return groups


def _ready(u: Tensor, ahead: Dict[int, Tensor], inline: set, listed: set, done: set
           ) -> Optional[List[Tensor]]:
    """``u`` preceded by the inlined intermediates among ``ahead`` it reads (through
    each other), in program order, when everything else they read is ``done``; else
    None."""
    need: Dict[int, Tensor] = {}
    todo = [u]
    while todo:
        x = todo.pop()
        for v in _inputs(x, listed) - done:
            if v in need:
                continue
            w = ahead.get(v)
            if w is None or w.uid not in inline:
                return None
            need[v] = w
            todo.append(w)
    order = [x for x in ahead.values() if x.uid in need]
    return order + [u]


def _inputs(t: Tensor, listed: set) -> set:
    """The uids of the tensors of ``listed`` that ``t`` reads."""
    found = {x.tensor.uid for x in walk(t.body, unique=True) if isinstance(x, Read)} \
        if isinstance(t, Compute) else set(listed)
    return found & listed


def _candidate(t: Tensor) -> bool:
    return (isinstance(t, Compute) and t.carry is None and t.self_ref is None and t.ndim >= 1
            and not is_copy(t))  # a copy is read across rows: never fused


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
    for x in walk(e, unique=True):
        if not isinstance(x, Read):
            continue
        src = inlined.get(x.tensor.uid)
        if src is None or depth > 32:
            out.append(x)
            continue
        body = substitute(src.body, dict(zip(src.axes, x.indices)))
        out.extend(_reads(body, inlined, depth + 1))
    return out


def slab_rows(extent: Expr, tiled: bool = False) -> int:
    """Rows per slab for a first axis of ``extent`` points; ``tiled``: a member runs
    register tiles of rows (its slabs then hold whole tiles).

    >>> with target.use(target.Target(64, 32, True)):   # tiles of 8 rows
    ...     [slab_rows(Const(n, "int64")) for n in (256, 64, 8)], slab_rows(Const(64, "int64"), True)
    ([8, 2, 1], 8)
    >>> with target.use(target.Target(32, 16, True)):   # tiles of 6 rows: whole tiles
    ...     slab_rows(Const(256, "int64"))
    12
    """
    n = const_value(extent)
    align = slab_align()
    if n is None:
        return align
    rows = -(-n // SLABS)
    if rows >= align or (tiled and n >= 2 * align):
        # a slab never cuts a register tile: an LSTM's gates (64 rows) in slabs of 2
        # rows ran their 8-row tiles never (forward 12.6 ms; numpy 0.77 ms); two slabs
        # or more of whole tiles keep the threads busy
        rows = -(-rows // align) * align
    return max(rows, 1)


def tiled(lw, group: Sequence[Tensor]) -> bool:
    """Does a stored member of ``group`` run register tiles of rows (the ``rows``
    strategy) when narrowed to a slab of rows?

    >>> import tensorexpr as te
    >>> from codegen.lower import Lowerer
    >>> from codegen.signature import Signature
    >>> A = te.placeholder((64, 32), name="A"); W = te.placeholder((32, 64), name="W")
    >>> k = te.reduce_axis(32, name="k")
    >>> C = te.compute((64, 64), lambda i, j: te.sum(A[i, k] * W[k, j], axis=k), name="C")
    >>> D = te.compute((64, 64), lambda i, j: te.tanh(C[i, j]), name="D")
    >>> tiled(Lowerer(Signature([C, D], [A, W])), [C, D]), tiled(Lowerer(Signature([D], [A, W])), [D])
    (True, False)
    """
    names = slab_names(1)
    for t in group:
        if t.uid not in lw.inline and isinstance(t, Compute):
            found = strategies.candidates(lw, member(t, names))
            if found and found[0][0].name == "rows":
                return True
    return False


def decide(lw, group: List[Compute]) -> Tuple[int, Optional[Tensor]]:
    """``(axes, blocker)``: how ``group`` runs, decided before anything is lowered from
    the strategies its members would take (``codegen.strategies.leading_loops``) with
    their axes narrowed to a slab: ``2``, a loop over slabs of planes of its first two
    axes, when :func:`planes` allows it, slabs of rows would be too large or too few
    (:func:`_rows_do`) and every member's strategy runs both axes outermost; else ``1``,
    slabs of rows of its first axis, when every member's runs that one outermost; else
    ``0``, not fused (``blocker``: the first member whose strategy does not).

    >>> import tensorexpr as te
    >>> from codegen.lower import Lowerer
    >>> from codegen.signature import Signature
    >>> X = te.placeholder((64, 64), name="X")
    >>> m = te.compute((64,), lambda i: X[i, 3] * 2.0, name="m")
    >>> Y = te.compute((64, 64), lambda i, j: X[i, j] - m[i], name="Y")
    >>> T = te.compute((64, 64), lambda i, j: Y[i, j] * X[j, i], name="T")
    >>> decide(Lowerer(Signature([m, Y], [X])), [m, Y])
    (1, None)
    >>> axes, blocker = decide(Lowerer(Signature([Y, T], [X])), [Y, T])
    >>> axes, blocker.name   # T runs in square blocks of i and j
    (0, 'T')
    """
    stored = [t for t in group if t.uid not in lw.inline]
    if len(stored) < 2:
        return 0, None
    plane = planes(group, lw.inline)
    tries = [2, 1] if plane is not None and not _rows_do(stored[0], plane) else [1]
    blocker = None
    for nslab in tries:
        blocker = next((t for t in stored if strategies.leading_loops(
            lw, member(t, slab_names(nslab))) < nslab), None)
        if blocker is None:
            return nslab, None
    return 0, blocker


def slab_names(nslab: int) -> List[Tuple[str, str]]:
    """The size variables bounding a slab's ``nslab`` axes: ``(lo, hi)`` of each."""
    return [(f"{SLAB_LO}{k or ''}", f"{SLAB_HI}{k or ''}") for k in range(nslab)]


def member(t: Compute, names: Sequence[Tuple[str, str]]) -> Compute:
    """``t`` with its first axes narrowed to the slab ``names`` bound (see the module
    docstring).

    >>> import tensorexpr as te
    >>> Y = te.compute((8, 4), lambda i, j: te.const(1.0), name="Y")
    >>> member(Y, slab_names(1)).axes[0].hi
    min(8, te_slab_hi__)
    """
    axes = list(t.axes)
    for k, (lo_name, hi_name) in enumerate(names):
        a = axes[k]
        # isl takes every size variable to be >= 1: the slab's first row is lo - 1
        first = Binary("sub", SizeVar(lo_name), Const(1, I64), I64)
        axes[k] = replace(a, lo=Binary("max", a.lo, first, I64),
                          hi=Binary("min", a.hi, SizeVar(hi_name), I64))
    return replace(t, axes=tuple(axes))


def _rows_do(t: Tensor, plane: Expr) -> bool:
    """Are slabs of rows (:func:`slab_rows`) within SLAB_BYTES and SLABS or more (so
    every thread gets several: 3 images on 2 threads leave one idle a third of the
    time)? Unknown sizes say no."""
    n0, n1, b = (const_value(x) for x in (_extent(t.axes[0]), _extent(t.axes[1]), plane))
    if None in (n0, n1, b):
        return False
    rows = slab_rows(Const(n0, I64))
    return rows * n1 * b <= SLAB_BYTES and -(-n0 // rows) >= SLABS


def _extent(ax: Axis) -> Expr:
    lo, hi = const_value(ax.lo), const_value(ax.hi)
    if lo is not None and hi is not None:
        return Const(max(hi - lo, 0), I64)
    return Binary("sub", ax.hi, ax.lo, I64)


def planes(group: Sequence[Tensor], inline: set) -> Optional[Expr]:
    """Bytes per point of the first two axes (a plane: one channel of one image) that
    ``group``'s stored members write and read there, when every stored member has at
    least three axes, all share their first two, and every read of an earlier member
    (through inlined intermediates) is at the reader's own point of both; else None.

    >>> import tensorexpr as te
    >>> X = te.placeholder((2, 3, 8, 8), name="X")
    >>> ry, rx = te.reduce_axis((0, 2)), te.reduce_axis((0, 2))
    >>> Y = te.compute((2, 3, 4, 4), lambda n, c, y, x: te.max(
    ...     X[n, c, 2 * y + ry, 2 * x + rx], axis=[ry, rx]), name="Y")
    >>> Z = te.compute((2, 3, 4, 4), lambda n, c, y, x: te.exp(Y[n, c, y, x]), name="Z")
    >>> planes([Y, Z], set()).value  # Y and Z (4 x 4 floats each), X (8 x 8)
    384
    >>> W = te.compute((2, 3, 4, 4), lambda n, c, y, x: Z[n, 2 - c, y, x] * 2.0, name="W")
    >>> planes([Y, Z, W], set()) is None  # W reads Z at another channel
    True
    """
    stored = [t for t in group if t.uid not in inline]
    inlined = {t.uid: t for t in group if t.uid in inline}
    if not stored or not all(_candidate(t) and t.ndim >= 3 for t in stored):
        return None
    a0, a1 = stored[0].axes[0], stored[0].axes[1]
    members = {t.uid for t in stored}
    seen: Dict[int, Tensor] = {}
    for t in stored:
        b0, b1 = t.axes[0], t.axes[1]
        if not all(same(x.lo, y.lo) and same(x.hi, y.hi) for x, y in ((a0, b0), (a1, b1))):
            return None
        seen[t.uid] = t
        for r in _reads(t.body, inlined):
            at = (len(r.indices) >= 2 and all(isinstance(x, Axis) and x.uid == y.uid
                                              for x, y in zip(r.indices[:2], (b0, b1))))
            if r.tensor.uid in members and not at:
                return None
            if at:
                seen.setdefault(r.tensor.uid, r.tensor)
    total: Expr = Const(0, I64)
    for u in seen.values():
        size: Expr = Const(np.dtype(u.dtype).itemsize, I64)
        for d in u.dims[2:]:
            size = _mul(size, d)
        total = _add(total, size)
    return total


def _mul(a: Expr, b: Expr) -> Expr:
    x, y = const_value(a), const_value(b)
    return Const(x * y, I64) if x is not None and y is not None else Binary("mul", a, b, I64)


def _add(a: Expr, b: Expr) -> Expr:
    x, y = const_value(a), const_value(b)
    return Const(x + y, I64) if x is not None and y is not None else Binary("add", a, b, I64)


def plane_blocks(n0: Expr, n1: Expr, plane: Expr):
    """``(blocks, per_block)``: the second axis (``n1`` points of ``plane`` bytes) cut
    into ``blocks`` of ``per_block`` points (the last maybe fewer), each under
    SLAB_BYTES, balanced, and at least enough of them for SLABS slabs in all with the
    ``n0`` rows of the first axis (at most one per point); with constant sizes, a
    multiple of slab_align() points when more (Python ints), else expressions.

    >>> plane_blocks(Const(8, "int64"), Const(32, "int64"), Const(45056, "int64"))
    (7, 5)
    >>> with target.use(target.Target(64, 32, True)):   # 8-row tiles: 56 = 7 x 8
    ...     plane_blocks(Const(2, "int64"), Const(1000, "int64"), Const(1024, "int64"))
    (18, 56)
    >>> with target.use(target.Target(32, 16, True)):   # 6-row tiles: 60 = 10 x 6
    ...     plane_blocks(Const(2, "int64"), Const(1000, "int64"), Const(1024, "int64"))
    (17, 60)
    >>> plane_blocks(Const(1, "int64"), Const(4, "int64"), Const(64, "int64"))
    (4, 1)
    """
    c0, c1, cp = const_value(n0), const_value(n1), const_value(plane)
    if None not in (c0, c1, cp):
        fit = min(max(SLAB_BYTES // max(cp, 1), 1), max(c1, 1))
        blocks = max(-(-c1 // fit), min(-(-SLABS // max(c0, 1)), c1), 1)
        per = -(-c1 // blocks)
        align = slab_align()
        if per > align:  # whole row blocks (lower.row_block) where they fit
            per = max(per // align * align, 1)
        return -(-c1 // per), per

    def cdiv(a: Expr, b: Expr) -> Expr:
        return Binary("floordiv", Binary("add", a, Binary("sub", b, Const(1, I64), I64), I64),
                      b, I64)

    one = Const(1, I64)
    fit = Binary("min", Binary("max", Binary("floordiv", Const(SLAB_BYTES, I64),
                                             Binary("max", plane, one, I64), I64), one, I64),
                 Binary("max", n1, one, I64), I64)
    least = Binary("min", cdiv(Const(SLABS, I64), Binary("max", n0, one, I64)), n1, I64)
    blocks = Binary("max", Binary("max", cdiv(n1, fit), least, I64), one, I64)
    return blocks, cdiv(n1, blocks)


def lower_group(lowerer, group: List[Compute], nslab: int) -> List[Stmt]:
    """``group`` as one loop over slabs of rows (``nslab`` 1) or planes (2) of its first
    axes, as :func:`decide` chose."""
    stored = [t for t in group if t.uid not in lowerer.inline]
    ax = stored[0].axes[0]
    saved_sizes = dict(lowerer.sizes)
    saved_params = lowerer.params
    los, his = [], []
    for _ in range(nslab):
        los.append(lowerer.fresh("s", I64))
        his.append(lowerer.fresh("s", I64))
    names = slab_names(nslab)
    for (lo_name, hi_name), lo_var, hi_var in zip(names, los, his):
        lowerer.sizes[lo_name], lowerer.sizes[hi_name] = lo_var, hi_var
    lowerer.params = tuple(saved_params) + tuple(n for pair in names for n in pair)
    body: List[Stmt] = []
    works = []
    shares: List[str] = []
    try:
        for t in group:
            if t.uid in lowerer.inline:
                body.append(Comment(f"{t} [computed where it is read]"))
                continue
            lowerer.owner = t
            works.append(lowerer.work(t, list(t.axes)))
            stmts = lowerer.compute(member(t, names))
            # a member whose rows the team shares as it comes (a gather's) keeps that
            # for the slabs: no slab loop has a reduction clause
            shares.extend(s.share for s in stmts if isinstance(s, For) and s.share)
            if not _outermost(stmts, los, his):
                raise AssertionError(
                    f"the strategy of {t.name} ({lowerer.record.freeze()[t.name]}) declares "
                    f"that it runs the first {nslab} axes outermost, and its loops do not: "
                    f"fix its leads in codegen/strategies.py")
            body.append(Block((_comment(t),) + tuple(_serial(s) for s in stmts)))
    finally:
        # the slab's bounds are size variables of its members only
        lowerer.sizes = saved_sizes
        lowerer.params = saved_params
    work = total_work(works)
    kw = dict(parallel=work is not False, work=None if work is False else work,
              share=shares[0] if shares else "")
    members = ", ".join(t.name for t in stored)
    lo, hi = lowerer.size_expr(ax.lo), lowerer.size_expr(ax.hi)
    if nslab == 1:
        rows = slab_rows(_extent(ax), tiled(lowerer, group))
        start = lowerer.fresh("i", I64)
        end = Op("min", (Op("add", (start, Lit(rows, I64)), I64), hi), I64)
        head = (Decl(los[0], Op("add", (start, Lit(1, I64)), I64)), Decl(his[0], end))
        return [For(start, lo, hi, rows, Block(head + tuple(body)), **kw,
                    note=f"{ax.name}: slabs of {rows} rows of {members}")]
    # slab q: row lo + q / blocks of the first axis, block q % blocks of the second
    ax1 = stored[0].axes[1]
    blocks, per = plane_blocks(_extent(ax), _extent(ax1), planes(group, lowerer.inline))
    pre: List[Stmt] = []
    if isinstance(blocks, int):
        nb, pb = Lit(blocks, I64), Lit(per, I64)
    else:  # sizes known at run time: the block shape once, before the loop
        nb, pb = lowerer.fresh("s", I64), lowerer.fresh("s", I64)
        n1 = lowerer.size_expr(_extent(ax1))
        per_c = Op("quot", (Op("sub", (_plus(n1, nb), Lit(1, I64)), I64), nb), I64)
        pre = [Decl(nb, lowerer.size_expr(blocks)), Decl(pb, per_c)]
    q = lowerer.fresh("i", I64)
    row = _plus(lo, Op("quot", (q, nb), I64))
    c0 = _plus(lowerer.size_expr(ax1.lo), Op("mul", (Op("rem", (q, nb), I64), pb), I64))
    c1 = Op("min", (_plus(c0, pb), lowerer.size_expr(ax1.hi)), I64)
    one = Lit(1, I64)
    head = (Decl(los[0], _plus(row, one)), Decl(his[0], _plus(row, one)),
            Decl(los[1], _plus(c0, one)), Decl(his[1], c1))
    n0 = lowerer.size_expr(_extent(ax))
    count = (Lit(n0.value * nb.value, I64) if isinstance(n0, Lit) and isinstance(nb, Lit)
             else Op("mul", (n0, nb), I64))
    note = (f"slabs of {per} planes of {members}" if isinstance(per, int)
            else f"slabs of planes of {members} (as many as fit SLAB_BYTES)")
    return pre + [For(q, Lit(0, I64), count, 1, Block(head + tuple(body)), **kw,
                      note=f"{ax.name}, {ax1.name}: {note}")]


def _plus(a, b):
    """``a + b`` in C, without a ``0 +``."""
    if isinstance(a, Lit) and a.value == 0:
        return b
    return Op("add", (a, b), I64)


def _comment(t: Tensor) -> Comment:
    return Comment(str(t))


def _mentions(x, var: Var) -> bool:
    match x:
        case Var():
            return x == var
        case Op(_, args, _):
            return any(_mentions(a, var) for a in args)
    return False


def _outermost(stmts: List[Stmt], lo: Sequence[Var], hi: Sequence[Var]) -> bool:
    """Do the member's loops start at the slab's first row and end at its last (its
    first axis outermost, in one loop or a main loop and a remainder), and, for a slab
    of planes, do the loops each of those runs first and last do the same for the
    second axis (it is the next loop)?"""
    loops = [s for s in flat(stmts) if isinstance(s, For)]
    if not loops or any(not isinstance(s, (For,)) and not _harmless(s) for s in flat(stmts)):
        return False
    if not (_mentions(loops[0].lo, lo[0]) and _mentions(loops[-1].hi, hi[0])):
        return False
    if len(lo) > 1:
        for outer in loops:
            inner = [s for s in flat(outer.body.stmts) if isinstance(s, For)]
            if not inner or not (_mentions(inner[0].lo, lo[1]) and _mentions(inner[-1].hi, hi[1])):
                return False
            if any(not isinstance(s, (For, Decl)) and not _harmless(s)
                   for s in flat(outer.body.stmts)):
                return False
    return True


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

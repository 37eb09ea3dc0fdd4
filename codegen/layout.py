"""Transposed copies for dot-product-shaped sums (``H B^T``), so they run by rows;
zero-padded copies for narrow row sums.

The fast schedule of a sum (``lower.Lowerer.compute_rows``) keeps the innermost
output axis ``j`` innermost: every read walks along ``j`` in its last index, and
a tile of ``j`` is reduced at once in vector lanes. A sum like the gradient of a
matrix product, ``dA[i, k] = sum_j H[i, j] * B[k, j]``, has no such read: ``B``
is indexed by the output axis ``k`` in its first dimension and walks along the
reduction axis. Its schedule (``compute_jam``) reduces each element in vector
lanes along ``j`` and is about twice slower.

This module gives such a sum a transposed copy of the operand, ``B_T[j, k] =
B[k, j]`` (a blocked transpose, ``O(n^2)`` work for an ``O(n^3)`` sum), and
lowers the sum as ``sum_j H[i, j] * B_T[j, k]``: by rows. Each element still
adds the same products in the same order as the point-by-point loops.

:func:`install` (called when a :class:`~codegen.lower.Lowerer` is created)
replaces such a sum in the lowerer's tensor list by its rewritten form (same
uid, so same buffer and output) and places the copies before it; the sum then
takes the rows schedule by the ordinary rules. A copy is made only when

* the sum is dot-product shaped (``patterns.jam_reduce``) and would otherwise not be
  computed by rows, and after the move it would be (``patterns.row_reduce``);
* each moved read indexes its tensor with the output axis ``j`` itself in one
  dimension other than the last, and the last dimension free of ``j``; every index
  is an axis ranging over its whole dimension (no read that a run-time check guards
  is moved: its error report names the tensor the user wrote; and the copy holds
  only elements the sum reads);
* the sum has at least ``MIN_ROWS`` rows per element of the copy (the extents of
  the outer output axes the moved read does not use): the copy costs one row;
* the copy can be placed between its source and the sum without changing how
  row fusion (``codegen.fuse``) groups the other tensors. Copies are never fused
  (``fuse`` asks ``copies.is_copy``): the sum reads a copy across its rows, so the
  copy must be complete before the sum's slab loop starts.

Programs with recurrences are left alone (their lowering keeps rolling buffers),
but for the sums a recurrence run by steps computes at each step
(``codegen.recurrence_steps``): :func:`step_copies` gives those the same transposed
copies of the inputs they read, made once before everything else (an RNN's gradient
``sum_j dZ[b, j] * Wh[k, j]`` reads ``Wh_T`` by rows at every step).

A row sum narrower than a vector register (``h W2`` with 10 outputs per row) gets
zero-padded copies of the operands it reads along the row instead (``copies.padded``,
:func:`_pads`): its row blocks then run whole vectors of lanes, the lanes beyond
the row computed and never stored.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from tensorexpr.ir import (Axis, Compute, Placeholder, Read, Select, Tensor, INDEX_DTYPE,
                           is_float, same, tensor_inputs, walk)
from tensorexpr.transform import const_value, map_reads

from . import fuse, target
from .copies import moved_read, padded, transposed
from .patterns import jam_reduce, row_block_axis, row_reduce, where_form

I64 = INDEX_DTYPE

#: a sum gets a transposed copy of an operand only if it reads each element of it at least
#: this many times (once per value of the outer output axes the read does not use;
#: symbolic extents count as many)
MIN_ROWS = 8


def pad_width(n: int, dtype: str) -> Optional[int]:
    """The width a row of ``n`` elements narrower than a register tile and not a whole
    number of vectors is padded to (whole vectors of the target), else None.

    >>> from codegen.target import Target, use
    >>> with use(Target(32, 16, True)):   # AVX2: 8 floats a vector, tiles of 16
    ...     pad_width(10, "float32"), pad_width(5, "float32"), pad_width(16, "float32")
    (16, 8, None)
    """
    t = target.current()
    lanes = t.lanes(dtype)
    if n % lanes == 0 or n >= lanes * t.tile_vectors:
        return None
    return -(-n // lanes) * lanes


def _pads(t: Tensor) -> Optional[List[Read]]:
    """The reads of ``t``'s sum to read from zero-padded copies instead, or None.

    A row sum (``patterns.row_reduce``) whose row axis ``j`` is narrower than a register
    tile and not whole vectors (10 outputs of a perceptron's last layer: ``h W2``) runs
    its lanes loop ``n`` wide; gcc splits it into a vector and a spilled remainder (a
    256 x 512 x 10 product ran at 22 GFLOP/s on AVX-512). Read through copies padded with
    zeros to whole vectors (:func:`pad_width`), every row block runs whole vectors (the
    lanes beyond ``n`` are computed, and never stored: ``lower.compute_rows`` asks
    :func:`copies.padded_width`; the other reads are at the
    points of the stored lanes). Only float sums without branches whose every read along
    ``j`` indexes the last dimension with ``j`` itself, over all of it, static sizes,
    with an outer axis to block the rows over.
    """
    from tensorexpr.ir import Reduce

    if not isinstance(t, Compute) or t.carry is not None or t.self_ref is not None:
        return None
    red = row_reduce(t)
    if (red is None or red.op != "sum" or not is_float(red.dtype)
            or any(isinstance(x, (Select, Reduce)) for x in walk(red.body, unique=True))):
        return None
    j = t.axes[-1]
    n = const_value(j.hi)
    if n is None or pad_width(n, red.dtype) is None or n < 2 or const_value(j.lo) != 0:
        return None
    body, where = where_form(red)
    if where is not None or red.where is not None or row_block_axis(t, red) is None:
        return None
    out: List[Read] = []
    for r in (x for x in walk(red.body, unique=True) if isinstance(x, Read)):
        uses = [any(isinstance(x, Axis) and x.uid == j.uid for x in walk(i, unique=True)) for i in r.indices]
        if not any(uses):
            continue
        if (any(uses[:-1]) or not isinstance(r.indices[-1], Axis) or r.tensor.uid == t.uid
                or not isinstance(r.tensor, (Placeholder, Compute))
                or r.tensor.dtype != red.dtype or not _covers(r.indices[-1], r.tensor.dims[-1])
                or any(const_value(d) is None for d in r.tensor.dims)):
            return None
        out.append(r)
    return out or None


#: a row sum's operand read down its columns (``A`` of ``A^T B``) is copied transposed when
#: it is larger than this (the L2 of one core): every row block's walk along the
#: reduction then reads contiguous rows instead of one element per row of ``A``, each on
#: its own page when the rows are 4 KB or longer (1024^3 A^T B, one core: 60 GFLOP/s)
STRIDED_BYTES = 1 << 20
#: ... and its rows are at least a page long (2 KB rows, 512 x 1024 x 512: no gain measured)
PAGE_BYTES = 4096


def _strided_rows(t: Tensor) -> Optional[List[Tuple[Read, int]]]:
    """The reads of a row-blocked sum ``t`` to move to transposed copies, with the
    dimension of each to move last, or None: 2-d reads ``A[k, i]`` of the blocked row
    axis ``i`` (last) and a reduction axis ``k`` (first), each over its whole dimension,
    of a tensor over ``STRIDED_BYTES`` with rows of ``PAGE_BYTES`` or more (static
    sizes). Moved, ``A_T[i, k]`` is read
    along ``k``: contiguous."""
    if not isinstance(t, Compute) or t.carry is not None or t.self_ref is not None:
        return None
    red = row_reduce(t)
    if red is None:
        return None
    ri = row_block_axis(t, red)
    if ri is None:
        return None
    row, j = t.axes[ri], t.axes[-1]
    rax = {ax.uid for ax in red.axes}
    out: List[Tuple[Read, int]] = []
    for r in (x for x in walk(red.body, unique=True) if isinstance(x, Read)):
        if len(r.indices) != 2 or not all(isinstance(i, Axis) for i in r.indices):
            continue
        first, last = r.indices
        if last.uid != row.uid or first.uid not in rax or first.uid == j.uid:
            continue
        dims = [const_value(d) for d in r.tensor.dims]
        if (any(d is None for d in dims) or not isinstance(r.tensor, (Placeholder, Compute))
                or r.tensor.uid == t.uid
                or not all(_covers(i, d) for i, d in zip(r.indices, r.tensor.dims))):
            continue
        item = np.dtype(r.tensor.dtype).itemsize
        if dims[0] * dims[1] * item > STRIDED_BYTES and dims[1] * item >= PAGE_BYTES:
            out.append((r, 0))
    return out or None


def _moves(t: Tensor) -> Optional[List[Tuple[Read, int]]]:
    """The reads of ``t``'s sum to move and the dimension of each to move last, or None
    when ``t`` is not a sum that moving reads turns into a row sum."""
    if not isinstance(t, Compute) or t.carry is not None or t.self_ref is not None:
        return None
    red = jam_reduce(t)
    if red is None or row_reduce(t) is not None:
        return None
    j = t.axes[-1]
    out: List[Tuple[Read, int]] = []
    exprs = [red.body] + ([red.where] if red.where is not None else [])
    for r in (x for e in exprs for x in walk(e, unique=True) if isinstance(x, Read)):
        uses = [any(isinstance(x, Axis) and x.uid == j.uid for x in walk(i, unique=True))
                for i in r.indices]
        if not any(uses[:-1]):
            continue
        where = [k for k, u in enumerate(uses) if u]
        if len(where) != 1 or where[0] == len(uses) - 1:
            return None
        p = where[0]
        if not (isinstance(r.indices[p], Axis) and r.indices[p].uid == j.uid):
            return None
        if not isinstance(r.tensor, (Placeholder, Compute)) or r.tensor.uid == t.uid:
            return None
        if not all(_covers(i, d) for i, d in zip(r.indices, r.tensor.dims)):
            return None
        # The sum reads each element of the copy once per value of the output axes the
        # read does not use (``i`` of ``H B^T``, not the batch axis of a batched one):
        # the copy costs one such row.
        rows = 1
        for ax in t.axes[:-1]:
            if any(isinstance(x, Axis) and x.uid == ax.uid for i in r.indices for x in walk(i, unique=True)):
                continue
            lo, hi = const_value(ax.lo), const_value(ax.hi)
            rows *= MIN_ROWS if lo is None or hi is None else max(hi - lo, 0)
        if rows < MIN_ROWS:
            return None
        out.append((r, p))
    return out or None


def _covers(index, dim) -> bool:
    """Is ``index`` an axis ranging over exactly ``[0, dim)``? Then the read needs no
    run-time check (moved, it needs none either), and the copy holds no element the
    sum does not read (a copy of a large tensor for a few of its rows would cost more
    than the sum)."""
    if not isinstance(index, Axis):
        return False
    lo, hi, n = const_value(index.lo), const_value(index.hi), const_value(dim)
    return lo == 0 and (same(index.hi, dim) or (hi is not None and hi == n))


def _apply(t: Compute, copies: Dict[Tuple[int, int], Compute]) -> Optional[Compute]:
    """``t`` with its movable reads redirected to ``copies`` (keyed by tensor uid and
    moved dimension), or None when a copy is missing or the result is no row sum."""
    from dataclasses import replace

    moves = _moves(t)
    if moves is None or any((r.tensor.uid, p) not in copies for r, p in moves):
        return None
    which = {id(r): p for r, p in moves}
    # Reads are matched by identity before any rebuilding: map_reads hands fn the
    # rebuilt read, which is the same object when its indices are unchanged (they
    # hold no reads here).
    def move(r: Read) -> Read:
        p = which.get(id(r))
        return r if p is None else moved_read(r, p, copies[(r.tensor.uid, p)])

    out = replace(t, body=map_reads(t.body, move))
    return out if row_reduce(out) is not None else None


def plan(computed: Sequence[Tensor], inline: set) -> List[Tensor]:
    """The computed tensors of a program (in order) with each sum whose reads move
    replaced by its rewritten form (same uid: same buffer) and the transposed copies
    placed before it.

    >>> import tensorexpr as te
    >>> H = te.placeholder((16, 32), name="H"); B = te.placeholder((32, 32), name="B")
    >>> j = te.reduce_axis((0, 32), name="j")
    >>> dA = te.compute((16, 32), lambda i, k: te.sum(H[i, j] * B[k, j], axis=j), name="dA")
    >>> [str(t).split(" for ")[0].strip() for t in plan([dA], set())]
    ['B_T[a0, a1] = B[a1, a0]', 'dA[i, k] = sum_{j in [0, 32)} (H[i, j] * B_T[j, k])']
    """
    order = list(computed)
    if any(isinstance(t, Compute) and (t.carry is not None or t.self_ref is not None)
           for t in order):
        return order  # recurrences: rolling buffers are planned on the original tensors
    copies: Dict[Tuple[int, int], Compute] = {}
    for t in list(order):
        moves = _moves(t)
        if moves is None:
            continue
        mine: Dict[Tuple[int, int], Compute] = {}
        new: List[Compute] = []
        for r, p in moves:
            key = (r.tensor.uid, p)
            if key in copies:
                mine[key] = copies[key]  # another sum's copy of the same operand
            elif key not in mine:
                mine[key] = transposed(r.tensor, p)
                new.append(mine[key])
        moved = _apply(t, mine)
        if moved is None:
            continue
        trial: Optional[List[Tensor]] = [moved if x.uid == t.uid else x for x in order]
        for c in new:
            trial = place(trial, c, moved, inline)
            if trial is None:
                break
        if trial is not None:
            order = trial
            copies.update(mine)
    for t in list(order):
        moves = _strided_rows(t)
        if moves is None:
            continue
        mine = {}
        new = []
        for r, p in moves:
            key = (r.tensor.uid, p)
            mine[key] = copies.get(key) or mine.get(key) or transposed(r.tensor, p)
            if key not in copies and mine[key] not in new:
                new.append(mine[key])
        which = {id(r): p for r, p in moves}
        moved = replace(t, body=map_reads(t.body, lambda r: r if id(r) not in which else
                                          moved_read(r, which[id(r)],
                                                     mine[(r.tensor.uid, which[id(r)])])))
        trial = [moved if x.uid == t.uid else x for x in order]
        for c in new:
            trial = place(trial, c, moved, inline)
            if trial is None:
                break
        if trial is not None:
            order = trial
            copies.update(mine)
    pads: Dict[int, Compute] = {}
    for t in list(order):
        reads = _pads(t)
        if reads is None:
            continue
        n = const_value(t.axes[-1].hi)
        width = pad_width(n, reads[0].dtype)
        mine_p = {r.tensor.uid: pads.get(r.tensor.uid) or padded(r.tensor, n, width)
                  for r in reads}
        fresh = [c for u, c in mine_p.items() if u not in pads]
        ids = {id(r) for r in reads}
        out = replace(t, body=map_reads(t.body, lambda r: Read(
            mine_p[r.tensor.uid], r.indices, r.dtype) if id(r) in ids else r))
        trial = [out if x.uid == t.uid else x for x in order]
        for c in fresh:
            trial = place(trial, c, out, inline)
            if trial is None:
                break
        if trial is not None:
            order = trial
            pads.update(mine_p)
    return order


def step_copies(steps: Dict[int, object], scratch: Sequence[Tuple[Tensor, str]]
                ) -> Tuple[Dict[int, object], List[Tuple[Tensor, str]], List[Compute]]:
    """``(steps, scratch, copies)``: the plans of the tensors run by steps
    (``codegen.recurrence_steps``) and the scratch tensors with each per-step sum that
    moving reads of inputs (placeholders) turns into a row sum (:func:`_moves`) reading
    transposed copies instead; ``copies``, to compute before everything else (nothing
    they read is computed; never fused: ``codegen.fuse``). Every build of the program
    (a checkpointed one too) lowers the sums so, each element adding the same products
    in the same order as the point-by-point loops.

    >>> import tensorexpr as te
    >>> from codegen import recurrence_steps
    >>> from codegen.schedule import DEFAULT
    >>> W, k = te.placeholder((16, 16), name="W"), te.reduce_axis(16, name="k")
    >>> def step(h, t, b, j):  # reads W down its rows
    ...     return te.select(t == 0, 1.0, te.sum(h[t - 1, b, k] * W[j, k], axis=k))
    >>> scratch, plans = recurrence_steps.rewrite([te.recurrence((5, 8, 16), step, name="h")],
    ...                                           DEFAULT)
    >>> h = next(iter(plans.values())).t
    >>> plans, scratch, copies = step_copies(plans, scratch)
    >>> [c.name for c in copies], str(plans[h.uid].sums[0].body).endswith("* W_T[k, j]))")
    (['W_T'], True)
    """
    made: Dict[Tuple[int, int], Compute] = {}
    new: Dict[int, Compute] = {}  # sum uid -> the sum reading copies
    for p in steps.values():
        for t in p.sums:
            moves = _moves(t)
            if moves is None or not all(isinstance(r.tensor, Placeholder) for r, _ in moves):
                continue
            mine = {(r.tensor.uid, q): made.get((r.tensor.uid, q)) or transposed(r.tensor, q)
                    for r, q in moves}
            moved = _apply(t, mine)
            if moved is not None:
                made.update(mine)
                new[t.uid] = moved
    if not new:
        return steps, list(scratch), []

    def reread(r: Read) -> Read:
        return Read(new[r.tensor.uid], r.indices, r.dtype) if r.tensor.uid in new else r
    steps = {u: replace(p, sums=tuple(new.get(t.uid, t) for t in p.sums),
                        rest=replace(p.rest, body=map_reads(p.rest.body, reread)))
             for u, p in steps.items()}
    scratch = [(new.get(t.uid, t), note) for t, note in scratch]
    return steps, scratch, list(dict.fromkeys(made.values()))


def _groups(tensors: Sequence[Tensor], inline: set) -> List[Tuple[int, ...]]:
    return [tuple(t.uid for t in g) for g in fuse.plan(list(tensors), inline)]


def place(order: List[Tensor], copy: Compute, consumer: Tensor, inline: set
           ) -> Optional[List[Tensor]]:
    """``order`` with ``copy`` inserted after its source and before ``consumer``, at the
    first group boundary where row fusion groups every other tensor as before (the
    copy is never fused: ``fuse`` asks :func:`is_copy`); None if there is no such
    place.

    >>> import tensorexpr as te
    >>> B = te.placeholder((32, 32), name="B")
    >>> C = te.compute((32, 32), lambda i, j: B[i, j] * 2.0, name="C")
    >>> [t.name for t in place([C], transposed(B, 0), C, set())]
    ['B_T', 'C']
    """
    before = _groups(order, inline)
    pos = {t.uid: k for k, t in enumerate(order)}

    def ready(t: Tensor) -> int:
        """The first position where ``t`` can be read: after it, or, if it is computed
        where it is read (inlined), after what it reads."""
        if t.uid not in pos:
            return 0
        if t.uid not in inline:
            return pos[t.uid] + 1
        return max([ready(x) for x in tensor_inputs(t)], default=0)

    first = max(ready(x) for x in tensor_inputs(copy))
    last = pos[consumer.uid]
    b = 0
    for gi in range(len(before) + 1):
        if first <= b <= last:
            trial = order[:b] + [copy] + order[b:]
            if _groups(trial, inline) == before[:gi] + [(copy.uid,)] + before[gi:]:
                return trial
        if gi < len(before):
            b += len(before[gi])
    return None


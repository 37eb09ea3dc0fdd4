"""The program rewrite of residue splits: strided gathers read contiguous planes.

Each sum of the program that ``codegen.residue_split`` can split (its reduction axes
``y = s*q + r + c0``) is replaced by the split form: the parts, each a tensor of its
own placed just before the sum, and the sum itself (same uid, same buffer) reading
its points from them, or the sum rewritten in place when no output axis was split.

A read left strided along the quotient axes (``H[n, f, 2*q + 1, 2*p]`` in a part of a
transposed convolution's weight gradient, ``H[n, f, 2*(y + qy - 1) + ry, ...]`` in its
input gradient) is moved to a residue-packed copy of its tensor (``copies.packed``:
``s`` de-interleaved planes per strided dimension, shared by every sum that packs the
same tensor the same way), where it is contiguous along ``q`` and indexed by plain
affine forms: the sums then take the ordinary row and tap schedules (register tiles,
zero-padded copies).

The cost model: a copy costs one pass over the operand; the strided loads it replaces
cost one per point of the sums that read it, so a read is moved only when the sums
read each element at least ``MIN_REUSE`` times (a pooling window reads each element
about ``(k/s)^2`` times: no copy), and only when it steps by ``s`` along the axis the
sum's fast schedules run in vector lanes (``residue_split.lanes``: the row, or the
last reduction axis of a weight gradient; a weight read by taps stays as it is). A
sum's split is kept when it pays: some read is moved and none is left gathering along
the lanes (a residue fixed by the outer point alone saves nothing: isl already steps
over the points a modulo condition skips). The copy is placed where it leaves row
fusion as it was (``layout.place``). Only sums whose every read isl proves in range
are split: no run-time check would report a part or a copy instead of the tensor the
user wrote.

Each kept split is a line of the schedule (``Schedule.residues``), with the copies its
sums read.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Dict, List, Optional, Sequence, Tuple

from tensorexpr.ir import Compute, Placeholder, Read, Tensor, walk
from tensorexpr.polyhedral import PointSet, conjuncts, params_of
from tensorexpr.transform import const_value, map_reads

from . import residue_classes
from .copies import packed, packed_read
from .layout import place
from .patterns import only_sum, where_form
from .residue_algebra import decompose, terms
from .residue_split import MAX_STRIDE, Split, lanes, split, strided

#: a read moves to a packed copy only if its sum reads each element this many times
MIN_REUSE = 8

Key = Tuple[int, Tuple[int, ...], int]   # (tensor uid, packed dimensions, stride)


def packs(t: Compute, kept: set) -> List[Tuple[Read, Key, list]]:
    """The reads of ``t``'s sum that may move to packed copies: ``(read, (tensor uid,
    dims, s), planes)``, ``planes`` each moved dimension's ``(plane, quotient)``.
    ``kept``: uids of the residue axes of the sum (``Split.kept``). Whether a copy pays
    is the caller's to judge (:func:`points`: the sums that would read it), and that
    the reads are in range (a read outside would find a zero of the copy).

    >>> import tensorexpr as te
    >>> H = te.placeholder((4, 32), name="H"); X = te.placeholder((4, 16, 16), name="X")
    >>> n, q = te.reduce_axis(4, "n"), te.reduce_axis(16, "q")
    >>> P = te.compute((16, 2), lambda c, a: te.sum(H[n, 2 * q + 1] * X[n, c, q - a + 1],
    ...                axis=[n, q], where=(q - a + 1 >= 0) & (q - a + 1 < 16)), name="P")
    >>> [(r.tensor.name, key[1:], [str(x) for x in pl[0]]) for r, key, pl in packs(P, set())]
    [('H', ((1,), 2), ['1', 'q'])]
    """
    red = only_sum(t)
    if red is None:
        return []
    body = where_form(red)[0]
    out: List[Tuple[Read, Key, list]] = []
    lane = lanes(t, red)
    for r in (x for x in walk(body, unique=True) if isinstance(x, Read)):
        if (r.tensor.uid == t.uid or not isinstance(r.tensor, (Placeholder, Compute))
                or not strided(r, lane)):
            continue
        strides = {}
        for d, idx in enumerate(r.indices):
            form = terms(idx)
            if form is None:
                continue
            free = [abs(c) for u, c in form[1].items() if u not in kept]
            g = math.gcd(*free) if free else 0
            if g >= 2:
                strides[d] = g
        if not strides:
            continue
        s = min(strides.values())
        dims = tuple(sorted(strides))
        if (s > MAX_STRIDE or any(g % s for g in strides.values())
                or any(const_value(r.tensor.dims[d]) is None for d in dims)):
            continue
        planes = [decompose(r.indices[d], s, kept) for d in dims]
        if any(p is None for p in planes):
            continue
        out.append((r, (r.tensor.uid, dims, s), planes))
    return out


def points(t: Compute) -> int:
    """Points of ``t``'s sum (output points times the reduction's box; a symbolic
    extent counts as 1: a batch, in the operands' elements alike).

    >>> import tensorexpr as te
    >>> X = te.placeholder((te.var("n"), 8), name="X")
    >>> k = te.reduce_axis(8, "k")
    >>> points(te.compute((te.var("n"), 4), lambda i, j: te.sum(X[i, k], axis=k), name="S"))
    32
    """
    red = only_sum(t)
    axes = list(t.axes) + (list(red.axes) if red is not None else [])
    return math.prod(_extent(a.lo, a.hi) for a in axes)


def _strided_reads(t: Compute) -> List[Read]:
    """The distinct reads of ``t``'s sum that step by 2 or more along its lanes."""
    red = only_sum(t)
    if red is None:
        return []
    lane = lanes(t, red)
    return [r for r in walk(where_form(red)[0], unique=True)
            if isinstance(r, Read) and r.tensor.uid != t.uid and strided(r, lane)]


def _checked_nowhere(t: Compute, params) -> bool:
    """Is every read of ``t``'s sum proven inside its tensor (isl, under the sum's
    domain)? Else a run-time check would report a part, not the tensor the user wrote."""
    red = only_sum(t)
    body, where = where_form(red)
    conds = conjuncts(where)
    axes = list(t.axes) + list(red.axes)
    ps = PointSet(axes, conds, sorted(set(params) | set(params_of(axes))))
    return all(ps.within(i, d) for e in [body] + conds for r in walk(e, unique=True)
               if isinstance(r, Read) for i, d in zip(r.indices, r.tensor.dims))


def _extent(lo, hi) -> int:
    """Points of ``[lo, hi)`` when static; a symbolic extent counts as 1 (a batch: in
    the sum's points and in the operand's elements alike)."""
    a, b = (0 if lo is None else const_value(lo)), const_value(hi)
    return 1 if a is None or b is None else max(b - a, 1)


def plan(sig, computed: Sequence[Tensor], inline: set, options
         ) -> Tuple[List[Tensor], List[str], List[str]]:
    """The computed tensors of a program (in order) with each sum whose split pays
    replaced by its parts and itself (module docstring), the packed copies placed
    before their first reader; a line per split for the schedule, and a line per sum
    split into residue classes of its output (``codegen.residue_classes``, when
    ``options.residue_classes``).

    >>> import tensorexpr as te
    >>> from codegen.signature import Signature
    >>> from codegen.schedule import DEFAULT
    >>> H = te.placeholder((8, 64), name="H"); X = te.placeholder((8, 16, 32), name="X")
    >>> n, y = te.reduce_axis(8, "n"), te.reduce_axis(64, "y")
    >>> dW = te.compute((16, 4), lambda c, k: te.sum(H[n, y] * X[n, c, (y + 1 - k) // 2],
    ...     axis=[n, y], where=((y + 1 - k) % 2 == 0) & (y + 1 >= k) & (y + 1 - k < 64)),
    ...     name="dW")
    >>> order, lines, _ = plan(Signature([dW], [H, X]), [dW], set(), DEFAULT)   # 16 reads of H
    >>> [t.name for t in order]
    ['H_planes', 'dW_r0', 'dW_r1', 'dW']
    >>> for part in lines[0].split("; "): print(part)
    dW: y = 2*y//2 + y%2 (fixed by the outer point)
    k by residues of 2: dW_r0, dW_r1
    reads H_planes
    """
    order = list(computed)
    lines: List[str] = []
    classes: List[str] = []
    if any(isinstance(t, Compute) and (t.carry is not None or t.self_ref is not None)
           for t in order):
        return order, lines, classes  # recurrences: rolling buffers are planned on the tensors
    params = tuple(sig.size_names)
    copies: Dict[Key, Compute] = {}
    for t in list(computed):
        if t.uid in inline or options.forced(t.name) is not None:
            continue
        sp = split(t, classes=options.residue_classes)
        if sp is None or (sp.classes and not residue_classes.pays(sp)):
            continue  # (without classes such a sum is not split at all)
        done = _apply(sp, order, copies, inline, params)
        if done is None:
            continue
        order, mine, line = done
        copies.update(mine)
        lines.append(line)
        if sp.classes:
            classes.append(residue_classes.line(sp))
    return order, lines, classes


def _apply(sp: Split, order: List[Tensor], copies: Dict[Key, Compute], inline: set,
           params) -> Optional[Tuple[List[Tensor], Dict[Key, Compute], str]]:
    """``order`` with ``sp`` in place of its tensor and its reads packed, the copies it
    made, and its schedule line; None when it does not pay or a copy finds no place."""
    if not _checked_nowhere(sp.orig, params):
        return None
    kept = {a.uid for a in sp.kept}
    mine: Dict[Key, Compute] = {}
    sums: List[Compute] = []
    readers: Dict[Key, Compute] = {}
    found = [(p, packs(p, kept)) for p in sp.sums]
    # a copy pays when the sums read each of its elements MIN_REUSE times (all the
    # parts of this sum; a copy another sum made is paid for)
    reads: Dict[Key, int] = {}
    sizes: Dict[Key, int] = {}
    for p, moves in found:
        for r, key, _ in {key: (r, key, pl) for r, key, pl in moves}.values():
            reads[key] = reads.get(key, 0) + points(p)
            sizes[key] = math.prod(_extent(None, d) for d in r.tensor.dims)
    pays = {k for k in reads if k in copies or reads[k] >= MIN_REUSE * sizes[k]}
    for p, moves in found:
        moves[:] = [m for m in moves if m[1] in pays]
        if len(moves) < len(_strided_reads(p)):
            return None  # a read would still gather along the lanes
    for p, moves in found:
        which = {}
        for r, key, planes in moves:
            if key not in copies and key not in mine:
                mine[key] = packed(r.tensor, key[1], key[2])
            which[id(r)] = (key, planes)

        def move(r: Read, which=which) -> Read:
            got = which.get(id(r))
            if got is None:
                return r
            key, planes = got
            return packed_read(r, copies.get(key) or mine[key], key[1], planes)

        new = replace(p, body=map_reads(p.body, move)) if which else p
        for key, _ in which.values():
            readers.setdefault(key, new)
        sums.append(new)
    if not readers and not sp.classes:
        return None  # no read steps by 1 along the lanes that did not before
    # (output residue classes pay by themselves: each is a dense sum, no residue left
    # moving with its rows)
    if sp.parts:
        by_uid = {p.uid: p for p in sums}
        final = replace(sp.final, body=map_reads(
            sp.final.body, lambda r: Read(by_uid[r.tensor.uid], r.indices, r.dtype)
            if r.tensor.uid in by_uid else r))
        new_tensors = sums + [final]
    else:
        final = sums[0]
        new_tensors = [final]
    at = next(k for k, x in enumerate(order) if x.uid == sp.orig.uid)
    trial: Optional[List[Tensor]] = order[:at] + new_tensors + order[at + 1:]
    for key, copy in mine.items():
        trial = place(trial, copy, readers[key], inline)
        if trial is None:
            return None
    names = sorted({(copies.get(k) or mine[k]).name for k in readers})
    line = sp.describe() + (f"; reads {', '.join(names)}" if names else "")
    return trial, mine, line

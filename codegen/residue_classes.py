"""Residue classes of a strided gather's output: one dense sum per class.

The input gradient of a stride-``s`` convolution gathers the output gradient ``H``::

    dX[n, c, y, x] = sum_{f, ky, kx if (y - ky) % s == 0 & (x - kx) % s == 0 & ...}
                         H[n, f, (y - ky) // s, (x - kx) // s] * W[f, c, ky, kx]

Along the row ``x`` the taps that contribute change with ``x % s``: lowered as it is
written, every row runs per residue of ``x`` (``codegen.rowsum_residues``) with masked
tiles and accumulators in memory. Writing each such output axis ``y = s*q + b`` (one
*class* per combination of the constants ``b``) instead, the residue of every tap is
fixed by the class (``ky = s*a + (b mod s)``: ``codegen.residue_split`` folds the
modulo conditions away) and each class is a dense stride-1 sum of its own::

    dX_rBbBa[n, c, qy, qx] = sum_{f, a, a'} H[n, f, qy - a, qx - a'] * W[f, c, s*a + by, s*a' + bx]

over ``ceil((K - b) / s)`` taps per axis (``s = 2``, ``K = 3``: 2x2, 2x1, 1x2 and 1x1):
a "valid" convolution over a zero-padded copy of ``H`` (``codegen.padcopy``, shared by
the classes) with register tiles, no masks. ``dX`` then reads each point from its
class (``y % s`` picks it, ``y // s`` is its index there): one more pass over ``dX``.
Every point keeps its value and its terms; only the order of a sum's terms changes (the
reassociation ``tensorexpr.ir`` allows for sums).

The same holds for any stride up to ``residue_split.MAX_STRIDE``, kernel, padding and
dilation, 1-D or 2-D, channels first or last: whatever output axes move under ``// s``.
A class may have no taps at all (a kernel shorter than the stride, a dilation that is
a multiple of it): its sum is empty, its points zero.

The cost model: the classes cost one pass over the output (the parts are written, then
read once by the interleaving tensor); they pay when each output point adds at least
``MIN_TERMS`` terms (a convolution's channels times its taps; a pooling gradient adds
one or a few: no split), and only when the residues move with the sum's rows (the axis
in vector lanes). Where they move with outer axes alone (channels last: ``NHWC``, rows
over the channels) isl already steps over the taps a modulo condition skips, the rows
are dense dot products over a transposed weight, and the classes measured 3-4 times
slower (``dX`` of a stride-2 3x3 convolution, 8x33x33x16 -> 32: 0.90 against 2.99 ms):
no split.
"""
from __future__ import annotations

import math
from typing import List

from tensorexpr.ir import Compute, Const
from tensorexpr.polyhedral import conjuncts
from tensorexpr.transform import const_value, substitute

from .patterns import only_sum, uses, where_form
from .residue_algebra import fold_indices
from .residue_split import MAX_TAP, Split, lanes

#: the classes pay when each output point adds at least this many terms
MIN_TERMS = 8


def taps(part: Compute, sp: Split) -> List[int]:
    """The number of taps of each split reduction axis (``sp.residues``' quotients) in
    one class ``part``: the values its tests on that axis alone allow.

    >>> import tensorexpr as te
    >>> from codegen.residue_split import split
    >>> H, W = te.placeholder((4, 16), name="H"), te.placeholder((4, 3), name="W")
    >>> f, k = te.reduce_axis(4, "f"), te.reduce_axis(3, "k")
    >>> dX = te.compute((33,), lambda x: te.sum(H[f, (x - k) // 2] * W[f, k], axis=[f, k],
    ...                 where=((x - k) % 2 == 0) & (x >= k) & (x - k < 32)), name="dX")
    >>> sp = split(dX, classes=True)
    >>> [taps(p, sp) for p in sp.parts]   # x even: k = 0, 2; x odd: k = 1
    [[2], [1]]
    """
    red = only_sum(part)
    conds = conjuncts(where_form(red)[1]) if red is not None else []
    if any(const_value(fold_indices(c)) == 0 for c in conds):
        return [0] * max(len(_tap_axes(part, sp)), 1)   # a class no tap reaches
    out = []
    for q in _tap_axes(part, sp):
        alone = [c for c in conds if uses(c, {q.uid})
                 and not any(uses(c, {a.uid}) for a in list(part.axes) + list(red.axes)
                             if a.uid != q.uid)]
        n = 0
        for v in range(const_value(q.lo), const_value(q.hi)):
            vals = [const_value(fold_indices(substitute(c, {q: Const(v, "int64")})))
                    for c in alone]
            n += all(val is None or bool(val) for val in vals)
        out.append(n)
    return out


def _tap_axes(part: Compute, sp: Split) -> list:
    """The reduction axes of ``part`` that are taps: those split by residues, or (no
    reduction axis split: a dilated gather) the short ones."""
    red = only_sum(part)
    if red is None:
        return []
    if sp.residues:
        split_q = {x.q.uid for x in sp.residues}
        return [a for a in red.axes if a.uid in split_q]
    return [a for a in red.axes if (const_value(a.hi) or MAX_TAP + 1) <= MAX_TAP]


def terms(sp: Split) -> float:
    """Terms each output point of ``sp.orig`` adds, on average over its classes."""
    total = 0
    for p in sp.parts:
        red = only_sum(p)
        if red is None:
            return 0.0
        tap_q = {a.uid for a in _tap_axes(p, sp)}
        rest = math.prod(max(const_value(a.hi) - const_value(a.lo), 1)
                         for a in red.axes if a.uid not in tap_q
                         and const_value(a.hi) is not None and const_value(a.lo) is not None)
        total += _points(p) * rest * math.prod(taps(p, sp))
    return total / max(_points(sp.orig), 1)


def pays(sp: Split) -> bool:
    """Do ``sp``'s output residue classes pay (module docstring): it splits the axis the
    sum runs in vector lanes (``residue_split.lanes``: its rows) into classes, and each
    output point adds ``MIN_TERMS`` terms or more."""
    red = only_sum(sp.orig)
    if red is None or lanes(sp.orig, red).uid not in {a.uid for a, _ in sp.classes}:
        return False
    return terms(sp) >= MIN_TERMS


def line(sp: Split) -> str:
    """The schedule's line for ``sp``'s classes: the tensor, the stride, the classes
    and each one's taps.

    >>> import tensorexpr as te
    >>> from codegen.residue_split import split
    >>> H, W = te.placeholder((4, 16, 16), name="H"), te.placeholder((4, 3, 3), name="W")
    >>> f, ky, kx = te.reduce_axis(4, "f"), te.reduce_axis(3, "ky"), te.reduce_axis(3, "kx")
    >>> dX = te.compute((33, 33), lambda y, x: te.sum(
    ...     H[f, (y - ky) // 2, (x - kx) // 2] * W[f, ky, kx], axis=[f, ky, kx],
    ...     where=((y - ky) % 2 == 0) & ((x - kx) % 2 == 0) & (y >= ky) & (y - ky < 32)
    ...     & (x >= kx) & (x - kx < 32)), name="dX")
    >>> line(split(dX, classes=True))
    'dX (s=2: 4 classes, taps 2x2/2x1/1x2/1x1)'
    """
    strides = "/".join(map(str, sorted({s for _, s in sp.taps})))
    shapes = "/".join("x".join(map(str, taps(p, sp))) or "1" for p in sp.parts)
    return f"{sp.orig.name} (s={strides}: {len(sp.parts)} classes, taps {shapes})"


def _points(t: Compute) -> int:
    """Output points of ``t`` (a symbolic extent counts as 1)."""
    return math.prod(max((const_value(a.hi) or 1) - (const_value(a.lo) or 0), 1)
                     for a in t.axes)


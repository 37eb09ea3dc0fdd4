"""Residue splits of a sum's reduction axes: strided gathers as contiguous sums.

The gradients of strided and transposed convolutions gather with a stride. The
weight gradient of a stride-2 transposed convolution visits every ``(y, x)`` of the
output gradient and keeps one point in four::

    dW[c, f, ky, kx] = sum_{n, y, x if (y + 1 - ky) % 2 == 0 & (x + 1 - kx) % 2 == 0 & ...}
                           H[n, f, y, x] * X[n, c, (y + 1 - ky) // 2, (x + 1 - kx) // 2]

and the input gradient reads ``H[n, f, 2*y + ky - 1, 2*x + kx - 1]``: every other
element along the row. Here each such reduction axis ``y`` is written
``y = s*q + r + c0`` (``r`` a new reduction axis over ``[0, s)``, ``c0`` a constant
offset, conditions keeping ``y`` in its range where the split overshoots), and the
identities of ``codegen.residue_algebra`` take ``q`` out of every modulo by ``s`` and
make every ``// s`` step by 1 along ``q``:

* a condition ``(E + c*r) % s == 0`` (``c`` prime to ``s``, ``E`` free of the sum's
  axes) holds for exactly one ``r`` of ``[0, s)``, ``(m*E) % s`` with ``m = -1/c mod s``:
  ``r`` is replaced by that value and the condition dropped (the sum visits only the
  points it keeps);
* what ``r`` became moves with output axes (``ky`` above) through ``% s`` and ``// s``:
  each such short output axis ``u`` (a tap) is written ``s*a + b`` once per constant
  ``b`` of ``[0, s)``, one *part* (a tensor of its own) per combination; in a part
  every ``% s`` and ``// s`` folds to a constant or an affine index, and the tensor
  itself reads each point from its part (``u % s`` picks it, ``u // s`` is ``a``).

A part of ``dW`` is then the weight gradient of a stride-1 convolution
(``sum_{n, q, p} H[n, f, 2*q + 1, 2*p] * X[n, c, q - a + 1, p - b + 1]``), and the
input gradient a sum over ``(f, ry, rx, qy, qx)`` reading ``H[n, f, 2*(y + qy - 1) +
ry, ...]``; the reads left strided along ``q`` are moved to residue-packed copies
by ``codegen.residues`` (which decides whether that pays). Every point of every sum
keeps its value and its terms; only which points are visited, in which loops, changes.

A reduction axis is split by ``s`` when a floor division or modulo by ``s`` has it
in its dividend with coefficient +-1, or a read's index is ``s*(...) + y + k`` (the
other axes' coefficients multiples of ``s``; then ``c0`` makes that index
``s*(...) + r``). Only sums (a single one, reached through arithmetic), static bounds
of the split axes and strides up to ``MAX_STRIDE``.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from tensorexpr.ir import (Axis, Binary, Compute, Const, Expr, Read, Reduce, Select, Tensor,
                           INDEX_DTYPE, fresh_uid, walk)
from tensorexpr.polyhedral import conjuncts
from tensorexpr.transform import const_value, replace_subexpr, substitute

from .patterns import ROW_MIN, conj, only_sum, uses, where_form
from .residue_algebra import fold_indices, linear, terms, tidy

I64 = INDEX_DTYPE

#: largest stride a reduction axis is split by
MAX_STRIDE = 4
#: an output axis split into residue parts has at most this many points (a tap axis)
MAX_TAP = 8
#: at most this many parts (residue combinations of the split output axes)
MAX_PARTS = 16


@dataclass(frozen=True)
class Residue:
    """Reduction axis ``axis`` written ``s*q + r + c0``; ``fixed``: what ``r`` was
    replaced by (an expression of output axes), or None when ``r`` stays an axis of
    the sum."""

    axis: Axis
    s: int
    c0: int
    q: Axis
    r: Axis
    fixed: Optional[Expr]

    def __str__(self):
        y = self.axis.name
        off = f" {'+' if self.c0 > 0 else '-'} {abs(self.c0)}" if self.c0 else ""
        how = " (fixed by the outer point)" if self.fixed is not None else ""
        return f"{y} = {self.s}*{self.q.name} + {self.r.name}{off}{how}"


@dataclass(frozen=True)
class Split:
    """``orig`` rewritten: ``final`` (same uid) computes its values, from ``parts`` when
    output axes were split (``taps``, each by ``s`` residues), else by itself."""

    orig: Compute
    final: Compute
    parts: Tuple[Compute, ...]
    residues: Tuple[Residue, ...]
    taps: Tuple[Tuple[Axis, int], ...]

    @property
    def sums(self) -> Tuple[Compute, ...]:
        """The tensors holding the rewritten sum: the parts, or the final tensor."""
        return self.parts if self.parts else (self.final,)

    @property
    def classes(self) -> Tuple[Tuple[Axis, int], ...]:
        """The split output axes longer than a tap (``MAX_TAP``): residue classes of the
        output itself (``codegen.residue_classes``)."""
        return tuple((a, s) for a, s in self.taps if const_value(a.hi) > MAX_TAP)

    @property
    def kept(self) -> Tuple[Axis, ...]:
        """The residue axes that stay axes of the sums (not fixed by the outer point)."""
        return tuple(x.r for x in self.residues if x.fixed is None)

    def describe(self) -> str:
        """One line for the schedule.

        >>> import tensorexpr as te
        >>> X = te.placeholder((4, 21), name="X")
        >>> k = te.reduce_axis(3, "k")
        >>> Y = te.compute((4, 10), lambda i, x: te.sum(X[i, 2 * x + k], axis=k), name="Y")
        >>> split(Y).describe()   # X is read at 2*(x + k//2) + k%2: planes make it contiguous
        'Y: k = 2*k//2 + k%2'
        """
        text = f"{self.orig.name}: " + ", ".join(str(x) for x in self.residues)
        if self.taps:
            axes = ", ".join(a.name for a, _ in self.taps)
            strides = sorted({s for _, s in self.taps})
            text += (f"{'; ' if self.residues else ''}{axes} by residues of "
                     f"{'/'.join(map(str, strides))}: "
                     + ", ".join(p.name for p in self.parts))
        return text


def split(t: Tensor, classes: bool = False) -> Optional[Split]:
    """``t`` with its strided reduction axes split (see the module docstring), or None
    when none is or the result would not fold. A residue moving with a long output
    axis: ``classes`` splits that axis into residue parts too (``codegen.residue_classes``
    judges whether they pay); else None (``codegen.rowsum_residues`` splits such rows at
    lowering instead).

    >>> import tensorexpr as te
    >>> H = te.placeholder((2, 9), name="H")
    >>> X = te.placeholder((2, 4), name="X")
    >>> n, y = te.reduce_axis(2, "n"), te.reduce_axis(9, "y")
    >>> dW = te.compute((3,), lambda k: te.sum(H[n, y] * X[n, (y - k) // 2], axis=[n, y],
    ...                 where=((y - k) % 2 == 0) & (y >= k) & (y - k < 8)), name="dW")
    >>> sp = split(dW)
    >>> sp.describe()
    'dW: y = 2*y//2 + y%2 (fixed by the outer point); k by residues of 2: dW_r0, dW_r1'
    >>> [p.shape for p in sp.parts], sp.final.uid == dW.uid
    ([(2,), (1,)], True)
    >>> print(sp.parts[1].body.body)
    (H[n, (2 * y//2) + 1] * X[n, y//2 - k//2])
    """
    red = only_sum(t)
    if red is None:
        return None
    body, where = where_form(red)
    conds = conjuncts(where)
    strides = _strides(t, red, body, conds)
    if not strides and not classes:
        return None
    # y = s*q + r + c0 for each split axis, q and r new reduction axes
    residues: List[Residue] = []
    mapping: Dict[Axis, Expr] = {}
    ranges: List[Expr] = []
    for y in red.axes:
        if y.uid not in strides:
            continue
        s, c0 = strides[y.uid]
        lo, hi = const_value(y.lo), const_value(y.hi)
        nq = -(-(hi - c0) // s)
        q = Axis(f"{y.name}//{s}", Const(0, I64), Const(nq, I64), fresh_uid())
        r = Axis(f"{y.name}%{s}", Const(0, I64), Const(s, I64), fresh_uid())
        value = Binary("add", Binary("mul", Const(s, I64), q, I64), r, I64)
        if c0:
            value = Binary("add", value, Const(c0, I64), I64)
        mapping[y] = value
        if c0 < lo:
            ranges.append(Binary("ge", value, Const(lo, I64), "bool"))
        if c0 + s * nq > hi:
            ranges.append(Binary("lt", value, Const(hi, I64), "bool"))
        residues.append(Residue(y, s, c0, q, r, None))
    body = substitute(body, mapping)
    conds = ranges + [substitute(c, mapping) for c in conds]
    for x in residues:
        body = tidy(body, x.q.uid, x.s)
        conds = [tidy(c, x.q.uid, x.s) for c in conds]
    # the residues a condition fixes: replaced by their value, the condition dropped
    axes_now = [a for a in red.axes if a.uid not in strides] + [x.q for x in residues]
    for k, x in enumerate(residues):
        others = {a.uid for a in axes_now} | {z.r.uid for z in residues if z is not x}
        found = _fixing(conds, x.r, x.s, others)
        if found is None:
            continue
        at, value = found
        conds = [substitute(c, {x.r: value}) for j, c in enumerate(conds) if j != at]
        body = substitute(body, {x.r: value})
        residues[k] = Residue(x.axis, x.s, x.c0, x.q, x.r, value)
    # reduction axes: the kept residues where the first split axis was, each q in place
    new_axes: List[Axis] = []
    kept = [x.r for x in residues if x.fixed is None]
    for a in red.axes:
        if a.uid in strides:
            if kept:
                new_axes += kept
                kept = []
            new_axes.append(next(x.q for x in residues if x.axis.uid == a.uid))
        else:
            new_axes.append(a)
    new_red = Reduce("sum", body, tuple(new_axes), conj(conds), red.dtype)
    whole = replace_subexpr(t.body, red, new_red) if t.body is not red else new_red
    taps = _taps(t, whole, classes)
    if taps is None:
        return None
    if not strides and not any(const_value(a.hi) > MAX_TAP for a, _ in taps):
        return None  # no reduction axis split and no output classes: nothing to do
    if not taps:
        final = Compute(t.name, t.dims, t.dtype, t.uid, t.origin, axes=t.axes,
                        body=fold_indices(whole))
        return Split(t, final, (), tuple(residues), ())
    parts = _parts(t, whole, taps)
    if parts is None:
        return None
    return Split(t, _gather(t, parts, taps), tuple(p for _, p in parts), tuple(residues),
                 tuple(taps))


def lanes(t: Compute, red: Reduce) -> Axis:
    """The axis a sum's fast schedules run in vector lanes: its innermost output axis
    (rows), or, when that is too short for rows (fewer than ``patterns.ROW_MIN``
    points: a weight gradient's taps), its last reduction axis (``codegen.tapsum``).

    >>> import tensorexpr as te
    >>> X = te.placeholder((8, 40), name="X")
    >>> n, x = te.reduce_axis(8, "n"), te.reduce_axis(32, "x")
    >>> dW = te.compute((3,), lambda k: te.sum(X[n, x + k], axis=[n, x]), name="dW")
    >>> lanes(dW, dW.body).name
    'x'
    """
    if not t.axes:
        return red.axes[-1]
    j = t.axes[-1]
    lo, hi = const_value(j.lo), const_value(j.hi)
    if lo is not None and hi is not None and hi - lo < ROW_MIN and red.axes:
        return red.axes[-1]
    return j


def strided(r: Read, lane: Axis) -> bool:
    """Does ``r`` step by 2 or more along ``lane`` (its coefficient in some index)?"""
    for idx in r.indices:
        form = terms(idx)
        if form is not None and abs(form[1].get(lane.uid, 0)) >= 2:
            return True
    return False


def _strides(t: Compute, red: Reduce, body: Expr, conds: Sequence[Expr]
             ) -> Dict[int, Tuple[int, int]]:
    """Reduction axis uid -> ``(s, c0)``: the axes to split and how (module docstring):
    those in a floor division or modulo by ``s`` with coefficient +-1, and those of an
    index ``s*(...) + y + k`` of a read that steps by ``s`` along the lanes
    (:func:`lanes`), with ``c0`` making that index ``s*(...) + r``."""
    out: Dict[int, Tuple[int, int]] = {}
    nodes = [x for e in [body] + list(conds) for x in walk(e, unique=True)]
    lane = lanes(t, red)
    rows = [r for r in nodes if isinstance(r, Read) and strided(r, lane)]
    for y in red.axes:
        lo, hi = const_value(y.lo), const_value(y.hi)
        if lo is None or hi is None or hi - lo < 2:
            continue
        divs, bad = set(), False
        for e in nodes:
            if (isinstance(e, Binary) and e.op in ("floordiv", "mod")
                    and uses(e.a, {y.uid})):
                s, c = const_value(e.b), linear(e.a, y.uid)
                if s is None or c is None:
                    bad = True
                elif abs(c) == 1 and 2 <= s <= MAX_STRIDE:
                    divs.add(s)
        if bad or len(divs) > 1:
            continue
        offsets = []
        for r in rows:
            for idx in r.indices:
                form = terms(idx)
                if form is None or form[1].get(y.uid) != 1:
                    continue
                k, coef, _ = form
                others = [abs(c) for u, c in coef.items() if u != y.uid]
                g = math.gcd(*others) if others else 0
                if 2 <= g <= MAX_STRIDE and (not divs or g in divs):
                    offsets.append((g, lo - (lo + k) % g))
        if divs:
            s = divs.pop()
            c0 = next((c for g, c in offsets if g == s), lo)
        elif offsets:
            s, c0 = offsets[0]
        else:
            continue
        if (hi - lo) < s:
            continue
        out[y.uid] = (s, c0)
    return out


def _fixing(conds: Sequence[Expr], r: Axis, s: int, others: set
            ) -> Optional[Tuple[int, Expr]]:
    """``(position, value)`` of a condition ``(E + c*r) % s == 0`` among ``conds`` with
    ``c`` prime to ``s`` and ``E`` free of the axes ``others`` (the sum's): ``r`` is
    then ``(m*E) % s`` for ``m = -1/c mod s``, the one value of ``[0, s)`` where it holds."""
    for k, c in enumerate(conds):
        if not (isinstance(c, Binary) and c.op == "eq"):
            continue
        for m_, z in ((c.a, c.b), (c.b, c.a)):
            if not (const_value(z) == 0 and isinstance(m_, Binary) and m_.op == "mod"
                    and const_value(m_.b) == s):
                continue
            coef = linear(m_.a, r.uid)
            if coef is None or math.gcd(coef, s) != 1 or uses(m_.a, others):
                continue
            rest = substitute(m_.a, {r: Const(0, I64)})
            mult = (-pow(coef, -1, s)) % s
            scaled = rest if mult == 1 else Binary("mul", Const(mult, I64), rest, I64)
            return k, Binary("mod", scaled, Const(s, I64), I64)
    return None


def _taps(t: Compute, whole: Expr, classes: bool = False
          ) -> Optional[List[Tuple[Axis, int]]]:
    """The output axes to split into residue parts, each with its stride: those inside a
    floor division or modulo by a constant ``s``, unless only as ``s*c*u``. None when
    one is not a short axis from 0 (``classes``: a static axis from 0 of any length),
    moves under two divisors, or the parts are too many (whether the parts fold is
    checked on them: :func:`_parts`)."""
    found: Dict[int, int] = {}
    for e in walk(whole, unique=True):
        if not (isinstance(e, Binary) and e.op in ("floordiv", "mod")):
            continue
        s = const_value(e.b)
        for a in t.axes:
            if not uses(e.a, {a.uid}) or (s is not None and (linear(e.a, a.uid) or 1) % s == 0):
                continue
            if s is None or s < 2 or found.get(a.uid, s) != s:
                return None
            found[a.uid] = s
    taps = []
    for a in t.axes:
        if a.uid in found:
            lo, hi = const_value(a.lo), const_value(a.hi)
            if lo != 0 or hi is None or (hi > MAX_TAP and not classes):
                return None
            taps.append((a, found[a.uid]))
    if math.prod(s for _, s in taps) > MAX_PARTS:
        return None
    return taps


def _parts(t: Compute, whole: Expr, taps: Sequence[Tuple[Axis, int]]
           ) -> Optional[List[Tuple[Tuple[int, ...], Compute]]]:
    """One tensor per combination of residues ``b`` of the tap axes: ``u = s*a + b``;
    None if a floor division or modulo still moves with some ``a`` there."""
    out = []
    for bs in itertools.product(*(range(s) for _, s in taps)):
        sizes = [-(-(const_value(u.hi) - b) // s) for (u, s), b in zip(taps, bs)]
        if min(sizes) <= 0:
            continue  # this residue never occurs (an axis shorter than the stride)
        new = {u.uid: Axis(f"{u.name}//{s}", Const(0, I64), Const(n, I64), fresh_uid())
               for (u, s), n in zip(taps, sizes)}
        mapping = {u: Binary("add", Binary("mul", Const(s, I64), new[u.uid], I64),
                             Const(b, I64), I64) for (u, s), b in zip(taps, bs)}
        body = substitute(whole, mapping)
        for (u, s) in taps:
            body = tidy(body, new[u.uid].uid, s)
        body = fold_indices(body)
        if _unfolded(body, {a.uid for a in new.values()}):
            return None
        axes = tuple(new.get(a.uid, a) for a in t.axes)
        name = f"{t.name}_r{''.join(map(str, bs))}"
        out.append((bs, Compute(name, tuple(a.hi for a in axes), t.dtype, fresh_uid(),
                                t.origin, axes=axes, body=body)))
    return out


def _gather(t: Compute, parts, taps) -> Compute:
    """``t`` reading each point from its part: ``u % s`` picks the part, ``u // s`` is
    its index there."""
    def read(p: Compute) -> Read:
        idx = tuple(Binary("floordiv", a, Const(s, I64), I64) if s else a
                    for a, s in ((a, dict((u.uid, s) for u, s in taps).get(a.uid, 0))
                                 for a in t.axes))
        return Read(p, idx, t.dtype)

    value: Expr = read(parts[-1][1])
    for bs, p in reversed(parts[:-1]):
        test = conj([Binary("eq", Binary("mod", u, Const(s, I64), I64), Const(b, I64), "bool")
                     for (u, s), b in zip(taps, bs)])
        value = Select(test, read(p), value, t.dtype)
    return Compute(t.name, t.dims, t.dtype, t.uid, t.origin, axes=t.axes, body=value)


def _unfolded(e: Expr, uids: set) -> bool:
    """Does a floor division or modulo of ``e`` move with one of the axes ``uids``?"""
    return any(isinstance(x, Binary) and x.op in ("floordiv", "mod") and uses(x, uids)
               for x in walk(e, unique=True))

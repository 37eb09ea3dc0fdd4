"""Sums over a zero-padded copy: a padded convolution as a plain "valid" sum.

A padded convolution, or the input gradient of any convolution, gathers a tensor
``R`` at positions that move with the output's spatial axes and may fall outside
``R``. The input gradient of a 2-D convolution gathers the output gradient ``H`` at
``(y - d*ky, x - d*kx)`` where that is inside ``H``::

    dX[n, c, y, x] = sum_{f, ky, kx if 0 <= y - d*ky < Hh and 0 <= x - d*kx < Wh}
                         H[n, f, y - d*ky, x - d*kx] * W[f, c, ky, kx]

and a 1-D convolution (NCW, padding ``P``) gathers ``X`` along one axis::

    Y[n, f, t] = sum_{c, k if 0 <= t + k - P < L} X[n, c, t + k - P] * W[f, c, k]

The tests move with the output's row axis (``x``, ``t``): the row loops of
``lower.Lowerer.compute_rows`` then get bounds that move with the taps, a masked
or staged tile per tap (``codegen.rowsum_masked``) with its sums in memory, and a
row of ``Wh + 2*d`` elements is rarely a whole number of vectors. Here the sum
reads instead a copy of ``R`` made once per call, with zeros around it along each
padded dimension: the last one alone (1-D), or the last two (2-D), each described
by the zeros before ``R``'s elements and the copy's extent (``Plan.before``)::

    Hp[n, f, r, col] = H[n, f, r - T, col - L]  inside, 0 elsewhere   (2-D: T rows above)
    Xp[n, c, col]    = X[n, c, col - P]         inside, 0 elsewhere   (1-D)

and sums over the whole box of taps, unconditionally.

2-D only, as an option on top: when the copy's row length ``S`` is the output's
row length, the element read for ``(y, x)`` is
``Hp.flat[(y + a) * S + x + b] = Hp.flat[p + off]`` with ``p = y*S + x``, the
output's own flat position: the two innermost output axes become one axis ``p``
of ``Hy * S`` elements (a whole number of vectors far more often than a row),
contiguous in ``dX`` and in the copy for every tap. A read past the end of a row
(``x + b >= S``) lands in the next row's left padding: zero too. The sum is then
``dX.flat[n, c, p] = sum_{f, ky, kx} Hp.flat[n, f, p + off(ky, kx)] * W[f, c, ky, kx]``,
which ``compute_rows`` runs with constant bounds and register-tiled accumulators,
as it runs a forward convolution.

Otherwise (a 1-D sum; a padded 2-D convolution, which reads left of column 0 and
past the last one, so its copy's rows are wider than the output's and the flat
positions no longer line up) the sum keeps its axes and reads
``Hp[n, f, y + a, x + b]`` or ``Xp[n, c, t + k]``: a "valid" convolution over the
copy, which ``compute_rows`` runs as it runs an unpadded one (2-D: keeping the
tests on ``y`` alone, exact, they skip the taps of zero rows).

The terms added outside the original domain are ``0 * w``: +0 or -0 when the
weight ``w`` is finite, which changes no sum (a sum that starts at +0 is never
-0); with an infinite or NaN weight they would add NaN. So the weights' buffer
is checked once per call (``Lowerer.finite_checks``; an input once per kernel,
``codegen.finite_flags``) and the original sum runs when it holds a non-finite
value. Sums that read the same tensor over copies that differ only in their
extents or zeros before share one copy of the union box (``codegen.padcopy_share``,
:func:`replan`). Sums keep their terms' values; only
their order and the zero terms change (the reassociation ir.py allows for sums).

:func:`plan` says when this applies: a float sum that is the whole body of a
tensor ``t`` (no recurrence), of ``R[..., y + A(k), x + B(k)] * w`` (2-D) or
``R[..., x + B(k)] * w`` (1-D, tried when 2-D does not apply) with ``w`` a read of
a stored tensor that does not move with the padded axes, constant extents of those
axes, the reduction axes and ``R``'s padded dimensions, some read outside ``R``
(else there is nothing to pad: a valid convolution, a matmul), a domain whose tests
on the padded axes say exactly that the read is inside ``R`` (isl checks both
directions), and a copy at most ``MAX_GROWTH`` times ``R``. Flat positions need
rows of ``S`` to hold the copy (``L + Wr <= S`` and no read beyond ``x + B <= S - 1``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from tensorexpr import polyhedral
from tensorexpr.ir import (Axis, Binary, Compute, Const, Expr, Placeholder, Read, Reduce, Select,
                           Tensor, INDEX_DTYPE, fresh_uid, walk)
from tensorexpr.transform import const_value, substitute

from . import target
from .loopast import Block, If, Op, Stmt
from .patterns import conj, row_reduce, uses, where_form

I64 = INDEX_DTYPE

#: do not pad when the copy would be this many times larger than the tensor read
MAX_GROWTH = 4


@dataclass(frozen=True)
class Plan:
    """``t``'s sum rewritten over a zero-padded copy (see the module docstring).

    ``fill`` computes the copy (``R``'s leading dims, then one padded dimension per
    padded axis); ``flat`` is the same buffer seen with the last two dimensions as
    one (``fill`` itself when the sum keeps its axes); ``sum`` is ``t`` summed over
    the copy (its buffer is ``t``'s); ``weight`` is the read whose buffer must hold
    finite values; ``before`` the zeros before ``R``'s elements along each padded
    dimension, outermost first (one entry for a 1-D sum, two for a 2-D one)."""

    t: Compute
    fill: Compute
    flat: Compute
    sum: Compute
    weight: Read
    before: Tuple[int, ...]
    #: the padded dimensions of the copy (R's), outermost first
    padded: Tuple[int, ...] = ()
    #: the axes of ``t`` the padded dimensions move with (what :func:`replan` keeps)
    positions: Tuple[int, ...] = ()
    #: the tensor the copy is made of (``R``)
    source: Optional[Tensor] = None

    def note(self) -> str:
        """The copy's buffer note in the generated C (what its padding is)."""
        if self.padded and self.padded[-1] != self.fill.ndim - 1:   # channels last
            sizes = ", ".join(str(const_value(self.fill.dims[k])) for k in self.padded)
            zeros = ", ".join(map(str, self.before))
            return (f"{self.fill.name} (scratch: dimensions {self.padded} padded to {sizes}, "
                    f"{zeros} zeros before)")
        cols = const_value(self.fill.dims[-1])
        rows = f", {self.before[-2]} zero rows above" if len(self.before) > 1 else ""
        return (f"{self.fill.name} (scratch: rows of {cols}{rows}, {self.before[-1]} zero "
                f"columns left)")


def _span(e: Expr, axes: Sequence[Axis]) -> Optional[Tuple[int, int]]:
    """Least and greatest value of ``e`` (affine, only ``axes``: constant boxes)."""
    form = polyhedral.affine_form(e, list(axes))
    if form is None:
        return None
    c, coeffs = form
    lo = hi = c
    for a, ax in zip(coeffs, axes):
        x0, x1 = const_value(ax.lo), const_value(ax.hi) - 1
        lo += min(a * x0, a * x1)
        hi += max(a * x0, a * x1)
    return lo, hi


def plan(t: Compute, red: Reduce, stored=lambda r: True, params: Sequence[str] = ()
         ) -> Optional[Plan]:
    """The rewrite of ``t`` (its sum ``red``) over a zero-padded copy, or None.

    Padded along ``t``'s last two axes (a 2-D convolution, rows and columns) when
    the read moves with both, else along the last one alone (a 1-D convolution),
    else along two neighbouring outer axes or one (channels last: NHWC, NWC; the
    dimension of ``R`` each moves need not be last) when no test on an output axis
    is left.
    ``stored(read)`` says whether a read's tensor has a buffer of its own (not
    computed where it is read): the weight's buffer is what is checked finite.

    >>> import tensorexpr as te
    >>> H = te.placeholder((2, 4, 12, 12), name="H")
    >>> W = te.placeholder((4, 3, 3, 3), name="W")
    >>> f, ky, kx = te.reduce_axis(4), te.reduce_axis(3), te.reduce_axis(3)
    >>> dX = te.compute((2, 3, 16, 16), lambda n, c, y, x: te.sum(
    ...     H[n, f, y - 2 * ky, x - 2 * kx] * W[f, c, ky, kx], axis=[f, ky, kx],
    ...     where=(y - 2 * ky >= 0) & (y - 2 * ky < 12) & (x - 2 * kx >= 0)
    ...     & (x - 2 * kx < 12)), name="dX")
    >>> with target.use(target.Target(64, 32, True)):   # AVX-512: tiles of 32 positions
    ...     p = plan(dX, dX.body)
    >>> p.fill.shape, p.sum.shape, p.before
    ((2, 4, 21, 16), (2, 3, 8, 32), (4, 4))
    >>> with target.use(target.Target(32, 16, True)):   # AVX2: tiles of 16
    ...     plan(dX, dX.body).sum.shape
    (2, 3, 16, 16)

    A 1-D convolution (NCW, padding 2 each side) pads its rows alone:

    >>> X = te.placeholder((2, 4, 30), name="X"); V = te.placeholder((3, 4, 5), name="V")
    >>> c, k = te.reduce_axis(4), te.reduce_axis(5)
    >>> Y = te.compute((2, 3, 30), lambda n, g, i: te.sum(
    ...     X[n, c, i + k - 2] * V[g, c, k], axis=[c, k],
    ...     where=(i + k - 2 >= 0) & (i + k - 2 < 30)), name="Y")
    >>> p = plan(Y, Y.body)
    >>> p.fill.shape, p.sum.shape, p.before, p.note()
    ((2, 4, 34), (2, 3, 30), (2,), 'X_padded (scratch: rows of 34, 2 zero columns left)')
    """
    if (t.carry is not None or t.self_ref is not None or t.body is not red
            or red.op != "sum" or red.dtype not in ("float32", "float64")):
        return None
    axes = list(t.axes) + list(red.axes)
    if any(const_value(a.lo) is None or const_value(a.hi) is None for a in axes):
        return None
    n = len(t.axes)
    # the last two axes, the last one, then (channels last: NHWC, NWC) two neighbouring
    # outer axes or one
    tries = [(n - 2, n - 1), (n - 1,)] + [(k, k + 1) for k in reversed(range(n - 2))] + [
        (k,) for k in reversed(range(n - 1))]
    for positions in tries:
        if min(positions) >= 0:
            p = _plan(t, red, positions, stored, params)
            if p is not None:
                return p
    return None


def _plan(t: Compute, red: Reduce, positions: Tuple[int, ...], stored,
          params: Sequence[str], extent: Optional[Sequence[int]] = None,
          copy: Optional[Compute] = None, zeros: Optional[Sequence[int]] = None,
          flat: Optional[bool] = None) -> Optional[Plan]:
    """:func:`plan` padding ``t``'s axes at ``positions`` (one or two); with ``extent``
    and ``zeros``, a copy that long along each padded dimension with that many zeros
    before ``R`` (at least what ``t`` needs: :func:`replan`), the tensor ``copy`` if
    given, a flat sum or not as ``flat`` says."""
    s = len(positions)
    sp = [t.axes[k] for k in positions]   # the padded axes: (y, x) or (x,)
    if any(const_value(a.lo) != 0 for a in sp):
        return None
    spu = {a.uid for a in sp}
    body, where = where_form(red)
    if not (isinstance(body, Binary) and body.op == "mul"):
        return None
    for R, w in ((body.a, body.b), (body.b, body.a)):
        if (isinstance(R, Read) and isinstance(w, Read) and uses(R, spu) and not uses(w, spu)
                and R.dtype == w.dtype == red.dtype and R.tensor.ndim >= s
                and isinstance(R.tensor, (Placeholder, Compute))
                and isinstance(w.tensor, (Placeholder, Compute)) and stored(w)):
            break
    else:
        return None
    # R's padded dimensions: the one index each padded axis moves (in the axes' order)
    pdims = []
    for a in sp:
        ks = [k for k, i in enumerate(R.indices) if uses(i, {a.uid})]
        if len(ks) != 1 or ks[0] in pdims:
            return None
        pdims.append(ks[0])
    if pdims != sorted(pdims):
        return None
    idx = [R.indices[k] for k in pdims]
    lead = [i for k, i in enumerate(R.indices) if k not in pdims]   # (and trailing ones)
    sizes = [const_value(R.tensor.dims[k]) for k in pdims]
    taps = list(red.axes)
    box = sp + taps
    # each padded index is its own axis + A(taps): nothing else moves
    if None in sizes or not all(
            {a.uid for a in walk(i, unique=True) if isinstance(a, Axis)} <= spu | {a.uid for a in taps}
            for i in idx):
        return None
    for j, i in enumerate(idx):
        form = polyhedral.affine_form(i, box)
        if form is None or form[1][:s] != tuple(int(m == j) for m in range(s)):
            return None
    spans = [_span(i, box) for i in idx]
    if all(0 <= lo and hi < n for (lo, hi), n in zip(spans, sizes)):
        return None   # every read is inside R (a "valid" sum, a matmul): nothing to pad
    before = [max(0, -lo) for lo, _ in spans]
    if zeros is not None:
        # a copy shared with other sums: as many zeros before as they need, or more
        if len(zeros) != len(before) or any(z < b for z, b in zip(zeros, before)):
            return None
        before = list(zeros)
    widths = [max(b + n, b + hi + 1) for b, n, (_, hi) in zip(before, sizes, spans)]
    S = const_value(sp[-1].hi)
    # 2-D: flat positions need the copy's rows as long as the output's; else (a padded
    # convolution reads left of column 0 and past the last) rows as wide as the reads
    last = tuple(positions) == (len(t.axes) - 2, len(t.axes) - 1) and pdims == [
        R.tensor.ndim - 2, R.tensor.ndim - 1]
    flat_rows = last and s == 2 and before[-1] + sizes[-1] <= S and spans[-1][1] <= S - 1
    if flat_rows:
        # one more row, where a read past the end of the last row runs into zeros
        widths = [widths[0] + 1, S]
    if flat is not None and flat != flat_rows:
        return None   # a shared copy would change the sum's layout
    if extent is not None:
        # a copy shared with other sums: longer, never shorter, and rows of S if flat
        if (len(extent) != len(widths) or any(e < w for e, w in zip(extent, widths))
                or (flat_rows and extent[-1] != S)):
            return None
        widths = list(extent)
    if math.prod(widths) > MAX_GROWTH * math.prod(sizes):
        return None
    # the domain: the tests on the padded axes must say exactly "the read is inside R"
    axes = list(t.axes) + taps
    conds = polyhedral.conjuncts(where)
    kept = [c for c in conds if not uses(c, spu)]
    n_out = len(t.axes)
    if positions not in ((n_out - 2, n_out - 1), (n_out - 1,)) and any(
            uses(c, {a.uid for a in t.axes}) for c in kept):
        return None   # outer axes padded, tests left on others: little gained for a copy
    inside = [e for i, n in zip(idx, sizes) for e in (i >= 0, i < n)]
    if not all(polyhedral.implies(axes, conds, c, params) for c in inside):
        return None
    if not all(polyhedral.implies(axes, kept + inside, c, params)
               for c in conds if uses(c, spu)):
        return None
    # the other reads, now evaluated on the whole box where ``kept`` holds
    ps = polyhedral.PointSet(axes, kept, params)
    for r in (R, w):
        ks = [k for k in range(r.tensor.ndim) if r is not R or k not in pdims]
        if not all(ps.within(r.indices[k], r.tensor.dims[k]) for k in ks):
            return None
    # the copy: R's dimensions, the padded ones widened
    pa = dict(zip(pdims, (Axis(nm, Const(0, I64), Const(n, I64), fresh_uid())
                          for nm, n in zip(("row", "col")[-s:], widths))))
    ca = tuple(pa[k] if k in pa else Axis(f"a{k}", Const(0, I64), d, fresh_uid())
               for k, d in enumerate(R.tensor.dims))
    shift = dict(zip(pdims, before))
    src = Read(R.tensor, tuple(a - shift[k] if k in shift else a for k, a in enumerate(ca)),
               R.dtype)
    ok = conj([e for k, b, n in zip(pdims, before, sizes) for e in (pa[k] >= b, pa[k] < b + n)])
    name = f"{R.tensor.name}_padded"
    cdims = tuple(Const(widths[pdims.index(k)], I64) if k in shift else d
                  for k, d in enumerate(R.tensor.dims))
    fill = Compute(name, cdims, R.dtype, fresh_uid(), t.origin, axes=ca,
                   body=Select(ok, src, Const(0.0, R.dtype), R.dtype))
    if copy is not None:
        # the same elements: the same body up to the names of the axes
        if copy.dims != fill.dims or substitute(copy.body, dict(zip(copy.axes, fill.axes))
                                                ) != fill.body:
            return None
        fill = copy
    if not flat_rows:
        # a "valid" convolution over the copy, run as a forward convolution is; the
        # tests on the outer padded axis alone stay (exact: they skip the taps of
        # zero rows)
        rows_only = [c for c in conds if uses(c, spu) and not uses(c, {sp[-1].uid})]
        moved = Read(fill, tuple(i + shift[k] if k in shift else i
                                 for k, i in enumerate(R.indices)), R.dtype)
        new = Reduce("sum", _term(body, R, moved, w, red.dtype), red.axes,
                     conj(kept + rows_only), red.dtype)
        total = Compute(t.name, t.dims, t.dtype, fresh_uid(), t.origin, axes=t.axes, body=new)
        return Plan(t, fill, fill, total, w, tuple(before), tuple(pdims), tuple(positions),
                    R.tensor)
    (y, x), (ri, ci), (top, left) = sp, idx, before
    rows, Hy = widths[0], const_value(y.hi)
    flat = Compute(name, R.tensor.dims[:-2] + (Const(rows * S, I64),), R.dtype, fresh_uid(),
                   t.origin)
    # the sum over p = y*S + x (dX's own flat position in its last two dimensions), in
    # tiles p = L*T + l when L divides the extent: the tests on y alone then hold for
    # some row of each tile (a tile spans few rows), which skips most taps that read
    # only padding rows (the copy has zeros there: dropping such tests is exact too)
    n = Hy * S
    # a register tile of the target (32 floats on AVX-512, 16 on AVX2), else one vector
    tgt = target.current()
    lanes = tgt.lanes(R.dtype)
    L = next((v for v in (lanes * tgt.tile_vectors, lanes) if n % v == 0), None)
    name_p = f"{y.name}*{S}+{x.name}"
    if L is None:
        pos = Axis(name_p, Const(0, I64), Const(n, I64), fresh_uid())
        out_axes: Tuple[Axis, ...] = (pos,)
        relaxed: List[Expr] = []
    else:
        T = Axis(f"({name_p})//{L}", Const(0, I64), Const(n // L, I64), fresh_uid())
        lane = Axis(f"({name_p})%{L}", Const(0, I64), Const(L, I64), fresh_uid())
        out_axes, pos = (T, lane), T * L + lane
        y0, y1 = (T * L) // S, (T * L + (L - 1)) // S
        relaxed = [r for c in conds if uses(c, {y.uid}) and not uses(c, {x.uid})
                   for r in [_relax(c, y, y0, y1, [y, x] + taps)] if r is not None]
    zero = {y: Const(0, I64), x: Const(0, I64)}
    off = (substitute(ri, zero) + top) * S + substitute(ci, zero) + left
    moved = Read(flat, tuple(lead) + (pos + off,), R.dtype)
    new = Reduce("sum", _term(body, R, moved, w, red.dtype), red.axes, conj(kept + relaxed),
                 red.dtype)
    total = Compute(t.name, t.dims[:-2] + tuple(a.hi for a in out_axes), t.dtype, fresh_uid(),
                    t.origin, axes=t.axes[:-2] + out_axes, body=new)
    return Plan(t, fill, flat, total, w, tuple(before), tuple(pdims), tuple(positions),
                R.tensor)


def _term(body: Binary, R: Read, moved: Read, w: Read, dtype: str) -> Binary:
    """``body`` (``R * w`` or ``w * R``) with ``moved`` read instead of ``R``, same order."""
    return Binary("mul", moved, w, dtype) if body.a is R else Binary("mul", w, moved, dtype)


def _relax(c: Expr, y: Axis, y0: Expr, y1: Expr, axes: Sequence[Axis]) -> Optional[Expr]:
    """``c`` (an affine inequality in ``y`` and ``axes``) at the end of ``[y0, y1]`` where
    it is weakest: it holds there iff it holds for some ``y`` of the range. None for
    other conditions (the caller drops them)."""
    if not (isinstance(c, Binary) and c.op in ("ge", "gt", "le", "lt")):
        return None
    d = c.a - c.b if c.op in ("ge", "gt") else c.b - c.a
    form = polyhedral.affine_form(d, list(axes))
    if form is None:
        return None
    return substitute(c, {y: y1 if form[1][list(axes).index(y)] > 0 else y0})


def replan(p: Plan, extent: Sequence[int], copy: Optional[Compute] = None,
           params: Sequence[str] = (), zeros: Optional[Sequence[int]] = None
           ) -> Optional[Plan]:
    """``p``'s sum over a copy of ``extent`` elements along each padded dimension with
    ``zeros`` before ``R``'s elements (default ``p.before``; at least ``p``'s, rows as
    long for a flat sum), the tensor ``copy`` when given (one copy read by several sums:
    ``codegen.padcopy_share``); None if ``p``'s sum cannot read such a copy as it read
    its own (flat or not).

    >>> import tensorexpr as te
    >>> H = te.placeholder((1, 2, 20), name="H"); W = te.placeholder((3, 2, 3), name="W")
    >>> f, k = te.reduce_axis(2), te.reduce_axis(3)
    >>> dX = te.compute((1, 3, 22), lambda n, c, x: te.sum(
    ...     H[n, f, x - k] * W[c, f, k], axis=[f, k], where=(x - k >= 0) & (x - k < 20)),
    ...     name="dX")
    >>> p = plan(dX, dX.body)
    >>> p.fill.shape, p.before
    ((1, 2, 24), (2,))
    >>> replan(p, (30,)).fill.shape
    (1, 2, 30)
    >>> replan(p, (23,)) is None   # shorter than the sum reads
    True
    >>> q = replan(p, (30,), zeros=(5,))   # 5 zeros before H's elements, not 2
    >>> q.before, q.fill.shape
    ((5,), (1, 2, 30))
    """
    red = row_reduce(p.t)
    weight = p.weight.tensor.uid
    return _plan(p.t, red, p.positions, lambda r: r.tensor.uid == weight, params,
                 tuple(extent), copy, tuple(p.before if zeros is None else zeros),
                 p.flat is not p.fill)


def rewrite(sig, computed: Sequence[Tensor], inline: set, options
            ) -> Tuple[List[Tuple[Tensor, str]], Dict[int, Plan]]:
    """The program rewrite: ``(scratch, plans)``: the zero-padded copies the program's
    sums will read (each a scratch tensor of the program, with its buffer's note), and
    each such sum's :class:`Plan` by uid. None in a recurrence's program (whose
    buffers ``codegen.checkpoint`` plans), nor for a tensor ``options`` force to
    another strategy.

    >>> import tensorexpr as te
    >>> from codegen.signature import Signature
    >>> H = te.placeholder((1, 2, 12, 12), name="H"); W = te.placeholder((2, 3, 3, 3), name="W")
    >>> f, ky, kx = te.reduce_axis(2), te.reduce_axis(3), te.reduce_axis(3)
    >>> dX = te.compute((1, 3, 14, 14), lambda n, c, y, x: te.sum(
    ...     H[n, f, y - ky, x - kx] * W[f, c, ky, kx], axis=[f, ky, kx],
    ...     where=(y - ky >= 0) & (y - ky < 12) & (x - kx >= 0) & (x - kx < 12)), name="dX")
    >>> from codegen.schedule import DEFAULT
    >>> scratch, plans = rewrite(Signature([dX], [H, W]), [dX], set(), DEFAULT)
    >>> [t.name for t, _ in scratch], plans[dX.uid].fill is scratch[0][0]
    (['H_padded'], True)
    """
    scratch: List[Tuple[Tensor, str]] = []
    plans: Dict[int, Plan] = {}
    if any(isinstance(x, Compute) and (x.carry is not None or x.self_ref is not None)
           for x in computed):
        return scratch, plans
    present = {t.uid for t in sig.inputs} | {t.uid for t in computed}
    for t in computed:
        if t.uid in inline or options.forced(t.name) not in (None, "padded-copy"):
            continue
        red = row_reduce(t) if isinstance(t, Compute) and t.carry is None else None
        p = None if red is None else plan(
            t, red, stored=lambda r: r.tensor.uid not in inline and r.tensor.uid in present,
            params=tuple(sig.size_names))
        if p is None:
            continue
        scratch.append((p.fill, p.note()))
        plans[t.uid] = p
    return scratch, plans


def lower(lowerer, t: Compute, red: Reduce, p: Plan) -> List[Stmt]:
    """``t`` by :func:`plan`'s rewrite ``p`` when the weights are finite, else as before:

        fin = sum(W[z] * 0)                       (NaN if some weight is not finite)
        if (fin == fin) { Hp = padded copy of R; dX.flat = sum over Hp.flat }
        else            { dX = the original sum }
    """
    lowerer.record.choose(t.name, "rows", (("version", "non-finite weights"),))
    slow = lowerer.compute_rows(t, red)
    lowerer.record.done()
    # the copy's buffer is a scratch tensor of the program (:func:`rewrite`); the
    # flattened views of it and of t share their buffers
    lowerer.buf[p.flat.uid] = lowerer.buf[p.fill.uid]
    lowerer.dims[p.flat.uid] = p.flat.dims
    lowerer.buf[p.sum.uid] = lowerer.buf[t.uid]
    lowerer.dims[p.sum.uid] = p.sum.dims
    # a copy several sums read (codegen.padcopy_share) is made by the first one: they
    # check the same weights, so they all take the version that reads it, or none does
    fill = lowerer.compute(p.fill) if p.fill.uid not in lowerer.copies_made else []
    lowerer.copies_made.add(p.fill.uid)
    lowerer.record.choose(p.sum.name, "rows", (("version", "finite weights"),))
    fast = lowerer.compute_rows(p.sum, p.sum.body)
    lowerer.record.done()
    wbuf = lowerer.buf[p.weight.tensor.uid]
    fin = lowerer.finite_flag(wbuf.name)
    checks = lowerer.finite_checks({wbuf.name: fin})
    ok = Op("eq", (fin, fin), "bool")
    return checks + [If(ok, Block(tuple(fill) + tuple(fast)), Block(tuple(slow)))]

"""A convolution's weight gradient with its partial sums in vector registers.

``dW[f, c, ky, kx] = sum_{n, y, x} H[n, f, y, x] * X[n, c, s*y + d*ky - p, s*x + d*kx - p]``
(the sums ``codegen.tapsum`` recognises: short taps as the innermost output axes) is
computed here as follows, for each value of the outer axes other than ``f`` (``c``,
on threads):

* for each value of the reduction axes the image does not move with (``n``), the
  image ``X[n, c]`` is copied into a local array, once per distinct column offset
  ``e = d*kx - p`` of the taps, as ``copy_e[row][j] = X[n, c, row, s*j + e]`` with
  zeros outside ``X`` and past the last column ``j`` of the sum: every tap then
  reads its columns ``x`` contiguously at the start of a row (aligned vectors, for
  any stride or dilation);
* for ``B`` rows ``f`` at a time and each vector of ``V`` columns ``x``, one loop over
  the lanes (``omp simd``) holds ``B x taps`` scalar accumulators and, inside it, the
  loop over ``y``: the compiler vectorizes the lanes loop as an outer loop, so the
  accumulators are vector registers across ``y`` (no load or store of a partial sum
  per product), each ``H`` load serves every tap and each copy load the ``B`` rows;
  the accumulators are then added to ``part[f][tap][lane]``;
* at the end the ``V`` lanes of each ``part[f][tap]`` are added: a reassociation of
  the sum, as ``tensorexpr.ir`` allows for reductions.

More taps than registers (5 x 5, 7 x 7 kernels: ``codegen.tapsum`` hands those over
only to this module) take several passes over ``y``, each with the accumulators of
a group of taps. A tall image runs by tiles of ``y`` whose rows of the copies stay
in the L1 cache. When the threaded axis has few values (the 3 channels of an RGB
image) or the partial sums would not fit the stack, the rows of ``f`` are split into
groups, each with its own copies, and the threads share the groups. Rows whose
length is not a whole number of vectors (8, 14, 28 columns; stride 1 in ``y``) run
their lanes over the flat positions ``p = y * nx + x`` instead, when that sums fewer
vectors: ``H[n, f]`` is contiguous in ``p``, and with copies in rows of ``nx``
elements every tap reads ``copy[p + r * nx]``; only the last vector has lanes past
the image. So does one long row (no ``y``: a 1-D convolution), its accumulators in
registers across the whole row.

The zeros of the copy are multiplied by ``H`` where a tap falls into the padding,
and the lanes past the last column of a ragged row (or past a flat image) read
``H`` as 0 (a masked load) and a zero of the copy (or some value of it). ``0 * h`` is +-0 and changes no sum when ``h`` is finite;
an element whose sum comes out finite had only finite terms, so it is exact. One
that comes out infinite or NaN (an infinite ``H`` next to the padding, or any
non-finite value) is summed again by the plain loops over its domain
(``Lowerer.reduce``): a test per element, no pass over ``H`` before the loops. The
domain must be exactly "the read of ``X`` is inside ``X``" (isl checks both
directions); without one every read must be inside ``X``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from tensorexpr import polyhedral
from tensorexpr.ir import Axis, Binary, Compute, Const, Expr, Read, Reduce, same
from tensorexpr.transform import const_value

from . import target
from .cexpr import I64, add, cast, fold, mul, zero
from .loopast import (Accumulate, Assign, Block, Decl, For, If, Lit, Load, Local, Op, Stmt,
                      Store, Var)
from .patterns import uses
from .scope import Scope

#: kernels up to this extent per axis and this many taps (7 x 7) run here even where
#: codegen.tapsum' own loops would not take them (its TAP, MAX_TAPS)
WIDE_TAP = 7
WIDE_MAX_TAPS = 49
#: at most this many rows of the block axis per lanes loop (each copy load serves them)
ROWS = 2
#: at most this many accumulators (rows of the block x taps of a pass) in registers
#: (measured on AVX-512's 32; fewer where the target has fewer: ``codegen.target``)
MAX_ACCS = 20
#: local arrays (the copies and the partial sums) of at most this many bytes each
MAX_LOCAL = 96 * 1024
#: rows of at most this many vectors are all summed in one lanes loop
MAX_VECTORS = 4
#: rows of at most this many such groups get a lanes loop per group (else a loop)
MAX_GROUPS = 4
#: a tile of y reads at most this many bytes of the copies per lanes loop (L1: 32K)
TILE_BYTES = 20 * 1024
#: ragged rows run over flat positions when their copies take at most this many bytes
#: (no tiles of y there; beyond, tiles of rows fit the L1 cache better)
FLAT_BYTES = 40 * 1024
#: the threads share at least this many tasks (values of the threaded axis x groups)
MIN_TASKS = 8
#: the image must be read at least this many times per copy (rows of the block axis)
MIN_ROWS = 4


@dataclass
class Plan:
    """What :func:`plan` found (see the module docstring for the roles)."""

    h: Read                     # the read that does not move with the taps
    x: Read                     # the read that does
    taps: List[Axis]
    block: Axis                 # an outer axis H uses and X does not (f)
    par: List[Axis]             # the other outer axes (c), the first on threads
    outer_red: List[Axis]       # reduction axes the image does not move with (n)
    inner: Optional[Axis]       # the reduction axis the rows move with (y), if any
    lane: Axis                  # the last reduction axis (x), in vector lanes
    row_dims: List[int]         # dimensions of X that move with the taps and y
    row_forms: List[Tuple[int, Tuple[int, ...]]]  # their affine forms over taps + inner
    row_lo: List[int]
    row_ext: List[int]
    col_stride: int             # s: X's last index is s*x + e(taps)
    offsets: List[int]          # the distinct e(taps), sorted
    tap_values: List[Tuple[int, ...]]
    tap_e: List[int]            # e of each tap value


def _axis_within(e: Expr, dim: Expr) -> bool:
    """Is ``e`` an axis ranging within ``[0, dim)``, or a constant inside it (a batch of 1)?"""
    if isinstance(e, Const):
        n = const_value(dim)
        return isinstance(e.value, int) and 0 <= e.value and (n is None and e.value == 0
                                                               or n is not None and e.value < n)
    if not isinstance(e, Axis):
        return False
    lo, hi, n = const_value(e.lo), const_value(e.hi), const_value(dim)
    if lo is not None and lo >= 0 and (same(e.hi, dim) or
                                       (hi is not None and n is not None and hi <= n)):
        return True
    # symbolic bounds isl compares (the gradient writes a batch's bound n as (n - 1) + 1)
    return polyhedral.PointSet([e]).within(e, dim)


def _uses_any(e: Expr, axes) -> bool:
    """Does ``e`` use one of ``axes`` (axis objects, not uids)?"""
    return uses(e, {a.uid for a in axes})


def _box_range(form: Tuple[int, Tuple[int, ...]], axes: List[Axis]) -> Tuple[int, int]:
    """Least and greatest value of the affine ``form`` over ``axes``' constant boxes."""
    c, coeffs = form
    lo = hi = c
    for a, ax in zip(coeffs, axes):
        ends = (a * const_value(ax.lo), a * (const_value(ax.hi) - 1))
        lo, hi = lo + min(ends), hi + max(ends)
    return lo, hi


def plan(lw, t: Compute, red: Reduce, ntaps: int, body: Expr, where: Optional[Expr]
         ) -> Optional[Plan]:
    """A :class:`Plan` when ``t`` (a sum of ``codegen.tapsum``, ``body`` and ``where`` its
    term and domain) has the form of the module docstring, else None.

    >>> import tensorexpr as te
    >>> from codegen.lower import Lowerer
    >>> from codegen.patterns import where_form
    >>> from codegen.signature import Signature
    >>> X = te.placeholder((2, 3, 10, 20), name="X")
    >>> H = te.placeholder((2, 4, 8, 18), name="H")
    >>> n, y, x = te.reduce_axis(2, "n"), te.reduce_axis(8, "y"), te.reduce_axis(18, "x")
    >>> dW = te.compute((4, 3, 3, 3), lambda f, c, ky, kx: te.sum(
    ...     H[n, f, y, x] * X[n, c, y + ky, x + kx], axis=[n, y, x]), name="dW")
    >>> red = dW.body
    >>> p = plan(Lowerer(Signature([dW], [X, H])), dW, red, 2, *where_form(red))
    >>> p.block.name, [a.name for a in p.par], [a.name for a in p.outer_red], p.inner.name
    ('f', ['c'], ['n'], 'y')
    >>> p.offsets, p.col_stride   # three copies of each image, by column offset kx
    ([0, 1, 2], 1)
    """
    if not (isinstance(body, Binary) and body.op == "mul" and body.dtype == red.dtype
            and isinstance(body.a, Read) and isinstance(body.b, Read)):
        return None
    taps = list(t.axes[-ntaps:])
    outer = list(t.axes[:-ntaps])
    if _uses_any(body.a, taps) == _uses_any(body.b, taps):
        return None
    hr, xr = (body.b, body.a) if _uses_any(body.a, taps) else (body.a, body.b)
    # a short axis codegen.tapsum took for a tap that X reads as a plain index or not at
    # all (c of an image of 1-4 channels) is an outer axis here
    while len(taps) > 1 and all(isinstance(i, Axis) and i.uid == taps[0].uid
                                for i in xr.indices if _uses_any(i, taps[:1])):
        outer.append(taps.pop(0))
    for r in (hr, xr):
        if (r.dtype != red.dtype or r.tensor.dtype != red.dtype or r.tensor.uid == t.uid
                or r.tensor.uid not in lw.buf or r.tensor.uid in lw.inline or not r.indices):
            return None
    lane = red.axes[-1]
    others = list(red.axes[:-1])
    # H: plain axes inside its dimensions, the lanes axis last and only there
    if not (isinstance(hr.indices[-1], Axis) and hr.indices[-1].uid == lane.uid):
        return None
    for i, d in zip(hr.indices, hr.tensor.dims):
        if not _axis_within(i, d) or _uses_any(i, taps):
            return None
    if any(_uses_any(i, [lane]) for i in hr.indices[:-1]):
        return None
    # X: its last index s*x + e(taps); rows moving with the taps and at most one other
    # reduction axis; the other dimensions plain axes (selectors: n, c)
    last = xr.indices[-1]
    if _uses_any(last, outer + others) or not _uses_any(last, [lane]):
        return None
    form = polyhedral.affine_form(last, taps + [lane])
    if form is None or form[1][-1] < 1:
        return None
    stride = form[1][-1]
    row_dims, selectors = [], []
    for k, i in enumerate(xr.indices[:-1]):
        if _uses_any(i, [lane]):
            return None
        if _uses_any(i, taps) or _uses_any(i, others) and not isinstance(i, Axis):
            row_dims.append(k)
        elif _axis_within(i, xr.tensor.dims[k]):
            selectors.append(k)
        else:
            return None
    moving = [ax for ax in others if any(_uses_any(xr.indices[k], [ax]) for k in row_dims)]
    if len(moving) > 1:
        return None
    inner = moving[0] if moving else None
    if inner is not None and (const_value(inner.lo) is None or const_value(inner.hi) is None):
        return None
    if any(inner is not None and _uses_any(xr.indices[k], [inner]) for k in selectors):
        return None
    row_axes = taps + ([inner] if inner is not None else [])
    row_forms, row_lo, row_ext = [], [], []
    for k in row_dims:
        i = xr.indices[k]
        if _uses_any(i, [ax for ax in outer + others if inner is None or ax.uid != inner.uid]):
            return None
        f = polyhedral.affine_form(i, row_axes)
        if f is None or const_value(xr.tensor.dims[k]) is None:
            return None
        lo, hi = _box_range(f, row_axes)
        row_forms.append(f)
        row_lo.append(lo)
        row_ext.append(hi - lo + 1)
    if const_value(xr.tensor.dims[-1]) is None:
        return None
    # the block axis: an outer axis H moves with and X does not (f)
    block = None
    for ax in outer:
        if (_uses_any(hr, [ax]) and not _uses_any(xr, [ax]) and const_value(ax.lo) is not None
                and const_value(ax.hi) is not None
                and const_value(ax.hi) - const_value(ax.lo) >= MIN_ROWS):
            block = ax
            break
    if block is None:
        return None
    par = [ax for ax in outer if ax.uid != block.uid]
    if not par:
        return None  # nothing to share among the threads without a race on part
    outer_red = [ax for ax in others if inner is None or ax.uid != inner.uid]
    # the domain: exactly "the read is inside X" on the box of taps, y and x
    box = taps + ([inner] if inner is not None else []) + [lane]
    inside: List[Expr] = []
    for k in row_dims + [len(xr.indices) - 1]:
        i = xr.indices[k]
        inside += [Binary("ge", i, Const(0, i.dtype), "bool"),
                   Binary("lt", i, xr.tensor.dims[k], "bool")]
    conds = polyhedral.conjuncts(where)
    if any(_uses_any(w, outer + outer_red) for w in conds):
        return None
    if not all(polyhedral.implies(box, conds, c) for c in inside):
        return None
    if conds and not all(polyhedral.implies(box, inside, w) for w in conds):
        return None
    values: List[Tuple[int, ...]] = [()]
    for ax in taps:
        values = [v + (c,) for v in values for c in range(const_value(ax.lo),
                                                        const_value(ax.hi))]
    c0, coeffs = form
    tap_e = [c0 + sum(a * v for a, v in zip(coeffs, val)) for val in values]
    return Plan(hr, xr, taps, block, par, outer_red, inner, lane, row_dims, row_forms, row_lo,
                row_ext, stride, sorted(set(tap_e)), values, tap_e)


def groups(p: Plan, dt: str, B: int) -> Tuple[Optional[int], int]:
    """``(P, G)``: the values of the threaded axis (None if not static) and the groups
    the block axis is split into, each with its own copies, the threads sharing them:
    more than one for few values of the threaded axis (an RGB image's 3 channels) or
    partial sums too large for the stack (``B`` rows a pass)."""
    size, V, T = (4 if dt == "float32" else 8), target.current().lanes(dt), len(p.tap_values)
    F = const_value(p.block.hi) - const_value(p.block.lo)
    lo0, hi0 = const_value(p.par[0].lo), const_value(p.par[0].hi)
    P = hi0 - lo0 if lo0 is not None and hi0 is not None else None
    G = 1
    while (F % (2 * G * B) == 0 and (F // G * T * V * size > MAX_LOCAL
                                     or P is not None and P * G < MIN_TASKS)):
        G *= 2
    return P, G


def rows_a_pass(p: Plan, dt: str) -> int:
    """Rows of the block axis a pass computes: all taps of a pass, or (5 x 5, 7 x 7 kernels;
    3 x 3 on AVX2's 16 registers) groups of them, each pass over y with its own
    accumulators. Fewest passes first, then most rows: on AVX2, 3 x 3 taps of one row in
    one pass ran a weight gradient 1.2-1.5x faster than two rows in two passes."""
    budget = min(MAX_ACCS, target.current().accumulators)
    F = const_value(p.block.hi) - const_value(p.block.lo)
    return max(1, min(ROWS, F, budget // len(p.tap_values)))


def lower(lw, t: Compute, red: Reduce, ntaps: int, body: Expr, where: Optional[Expr]
          ) -> Optional[List[Stmt]]:
    """The loop nest of the module docstring for ``t``, or None when :func:`plan` does
    not apply or its arrays would be too large.

    >>> import tensorexpr as te
    >>> X = te.placeholder((2, 3, 10, 20), name="X")
    >>> H = te.placeholder((2, 4, 8, 18), name="H")
    >>> n, y, x = te.reduce_axis(2, "n"), te.reduce_axis(8, "y"), te.reduce_axis(18, "x")
    >>> dW = te.compute((4, 3, 3, 3), lambda f, c, ky, kx: te.sum(
    ...     H[n, f, y, x] * X[n, c, y + ky, x + kx], axis=[n, y, x]), name="dW")
    >>> src = te.build(dW).source   # 18 columns: lanes over the flat positions y * 18 + x
    >>> "(lanes; registers across the flat positions)" in src and "copy of the image" in src
    True
    """

    def _fold_sub(a, b):
        return fold("sub", a, b, I64)
    p = plan(lw, t, red, ntaps, body, where)
    if p is None:
        return None
    dt = red.dtype
    size = 4 if dt == "float32" else 8
    V = target.current().lanes(dt)
    T = len(p.tap_values)
    F0, F1 = const_value(p.block.lo), const_value(p.block.hi)
    F = F1 - F0
    budget = min(MAX_ACCS, target.current().accumulators)
    B = rows_a_pass(p, dt)
    npass = -(-T * B // budget)
    per = -(-T // npass)
    passes = [list(range(k, min(k + per, T))) for k in range(0, T, per)]
    x0, x1 = const_value(p.lane.lo), const_value(p.lane.hi)
    nx = x1 - x0
    NV = -(-nx // V)
    JP = NV * V
    RS = 1
    for e in p.row_ext:
        RS *= e
    E = len(p.offsets)
    lo0 = const_value(p.par[0].lo)
    P, G = groups(p, dt, B)
    FG = F // G
    if FG * T * V * size > MAX_LOCAL:
        return None
    # tiles of y: their rows of the copies (for one lanes loop) stay in the L1 cache;
    # when the copies of a whole image do not fit the stack (a 224 x 224 image), each
    # tile gets copies of its own rows (one row dimension moving forward with y)
    ys = 0  # rows of the copies per step of y
    for q, (c, coeffs) in enumerate(p.row_forms):
        ys = ys * p.row_ext[q] + (coeffs[-1] if p.inner is not None else 0)
    # rows whose length is not a whole number of vectors (14, 28, 8 columns): with
    # stride 1 in y the lanes run over the flat positions y * nx + x of H's last two
    # axes, and copies in rows of nx elements make every tap's read flat too
    # (copy[(y + r) * nx + x] = copy[p + r * nx]); no lane is wasted but a few at the end
    ylo_ = const_value(p.inner.lo) if p.inner is not None else None
    flat = (p.inner is not None and nx % V != 0 and x0 == 0 and ylo_ == 0
            and len(p.row_dims) == 1 and p.row_forms[0][1][-1] == 1
            and len(p.h.indices) >= 2 and isinstance(p.h.indices[-2], Axis)
            and p.h.indices[-2].uid == p.inner.uid
            and const_value(p.h.tensor.dims[-1]) == nx
            and const_value(p.h.tensor.dims[-2]) == const_value(p.inner.hi)
            and (E * RS * nx + V) * size <= FLAT_BYTES)
    if flat:  # fewer vectors to sum, counting the last one's own lanes loop as 3
        hy = const_value(p.inner.hi)
        flat = (hy * nx // V + (3 if hy * nx % V else 0)) < hy * NV
    # one row (no y: a 1-D convolution) longer than a lanes loop holds: else each group
    # of vectors adds its accumulators to part (2.2x slower: case 20's conv1d, L = 512)
    flat = flat or (p.inner is None and NV > MAX_VECTORS
                    and (E * RS * nx + V) * size <= MAX_LOCAL)
    if flat:
        JP = nx
    tiled_copy = E * RS * JP * size > MAX_LOCAL
    if tiled_copy and not (p.inner is not None and len(p.row_dims) == 1 and ys > 0):
        return None
    ytile: object = None
    Ty = 0
    if p.inner is not None:
        ylo, yhi = const_value(p.inner.lo), const_value(p.inner.hi)
        c_, coeffs_ = p.row_forms[0] if p.row_forms else (0, ())
        tap_rows = [c_ + sum(a * w for a, w in zip(coeffs_, v)) for v in p.tap_values]
        rmin_t, rmax_t = (min(tap_rows), max(tap_rows)) if tap_rows else (0, 0)

        def tile_rows(d: int) -> int:
            return ys * (d - 1) + rmax_t - rmin_t + 1

        def fits(d: int) -> bool:
            per_lanes_loop = E * min(NV, MAX_VECTORS) * V * size * max(1, ys) * d
            return ((d == 1 or per_lanes_loop <= TILE_BYTES)
                    and (not tiled_copy or E * tile_rows(d) * JP * size <= MAX_LOCAL))
        sizes = [d for d in range(1, yhi - ylo + 1) if (yhi - ylo) % d == 0 and fits(d)]
        if flat:
            sizes = [yhi - ylo]
        if not sizes or (tiled_copy and max(sizes) == yhi - ylo):
            return None
        Ty = max(sizes)
        ytile = lw.fresh("k", I64) if Ty < yhi - ylo else Lit(ylo, I64)
    if tiled_copy:
        RS = tile_rows(Ty)
    lw.record.note("lanes", "flat positions" if flat else p.lane.name)
    if isinstance(ytile, Var):
        lw.record.note("y tile", Ty)
    if G > 1:
        lw.record.note("groups", G)
    xbuf, hbuf = lw.buf[p.x.tensor.uid].name, lw.buf[p.h.tensor.uid].name
    gv = lw.fresh("i", I64) if G > 1 else None
    g0 = add(Lit(F0, I64), mul(gv, Lit(FG, I64))) if gv is not None else Lit(F0, I64)
    pvars = [lw.fresh("i", I64) for _ in p.par]
    env: Dict[int, object] = {ax.uid: v for ax, v in zip(p.par, pvars)}
    part = lw.fresh("part", dt).name
    copy = lw.fresh("copy", dt).name
    stmts: List[Stmt] = [Local(part, dt, FG * T * V),
                         Local(copy, dt, E * RS * JP + (V if flat else 0))]
    z = lw.fresh("k", I64)
    stmts.append(For(z, Lit(0, I64), Lit(FG * T * V, I64), 1,
                     Block((Store(part, z, zero(dt)),)), simd=True))
    if flat:  # the last vector's lanes past the image read here
        z2 = lw.fresh("k", I64)
        stmts.append(For(z2, Lit(E * RS * JP, I64), Lit(E * RS * JP + V, I64), 1,
                         Block((Store(copy, z2, zero(dt)),)), simd=True))
    rvars = [lw.fresh("k", I64) for _ in p.outer_red]
    env.update({ax.uid: v for ax, v in zip(p.outer_red, rvars)})
    scope = Scope(env, tuple(p.par) + tuple(p.outer_red), (), {})

    def index(e: Expr, sc) -> object:
        return lw.expr(e, sc, [])

    # the copies: copy[e][row][j] = X[.., row, s*(x0 + j) + e] inside X and j < nx, else 0
    fill: List[Stmt] = []
    rowv = [lw.fresh("k", I64) for _ in p.row_dims]
    j = lw.fresh("k", I64)
    for ei, e in enumerate(p.offsets):
        idx: List[object] = []
        tests: List[object] = []
        for k, i in enumerate(p.x.indices):
            if k in p.row_dims:
                q = p.row_dims.index(k)
                n = const_value(p.x.tensor.dims[k])
                if tiled_copy:  # the rows of this tile of y
                    r = add(add(rowv[q], Lit(rmin_t, I64)), mul(Lit(ys, I64), ytile))
                    tests += [Op("ge", (r, Lit(0, I64)), "bool"),
                              Op("lt", (r, Lit(n, I64)), "bool")]
                else:
                    r = add(rowv[q], Lit(p.row_lo[q], I64))
                    if p.row_lo[q] < 0:
                        tests.append(Op("ge", (r, Lit(0, I64)), "bool"))
                    if p.row_lo[q] + p.row_ext[q] > n:
                        tests.append(Op("lt", (r, Lit(n, I64)), "bool"))
                idx.append(r)
            elif k == len(p.x.indices) - 1:
                col = add(mul(Lit(p.col_stride, I64), add(j, Lit(x0, I64))), Lit(e, I64))
                n = const_value(p.x.tensor.dims[k])
                if JP > nx:
                    tests.append(Op("lt", (j, Lit(nx, I64)), "bool"))
                if x0 * p.col_stride + e < 0:
                    tests.append(Op("ge", (col, Lit(0, I64)), "bool"))
                if p.col_stride * (x0 + JP - 1) + e >= n:
                    tests.append(Op("lt", (col, Lit(n, I64)), "bool"))
                idx.append(col)
            else:
                idx.append(index(i, scope))
        row_flat: object = Lit(0, I64)
        for q in range(len(p.row_dims)):
            row_flat = add(mul(row_flat, Lit(RS if tiled_copy else p.row_ext[q], I64)),
                            rowv[q])
        at = add(mul(add(Lit(ei * RS, I64), row_flat), Lit(JP, I64)), j)
        value: object = Load(xbuf, lw.offset(p.x.tensor.uid, idx), dt)
        if tests:
            cond = tests[0]
            for c in tests[1:]:
                cond = Op("and", (cond, c), "bool")
            value = Op("select", (cond, value, zero(dt)), dt)
        loop: Stmt = For(j, Lit(0, I64), Lit(JP, I64), 1, Block((Store(copy, at, value),)),
                         simd=True, note="copy of the image")
        for q in reversed(range(len(p.row_dims))):
            loop = For(rowv[q], Lit(0, I64), Lit(RS if tiled_copy else p.row_ext[q], I64), 1,
                       Block((loop,)))
        fill.append(loop)

    # the copy row of each tap, as const + ystep * y (y from the tile's start for
    # copies by tile)
    tap_row: List[int] = []
    ystep = ys * JP
    for v, e in zip(p.tap_values, p.tap_e):
        row = 0
        for q, (c, coeffs) in enumerate(p.row_forms):
            row = row * p.row_ext[q] + c + sum(a * w for a, w in zip(coeffs, v)) - p.row_lo[q]
        if tiled_copy:
            row = c_ + sum(a * w for a, w in zip(coeffs_, v)) - rmin_t
        tap_row.append((p.offsets.index(e) * RS + row) * JP)

    def block(fb: object, nb: int, chunks: List[Tuple[object, bool]], ks: List[int]) -> Stmt:
        """The lanes loop for rows ``fb .. fb + nb - 1`` of the block axis, the taps ``ks``
        and the lanes of the vectors ``chunks`` (``(index, ragged)``; ragged: the last
        one, past the row's end), all adding to the same accumulators."""
        lv = lw.fresh("k", I64)
        accs = [{k: lw.fresh("a", dt) for k in ks} for _ in range(nb)]
        inner_stmts: List[Stmt] = [Decl(a, zero(dt)) for row in accs for a in row.values()]
        yv = lw.fresh("k", I64) if p.inner is not None else None
        yy = yv if not isinstance(ytile, Var) else lw.fresh("k", I64)
        pt: List[Stmt] = []
        for chunk, ragged in chunks:
            xcol = add(mul(chunk, Lit(V, I64)), lv)  # j: the lane's column in the copy
            sc_env = dict(env)
            sc_env[p.lane.uid] = add(xcol, Lit(x0, I64))
            if p.inner is not None:
                sc_env[p.inner.uid] = yv
            hs = []
            for b in range(nb):
                e2 = dict(sc_env)
                e2[p.block.uid] = add(fb, Lit(b, I64))
                sc = Scope(e2, (), (), {})
                hidx = [index(i, sc) for i in p.h.indices]
                h: object = Load(hbuf, lw.offset(p.h.tensor.uid, hidx), dt)
                if ragged:
                    h = Op("select", (Op("lt", (xcol, Lit(nx, I64)), "bool"), h, zero(dt)), dt)
                hv = lw.fresh("h", dt)
                pt.append(Decl(hv, h))
                hs.append(hv)
            ybase = (Lit(0, I64) if yv is None else
                     mul(Lit(ystep, I64), yy if tiled_copy else yv))
            for k in ks:
                ld = Load(copy, add(add(Lit(tap_row[k], I64), ybase), xcol), dt)
                if nb > 1:
                    # ``+ 0``: gcc folded a plain load into each FMA using it (one load per
                    # row of the block: load-bound, 20% slower); the sum cannot tell -0
                    # from +0 (it starts at +0, and 0 * inf is NaN either way)
                    xv = lw.fresh("xc", dt)
                    pt.append(Decl(xv, Op("add", (ld, zero(dt)), dt)))
                    ld = xv
                for b in range(nb):
                    pt.append(Accumulate(accs[b][k], "sum", Op("mul", (hs[b], ld), dt)))
        if p.inner is not None:
            # constant bounds (gcc vectorizes the lanes loop as an outer loop only then)
            y_of = [Decl(yv, add(ytile, yy))] if isinstance(ytile, Var) else []
            y0 = 0 if isinstance(ytile, Var) else const_value(p.inner.lo)
            inner_stmts.append(For(yy, Lit(y0, I64), Lit(y0 + Ty, I64), 1,
                                   Block(tuple(y_of + pt)), note=p.inner.name))
        else:
            inner_stmts.extend(pt)
        for b in range(nb):
            base = mul(add(_fold_sub(fb, g0), Lit(b, I64)), Lit(T * V, I64))
            for k in ks:
                inner_stmts.append(Store(part, add(add(base, Lit(k * V, I64)), lv),
                                         accs[b][k], add=True))
        return For(lv, Lit(0, I64), Lit(V, I64), 1, Block(tuple(inner_stmts)), simd=True,
                   note=f"{p.lane.name} (lanes; registers across {p.inner.name})"
                   if p.inner is not None else f"{p.lane.name} (lanes)")

    def flat_block(fb: object, nb: int, ks: List[int]) -> List[Stmt]:
        """The lanes loops of :func:`block` over the flat positions ``p = y * nx + x``:
        one over the whole vectors, one for the last (lanes past the image read H as
        0; in the first loop it kept gcc from vectorizing the lanes as an outer loop)."""
        total = (const_value(p.inner.hi) if p.inner is not None else 1) * nx
        where = p.lane.name if p.inner is None else f"{p.inner.name} * {nx} + {p.lane.name}"
        hbase = []
        for b in range(nb):
            e2 = dict(env)
            e2[p.block.uid] = add(fb, Lit(b, I64))
            if p.inner is not None:
                e2[p.inner.uid] = Lit(0, I64)
            e2[p.lane.uid] = Lit(x0, I64)  # 0 but for one row
            hbase.append(lw.offset(p.h.tensor.uid, [index(i, Scope(e2, (), (), {}))
                                                    for i in p.h.indices]))

        def lanes(ragged: bool) -> Stmt:
            lv = lw.fresh("k", I64)
            accs = [{k: lw.fresh("a", dt) for k in ks} for _ in range(nb)]
            body: List[Stmt] = [Decl(a, zero(dt)) for row in accs for a in row.values()]
            pv = lw.fresh("k", I64)
            pos = add(Lit(total // V * V, I64), lv) if ragged else \
                add(mul(pv, Lit(V, I64)), lv)
            pt: List[Stmt] = []
            hs = []
            for b in range(nb):
                h: object = Load(hbuf, add(hbase[b], pos), dt)
                if ragged:
                    h = Op("select", (Op("lt", (pos, Lit(total, I64)), "bool"), h, zero(dt)),
                           dt)
                hv = lw.fresh("h", dt)
                pt.append(Decl(hv, h))
                hs.append(hv)
            for k in ks:
                ld: object = Load(copy, add(Lit(tap_row[k], I64), pos), dt)
                if nb > 1:  # held in a register for the rows (see block)
                    xv = lw.fresh("xc", dt)
                    pt.append(Decl(xv, Op("add", (ld, zero(dt)), dt)))
                    ld = xv
                for b in range(nb):
                    pt.append(Accumulate(accs[b][k], "sum", Op("mul", (hs[b], ld), dt)))
            if ragged:
                body.extend(pt)
            else:
                body.append(For(pv, Lit(0, I64), Lit(total // V, I64), 1, Block(tuple(pt)),
                                note=f"{where} (vectors)"))
            for b in range(nb):
                base = mul(add(_fold_sub(fb, g0), Lit(b, I64)), Lit(T * V, I64))
                for k in ks:
                    body.append(Store(part, add(add(base, Lit(k * V, I64)), lv),
                                      accs[b][k], add=True))
            note = "the last vector" if ragged else "registers across the flat positions"
            return For(lv, Lit(0, I64), Lit(V, I64), 1, Block(tuple(body)), simd=True,
                       note=f"{where} (lanes; {note})")

        return ([lanes(False)] if total >= V else []) + ([lanes(True)] if total % V else [])

    def chunks(fb: object, nb: int) -> List[Stmt]:
        """The vectors of the row, ``MAX_VECTORS`` to a lanes loop adding to the same
        accumulators, each at a constant offset (with a loop over the vectors outside,
        gcc kept one pointer per tap and spilled H's vectors); a loop over the whole
        vectors and the ragged one after for very long rows."""
        if flat:
            return [loop for ks in passes for loop in flat_block(fb, nb, ks)]
        full = nx // V
        out: List[Stmt] = []
        for ks in passes:
            if NV <= MAX_VECTORS * MAX_GROUPS:
                out += [block(fb, nb, [(Lit(c, I64), c >= full)
                                       for c in range(g, min(g + MAX_VECTORS, NV))], ks)
                        for g in range(0, NV, MAX_VECTORS)]
                continue
            cv = lw.fresh("k", I64)
            lw.record.note("vector loop", True)
            out.append(For(cv, Lit(0, I64), Lit(full, I64), 1,
                           Block((block(fb, nb, [(cv, False)], ks),)),
                           note=f"{p.lane.name} vectors"))
            if full < NV:
                out.append(block(fb, nb, [(Lit(full, I64), True)], ks))
        return out

    # tiles of y whose rows of the copies (for one lanes loop) stay in the L1 cache
    fbv = lw.fresh("i", I64)
    main = FG - FG % B
    tile: List[Stmt] = []
    if main:
        tile.append(For(fbv, g0, add(g0, Lit(main, I64)), B,
                        Block(tuple(chunks(fbv, B))), note=p.block.name))
    for r in range(main, FG):
        tile.extend(chunks(Lit(F0 + r, I64), 1))  # G == 1 here
    work: List[Stmt] = [] if tiled_copy else list(fill)
    if p.inner is not None and isinstance(ytile, Var):
        work.append(For(ytile, Lit(ylo, I64), Lit(yhi, I64), Ty,
                        Block(tuple((fill if tiled_copy else []) + tile)),
                        note=f"{p.inner.name} tiles"))
    else:
        work.extend(tile)
    nest: Stmt = Block(tuple(work))
    for ax, v in reversed(list(zip(p.outer_red, rvars))):
        nest = Block((For(v, lw.size_expr(ax.lo), lw.size_expr(ax.hi), 1, nest,
                          note=ax.name),))
    stmts.append(nest)

    # the epilogue, over f and the taps: the lanes of each partial sum added; an element
    # whose sum is not finite is summed again exactly (a zero of the copy times an
    # infinite H adds NaN); then the body around the sum
    fv = lw.fresh("i", I64)
    tvars = [lw.fresh("i", I64) for _ in p.taps]
    k_of: object = Lit(0, I64)  # the tap's place in p.tap_values (row-major)
    for ax, tv in zip(p.taps, tvars):
        ext = const_value(ax.hi) - const_value(ax.lo)
        k_of = add(mul(k_of, Lit(ext, I64)), _fold_sub(tv, Lit(const_value(ax.lo), I64)))
    total = lw.fresh("t", dt)
    kk = lw.fresh("k", I64)
    at = mul(add(mul(_fold_sub(fv, g0), Lit(T, I64)), k_of), Lit(V, I64))
    est: List[Stmt] = [Decl(total, zero(dt)), For(
        kk, Lit(0, I64), Lit(V, I64), 1,
        Block((Accumulate(total, "sum", Load(part, add(at, kk), dt)),)),
        simd=True, reduction=(("sum", total),))]
    binds = {ax.uid: tv for ax, tv in zip(p.taps, tvars)}
    binds[p.block.uid] = fv
    again: List[Stmt] = []
    exact = lw.reduce(red, Scope({**env, **binds}, tuple(t.axes), (), {}), again)
    again.append(Assign(total, exact))
    inf_or_nan = Op("ne", (Op("sub", (total, total), dt), zero(dt)), "bool")
    est.append(If(inf_or_nan, Block(tuple(again))))
    es = Scope({**env, **binds}, tuple(t.axes), (), {})
    es.memo[red] = total
    out = lw.expr(t.body, es, est)
    idx = [es.env[ax.uid] for ax in t.axes]
    est.append(Store(lw.buf[t.uid].name, lw.offset(t.uid, idx), cast(out, t.dtype)))
    ep: Stmt = Block(tuple(est))
    for ax, tv in reversed(list(zip(p.taps, tvars))):
        ep = Block((For(tv, Lit(const_value(ax.lo), I64), Lit(const_value(ax.hi), I64), 1,
                        ep, note=ax.name),))
    stmts.append(For(fv, g0, add(g0, Lit(FG, I64)), 1, ep, note=p.block.name))

    wk = lw.work(t, t.axes)
    threaded = wk is not False
    nest2: List[Stmt] = stmts
    pair = gv is not None and P is not None  # one parallel loop over (c, group) pairs
    for k in reversed(range(len(p.par))):
        if k == 0 and pair:
            break
        ax = p.par[k]
        par = k == 0 and threaded and gv is None
        nest2 = [For(pvars[k], lw.size_expr(ax.lo), lw.size_expr(ax.hi), 1, Block(tuple(nest2)),
                     note=ax.name, parallel=par, work=wk if par else None)]
    if pair:
        q = lw.fresh("i", I64)
        head = [Decl(pvars[0], add(Lit(lo0, I64), Op("quot", (q, Lit(G, I64)), I64))),
                Decl(gv, Op("rem", (q, Lit(G, I64)), I64))]
        nest2 = [For(q, Lit(0, I64), Lit(P * G, I64), 1, Block(tuple(head + nest2)),
                     note=f"{p.par[0].name} x groups of {p.block.name}", parallel=threaded,
                     work=wk if threaded else None)]
    elif gv is not None:
        nest2 = [For(gv, Lit(0, I64), Lit(G, I64), 1, Block(tuple(nest2)),
                     note=f"groups of {p.block.name}", parallel=threaded,
                     work=wk if threaded else None)]
    return nest2

"""Sums whose innermost output axes are short taps (a convolution's weight gradient).

``dW[f, c, ky, kx] = sum_{n, y, x} H[n, f, y, x] * X[n, c, y + ky, x + kx]`` has
a 3 x 3 box of taps as its innermost output axes: too short to be computed by
rows, and one element at a time every product loads both of its operands. Here
all the taps of an output element, and ``BLOCK`` values of an outer axis that
some read does not use (``f``: the ``X`` reads are shared), are computed in one
pass over the reduction's box: for each point of the last reduction axis ``x``
(innermost, in vector lanes) every tap adds its product to its own partial sum
for that ``x``, so ``H[n, f, y, x]`` is loaded once for the taps and
``X[n, c, y + ky, x + kx]`` once for the ``f`` block. The partial sums of an
element are added at the end: a reassociation of the sum, as ``tensorexpr.ir``
allows for reductions.

Each element still adds exactly the points of its domain: the loops run over the
reduction's box (its bounds may not depend on the output) except ``x``; the
elements are grouped by the tests of their domains with the taps' values put in
(the taps of a padded convolution differ), and each group gets its own loop over
``x``, bounded by isl, inside its tests of the row. No lane is masked: masked
lanes next to another nest in one parallel region kept gcc 12 from vectorizing.

The partial sums here are stored per point of ``x``: every product loads and stores
one. Where the sum is a convolution's weight gradient proper (a product of two
stored tensors, a domain that only says the read is inside the image),
``codegen.tapsum_registers`` keeps them in vector registers instead, about three times faster;
the loops here are for the other sums.

>>> import tensorexpr as te
>>> X, H = te.placeholder((4, 34, 34), name="X"), te.placeholder((8, 32, 32), name="H")
>>> y, x = te.reduce_axis(32, name="y"), te.reduce_axis(32, name="x")
>>> dW = te.compute((8, 4, 3, 3), lambda f, c, ky, kx: te.sum(
...     H[f, y, x] * X[c, y + ky, x + kx], axis=[y, x]), name="dW")
>>> plan(dW)[1:]   # two tap axes, rows blocked along f (its X reads are shared)
(2, 0)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from tensorexpr import polyhedral
from tensorexpr.ir import (Binary, Compute, Const, Read, Reduce, walk)
from tensorexpr.transform import const_value, substitute

from . import tapsum_registers
from .cexpr import I64, add, cast, identity
from .loopast import (Accumulate, Block, Decl, For, If, Lit, Load, Local, Stmt, Store,
                      mark_inner_simd)
from .patterns import conj, only_sum, uses, where_form
from .scope import Scope

#: at most this many taps (product of the short innermost output axes) per pass
MAX_TAPS = 16
#: an output axis of at most this extent is a tap
TAP = 4
#: rows of an outer axis computed in the same pass (when a read does not use it)
BLOCK = 4
#: the last reduction axis must be at least this long (it runs in vector lanes)
MIN_LANES = 8


def plan(t: Compute, tap: int = TAP, max_taps: int = MAX_TAPS, min_lanes: int = MIN_LANES
         ) -> Optional[Tuple[Reduce, int, Optional[int]]]:
    """``(red, ntaps, block_axis)`` when ``t`` is such a sum, else None: ``ntaps`` trailing
    output axes of static extents at most ``TAP`` (product at most ``MAX_TAPS``, at
    least one outer axis before them), a float sum reached through arithmetic only,
    its axes a static box (the last at least ``MIN_LANES`` long, walked by a read's
    last index), and ``block_axis`` an outer axis some read does not use (or None)."""
    red = only_sum(t)
    if red is None or len(t.axes) < 2:
        return None
    ntaps, prod = 0, 1
    for ax in reversed(t.axes[1:]):
        lo, hi = const_value(ax.lo), const_value(ax.hi)
        if lo is None or hi is None or hi - lo > tap or prod * (hi - lo) > max_taps:
            break
        ntaps, prod = ntaps + 1, prod * (hi - lo)
    if ntaps == 0 or prod < 2:
        return None
    x = red.axes[-1]  # the other reduction axes may have symbolic bounds (a batch)
    if const_value(x.lo) is None or const_value(x.hi) is None:
        return None
    if const_value(x.hi) - const_value(x.lo) < min_lanes:
        return None
    if any(isinstance(e, (Reduce,)) for e in walk(red.body, unique=True)):
        return None
    reads = [e for e in walk(red.body, unique=True) if isinstance(e, Read)]
    if not any(r.indices and uses(r.indices[-1], {x.uid}) for r in reads):
        return None
    # Block an axis that the reads moving with the taps do not use (f of dW: the X
    # reads, one per tap, then serve the whole block), else one some read does not use.
    tap_uids = {ax.uid for ax in t.axes[-ntaps:]}
    tapped = [r for r in reads if uses(r, tap_uids)]
    # the sum's condition as the lowering tests it: its where and the select of its body
    # (a padded convolution's), tested once per block; an axis it uses has rows that
    # differ in it, so it cannot be the block axis
    where = where_form(red)[1]
    block, score = None, 0
    for k in range(len(t.axes) - ntaps):
        ax = t.axes[k]
        lo, hi = const_value(ax.lo), const_value(ax.hi)
        if lo != 0 or hi is None or hi < 2 * BLOCK or hi % BLOCK:
            continue
        if where is not None and uses(where, {ax.uid}):
            continue
        if not any(uses(r, {ax.uid}) for r in reads):
            continue
        shared = sum(not uses(r, {ax.uid}) for r in reads) + 8 * sum(
            not uses(r, {ax.uid}) for r in tapped)
        if shared > score:
            block, score = k, shared
    return red, ntaps, block


@dataclass(frozen=True)
class Taps:
    """How :func:`lower` runs a tensor: :func:`plan`'s ``(red, ntaps, block)``, and
    whether only the register form applies (larger kernels, short rows)."""
    plan: tuple
    ntaps: int
    registers_only: bool


def applies(t: Compute) -> Optional[Taps]:
    """The :class:`Taps` of ``t``, or None when it has no short tap axes."""
    p = plan(t)
    if p is not None:
        return Taps(p, p[1], False)
    # larger kernels (5 x 5, 7 x 7) and short rows (7 x 7 images: tapsum_registers runs
    # them over flat positions) only in registers: the per-point partial sums of
    # _exact were not measured against the other schedules for them
    wide = plan(t, tapsum_registers.WIDE_TAP, tapsum_registers.WIDE_MAX_TAPS, 1)
    return None if wide is None else Taps(wide, wide[1], True)


def leading_loops(lw, t: Compute, chosen: Taps) -> int:
    """How many leading axes of ``t`` :func:`lower` runs as its outermost loops, in order,
    with nothing before them (what ``codegen.fuse`` needs of a member of a slab loop),
    whichever of its forms runs: in registers, its threaded axes unless a loop over
    groups of the block axis is outermost; in memory, the axes before the taps.

    >>> import tensorexpr as te
    >>> from codegen.lower import Lowerer
    >>> from codegen.signature import Signature
    >>> X = te.placeholder((4, 20), name="X")
    >>> k = te.reduce_axis(18, name="k")
    >>> Y = te.compute((4, 3), lambda i, t: te.sum(X[i, k + t], axis=k), name="Y")
    >>> leading_loops(Lowerer(Signature([Y], [X])), Y, applies(Y))
    1
    """
    red, ntaps, _ = chosen.plan
    memory = t.ndim - ntaps
    p = tapsum_registers.plan(lw, t, red, ntaps, *where_form(red))
    if p is None:
        # ``t`` may be a slab of a tensor of the program (``codegen.fuse.member``) whose
        # narrowed block axis the registers need static: a slab must leave that axis
        # whole, or the tensor would lose the registers' form for the memory one (about
        # three times slower) to share a loop
        whole = next((x for x in lw.lowered if x.uid == t.uid), t)
        own = applies(whole) if whole is not t else None
        q = None if own is None else tapsum_registers.plan(
            lw, whole, own.plan[0], own.ntaps, *where_form(own.plan[0]))
        if q is not None:
            return min(memory, next(k for k, a in enumerate(whole.axes)
                                    if a.uid == q.block.uid))
        return memory
    B = tapsum_registers.rows_a_pass(p, red.dtype)
    k = 0
    if tapsum_registers.groups(p, red.dtype, B)[1] == 1:  # else the groups' loop is outermost
        while k < len(p.par) and p.par[k].uid == t.axes[k].uid:
            k += 1
    # the registers' lowering may still find its arrays too large: then the memory form runs
    return k if chosen.registers_only else min(k, memory)


def lower(lw, t: Compute, chosen: Taps) -> Optional[List[Stmt]]:
    """The loop nest of ``t`` by taps (see the module docstring): with its partial sums
    in vector registers (``codegen.tapsum_registers``) where they fit; None (nothing lowered)
    when only registers apply and they do not fit."""
    red, ntaps, _ = chosen.plan
    body, where = where_form(red)
    fast = tapsum_registers.lower(lw, t, red, ntaps, body, where)
    if fast is not None or chosen.registers_only:
        if fast is not None:
            lw.record.note("partial sums", "registers")
        return fast
    lw.record.note("partial sums", "memory")
    return _exact(lw, t, chosen.plan)


def _exact(lw, t: Compute, p) -> List[Stmt]:
    """The loop nest by taps, each element adding exactly the points of its domain."""
    red, ntaps, bk = p
    body, where = where_form(red)
    outer, taps = list(t.axes[:-ntaps]), list(t.axes[-ntaps:])
    rows = BLOCK if bk is not None else 1
    # every tap value (and row of the block): (constants of the taps, row offset)
    values: List[Tuple[int, ...]] = [()]
    for ax in taps:
        values = [v + (c,) for v in values for c in range(const_value(ax.lo), const_value(ax.hi))]
    x = red.axes[-1]
    x0, x1 = const_value(x.lo), const_value(x.hi)
    nx = x1 - x0
    elems = [(v, r) for r in range(rows) for v in values]
    vars_ = [lw.fresh("i", I64) for _ in outer]
    env = {ax.uid: v for ax, v in zip(outer, vars_)}
    part = lw.fresh("part", red.dtype).name
    stmts: List[Stmt] = [Local(part, red.dtype, len(elems) * nx)]
    z = lw.fresh("k", I64)
    stmts.append(For(z, Lit(0, I64), Lit(len(elems) * nx, I64), 1,
                     Block((Store(part, z, identity("sum", red.dtype)),)), simd=True))

    def bind(v: Tuple[int, ...], r: int) -> Dict[int, object]:
        b = {ax.uid: Lit(c, I64) for ax, c in zip(taps, v)}
        if r:
            b[outer[bk].uid] = add(vars_[bk], Lit(r, I64))
        return b

    # loops over the reduction's box, x innermost: one loop over x per set of tests of
    # the domain (the taps of a padded convolution differ), bounded by isl, its row
    # tests around it, so no lane is masked
    rvars = [lw.fresh("k", I64) for _ in red.axes[:-1]]
    renv = {ax.uid: v for ax, v in zip(red.axes[:-1], rvars)}
    base = Scope({**env, **renv}, tuple(t.axes) + tuple(red.axes[:-1]), (), {})
    tests: List[List] = []
    for v, r in elems:
        tests.append([] if where is None else [
            substitute(w, {ax: Const(c, I64) for ax, c in zip(taps, v)})
            for w in polyhedral.conjuncts(where)])

    def rows_of(ws):
        return [w for w in ws if not uses(w, {x.uid})]

    def lanes_of(ws):
        return [w for w in ws if uses(w, {x.uid})]

    def emit(key, row_tests: bool, guards) -> List[Stmt]:
        """A loop over x per group of elements with the same ``key`` tests, inside their
        row tests (``row_tests``; else they are known to hold: ``guards``)."""
        groups: Dict[str, List[int]] = {}
        for k in range(len(elems)):
            groups.setdefault(" & ".join(str(w) for w in key(tests[k])), []).append(k)
        out: List[Stmt] = []
        for ks in groups.values():
            row = rows_of(tests[ks[0]]) if row_tests else []
            lane = lanes_of(tests[ks[0]])

            def point(sc, stmts, ks=ks):
                for k in ks:
                    v, r = elems[k]
                    known = tuple(Binary("eq", ax, Const(c, I64), "bool")
                                  for ax, c in zip(taps, v))
                    s2 = sc.child(env=bind(v, r), guards=known)
                    value = cast(lw.expr(body, s2, stmts), red.dtype)
                    at = add(Lit(k * nx - x0, I64), sc.env[x.uid])
                    stmts.append(Store(part, at, value, add=True))

            loop: List[Stmt] = []
            lw.loops([x], conj(lane) if lane else None,
                     base.child(guards=tuple(row) + tuple(guards)), point, loop)
            if row:
                pre: List[Stmt] = []
                c = lw.expr(conj(row), base, pre)
                out.extend(pre)
                out.append(If(c, Block(tuple(loop))))
            else:
                out.extend(loop)
        return out

    # Each group by all its tests, inside its row tests; and, where every row test of
    # every element holds (the interior rows of a padded image), groups by the lane
    # tests alone: the taps of a column share their loop and its loads.
    inner = emit(lambda ws: ws, True, ())
    every = list({str(w): w for ws in tests for w in rows_of(ws)}.values())
    if every:
        merged = emit(lanes_of, False, every)
        if len(merged) < len(inner):
            pre: List[Stmt] = []
            c = lw.expr(conj(every), base, pre)
            inner = pre + [If(c, Block(tuple(merged)), Block(tuple(inner)))]
    nest: Stmt = Block(tuple(inner))
    for ax, v in reversed(list(zip(red.axes[:-1], rvars))):
        nest = Block((For(v, lw.size_expr(ax.lo), lw.size_expr(ax.hi), 1,
                          nest, note=ax.name),))
    stmts.extend(mark_inner_simd(list(nest.stmts)))
    # the epilogue: each element's partial sums added, then the body around the sum
    for k, (v, r) in enumerate(elems):
        total = lw.fresh("t", red.dtype)
        kk = lw.fresh("k", I64)
        stmts.append(Decl(total, identity("sum", red.dtype)))
        stmts.append(For(kk, Lit(0, I64), Lit(nx, I64), 1,
                         Block((Accumulate(total, "sum",
                                           Load(part, add(Lit(k * nx, I64), kk), red.dtype)),)),
                         simd=True, reduction=(("sum", total),)))
        es = Scope({**env, **bind(v, r)}, tuple(t.axes), (), {})
        es.memo[red] = total
        est: List[Stmt] = []
        out = lw.expr(t.body, es, est)
        idx = [v_ for v_ in vars_]
        if r:
            idx[bk] = add(vars_[bk], Lit(r, I64))
        idx += [Lit(c, I64) for c in v]
        est.append(Store(lw.buf[t.uid].name, lw.offset(t.uid, idx), cast(out, t.dtype)))
        stmts.extend(est)
    # loops over the outer axes (the block axis by BLOCK), the first one on threads
    work = lw.work(t, t.axes)
    nest2: List[Stmt] = stmts
    for k in reversed(range(len(outer))):
        ax = outer[k]
        par = k == 0 and work is not False
        nest2 = [For(vars_[k], Lit(const_value(ax.lo), I64) if const_value(ax.lo) is not None
                     else lw.size_expr(ax.lo), lw.size_expr(ax.hi), rows if k == bk else 1,
                     Block(tuple(nest2)), note=ax.name, parallel=par,
                     work=work if par else None)]
    return nest2

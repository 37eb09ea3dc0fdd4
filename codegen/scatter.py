"""Scatter-add lowering: zero-fill, then serial accumulation with checked target indices.

A mixin of :class:`codegen.lower.Lowerer` (``scatter``); a scatter whose last target
index is its last axis (an embedding's gradient) adds whole rows in vector lanes.

>>> import tensorexpr as te
>>> from codegen.lower import Lowerer
>>> from codegen.signature import Signature
>>> E, idx = te.placeholder((10, 16), name="E"), te.placeholder((4,), "int32", name="idx")
>>> Y = te.compute((4, 16), lambda i, d: E[idx[i], d], name="Y")
>>> H = te.placeholder((4, 16), name="H")
>>> dE, = te.differentiate(Y, [E], head=H)
>>> any(s.read is None for s in Lowerer(Signature([dE], [H, idx])).program().sites)
True
"""
from __future__ import annotations

from typing import List

from tensorexpr.ir import Axis, ScatterAdd, same
from tensorexpr.transform import const_value

from .cexpr import I64, cast, checked, mul, zero
from .loopast import Block, CExpr, Decl, For, Lit, Stmt, Store, simd_safe
from .patterns import uses
from .program import SCATTER_OUT_OF_RANGE
from .scope import Scope


def scatter_rows_apply(t: ScatterAdd) -> bool:
    """Whether ``ScatterLowering.scatter_rows`` applies: a scatter over a box whose
    last axis ``d`` is itself the last target index, which no other index uses.

    >>> import tensorexpr as te
    >>> E, idx = te.placeholder((10, 16), name="E"), te.placeholder((4,), "int32", name="idx")
    >>> H = te.placeholder((4, 16), name="H")
    >>> dE, = te.differentiate(te.compute((4, 16), lambda i, d: E[idx[i], d], name="Y"),
    ...                        [E], head=H)
    >>> scatter_rows_apply(dE)
    True
    """
    if t.where is not None or len(t.axes) < 2 or len(t.indices) < 1:
        return False
    d = t.axes[-1]
    last = t.indices[-1]
    if not (isinstance(last, Axis) and last.uid == d.uid and same(d.hi, t.dims[-1])
            and const_value(d.lo) == 0):
        return False
    return not any(uses(x, {d.uid}) for x in t.indices[:-1])


class ScatterLowering:
    """The scatter-adds of :class:`codegen.lower.Lowerer`."""

    def scatter(self, t: ScatterAdd, rows: bool) -> List[Stmt]:
        """Zero-fill, then accumulate serially with a checked target index: a row at a
        time (``rows``: :meth:`scatter_rows`) or point by point."""
        buf = self.buf[t.uid].name
        total: CExpr = Lit(1, I64)
        for d in t.dims:
            total = mul(total, self.size_expr(d))
        z = self.fresh("i", I64)
        fill_work = self.work_of(t.dims)
        fill = For(z, Lit(0, I64), total, 1, Block((Store(buf, z, zero(t.dtype)),)),
                   note="zero-fill", simd=True, parallel=fill_work is not False,
                   work=None if fill_work is False else fill_work)
        site = self.error_site(t, None)
        scope = Scope({}, (), (), {})
        if rows:
            return [fill] + self.scatter_rows(t, site)

        def point(inner: Scope, out: List[Stmt]):
            value = cast(self.expr(t.value, inner, out), t.dtype)
            idx = []
            for x in t.indices:
                v = self.fresh("t", I64)
                out.append(Decl(v, self.expr(x, inner, out)))
                idx.append(v)
            checks = [(d, v, self.size_expr(s)) for d, (v, s) in enumerate(zip(idx, t.dims))]
            store = Store(buf, self.offset(t.uid, idx), value, add=True)
            out.append(checked(SCATTER_OUT_OF_RANGE, site, checks, [store]))

        loops: List[Stmt] = []
        self.loops(t.axes, t.where, scope, point, loops)
        return [fill] + loops

    def scatter_rows(self, t: ScatterAdd, site: int) -> List[Stmt]:
        """A scatter of :func:`scatter_rows_apply`'s form (``dE[idx[i], d] += H[i, d]``,
        an embedding's gradient): the other target indices are computed and checked
        once per row, outside the loop over ``d``, which then adds a contiguous row in
        vector lanes (distinct ``d``, distinct targets). Rows are added in order, as the
        point-by-point loops would."""
        d = t.axes[-1]
        buf = self.buf[t.uid].name
        outer = list(t.axes[:-1])
        vars_ = [self.fresh("k", I64) for _ in outer]
        scope = Scope({ax.uid: v for ax, v in zip(outer, vars_)}, tuple(outer), (), {})
        head: List[Stmt] = []
        idx: List[CExpr] = []
        checks = []
        for k, (x, size) in enumerate(zip(t.indices[:-1], t.dims[:-1])):
            v = self.fresh("t", I64)
            head.append(Decl(v, self.expr(x, scope, head)))
            idx.append(v)
            if not scope.proves_inside(x, size, self.params):
                checks.append((k, v, self.size_expr(size)))
        dv = self.fresh("k", I64)
        inner_scope = scope.child(axes=(d,), env={d.uid: dv})
        body: List[Stmt] = []
        value = cast(self.expr(t.value, inner_scope, body), t.dtype)
        body.append(Store(buf, self.offset(t.uid, idx + [dv]), value, add=True))
        block = Block(tuple(body))
        row = For(dv, Lit(0, I64), self.size_expr(d.hi), 1, block, note=d.name,
                  simd=simd_safe(block))
        nest: Stmt = Block(tuple(head) + (checked(SCATTER_OUT_OF_RANGE, site, checks, [row]),))
        for ax, v in reversed(list(zip(outer, vars_))):
            nest = For(v, self.size_expr(ax.lo), self.size_expr(ax.hi), 1,
                       nest if isinstance(nest, Block) else Block((nest,)), note=ax.name)
        return [nest]

"""Unroll-and-jam of dot-product-like sums: ``JAM`` x ``JAM`` output elements per loop nest.

A mixin of :class:`codegen.lower.Lowerer` (``compute_jam``) for sums like ``H B^T``
where no read walks along the innermost output axis: each read is loaded once for
the row or the column of elements that shares it.

>>> import tensorexpr as te
>>> from codegen.lower import Lowerer
>>> from codegen.signature import Signature
>>> from codegen.cemit import emit
>>> A, B = te.placeholder((64, 32), name="A"), te.placeholder((64, 32), name="B")
>>> k = te.reduce_axis(32, name="k")
>>> C = te.compute((64, 64), lambda i, j: te.sum(A[i, k] * B[j, k], axis=k), name="C")
>>> "(remainder)" in emit(Lowerer(Signature([C], [A, B])).program().kernel)
True
"""
from __future__ import annotations

from typing import List, Optional

from tensorexpr.ir import Compute, Reduce

from .cexpr import I64, add, cast, fold, identity, mul
from .loopast import Accumulate, Block, CExpr, Decl, For, Lit, Stmt, Store, Var, lane_sums
from .patterns import JAM, row_block_axis
from .scope import Scope

#: lanes of each accumulator's partial sums (``JAM * JAM`` of them: 16 x 8 floats fill the
#: vector registers of an AVX-512 machine without spilling)
JAM_LANES = 8


class JamLowering:
    """The unroll-and-jam sums of :class:`codegen.lower.Lowerer`."""

    def compute_jam(self, t: Compute, red: Reduce) -> List[Stmt]:
        """``t`` (body ``epilogue(red)``, a float sum) with ``JAM`` consecutive elements
        along its innermost axis ``j`` (and ``JAM`` along an outer axis whose rows share
        reads, when there is one) reduced in one loop nest, one accumulator each: a read
        that does not use ``j`` (``H[i, k]`` of ``H B^T``) is loaded once for the
        columns, one that does not use the row axis (``B[j, k]``) once for the rows.
        Each accumulator sums its own points (lanes reassociate, as for any sum)."""
        axes = list(t.axes)
        j, outer = axes[-1], axes[:-1]
        vars_ = [self.fresh("i", I64) for _ in outer]
        env = {ax.uid: v for ax, v in zip(outer, vars_)}
        work = self.work(t, axes, dense=True)
        ri = row_block_axis(t, red, JAM)
        self.record.note("jam", f"{JAM} x {JAM}" if ri is not None else f"1 x {JAM}")

        def block(rows: List[Optional[Var]], cols: List[CExpr]) -> List[Stmt]:
            scope = Scope(dict(env), tuple(outer) + (j,), (), {})
            pairs = [(r, c) for r in rows for c in cols]
            accs = [self.fresh("t", red.dtype) for _ in pairs]
            out: List[Stmt] = [Decl(a, identity(red.op, red.dtype)) for a in accs]

            def at(sc: Scope, r, c) -> Scope:
                bind = {j.uid: c}
                if r is not None:
                    bind[outer[ri].uid] = r
                return sc.child(env=bind)

            def point(inner: Scope, stmts: List[Stmt]):
                for a, (r, c) in zip(accs, pairs):
                    v = cast(self.expr(red.body, at(inner, r, c), stmts), red.dtype)
                    stmts.append(Accumulate(a, "sum", v))

            nest: List[Stmt] = []
            self.loops(red.axes, red.where, scope, point, nest)
            # each accumulator in lanes whose order the C spells out (loopast.lane_sums)
            out.extend(lane_sums(nest, accs, self.fresh, JAM_LANES))
            for a, (r, c) in zip(accs, pairs):
                es = at(scope, r, c)
                es.memo[red] = a
                value = self.expr(t.body, es, out)
                idx = [v if k != ri or r is None else r for k, v in enumerate(vars_)]
                out.append(Store(self.buf[t.uid].name, self.offset(t.uid, idx + [c]),
                                 cast(value, t.dtype)))
            return out

        def split(v: Var, lo: CExpr, hi: CExpr, inner, note: str, **kw) -> List[Stmt]:
            """``v`` over [lo, hi) JAM at a time (``inner(vars)``), then one at a time."""
            mid = add(lo, mul(fold("floordiv", fold("sub", hi, lo, I64), Lit(JAM, I64),
                                      I64), Lit(JAM, I64)))
            each = [self.fresh("i", I64) for _ in range(JAM)]
            decls = tuple(Decl(c, add(v, Lit(r, I64))) for r, c in enumerate(each))
            rv = self.fresh("i", I64)
            return [For(v, lo, mid, JAM, Block(decls + tuple(inner(each))), note=note, **kw),
                    For(rv, mid, hi, 1, Block(tuple(inner([rv]))), note=note + " (remainder)")]

        def columns(rows) -> List[Stmt]:
            return split(self.fresh("i", I64), self.size_expr(j.lo), self.size_expr(j.hi),
                         lambda cols: block(rows, cols), j.name)

        def nest_from(k: int, rows) -> List[Stmt]:
            if k == len(outer):
                return columns(rows)
            ax = outer[k]
            kw = dict(parallel=True, work=work) if k == 0 and work is not False else {}
            lo, hi = self.size_expr(ax.lo), self.size_expr(ax.hi)
            if k == ri:
                return split(vars_[k], lo, hi, lambda rs: nest_from(k + 1, rs), ax.name, **kw)
            return [For(vars_[k], lo, hi, 1, Block(tuple(nest_from(k + 1, rows))),
                        note=ax.name, **kw)]

        out = nest_from(0, [None])
        # (they call each other, holding the lowerer: a cycle the collector alone frees)
        block = split = columns = nest_from = None  # noqa: F811, F841
        return out

"""Gather rows: data-dependent indices constant along a row, checked once per row.

A mixin of :class:`codegen.lower.Lowerer` (``compute_gather_rows``), for embeddings
``E[idx[i], d]``: the row then runs unchecked in vector lanes.

The team shares the rows as they come (:data:`SHARE`), not in halves fixed in advance:
a gather moves memory at one core's cache bandwidth, so it is short (an embedding's
2 MiB, ~70 us on one thread), and idle threads sleep (``codegen.openmp_env``): with
fixed halves the call waits for a sleeping thread to wake and then for all of its half
(its core cold). Shared as they come, the calling thread starts at once on a part and
the woken one takes what is left (rows also differ in cost: a row read from L1 or from
memory, a bad index's checked row). Case 13 (V=10000 D=128 I=4096, two threads, calls
back to back as the benchmark makes them, medians): 88 -> 47 us; one thread 70 us.
With the second core busy with other work (load 4-5 on 2 cores) fixed halves ran as
one thread would (70 us: the woken thread ran its half on the caller's core once that
one waited) and shared rows 82 us (the caller did nearly all, then waited for the
other to be scheduled at all). Each row is computed by one thread whichever it is: the
same bits.

>>> import tensorexpr as te
>>> from codegen.lower import Lowerer
>>> from codegen.signature import Signature
>>> E, idx = te.placeholder((10, 16), name="E"), te.placeholder((4,), "int32", name="idx")
>>> Y = te.compute((4, 16), lambda i, d: E[idx[i], d], name="Y")
>>> prog = Lowerer(Signature([Y], [E, idx])).program()
>>> len(prog.sites)   # the point-by-point loop for a row with a bad index
1
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Tuple

from tensorexpr.ir import Compute, Expr, Read

from .cexpr import I64, cast
from .loopast import Block, CExpr, Decl, For, If, Lit, Op, Stmt, Store, simd_safe
from .scope import Scope


#: how the team shares the rows (``loopast.For.share``): shrinking parts taken as the
#: threads come, down to 16 rows (dynamic parts of 16 or 64 rows: 56-60 us in the
#: measurement above, against 47)
SHARE = "guided, 16"


class GatherRowsLowering:
    """The gather rows of :class:`codegen.lower.Lowerer`."""

    def compute_gather_rows(self, t: Compute, hoist: List[Tuple[Read, int]]) -> List[Stmt]:
        """``t`` (no recurrence) whose data-dependent indices ``hoist`` (``idx[i]`` of
        ``E[idx[i], d]``) do not move along the innermost axis: they are loaded and
        checked once per row, and the row runs without checks (contiguous, in vector
        lanes). A row with a bad index runs the point-by-point loop instead, which
        records the error and reads 0 exactly as before."""
        axes = list(t.axes)
        j = axes[-1]
        outer = axes[:-1]
        vars_ = [self.fresh("i", I64) for _ in outer]
        oscope = Scope({ax.uid: v for ax, v in zip(outer, vars_)}, tuple(outer), (), {})
        pre: List[Stmt] = []
        bad: List[CExpr] = []
        known: Dict[Expr, CExpr] = {}
        for r, d in hoist:
            x = r.indices[d]
            if x in known:
                continue
            v = self.fresh("t", I64)
            pre.append(Decl(v, self.expr(x, oscope, pre)))
            known[x] = v
            size = self.size_expr(self.dims[r.tensor.uid][d])
            bad.append(Op("or", (Op("lt", (v, Lit(0, I64)), "bool"),
                                 Op("ge", (v, size), "bool")), "bool"))

        def row(memo) -> For:
            jv = self.fresh("i", I64)
            sc = oscope.child(axes=(j,), env={j.uid: jv})
            sc.memo.update(memo)
            stmts: List[Stmt] = []
            value = self.expr(t.body, sc, stmts)
            stmts.append(Store(self.buf[t.uid].name, self.offset(t.uid, vars_ + [jv]),
                               cast(value, t.dtype)))
            block = Block(tuple(stmts))
            return For(jv, self.size_expr(j.lo), self.size_expr(j.hi), 1, block, note=j.name,
                       simd=simd_safe(block))

        fast = row({("in range", x): v for x, v in known.items()})
        cond = bad[0]
        for b in bad[1:]:
            cond = Op("or", (cond, b), "bool")
        body = list(pre) + [If(cond, Block((row({}),)), Block((fast,)))]
        nest = self.outer_loops(outer, vars_, body, self.work(t, axes))
        return [replace(s, share=SHARE) if isinstance(s, For) and s.parallel else s
                for s in nest]

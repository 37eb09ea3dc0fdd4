"""The segments reversal of a checkpointed recurrence, as loop-AST (``codegen.checkpoint``).

:class:`SegmentSteps` is the part of ``checkpoint.RingProgram`` that runs a
``checkpoints=k`` gradient by plain segments (``Options.checkpoint == "segments"``, and
any symbolic ``T``): the forward sweep keeps the rows before each segment start, then
each segment, last first, restores them, recomputes the group over the segment and runs
its adjoints and consumers backwards over it. Its methods use the ring program's
lowerer (``self.lw``), rings (``self.ring_of``), ``rows``, ``lockstep``,
``consumer_rows``, ``_row_size`` and ``_copy_row``; ``s`` is the program's
``checkpoint_plan.Segments``.

Two stacked layers, as one group (``codegen.checkpoint_groups``), by segments of 3 steps:

>>> import tensorexpr as te
>>> from codegen.pipeline import lower
>>> from codegen.schedule import Options
>>> from codegen.signature import Signature
>>> u = te.placeholder((12, 3), name="u")
>>> def layer(x, name):
...     return te.recurrence((12, 3), lambda h, t, r: te.sin(x[t, r] + te.select(
...         t > 0, h[t - 1, r], 0.0)), name=name, checkpoints=4)
>>> h2 = layer(layer(u, "h1"), "h2")
>>> L = te.compute((), lambda: h2[11, 0] * h2[11, 1], name="L")
>>> (g,) = te.differentiate(L, [u])
>>> kept = lower(Signature([g], [u]), Options(checkpoint="segments"))[1].checkpoint
>>> [c for c in kept if "segments" in c or "dh" in c]  # doctest: +NORMALIZE_WHITESPACE
['dh2 (ring of 4 rows)', 'dh1 (ring of 4 rows)', 'h1 (segments: 4 checkpoints x 1 rows)',
 'h2 (segments: 4 checkpoints x 1 rows)']
"""
from __future__ import annotations

from typing import List

from tensorexpr.ir import INDEX_DTYPE

from .loopast import Block, Comment, Decl, For, If, Lit, Op, Stmt, Var

I64 = INDEX_DTYPE


class SegmentSteps:
    """The segments executor's statements (a mixin of ``checkpoint.RingProgram``)."""

    def _save(self, s):
        """After forward step ``t``: keep it if it is one of the ``W`` rows before a
        segment start ``j * S`` (``j = t // S + 1``)."""
        def after(t: Var) -> List[Stmt]:
            seg = self.lw.size_expr(s.seg)
            j = self.lw.fresh("k", I64)
            first = self.lw.fresh("k", I64)
            at = Op("add", (Op("mul", (j, Lit(s.back, I64)), I64), Op("sub", (t, first), I64)),
                    I64)
            copies = tuple(self._copy_row(
                self.lw.buf[s.stores[e.uid].uid].name, at, self.lw.buf[e.uid].name,
                Op("mod", (t, self.lw.size_expr(self.ring_of[e.uid].rows)), I64),
                self._row_size(e), e.dtype) for e in s.es)
            return [Decl(j, Op("add", (Op("floordiv", (t, seg), I64), Lit(1, I64)), I64)),
                    Decl(first, Op("sub", (Op("mul", (j, seg), I64), Lit(s.back, I64)), I64)),
                    If(Op("and", (Op("lt", (j, Lit(s.k, I64)), "bool"),
                                  Op("ge", (t, first), "bool")), "bool"), Block(copies))]
        return after

    def _restore(self, s, j: Var, lo: Var) -> Stmt:
        """Copy segment ``j``'s checkpoint (the ``W`` rows before ``lo``) into the ring."""
        w, row = self.lw.fresh("k", I64), self.lw.fresh("k", I64)
        at = Op("add", (Op("mul", (j, Lit(s.back, I64)), I64), w), I64)
        copies = tuple(self._copy_row(
            self.lw.buf[e.uid].name,
            Op("mod", (row, self.lw.size_expr(self.ring_of[e.uid].rows)), I64),
            self.lw.buf[s.stores[e.uid].uid].name, at, self._row_size(e), e.dtype)
            for e in s.es)
        return For(w, Lit(0, I64), Lit(s.back, I64), 1, Block((
            Decl(row, Op("add", (Op("sub", (lo, Lit(s.back, I64)), I64), w), I64)),
            If(Op("ge", (row, Lit(0, I64)), "bool"), Block(copies)),)),
            note="restore the checkpoint")

    def _segments(self, s) -> Stmt:
        e, de = s.e, s.de
        T = self.lw.size_expr(e.dims[0])
        seg_v, nseg = self.lw.fresh("k", I64), self.lw.fresh("k", I64)
        j, lo, hi = self.lw.fresh("k", I64), self.lw.fresh("k", I64), self.lw.fresh("k", I64)
        inner: List[Stmt] = [
            Decl(lo, Op("mul", (j, seg_v), I64)),
            Decl(hi, Op("min", (T, Op("add", (lo, seg_v), I64)), I64)),
        ]
        if s.recompute:
            inner += [self._restore(s, j, lo), Comment(f"recompute {s.names} over the segment")]
            e_hi = Op("min", (T, Op("add", (hi, Lit(s.ahead, I64)), I64)), I64)
            inner += self.lockstep(s.es, lo, e_hi)
        for x, a, r0, r1 in s.fore:
            inner.append(Comment(f"{x} [the rows the segment reads]"))
            inner += self.clipped(x, a, Op("add", (lo, Lit(r0, I64)), I64),
                                  Op("add", (hi, Lit(r1, I64)), I64))
        for x, a, c in s.reversal():
            if a is None:
                inner.append(Comment(f"{x} [ring of {self.ring_of[x.uid].rows} rows]"))
                self.lw.owner = x
                inner += self.rows(x, 0, lo, hi)
                continue
            inner.append(Comment(f"{x} [rows of the segment]"))
            inner += self.consumer_rows(s, x, a, c, lo, hi)
        if s.sums:
            t = self.lw.fresh("k", I64)
            inner.append(For(t, lo, hi, 1, Block(tuple(self.add_steps(s, t))), descending=True,
                             note="the sums' steps, last first"))
        return Block(tuple(self.zero_sums(s)) + (
            Comment(f"checkpointed gradient of {s.names}: {s.k} segments, "
                    + ("recomputed backwards" if s.recompute else
                       f"{de.name} runs backwards a segment at a time ({e.name} is read "
                       f"only at its last steps: nothing to recompute)")),
            Decl(seg_v, self.lw.size_expr(s.seg)),
            Decl(nseg, Op("floordiv", (Op("add", (T, Op("sub", (seg_v, Lit(1, I64)), I64)), I64),
                                       seg_v), I64)),
            For(j, Lit(0, I64), nseg, 1, Block(tuple(inner)), descending=True,
                note="segments, last first (sequential)"),
        ))

"""The revolve reversal of a checkpointed recurrence, as loop-AST (``codegen.checkpoint``).

:class:`RevolveSteps` is the part of ``checkpoint.RingProgram`` that runs a
``checkpoints=k`` gradient one step at a time by the binomial schedule of
:mod:`codegen.revolve`, emitted as a static table of actions the C loops over: the
forward sweep (the schedule up to its first turn) and the reversal (the rest).
Its methods use the ring program's lowerer (``self.lw``), rings (``self.ring_of``),
``rows`` and ``_copy_row``; ``s`` is the program's ``checkpoint_plan.Segments``.

The schedule it runs is part of the build's schedule:

>>> import tensorexpr as te
>>> from codegen.pipeline import lower
>>> from codegen.signature import Signature
>>> d = te.placeholder((4, 10), name="d")
>>> e = te.recurrence((10, 4), lambda e, t, r: te.tanh(d[r, t] + te.select(
...     t == 0, 0.0, 0.9 * e[t - 1, r])), name="e", checkpoints=3)
>>> x = te.reduce_axis(4)
>>> L = te.compute((), lambda: te.sum(e[9, x] * e[9, x], axis=x), name="L")
>>> (g,) = te.differentiate(L, [d])
>>> [c for c in lower(Signature([g], [d]))[1].checkpoint if "schedule" in c]
['e schedule: 34 actions, 15 steps recomputed']
"""
from __future__ import annotations

from typing import List

from tensorexpr.ir import INDEX_DTYPE

from . import revolve as revolve_schedule
from .cexpr import add
from .loopast import Assign, Block, Comment, Decl, For, If, Lit, Load, Local, Op, Stmt, Var

I64 = INDEX_DTYPE


class RevolveSteps:
    """The revolve executor's statements (a mixin of ``checkpoint.RingProgram``)."""

    def _table(self, s):
        """``(table var name, actions, index of the firsturn)``: the schedule as C data."""
        revolve = revolve_schedule
        # (one per group: a program may reverse several, each by its own schedule)
        if not hasattr(self, "_sched"):
            self._sched, self._cur = {}, {}
        if s.e.uid not in self._sched:
            sched = revolve.schedule(int(s.e.dims[0].value), s.k)
            codes = revolve.encode(sched)
            self._sched[s.e.uid] = (f"revolve_{self.lw.buf[s.e.uid].name}", codes,
                                    [a.kind for a in sched.actions].index("firsturn"))
            self.lw.record.checkpoint.append(
                f"{s.names} schedule: {len(sched.actions)} actions, "
                f"{revolve.least_forward_steps(sched.steps, sched.slots)} steps recomputed")
        return self._sched[s.e.uid]

    def _state_rows(self, s, cur, slot, restore: bool) -> Stmt:
        """Copy the state at position ``cur`` (the rows ``[cur + H - width, cur + H)`` that
        exist of each recurrence of the group) between the rings and checkpoint ``slot``."""
        T = int(s.e.dims[0].value)
        w, row = self.lw.fresh("k", I64), self.lw.fresh("k", I64)
        at_store = Op("add", (Op("mul", (slot, Lit(s.width, I64)), I64), w), I64)
        copies = []
        for e in s.es:
            ring, store = self.lw.buf[e.uid].name, self.lw.buf[s.stores[e.uid].uid].name
            at_ring = Op("mod", (row, self.lw.size_expr(self.ring_of[e.uid].rows)), I64)
            n = self._row_size(e)
            copies.append(self._copy_row(ring, at_ring, store, at_store, n, e.dtype) if restore
                          else self._copy_row(store, at_store, ring, at_ring, n, e.dtype))
        first = Op("sub", (cur, Lit(s.width - s.ahead, I64)), I64)
        return For(w, Lit(0, I64), Lit(s.width, I64), 1, Block((
            Decl(row, Op("add", (first, w), I64)),
            If(Op("and", (Op("ge", (row, Lit(0, I64)), "bool"),
                          Op("lt", (row, Lit(T, I64)), "bool")), "bool"),
               Block(tuple(copies))),)),
            note="restore a checkpoint" if restore else "take a checkpoint")

    def _advance(self, s, lo, hi, after_step=None) -> List[Stmt]:
        """Forward steps from position ``lo`` to ``hi``: the group's rows ``[lo + H, hi + H)``
        < T (``after_step``: as ``lockstep``'s)."""
        T = Lit(int(s.e.dims[0].value), I64)
        return self.lockstep(s.es, Op("add", (lo, Lit(s.ahead, I64)), I64),
                             Op("min", (T, Op("add", (hi, Lit(s.ahead, I64)), I64)), I64),
                             after_step)

    def _interpret(self, s, start: int, stop: int, cur: Var, kinds, after_step=None) -> Stmt:
        """A loop over actions ``[start, stop)`` of the table, running ``kinds`` of them
        (``after_step``: run after each step an advance computes)."""
        name, codes, _ = self._table(s)
        q, kind, arg = (self.lw.fresh("k", I64) for _ in range(3))
        KINDS = revolve_schedule.KINDS

        def is_(k: str):
            return Op("eq", (kind, Lit(KINDS.index(k), I64)), "bool")

        branches: List[Stmt] = []
        if "advance" in kinds:
            branches.append(If(is_("advance"), Block(
                tuple(self._advance(s, cur, arg, after_step)) + (Assign(cur, arg),))))
        if "takeshot" in kinds:
            branches.append(If(is_("takeshot"), Block((self._state_rows(s, cur, arg, False),))))
        if "restore" in kinds:
            pos = Load(name, Op("add", (Op("mul", (q, Lit(3, I64)), I64), Lit(2, I64)), I64), I64)
            branches.append(If(is_("restore"), Block(
                (Assign(cur, pos), self._state_rows(s, cur, arg, True)))))
        if "youturn" in kinds:
            branches.append(If(is_("youturn"), Block(tuple(self._turn(s, arg)))))
        return For(q, Lit(start, I64), Lit(stop, I64), 1, Block((
            Decl(kind, Load(name, Op("mul", (q, Lit(3, I64)), I64), I64)),
            Decl(arg, Load(name, Op("add", (Op("mul", (q, Lit(3, I64)), I64), Lit(1, I64)), I64),
                           I64)),
            *branches)), note="the revolve schedule's actions (sequential)")

    def _turn(self, s, t) -> List[Stmt]:
        """Forward step ``t`` (e's row ``t + H``), then reverse it: ``de[t]``, and every
        consumer's row ``t``."""
        out = self._advance(s, t, Op("add", (t, Lit(1, I64)), I64))
        # each forward tensor's lowest row the turn reads: the others, computed at the
        # turns before (from the same rows of e), are still in its ring
        for x, a, lo, _ in s.fore:
            at = Op("add", (t, Lit(lo, I64)), I64)
            out.append(self._fore_call(x, a, at, Op("add", (at, Lit(1, I64)), I64)))
        return out + [self._reverse_call(s, t)]

    def _fore_call(self, x, a, lo, hi) -> Stmt:
        """The rows ``[lo, hi)`` of the forward tensor ``x`` (along its axis ``a``) that
        exist, a call of one function of the bounds: the first turn's rows and each
        turn's lowest one run the same statements."""
        return self.functions.call(("forward rows", x.uid, a), f"rows of {x.name}",
                                   lambda lo, hi: self.clipped(x, a, lo, hi), (lo, hi))

    def _reverse_call(self, s, t) -> Stmt:
        """Reverse step ``t`` (:meth:`_reverse_step`), a call of one function of ``t``:
        the last step and the turns of the schedule run the same statements."""
        return self.functions.call(("reverse step", s.e.uid), f"a reverse step of {s.names}",
                                   lambda k: self._reverse_step(s, k, add(k, Lit(1, I64))),
                                   (t,))

    def _reverse_step(self, s, t, one) -> List[Stmt]:
        """``de[t]`` (of each adjoint), the consumers' rows of turn ``t`` (``one``:
        ``t + 1``), in program order, then the sums' step ``t``."""
        out: List[Stmt] = []
        for x, a, c in s.reversal():
            if a is None:
                self.lw.owner = x
                out += self.rows(x, 0, t, one)
            else:
                out += self.consumer_rows(s, x, a, c, t, one)
        return out + self.add_steps(s, t)

    def zero_sums(self, s) -> List[Stmt]:
        """The sums over the steps start at +0.0, as the full tape's do (and are recorded
        in the schedule as the ``adjoint-steps`` their steps run)."""
        out: List[Stmt] = []
        for p in s.sums:
            self.lw.record.choose(p.t.name, "adjoint-steps",
                                  p.params() + (("added", "at the checkpointed turns"),))
            self.lw.record.done()
            self.lw.owner = p.t
            out.append(Block((Comment(f"{p.t.name} = 0: its steps are added at their "
                                      f"turns"),) + tuple(self.lw.adjoint_zero(p))))
        return out

    def add_steps(self, s, t) -> List[Stmt]:
        """Step ``t``'s terms of each sum over the steps (``codegen.adjoint_sums``), added
        to its running value by the full tape's lowering of a step
        (``Lowerer.adjoint_step``), where ``t`` is one of its steps."""
        out: List[Stmt] = []
        for p in s.sums:
            lo, hi = self.lw.adjoint_bounds(p)
            self.lw.owner = p.t
            out.append(If(Op("and", (Op("ge", (t, lo), "bool"), Op("lt", (t, hi), "bool")),
                             "bool"),
                          Block((Comment(f"{p.t.name} += the terms of this step"),)
                                + tuple(self.replays.get(
                                    ("adjoint step", p.t.uid),
                                    lambda after: self.lw.adjoint_step(p, None, after),
                                    after=add(t, Lit(1, I64)))))))
        return out

    def _forward(self, s) -> Stmt:
        """The forward sweep: the schedule up to its first turn (snapshots on the way),
        then e's last rows, which the tensors before its adjoint read."""
        name, codes, first = self._table(s)
        cur = self._cur[s.e.uid] = self.lw.fresh("k", I64)
        T = int(s.e.dims[0].value)
        body: List[Stmt] = [
            Comment(f"{', '.join(map(str, s.es))} [forward sweep, revolve: {s.k} checkpoints x "
                    f"{s.width} rows]"),
            Local(name, I64, len(codes), tuple(codes)),
            Decl(cur, Lit(0, I64))]
        # (the first rows read before the reversals are copied as they are computed)
        after = self.after_step(s)
        body += self.lockstep(s.es, Lit(0, I64), Lit(min(s.ahead, T), I64), after)
        body.append(self._interpret(s, 0, first, cur, ("advance", "takeshot"), after))
        body += self._advance(s, Lit(T - 1, I64), Lit(T, I64), after)
        return Block(tuple(body))

    def _reverse(self, s) -> Stmt:
        """The reversal: the tensors the adjoint reads that read e's last rows, the first
        turn's reverse step, then the rest of the schedule."""
        name, codes, first = self._table(s)
        T = int(s.e.dims[0].value)
        body: List[Stmt] = [Comment(f"checkpointed gradient of {s.names}: reversed by the "
                                    f"revolve schedule ({s.k} checkpoints)")]
        for x in s.early:
            body.append(self._tensor(x))
        body += self.zero_sums(s)
        last = Lit(T - 1, I64)
        for x, a, lo, hi in s.fore:  # (every row the first turn reads)
            body.append(self._fore_call(x, a, Lit(T - 1 + lo, I64), Lit(T + hi, I64)))
        body.append(self._reverse_call(s, last))
        body.append(self._interpret(s, first + 1, len(codes) // 3, self._cur[s.e.uid],
                                    ("advance", "takeshot", "restore", "youturn")))
        return Block(tuple(body))

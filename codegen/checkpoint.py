"""Bounded-memory recurrences in the C backend: rolling state and checkpointed gradients.

A recurrence ``e[t, r]`` kept whole costs ``T`` rows of memory. Two program
shapes need far less, and :func:`lower` lowers them specially (everything else
keeps the full tape, exactly as :class:`codegen.lower.Lowerer` does):

Rolling state (any recurrence, forward or adjoint)
    If ``e`` is not an output, its self-reads reach back at most ``w`` steps along
    its carried axis, and every other reader only reads the last ``m`` steps
    (``t >= T - m`` for an ascending recurrence, ``t < m`` for a descending one),
    ``e`` lives in a ring of ``max(w + 1, m)`` rows: carry index ``t`` is stored at
    row ``t mod rows``. The carried loop is sequential, so when step ``t`` is
    computed the rows it overwrites are no longer needed.

Checkpointed gradient by revolve (``te.recurrence(..., checkpoints=k)``, a constant ``T``)
    The pattern is the one below; execution is one step at a time, by the binomial
    schedule of :mod:`codegen.revolve` (emitted as a table of actions the C loops
    over): a checkpoint holds ``max(w, W + H)`` rows of ``e`` (its state before a
    step, and what the adjoint at that step reads: ``W`` back, ``H`` ahead), ``e``
    lives in a ring of one more row, ``de`` in a ring of its window plus one; the
    forward sweep runs the schedule up to its first turn, the reversal the rest (each
    turn: ``e``'s next row, ``de``'s row, the consumers' rows). Memory is ``k``
    checkpoints and a few rows at any ``T``; ``k = 1`` recomputes from the start for
    every step (``T (T - 1) / 2`` steps). A symbolic ``T``, or
    ``Options.checkpoint == "segments"``, runs the segments below instead (with the
    weight gradients: their steps ``[1, T)`` are added at the turns, in every build, as
    with a constant ``T``).

Checkpointed gradient by segments
    The supported pattern is the one ``te.differentiate`` produces for a loss of
    the last steps: a forward recurrence ``e`` (ascending, carried axis first: a
    recurrence along another axis, and an adjoint along another, is stored so by
    ``codegen.checkpoint_axes`` in every build, ``e.checkpoints = k``), a descending recurrence ``de`` reading ``e`` (its
    adjoint) with the same number of steps, and *per-step consumers*: tensors
    after ``de`` with an axis ``a`` of length ``T`` such that every read of ``e``
    and ``de`` is within a constant distance of ``a`` (the input gradient
    ``dd[r, t]``). Execution is segment-wise with segments of ``S = max(ceil(T/k),
    W)`` steps (``k = 1``, one segment, would save nothing: full tape):

    1. the forward sweep computes ``e`` in a ring and copies, for each segment
       start ``s``, the ``W`` rows before ``s`` (the recurrence's window, or
       farther if a reader looks back farther) into a checkpoint store of
       ``k * W`` rows; tensors reading only the last rows of ``e`` are computed
       from the ring right after it;
    2. for each segment from the last to the first: restore its checkpoint rows
       into the ring, recompute ``e`` over the segment (plus ``H`` steps after it
       when readers look ahead, e.g. ``tanh'`` at ``t + 1``), run ``de``
       backwards over the segment in its own ring of ``S + window`` rows, and
       compute the consumers' rows ``a in [s, s + S)``.

    Memory for ``e`` and ``de`` is ``O((k * W + 2 S + windows) * R)`` instead of
    ``2 T * R``. Every element is computed by the same C expression as in the
    full tape (compiled without FMA contraction or fast-math), from the same
    operands, so the gradient is identical bit for bit.

    When ``de`` and the consumers read only the last few steps of ``e`` (a
    linear recurrence such as an EWMA: its adjoint does not depend on ``e``),
    nothing is recomputed and no checkpoint is stored: ``e`` keeps a rolling
    state and only ``de`` and the consumers run segment by segment
    (``O((S + windows) * R)``). ``k`` is capped at ``T`` when ``T`` is constant.

    Sums over the steps (an RNN's weight gradient ``dW = sum_t ...``) are added a step at a
    time, last first, at each step's turn (``codegen.adjoint_sums``; the full tape of
    such a program adds them in the same order), and recurrences whose steps hold sums
    over the previous step (``codegen.recurrence_steps``) run each step with the full
    tape's lowering of a step, so both stay bit-identical to the full tape.

    The tensors run along the steps (``codegen.checkpoint_rows``) are more than ``de``
    and per-step consumers: *forward rows*, tensors computed before ``de`` that read
    ``e`` at every step (a GRU's forward sums ``h_sum[t] = h[t - 1] @ U``, the gates
    ``passes.hoist`` moves out of ``de``'s sum), are recomputed with ``e`` (each turn
    needs rows ``[t + lo, t + hi]`` of them; the revolve turn computes the lowest, the
    others are still in its ring from the turns before); ``de`` may read ``e`` only
    through them. A consumer's row ``a`` runs at turn ``a + shift`` (a weight gradient's
    hoisted terms ``dU_h0[t] = f(dh[t + 1], ...)``, added at step ``t + 1``: shift 1),
    may read other consumers at that turn's rows (``dx = dxr @ Wr^T``), and lives in a
    ring of a turn's (a segment's) rows when only consumers and sums read it. Every
    one of them holding a sum runs by steps (``recurrence_steps.plan_rows``) in every
    build of a program with a checkpointed recurrence, as the sums over the steps do:
    the full tape and the turns evaluate each row by the same C. Everything run inside
    the segments counts for the rows of ``e`` kept: with a head over every step, the
    rows a sum reads are among them. GRU and LSTM cells (``benchmarks.recurrence_cells``;
    an LSTM's state ``s[t, b, 2, H]`` holds ``c`` and ``h``) are checkpointed this way in
    both modes.

Several recurrences: a group in lockstep (``codegen.checkpoint_groups``)
    ``e`` may be a *group*: the checkpointed ascending recurrences of the same steps
    that read the earlier members at their own step or earlier (the layers of a
    stacked RNN, a GRU layer on an RNN layer, a third layer on those), with the
    tensors between them reading members a step at a time (a GRU layer's input
    projections ``h1 @ Wz2``), all along their first axis (``codegen.checkpoint_axes``
    moves the steps of batch-first layers first, and those of the tensors between them
    read at the lower layer's step, ``h1[b, t] @ Wz2``). Both modes run it as one
    recurrence whose state is the tuple of the members: a forward step computes the
    row of each in program order; a checkpoint holds ``width`` (``W``) rows of each (the
    rows kept are the most any member needs); the rings of the members and of their
    adjoints have the same rows; a turn (a segment) runs the adjoints ``de`` and the
    consumers in program order (a consumer between two adjoints, such as a GRU layer's
    ``dh2_sum``, is read by the later one at its own turn), then adds the sums'
    step. Forward tensors an adjoint reads (a lower layer's forward sums
    ``h1[t - 1] @ U1``) are forward rows wherever they are in the program. ``k`` is the
    least of the members'. The schedule lists each member (``h2 (revolve: 4
    checkpoints x 2 rows)``) and the group (``h1, h2: in lockstep``). The longest
    prefix of the candidates with a supported gradient is checkpointed, down to the
    first recurrence alone; the rest keep the full tape (a second layer without
    ``checkpoints`` reads every row of the first: its ring is then whole).

Several groups: one reversal each (``codegen.checkpoint_plan``)
    Independent groups are each checkpointed by their own plan: each group's forward
    sweep runs where its last member is, its reversal (with its own rings, checkpoints
    and revolve schedule) where its first adjoint is, one after the other
    (``g; h: reversed one after the other``). No two plans compute the same tensor, and
    none reads what another keeps in rings or runs a row at a time; a consumer of one
    kept whole may be read by another's turns if its reversal runs first. A
    bidirectional RNN (``h`` over ``x``, ``g`` over ``xr[t] = x[T - 1 - t]``,
    ``y[t] = h[t] + g[T - 1 - t]``) under a head over every step is so: ``g``'s reversal
    computes ``dxr`` whole (a tensor after the turns that reads only consumers, at rows
    of no single turn, runs after them and reads them whole), then ``h``'s computes
    ``dx[t] = dxr[T - 1 - t] + ...`` at its turns. ``dx`` needs no split: the term of
    ``g`` is ``dxr``, already a tensor of its own, and every element is the same C in
    every build.

Tensors before the reversals reading kept rows (``codegen.checkpoint_kept``)
    A tensor between the forward sweeps and the first adjoint may read the checkpointed
    recurrences at their last rows (the forward ring holds them, ``last``) or their
    first rows (the forward sweep copies each into a store of ``first`` rows as it
    computes it: ``g_first``), counting only the rows of it that are read (it is then
    computed at those rows, in a ring of them); it is computed once, where the program
    has it, and read by any reversal. A recurrence reached only through such tensors is
    no adjoint of the group (when another is reached otherwise). A group is planned so
    only where it cannot be otherwise: a forward row (an LSTM's ``hs[t] = s[t, 1]``,
    read at its last step by ``dhs``) keeps a ring of a few rows, where ``dhs`` would be
    computed whole before the reversal. The bidirectional RNN
    under a loss of ``y``'s last step is so: ``y`` is read at ``T - 1`` only (``dy = 2
    select(t == T - 1, y[T - 1], 0)``), which reads ``h``'s last row and ``g``'s first;
    ``dy``, read by ``dh[t]`` and by ``dg`` at ``T - 1 - t``, is computed where it is
    read (``checkpoint_kept.where_read``: cheap, at every row, from ``y``'s ring of one
    row, stored before the reversals and rewritten by none), so no buffer holds a row of
    every step but ``dxr``. A loss of ``concat(h[T - 1], g[T - 1])`` reads both layers'
    last rows.

No plan keeps more than the full tape (``codegen.checkpoint_memory``)
    Each group's plan counts the bytes of its buffers (rings, checkpoints, first rows,
    the rings of kept tensors it relies on) and of the full tensors they replace; the
    schedule prints both (``h: 312 bytes in 3 buffers (13 rows), the full tape 1,920
    bytes (80 rows)``). A plan keeping no fewer bytes is refused and the program planned
    again without it (a smaller group, or the full tape), and each member's full tape
    names that plan and both figures. Few steps per checkpoint do it (``T = 4, k = 2``:
    two checkpoints of 2 rows and rings of 3 and 2 rows hold more than ``h`` and ``dh``
    whole), and so do turns reading far from their step: the bidirectional GRU whose
    output multiplies its layers, ``y[t] = h[t] * g[T - 1 - t]``, has ``dh[t]`` read
    ``g[T - 1 - t]`` and ``dg[t]`` read ``h[T - 1 - t]``; in lockstep the row read is up
    to ``T - 1`` steps from the turn either way, so a checkpoint would hold ``4 (T - 1)``
    rows of each (48 at ``T = 13``, and a ring of 49), and apart each adjoint reads the
    other layer, which no turn of its own reversal holds (it would need the other layer
    recomputed forwards during its reversal: not a plan this module makes). The full
    tape, then, exact.

    Not supported, in either mode (full tape instead, still exact): a tensor holding a
    sum along the steps that does not run by steps (a sum under a condition on an axis
    it reads: the C backend vectorizes some sums, and the order of a vectorized sum may
    depend on the alignment of the rows it reads, which a ring changes: bit-identity
    could not be promised); a sum over the steps reading a consumer at another turn,
    ``de`` at an earlier step, or a tensor computed after the segments; consumers
    reading ``de`` at earlier steps than their turn, or another consumer at another
    turn and ``de``, ``e`` or a forward row too; tensors before ``de`` reading ``e``
    other than within a constant distance of one of their axes or at its last steps;
    tensors after the segments reading forward rows; ``e``, ``de`` or a forward row
    being outputs (an output keeps the caller's layout: a recurrence that is one and is
    carried along another axis than its first is not moved either), scatter-adds
    reading them; a group that would share a tensor with another's reversal, or read
    its rings (the schedule names the tensor). A tensor read by the adjoints of two
    recurrences that reads them at other rows than their first and last: the
    bidirectional RNN under a loss of every step, ``sum(y ** 2)``, where ``dy[t] = 2
    y[t]`` reads ``h[t]`` and ``g[T - 1 - t]`` and is read by ``dh[t]`` and by ``dg`` at
    ``T - 1 - t``: each layer is read by two descending recurrences, at rows of no single
    turn of either, and both keep their full tape. A tensor reading the same recurrence
    at its first rows and its last. Also not supported: a member read ahead of its step
    by a later one; an adjoint reading a consumer at another turn. A second-order
    gradient through a checkpointed recurrence (a loss of its gradient, differentiated
    again): its program runs the steps four times, ``h`` forward, ``dh`` backward, the
    tangent ``ddh`` forward (reading ``h`` and ``dh`` at every step, ``dh`` complete only
    after its reversal) and ``d2h`` backward (reading ``h``, ``dh`` and ``ddh`` at its
    step): ``h`` is read by two descending recurrences at every step and ``dh`` would
    need checkpoints of its own, reversed again after ``ddh``'s sweep (checkpoints of
    checkpoints, which no plan here makes); ``h`` keeps its full tape (``several
    descending recurrences read it (dh, d2h) ... (d2h reads dh: a gradient of its
    gradient ...)``), in a bidirectional RNN ``g`` too. The numpy backend always keeps
    the full tape (it is the reference).
    ``te.recurrence`` itself runs ascending only: a user's descending recurrence along
    any axis does not exist (``x[b, T - 1 - t]`` reverses the input instead); adjoints
    descend along any axis and are moved as their recurrence is.

    The schedule names each recurrence asking for checkpoints that keeps its full tape,
    with the first unsupported condition it met (``checkpoint_plan.Plan.refused``,
    :func:`full_tapes`: ``full tape: g (checkpoints=3: several descending recurrences
    read it (dg, dh): no turn could run them)``), so a full tape is never given
    silently.

Ring and checkpoint buffers are ordinary program buffers of their reduced
shape (``runtime`` allocates them like any intermediate); the full ``T``-row
tensors are never allocated. Which offsets a read can reach is proven with isl
(:func:`tensorexpr.polyhedral.offset_range`) over the points where it runs.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from tensorexpr.ir import Compute, Const, Tensor, same, INDEX_DTYPE

from .loopast import Block, Buffer, Comment, For, If, Kernel, Lit, Load, Op, Stmt, Store, Var
from .cexpr import add, cast, mul
from .program import Program
from .replay import Replays
from .step_functions import Functions
from .scope import Scope
from .checkpoint_plan import Plan, Ring, Segments, plan
from .revolve_lowering import RevolveSteps
from .segments_lowering import SegmentSteps

I64 = INDEX_DTYPE


# {{{ lowering


def rings(sig, mode: str = "revolve", sums=None, steps=None) -> Optional[Plan]:
    """The rings and checkpointed segments of ``sig``'s program (a
    ``codegen.checkpoint_plan.Plan``; with no ring, the program keeps the full tape, and
    its ``refused`` says why for each recurrence asking for checkpoints), or None when
    there is nothing to say.

    >>> import tensorexpr as te
    >>> from codegen.signature import Signature
    >>> x = te.placeholder((3,), name="x")
    >>> y = te.compute((3,), lambda i: x[i] + 1.0, name="y")
    >>> rings(Signature([y], [x])) is None
    True
    """
    if not any(isinstance(t, Compute) and t.carry is not None for t in sig.order):
        return None
    p = plan(sig, mode, sums, steps)
    return p if p.rings or p.refused else None


def full_tapes(sig, p: Optional[Plan], options) -> List[str]:
    """A line for each recurrence of ``sig`` asking for checkpoints that keeps its full
    tape in the build with ``options`` (``p``: :func:`rings`' plan): its name and the
    first unsupported condition it met, so that no one is given the full tape silently.

    >>> import tensorexpr as te
    >>> from codegen.schedule import Options
    >>> from codegen.signature import Signature
    >>> x = te.placeholder((4, 2), name="x")
    >>> h = te.recurrence((4, 2), lambda h, t, b: te.sin(x[t, b] + te.select(
    ...     t > 0, h[t - 1, b], 0.0)), name="h", checkpoints=2)
    >>> full_tapes(Signature([h], [x]), rings(Signature([h], [x])), Options())
    ['h (checkpoints=2: it is an output (every step is returned))']
    >>> full_tapes(Signature([h], [x]), None, Options(checkpoint=False))
    ['h (checkpoints=2: ScheduleOptions(checkpoint=False))']
    """
    asked = {t.name: t.checkpoints for t in sig.order
             if isinstance(t, Compute) and t.carry is not None and t.checkpoints}
    if not options.checkpoint:
        return [f"{n} (checkpoints={k}: ScheduleOptions(checkpoint=False))"
                for n, k in asked.items()]
    return [f"{n} (checkpoints={asked[n]}: {why})" for n, why in (p.refused if p else ())
            if n in asked]


class RingProgram(RevolveSteps, SegmentSteps):
    """The program of a lowerer whose ring tensors are addressed modulo their row count
    (``Lowerer.rings``), with the checkpointed segments of ``p`` (if any)."""

    def __init__(self, lw, p: Plan):
        self.lw = lw
        self.plan = p
        lw.record.checkpoint.extend(
            f"{r.tensor.name} (ring of {r.rows} rows)" for r in p.rings.values())
        for s in p.groups:
            for e in s.es:
                lw.record.checkpoint.append(
                    f"{e.name} (revolve: {s.k} checkpoints x {s.width} rows)"
                    if s.mode == "revolve" else
                    f"{e.name} (segments: {s.k} checkpoints x {s.back} rows)" if s.recompute
                    else f"{e.name} (segments: nothing recomputed, its last {s.last} rows kept)")
            if len(s.es) > 1:
                lw.record.checkpoint.append(f"{s.names}: in lockstep (a step of each in turn; "
                                            f"a checkpoint holds the state of each)")
            if s.memory is not None:
                lw.record.checkpoint.append(f"{s.names}: {s.memory}")
        if len(p.groups) > 1:
            lw.record.checkpoint.append(
                "; ".join(s.names for s in p.groups) + ": reversed one after the other")
        self.replays = Replays(lw)
        self.functions = Functions(lw)
        self.ring_of: Dict[int, Ring] = {}
        self.logical: Dict[int, Tensor] = {}  # scratch buffer uid -> the tensor it holds
        self.recorded: set = set()  # uids of the tensors run by steps whose choice is recorded
        for k, t in enumerate(lw.tensors):
            ring = p.rings.get(t.uid)
            if ring is None:
                continue
            lw.tensors[k] = ring.scratch
            self.logical[ring.scratch.uid] = t
            b = lw.buf[t.uid]
            lw.buf[ring.scratch.uid] = type(b)(b.name, b.dtype, False,
                                               f"{t.name} (ring of {ring.rows} rows)")
            for uid in (t.uid, t.self_ref.uid if t.self_ref is not None else None):
                if uid is not None:
                    lw.buf[uid] = lw.buf[ring.scratch.uid]
                    self.ring_of[uid] = ring
                    lw.rings[uid] = (ring.axis, ring.rows)
        # tensors from kept rows computed where they are read (at the turns): no buffer
        lw.inline = (lw.inline | p.where_read) - p.stored
        lw.tensors = [t for t in lw.tensors if t.uid not in p.where_read]
        for s, e in ((s, e) for s in p.groups for e in s.es):
            st = s.stores.get(e.uid)
            if st is not None:
                self._buffer(st, f"{e.name} checkpoints ({s.k} x "
                                 f"{s.width if s.mode == 'revolve' else s.back} rows)")
            if e.uid in s.firsts:
                self._buffer(s.firsts[e.uid], f"{e.name}'s first rows ({s.first}: read before "
                                              f"the reversals)")
        # e uid -> (its first rows' store, their count), for the kept tensors reading them
        self.firsts = {e.uid: (s.firsts[e.uid], s.first) for s in p.groups for e in s.es
                       if e.uid in s.firsts}

    def _buffer(self, t: Tensor, note: str) -> None:
        """A buffer of the program for the scratch tensor ``t`` (a checkpoint store)."""
        lw = self.lw
        # (named after the last buffer: a tensor computed where it is read has none)
        n = 1 + max((int(b.name[1:]) for b in lw.buf.values()), default=-1)
        lw.buf[t.uid] = Buffer(f"b{n}", t.dtype, False, note)
        lw.dims[t.uid] = t.dims
        lw.tensors.append(t)

    def program(self) -> Program:
        skip = set()
        lowered = [self.logical.get(t.uid, t) for t in self.lw.lowered]
        forward, reverse = {}, {}  # uid -> the group whose sweep runs there
        for s in self.plan.groups:
            skip |= ({x.uid for x in s.des[1:]} | {x.uid for x, *_ in s.consumers}
                     | {x.uid for x in s.early} | {p.t.uid for p in s.sums}
                     | {x.uid for x, *_ in s.fore} | {x.uid for x in s.stores.values()})
            # a group's forward steps run where its last member is (group(): nothing
            # between its members reads them), its reversal where its first adjoint is
            es = {x.uid for x in s.es}
            last = [t for t in lowered if t.uid in es][-1]
            skip |= es - {last.uid}
            forward[last.uid] = s
            reverse[next(t for t in lowered if t.uid in {x.uid for x in s.des}).uid] = s
        body: List[Stmt] = []
        for t in lowered:  # (scratch tensors are lowered inside their users)
            s = reverse.get(t.uid)
            if s is not None:
                if s.mode == "revolve":
                    body.append(self._reverse(s))
                    continue
                for x in s.early:
                    body.append(self._tensor(x))
                body.append(self._segments(s))
                continue
            if t.uid in skip:
                continue
            s = forward.get(t.uid)
            if s is not None and s.mode == "revolve":
                body.append(self._forward(s))
                continue
            if s is not None and (s.recompute or s.first):
                body.append(Block((Comment(f"{', '.join(map(str, s.es))} [forward sweep, "
                                           f"checkpointed]"),) +
                                  tuple(self.lockstep(s.es, None, None, self.after_step(s)))))
                continue
            if t.uid in self.plan.kept:
                body.append(self._kept(t))
                continue
            body.append(self._tensor(t))
        body, functions = self.functions.finish(body)
        kernel = Kernel(self.lw.title, tuple((v, n) for n, v in self.lw.sizes.items()),
                        tuple(self.lw.buf[t.uid] for t in self.lw.tensors), tuple(body),
                        functions)
        return Program(kernel, self.lw.tensors, self.lw.sites)

    def after_step(self, s: Segments):
        """What the forward sweep of ``s`` runs after a step (``codegen.segments_lowering``'s
        checkpoints, when it recomputes; the first rows kept), or None."""
        fs = ([self._save(s)] if s.mode != "revolve" and s.recompute else []) + (
            [self._keep_first(s)] if s.first else [])
        return None if not fs else lambda t: [x for f in fs for x in f(t)]

    def _keep_first(self, s: Segments):
        """After forward step ``t``: copy it into the store of the first rows if it is one
        (``codegen.checkpoint_kept``: read before the reversals, when no ring holds it)."""
        def after(t) -> List[Stmt]:
            return [If(Op("lt", (t, Lit(s.first, I64)), "bool"), Block(tuple(
                self._copy_row(self.lw.buf[s.firsts[e.uid].uid].name, t, self.lw.buf[e.uid].name,
                               Op("mod", (t, self.lw.size_expr(self.ring_of[e.uid].rows)), I64),
                               self._row_size(e), e.dtype) for e in s.es)))]
        return after

    def _kept(self, t: Compute) -> Stmt:
        """A tensor computed before the reversals from kept rows (``codegen.checkpoint_kept``):
        at the rows read only, its reads of first rows from their store."""
        k = self.plan.kept[t.uid]
        if t.uid in self.lw.inline:  # (its reads are lowered in its readers')
            return Comment(f"{t} [computed where it is read, from the rows kept]")
        self.lw.owner = t
        lw, saved = self.lw, {}
        for u in k.first:
            if u in self.firsts:
                st, n = self.firsts[u]
                saved[u] = (lw.buf[u], lw.rings.get(u))
                lw.buf[u], lw.rings[u] = lw.buf[st.uid], (0, Const(n, I64))
        try:
            stmts = (self.lw.compute(t) if k.rows is None else
                     self.rows(t, 0, lw.size_expr(k.rows[0]),
                               add(lw.size_expr(k.rows[1]), Lit(1, I64))))
        finally:
            for u, (b, r) in saved.items():
                lw.buf[u] = b
                if r is None:
                    del lw.rings[u]
                else:
                    lw.rings[u] = r
        note = (f" [rows {k.rows[0]} to {k.rows[1]}, from the rows kept]" if k.rows is not None
                else " [from the rows kept]")
        return Block((Comment(f"{t}{note}"),) + tuple(stmts))

    def _tensor(self, t: Tensor) -> Stmt:
        self.lw.owner = t
        stmts = self.lw.compute(t)
        note = f" [ring of {self.ring_of[t.uid].rows} rows]" if t.uid in self.ring_of else ""
        return Block((Comment(f"{t}{note}"),) + tuple(stmts))

    # {{{ loops restricted along one axis

    def rows(self, t: Compute, a: int, lo, hi, after_step=None) -> List[Stmt]:
        """``t``'s loop nest (as ``Lowerer.compute``) with axis ``a`` running over
        ``[lo, hi)`` (C expressions; None: its whole range). ``after_step(var)``
        gives statements run after each step of a recurrence's carried loop."""
        p = self.lw.steps.get(t.uid)
        # (by steps: recorded as the full tape records it, once: rows run at several places)
        first = p is not None and a == p.axis and t.carry is None and t.uid not in self.recorded
        if first:
            self.recorded.add(t.uid)
            self.lw.record.choose(t.name, "step-rows", (
                ("step sums", tuple(x.name for x in p.sums)),
                ("rows", "at the checkpointed turns")))
        try:
            if after_step is not None:
                return self._rows(t, a, lo, hi, after_step)
            # the same rows at several places of the program, with other bounds: lowered
            # once (codegen.replay)
            return self.replays.get(("rows", t.uid, a),
                                    lambda lo, hi: self._rows(t, a, lo, hi), lo=lo, hi=hi)
        finally:
            if first:
                self.lw.record.done()

    def _rows(self, t: Compute, a: int, lo, hi, after_step=None) -> List[Stmt]:
        axes = list(t.axes)
        carry = t.carry.axis if t.carry is not None else None
        p = self.lw.steps.get(t.uid)
        if p is not None and a == p.axis:
            # by steps, each step lowered as the full tape lowers it (Lowerer.step_of)
            s = self.lw.fresh("s", I64)
            ax = axes[p.axis]
            step = self.lw.step_of(t, p, s) + (after_step(s) if after_step else [])
            return [For(s, lo if lo is not None else self.lw.size_expr(ax.lo),
                        hi if hi is not None else self.lw.size_expr(ax.hi), 1,
                        Block(tuple(step)), descending=carry is not None and t.carry.step < 0,
                        note=ax.name + " (steps)")]
        order = ([carry] if carry is not None else []) + [k for k in range(len(axes))
                                                          if k != carry]
        vars_ = {k: self.lw.fresh("i", I64) for k in range(len(axes))}
        # isl sees each axis' whole box: a superset of the rows run here, so its
        # in-range proofs stay valid.
        scope = Scope({axes[k].uid: vars_[k] for k in order}, tuple(axes), (), {})
        stmts: List[Stmt] = []
        value = self.lw.expr(t.body, scope, stmts)
        stmts.append(Store(self.lw.buf[t.uid].name, self.lw.offset(t.uid, [vars_[k] for k in
                                                                     range(len(axes))]),
                           cast(value, t.dtype)))
        body = Block(tuple(stmts))
        par = [k for k in order if k != carry]
        work = self.lw.work(t, [axes[k] for k in par])
        for k in reversed(order):
            ax = axes[k]
            if k == carry and after_step is not None:
                body = Block(body.stmts + tuple(after_step(vars_[k])))
            parallel = bool(par) and k == par[0] and work is not False
            a_lo = self.lw.size_expr(ax.lo) if k != a or lo is None else lo
            a_hi = self.lw.size_expr(ax.hi) if k != a or hi is None else hi
            body = Block((For(vars_[k], a_lo, a_hi, 1, body,
                              descending=(k == carry and t.carry.step < 0),
                              parallel=parallel, work=work if parallel else None,
                              note=ax.name + (" (sequential)" if k == carry else "")),))
        return list(body.stmts)

    def lockstep(self, ts: Sequence[Compute], lo, hi, after_step=None) -> List[Stmt]:
        """The rows ``[lo, hi)`` (None: all) along the first axis of the tensors ``ts``
        (a group of recurrences), a step of each in program order at a time (a later one
        reads the earlier ones' rows of its step). A step is a call of one function of
        its index (``codegen.step_functions``): the forward sweep, the recomputations and
        the turns run the same statements."""
        n = self.lw.size_expr(ts[0].dims[0])
        v = self.lw.fresh("k", I64)
        names = ", ".join(t.name for t in ts)
        step = [self.functions.call(("forward step",) + tuple(t.uid for t in ts),
                                    f"a forward step of {names}",
                                    lambda k: self.forward_step(ts, k), (v,))]
        step += after_step(v) if after_step else []
        return [For(v, lo if lo is not None else Lit(0, I64), hi if hi is not None else n, 1,
                    Block(tuple(step)), note=f"steps of {names} (sequential)")]

    def forward_step(self, ts: Sequence[Compute], k: Var) -> List[Stmt]:
        """Step ``k`` of each of the tensors ``ts``, in program order (as :meth:`rows`
        lowers a row)."""
        out: List[Stmt] = []
        for t in ts:
            self.lw.owner = t
            out += self.rows(t, 0, k, Op("add", (k, Lit(1, I64)), I64))
        return out

    # }}}

    # {{{ checkpoints and segments

    def clipped(self, t: Compute, a: int, lo, hi) -> List[Stmt]:
        """``t``'s rows ``[lo, hi)`` along its axis ``a``, those that exist."""
        self.lw.owner = t
        n = self.lw.size_expr(t.dims[a])
        return self.rows(t, a, Op("max", (lo, Lit(0, I64)), I64), Op("min", (hi, n), I64))

    def consumer_rows(self, s: Segments, x: Compute, a: int, c: int, lo, hi) -> List[Stmt]:
        """The rows of consumer ``x`` (step axis ``a``, shift ``c``) of turns ``[lo, hi)``."""
        if c == 0 and same(x.dims[a], s.e.dims[0]):
            self.lw.owner = x
            return self.rows(x, a, lo, hi)
        return self.clipped(x, a, Op("sub", (lo, Lit(c, I64)), I64),
                            Op("sub", (hi, Lit(c, I64)), I64))

    def _row_size(self, t: Compute):
        n = Lit(1, I64)
        for d in t.dims[1:]:
            n = mul(n, self.lw.size_expr(d))
        return n

    def _copy_row(self, dst: str, dst_row, src: str, src_row, n, dtype) -> Stmt:
        z = self.lw.fresh("k", I64)
        return For(z, Lit(0, I64), n, 1, Block((
            Store(dst, add(mul(dst_row, n), z), Load(src, add(mul(src_row, n), z), dtype)),)),
            note="copy a row")

    # }}}



# }}}


"""The plan of a program's bounded-memory recurrences: which ones live in rings of rows,
and the checkpointed gradient (``codegen.checkpoint`` explains both, and lowers them).

:func:`plan` finds, for each recurrence, whether it can keep a rolling state (a ring of
its last rows) and, for the first group of checkpointed recurrences whose gradient has
the supported shape (``codegen.checkpoint_groups``, ``codegen.checkpoint_rows``), a
:class:`Segments`: its adjoints, the tensors run along the steps, the rows a checkpoint
holds, and the buffers (rings and checkpoint stores) of reduced shape that replace the
full ``T``-row tensors. A recurrence asking for checkpoints that keeps its full tape is
listed in :attr:`Plan.refused` with the first unsupported condition it met.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from tensorexpr.ir import (Binary, Compute, Const, Expr, Placeholder, Tensor, fresh_uid, same,
                           size_vars, tensor_inputs, INDEX_DTYPE)
from tensorexpr.transform import eval_int

from . import checkpoint_rows
from . import revolve as revolve_schedule
from .checkpoint_groups import adjoints, group
from .checkpoint_kept import Kept, kept, where_read
from .checkpoint_memory import Memory, memory
from .checkpoint_rows import has_reduce, last_rows, offsets, refuse, window
from .patterns import inlinable

I64 = INDEX_DTYPE


def _c(v: int) -> Const:
    return Const(int(v), I64)


def _bin(op: str, a: Expr, b: Expr) -> Expr:
    """``a op b`` on indices, evaluated when both are constant (ring shapes stay readable)."""
    e = Binary(op, a, b, I64)
    return e if size_vars(e) else _c(eval_int(e))



@dataclass
class Ring:
    """``tensor`` stored in ``rows`` rows along its carried axis (``axis``: for a tensor
    run a row at a time, its step axis; ``scratch`` is the buffer's tensor, of the
    reduced shape)."""

    tensor: Compute
    rows: Expr
    scratch: Tensor
    axis: int = 0


@dataclass
class Segments:
    """The checkpointed-gradient plan (see the module docstring): ``es``, the forward
    recurrences run in lockstep (one of them, or a group), ``des`` their adjoints, in
    program order; ``e`` and ``de`` name the first of each."""

    es: Tuple[Compute, ...]
    des: Tuple[Compute, ...]
    k: int
    back: int  # W: rows before a segment start kept in a checkpoint
    ahead: int  # H: steps of e recomputed past the segment end
    seg: Expr  # S: steps per segment
    consumers: List[Tuple[Compute, int, int]]  # (tensor, its step axis, shift: row a at turn a + shift)
    early: List[Tensor]  # after de in program order, but needed by the consumers
    look_d: int = 1  # steps ahead of a segment at which de is read (its ring's extra rows)
    last: int = 1  # last steps of e read before the segments (the forward ring keeps them)
    window: int = 1  # w: how far back e reads itself
    recompute: bool = True  # False: only e's last steps are read, its ring keeps them
    stores: Dict[int, Tensor] = field(default_factory=dict)  # uid -> checkpoint buffer
    mode: str = "segments"  # or "revolve": one step at a time, by codegen.revolve's schedule
    width: int = 1  # revolve: rows of e a checkpoint holds (max(w, back + ahead))
    sums: List = field(default_factory=list)  # codegen.adjoint_sums plans: added per step
    # forward rows (checkpoint_rows.Rows.fore): (tensor, step axis, lo, hi), turn t
    # needs rows [t + lo, t + hi]
    fore: List[Tuple[Compute, int, int, int]] = field(default_factory=list)
    ringed: set = field(default_factory=set)  # consumers kept in rings of a turn's rows
    order: List[Tensor] = field(default_factory=list)  # the program's tensors, in order
    # first rows of e read before the reversals (codegen.checkpoint_kept), which the
    # forward sweep copies into a store of their own: how many, and uid -> the store
    first: int = 0
    firsts: Dict[int, Tensor] = field(default_factory=dict)
    kept: set = field(default_factory=set)  # uids of those tensors this plan relies on
    # the bytes its buffers keep, and the full tape's (codegen.checkpoint_memory)
    memory: Optional[Memory] = None

    @property
    def e(self) -> Compute:
        return self.es[0]

    @property
    def de(self) -> Compute:
        return self.des[0]

    @property
    def store(self) -> Optional[Tensor]:
        """The checkpoint buffer of ``e`` (None: nothing recomputed)."""
        return self.stores.get(self.e.uid)

    def reversal(self) -> List[Tuple[Compute, Optional[int], int]]:
        """What a turn (a segment) runs backwards, in program order: each adjoint
        (``(de, None, 0)``) and consumer (``(tensor, step axis, shift)``); a consumer
        between two adjoints is read by the later one (a layer's ``dh_sum``)."""
        pos = {x.uid: n for n, x in enumerate(self.order)}
        return sorted([(d, None, 0) for d in self.des] + list(self.consumers),
                      key=lambda r: pos[r[0].uid])

    @property
    def names(self) -> str:
        return ", ".join(x.name for x in self.es)

    def key(self) -> tuple:
        """What tells this plan from the others the planner may try for its members:
        the members, and the tensors from kept rows it relies on."""
        return tuple(x.uid for x in self.es), frozenset(self.kept)

    def describe(self) -> str:
        """Its members, mode and checkpoints, as the schedule says them."""
        how = (f"revolve, {self.k} checkpoints x {self.width} rows" if self.mode == "revolve"
               else f"segments, {self.k} checkpoints x {self.back} rows" if self.recompute
               else f"segments, its last {self.last} rows kept")
        return f"{self.names}{' in lockstep' if len(self.es) > 1 else ''}: {how}"

    def runs(self) -> Dict[int, Tensor]:
        """uid -> each tensor this plan computes itself (the recurrences, their adjoints,
        the rows run along the steps, the sums over them, the tensors computed before
        the turns), not where the program has it.

        >>> import tensorexpr as te
        >>> from codegen.signature import Signature
        >>> u = te.placeholder((6, 2), name="u")
        >>> e = te.recurrence((6, 2), lambda e, t, r: te.sin(u[t, r] + te.select(
        ...     t > 0, e[t - 1, r], 0.0)), name="e", checkpoints=2)
        >>> (du,) = te.differentiate(te.compute((), lambda: e[5, 0], name="L"), [u])
        >>> s = plan(Signature([du], [u])).segments
        >>> sorted(x.name for x in s.runs().values()), sorted(s.runs()[u].name for u in s.rowed())
        (['de', 'du', 'e'], ['de', 'e'])
        """
        got = list(self.es) + list(self.des) + [c for c, *_ in self.consumers] + [
            f for f, *_ in self.fore] + [p.t for p in self.sums] + list(self.early)
        return {x.uid: x for x in got}

    def rowed(self) -> set:
        """uids of the tensors of this plan no other tensor may read (kept in rings or run
        a row at a time): all it computes but the consumers kept whole."""
        whole = {c.uid for c, *_ in self.consumers if c.uid not in self.ringed}
        return set(self.runs()) - whole


@dataclass
class Plan:
    rings: Dict[int, Ring] = field(default_factory=dict)
    # the checkpointed groups, each reversed on its own, one after the other (in the
    # program order of their first adjoints)
    groups: List[Segments] = field(default_factory=list)
    # (name, reason): the recurrences with checkpoints that keep their full tape, and the
    # first unsupported condition each met (the schedule prints them)
    refused: List[Tuple[str, str]] = field(default_factory=list)
    # uid -> the tensors before the reversals computed from the rows the plans keep
    # (codegen.checkpoint_kept) that a group relies on (Segments.kept)
    kept: Dict[int, Kept] = field(default_factory=dict)
    # uids of those computed where they are read, stored nowhere
    # (codegen.checkpoint_kept.where_read)
    where_read: set = field(default_factory=set)
    # uids of those stored (in their rings) for them, which would be computed where read
    stored: set = field(default_factory=set)

    @property
    def segments(self) -> Optional[Segments]:
        """The first checkpointed group (None: none)."""
        return self.groups[0] if self.groups else None


def _scratch(t: Compute, dims: Sequence[Expr], what: str) -> Compute:
    return Compute(f"{t.name}_{what}", tuple(dims), t.dtype, fresh_uid(), t.origin)


def _ceil_div(a: Expr, k: int) -> Expr:
    return _bin("floordiv", _bin("add", a, _c(k - 1)), _c(k))


def plan(sig, mode: str = "revolve", sums=None, steps=None) -> Plan:
    """Which recurrences of ``sig``'s program are kept in rings, and the
    checkpointed segments if the program has the supported shape.

    >>> import tensorexpr as te
    >>> from codegen.signature import Signature
    >>> d = te.placeholder((2, 64), name="d")
    >>> e = te.recurrence((64, 2), lambda e, t, r: te.select(
    ...     t == 0, d[r, 0], 0.5 * d[r, t] + 0.5 * e[t - 1, r]), name="e")
    >>> last = te.compute((2,), lambda r: e[63, r], name="last")
    >>> p = plan(Signature([last], [d]))
    >>> [(r.tensor.name, r.scratch.shape) for r in p.rings.values()]
    [('e', (2, 2))]

    ``sums``: the sums over an adjoint's steps (``codegen.adjoint_sums`` plans by uid),
    which a checkpointed gradient adds a step at a time; ``steps``: the recurrences run
    by steps (``codegen.recurrence_steps`` plans by uid), whose steps it runs as the full
    tape does.
    """
    # a plan keeping no fewer bytes than the full tape is refused, and the program
    # planned again without it (each time one more is refused: a few times at most)
    banned: Dict[tuple, str] = {}
    while True:
        out = _plan(sig, mode, sums, steps, banned)
        worse = [s for s in out.groups if s.memory is not None and s.memory.smaller() is False]
        if not worse:
            return out
        for s in worse:
            banned[s.key()] = (f"its plan ({s.describe()}) keeps no less than the full "
                               f"tape: {s.memory}")


def _plan(sig, mode: str, sums, steps, banned: Dict[tuple, str]) -> Plan:
    """:func:`plan`, the groups of ``banned`` (``Segments.key()`` -> why) refused."""
    sums, steps = dict(sums or {}), dict(steps or {})
    params = sig.size_names
    outputs = {t.uid for t in sig.outputs}
    order = [t for t in sig.order if not isinstance(t, Placeholder)]
    readers: Dict[int, List[Tensor]] = {}
    for x in order:
        for p in tensor_inputs(x):
            readers.setdefault(p.uid, []).append(x)
    out = Plan()
    refused: Dict[int, Tuple[str, str]] = {}
    inline = inlinable(sig)
    kp = kept(order, outputs, params, inline)
    grouped: set = set()
    for e in order:
        if not (isinstance(e, Compute) and e.carry is not None) or e.uid in outputs:
            if isinstance(e, Compute) and e.checkpoints and e.carry is not None:
                refused[e.uid] = (e.name, "it is an output (every step is returned)")
            continue
        w = window(e, params)
        if w is None or e.uid in grouped:
            if e.checkpoints and e.uid not in grouped:
                T = e.dims[e.carry.axis]
                refused[e.uid] = (e.name, "one step: nothing to checkpoint" if same(
                    T, _c(1)) else "it reads itself at no constant distance back")
            continue
        seg, why = None, []
        if e.checkpoints and e.carry.step > 0 and e.carry.axis != 0:
            why.append(f"its steps are along its axis {e.carry.axis}, not its first "
                       f"(codegen.checkpoint_axes moves them first unless it is an output)")
        if e.checkpoints and not why:
            # the largest group that has the supported shape, down to e alone (the reason
            # noted: e's own)
            es = group(e, order, outputs, params)
            # (a plan of e refused for its memory, alone or in a group: the reason said)
            larger = next((why for key, why in banned.items() if e.uid in key[0]), None)
            for n in range(len(es), 0, -1):
                why = []
                # the tensors before the reversals from kept rows only where the rows run
                # along the steps cannot do (they would compute whole what a forward row
                # keeps in a ring of a few rows)
                for kk in (None, kp) if kp else (None,):
                    seg = _segments(es[:n], order, readers, outputs, params, mode, sums,
                                    steps, why if kk is None else [], kk)
                    if seg is not None and seg.key() in banned:
                        seg = None
                        continue
                    clash = seg and _clash(seg, out.groups, order)
                    if clash:
                        seg = refuse(why if kk is None else [], clash)
                    if seg is not None:
                        break
                if seg is not None:
                    break
            if seg is None and larger:
                why = [larger]
        if seg is not None:
            out.groups.append(seg)
            grouped |= {x.uid for x in seg.es}
            continue
        if e.checkpoints:
            refused[e.uid] = (e.name, why[0] if why else "its gradient is not checkpointed")
        m = 0
        for x in readers.get(e.uid, []):
            got = last_rows(x, e, params)
            if got is None:
                break
            m = max(m, got)
        else:
            rows = max(w + 1, m)
            n = e.dims[e.carry.axis]
            if isinstance(n, Const) and rows >= n.value:
                continue  # the ring would be the whole tensor
            dims = list(e.dims)
            dims[e.carry.axis] = _c(rows)
            out.rings[e.uid] = Ring(e, _c(rows), _scratch(e, dims, "ring"), e.carry.axis)
    out.kept = {u: kp[u] for seg in out.groups for u in seg.kept}
    for seg in out.groups:
        # (the rows of its members those tensors read, whichever group relies on them)
        seg.last = max([seg.last] + [k.last.get(e.uid, 0) for k in out.kept.values()
                                     for e in seg.es])
        seg.first = max([seg.first] + [k.first.get(e.uid, 0) for k in out.kept.values()
                                       for e in seg.es])
        _segment_buffers(out, seg)
    for k in out.kept.values():  # (computed at the rows read only, in a ring of them)
        if k.count() is not None:
            _row_ring(out, k.tensor, 0, _c(k.count()))
    # (the rings the reversals and rolling states rewrite: all but those of kept rows)
    out.where_read, out.stored = where_read(out.kept, order, inline,
                                            {u for u in out.rings if u not in out.kept})
    for seg in out.groups:
        seg.memory = memory(out, seg)
    # (a recurrence in a ring of its last rows keeps no full tape: a forward-only build)
    out.refused = [r for u, r in refused.items() if u not in out.rings]
    return out


def _segments(es: Sequence[Compute], order, readers, outputs, params,
              mode: str = "revolve", sums=None, steps=None, why=None,
              kp=None) -> Optional[Segments]:
    """The checkpointed plan for the group ``es`` and its adjoints, or None (full tape;
    the reason noted in the list ``why``). ``kp``: ``codegen.checkpoint_kept.kept``'s
    tensors, computed before the reversals from kept rows."""
    sums, steps = sums or {}, steps or {}
    e = es[0]
    T = e.dims[0]
    pos = {t.uid: n for n, t in enumerate(order)}
    # (those reading the group, or reading such tensors)
    mine, kp = {x.uid for x in es}, dict(kp or {})
    rel: set = set()
    for x in order:
        k = kp.get(x.uid)
        if k is not None and (mine & (set(k.last) | set(k.first))
                              or any(p.uid in rel for p in tensor_inputs(x))):
            rel.add(x.uid)
    kp = {u: kp[u] for u in rel}
    des = sorted(adjoints(es, readers, set(kp)), key=lambda x: pos[x.uid])
    # one adjoint per recurrence at most (a second descending reader of e is no adjoint
    # a turn could run)
    if not des:
        return refuse(why, "no adjoint recurrence reads it (its gradient is not taken, or "
                           "does not depend on it)")
    if len(des) > len(es):
        # (a second-order gradient: an adjoint reading another, d2h[t] reads dh[t], whose
        # steps its reversal would need again, after the tangent ddh's forward sweep)
        mine_d = {d.uid for d in des}
        nested = [(d.name, q.name) for d in des for q in tensor_inputs(d)
                  if q.uid in mine_d and q.uid != d.uid]
        return refuse(why, f"several descending recurrences read it "
                           f"({', '.join(d.name for d in des)}): no turn could run them" + (
                               f" ({nested[0][0]} reads {nested[0][1]}: a gradient of its "
                               f"gradient, which would reverse {nested[0][1]}'s steps again: "
                               f"checkpoints of checkpoints are not made)" if nested else ""))
    for de in des:
        if de.uid in outputs:
            return refuse(why, f"its adjoint {de.name} is an output")
        if de.carry.axis != 0 or not same(de.dims[0], T):
            return refuse(why, f"its adjoint {de.name} does not run along its steps")
    # a recurrence by steps runs each step with the full tape's lowering of a step
    # (Lowerer.step_of), in either mode: its per-step sums are the same C, in the same order
    for x in list(es) + des:
        if has_reduce(x) and x.uid not in steps or x.carry is None and not \
                checkpoint_rows.by_steps_ok(x, 0, steps):
            return refuse(why, f"{x.name} holds a sum that does not run by steps")
    wds = [window(de, params) for de in des]
    ws = [window(x, params) if x.carry is not None else 0 for x in es]
    if None in wds or None in ws:
        return refuse(why, "a recurrence of it reads itself at no constant distance")
    rows = checkpoint_rows.classify(tuple(es), tuple(des), order, outputs, params, sums, steps,
                                    why, set(kp))
    if rows is None:
        return None
    wd, w = max(wds), max(ws)
    # a member reading an earlier one: the rows of it its step reads (lockstep)
    cross = [offsets(x, y, x.axes[0], params, 0) for n, x in enumerate(es) for y in es[:n]]
    need, look_d = rows.need + [r for r in cross if r], rows.look_d
    taken = rows.taken | {f.uid for f, *_ in rows.fore}
    back = max([w] + [-lo for lo, _ in need])
    ahead = max([0] + [hi for _, hi in need])
    k = min(_slots(x.checkpoints, T) for x in es if x.carry is not None)
    if isinstance(T, Const):
        k = min(k, T.value)  # more checkpoints than steps would only cost memory
    # revolve needs its schedule as data, made for a known T: a symbolic T runs segments
    revolve = mode == "revolve" and isinstance(T, Const)
    seg = _c(1) if revolve else _bin("max", _ceil_div(T, k), _c(back))
    if not revolve and isinstance(seg, Const) and seg.value >= T.value:
        return refuse(why, "one segment (k = 1 in segments mode) would be the whole tape")
    inner = rows.es | rows.des
    last = max([1] + [(last_rows(x, y, params) or 0) for y in es for x in readers.get(y.uid, [])
                      if x.uid not in inner and x.uid not in taken and x.uid not in kp]
               + [k.last.get(y.uid, 0) for y in es for k in kp.values()])
    first = max([0] + [k.first.get(y.uid, 0) for y in es for k in kp.values()])
    s = Segments(tuple(es), tuple(des), k, back, ahead, seg, rows.consumers, rows.early,
                 max(wd, look_d), last, w)
    s.sums, s.fore, s.ringed, s.order = rows.sums, rows.fore, rows.ringed, list(order)
    s.first, s.kept = first, set(kp)
    # When everything run inside the segments (de, the consumers, the sums added a step
    # at a time) reads only e's last steps (a linear recurrence such as an EWMA: its
    # adjoint does not depend on e), nothing needs recomputing: e keeps a rolling state
    # of those last steps and only de runs segment-wise.
    inside = list(des) + [c for c, *_ in rows.consumers] + [p.t for p in rows.sums] + [
        f for f, *_ in rows.fore]
    tail = [last_rows(x, e, params) for x in inside]
    # (with a constant T every read is "in the last T steps": demand a ring smaller
    # than the one recomputation needs, and, with fewer checkpoints than steps, than T:
    # a ring of every step is the full tape checkpoints=k asked not to keep; at T = 9,
    # k = 3 revolve's 3 x 2 checkpoint rows and 3 ring rows are 9 as well)
    width = max(w, back + ahead)
    # (revolve: its ring and checkpoints)
    ring = _c((k + 1) * width + 1) if revolve else _bin("add", seg, _c(back + ahead))
    held = max([w + 1, last] + [m for m in tail if m is not None])
    if len(es) == 1 and not rows.fore and None not in tail and (not isinstance(ring, Const) or (
            held < ring.value and (k >= T.value or held < T.value))):
        s.recompute = False
        s.last = max([last] + tail)
        s.back, s.ahead = 0, 0
        s.seg = _c(1) if revolve else _ceil_div(T, k)  # revolve: de one step at a time
    elif revolve:
        s.mode, s.width = "revolve", width
    return s


def _slots(k, T: Expr) -> int:
    """A recurrence's ``checkpoints`` as a number: ``"auto"`` (see ``te.recurrence``) is
    revolve's for a constant ``T``; a symbolic ``T`` runs segments, 64 of them."""
    if k == "auto":
        return revolve_schedule.auto_slots(T.value) if isinstance(T, Const) else 64
    return int(k)


def _clash(b: Segments, groups: Sequence[Segments], order) -> Optional[str]:
    """Why the group ``b`` cannot be reversed besides the ``groups`` already checkpointed
    (None: it can). Each group's reversal runs where its first adjoint is in the program,
    on its own rings: no two may compute the same tensor, nor read what another keeps in
    rings or runs a row at a time; one may read another's consumers kept whole (a
    bidirectional RNN's dx[t] reads the reversed layer's dxr[T - 1 - t]) if that other's
    reversal runs first."""
    pos = {t.uid: n for n, t in enumerate(order)}
    mine = b.runs()
    for a in groups:
        theirs = a.runs()
        for x, y in ((a, b), (b, a)):  # (computed before the reversals, not at the turns)
            for u in x.kept & set(y.runs()):
                return (f"{y.runs()[u].name} would be run by the reversal of {y.names}, and "
                        f"before the reversals for {x.names}")
        if set(mine) & set(theirs):
            return (f"{', '.join(mine[u].name for u in set(mine) & set(theirs))} would be run "
                    f"by the reversal of {a.names} as well")
        for runs, other, other_runs in ((mine, a, theirs), (theirs, b, mine)):
            before = pos[other.de.uid] < pos[(b if other is a else a).de.uid]
            for x in runs.values():
                for q in tensor_inputs(x):
                    if q.uid in other_runs and (q.uid in other.rowed() or not before):
                        return (f"{x.name} reads {q.name}, which the reversal of "
                                f"{other.names} computes "
                                + ("a row at a time" if q.uid in other.rowed() else "after it"))
    return None


def _segment_buffers(p: Plan, s: Segments) -> None:
    # (a group's members share the rows kept: a checkpoint holds each one's state)
    held = None
    if s.mode == "revolve":
        # a checkpoint's rows, and the step computed from them
        rows_e, held = _c(max(s.width + 1, s.last)), s.width
    elif s.recompute:
        rows_e = _bin("max", _bin("add", s.seg, _c(s.back + s.ahead)), _c(s.last))
        held = s.back
    else:
        rows_e = _c(max(s.window + 1, s.last))
    rows_d = _bin("add", s.seg, _c(s.look_d))
    for e in s.es:
        if held is not None:
            s.stores[e.uid] = _scratch(e, (_c(s.k * held),) + tuple(e.dims[1:]), "checkpoints")
        if s.first:
            s.firsts[e.uid] = _scratch(e, (_c(s.first),) + tuple(e.dims[1:]), "first")
        p.rings[e.uid] = Ring(e, rows_e, _scratch(e, (rows_e,) + tuple(e.dims[1:]), "ring"))
    for de in s.des:
        p.rings[de.uid] = Ring(de, rows_d, _scratch(de, (rows_d,) + tuple(de.dims[1:]), "ring"))
    # the tensors run a row at a time: the rows a segment (a turn) reads; a forward
    # tensor's rows [lo, hi] from the turn, a consumer's its turn's row
    one = s.mode == "revolve"
    for t, a, lo, hi in s.fore:
        _row_ring(p, t, a, _c(hi - lo + 1) if one else _bin("add", s.seg, _c(hi - lo)))
    for t, a, _ in s.consumers:
        if t.uid in s.ringed:
            _row_ring(p, t, a, _c(1) if one else s.seg)


def _row_ring(p: Plan, t: Compute, a: int, rows: Expr) -> None:
    n = t.dims[a]
    if isinstance(n, Const) and isinstance(rows, Const) and rows.value >= n.value:
        return  # the ring would be the whole tensor
    dims = list(t.dims)
    dims[a] = rows
    p.rings[t.uid] = Ring(t, rows, _scratch(t, dims, "ring"), a)

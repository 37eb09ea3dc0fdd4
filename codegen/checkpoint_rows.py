"""Which tensors a checkpointed gradient computes a row at a time, and which rows each needs.

``codegen.checkpoint`` runs the gradient of a checkpointed recurrence ``e`` step by
step backwards: each *turn* ``t`` (from the last step down) has ``e``'s rows around
``t``, computes its adjoint ``de[t]``, and whatever else reads them a step at a time.
:func:`classify` sorts the tensors of the program after ``e`` into

* *forward rows* (:attr:`Rows.fore`): computed before ``de``, reading ``e`` (or
  other forward rows) within a constant distance of one of their axes, at every step
  (a GRU's forward sums ``h_sum[t] = h[t - 1] @ U`` and the gate values ``passes.hoist``
  moves out of ``de``'s sum). They are recomputed with ``e``: a turn ``t`` needs rows
  ``[t + lo, t + hi]`` of each, kept in a ring;
* *consumers* (:attr:`Rows.consumers`): after ``de``, reading ``de``, ``e``, forward
  rows or other consumers within a constant distance of one of their axes (the input
  gradient ``dx[t]``); row ``a`` is computed at turn ``a + shift`` (a weight gradient's
  hoisted terms ``dU_h0[t] = f(dh[t + 1], ...)`` have ``shift = 1``), when every row
  of ``de`` it reads exists (the turns run down: ``de``'s rows ``>= t``) and every
  consumer row it reads is that turn's;
* *sums over the steps* (``codegen.adjoint_sums`` plans), added at each turn, reading
  consumers at that turn's rows;
* the rest: tensors reading ``e``'s last rows only (computed from the forward ring),
  tensors reading none of these, and tensors computed after the segments (reading
  consumers whole).

Tensors holding sums among the rows run by steps (``codegen.recurrence_steps``), as
in every build of the program, so that a row is the same C in both. Any other shape
returns None: the program keeps its full tape.

>>> import tensorexpr as te
>>> u = te.placeholder((3, 8), name="u")
>>> e = te.recurrence((8, 3), lambda e, t, r: te.sin(u[r, t] + te.select(
...     t > 0, e[t - 1, r], 0.0)), name="e", checkpoints=2)
>>> L = te.compute((), lambda: e[7, 0] + e[7, 2], name="L")
>>> (g,) = te.differentiate(L, [u])
>>> order = [t for t in te.ir.topo_order([g]) if not isinstance(t, te.ir.Placeholder)]
>>> de = next(t for t in order if t.name == "de")
>>> rows = classify(e, de, order, set(), ())
>>> [(c.name, a, shift) for c, a, shift in rows.consumers], rows.need  # (du reads e[t - 1], de e[t])
([('du', 1, 0)], [(-1, -1), (0, 0)])
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from tensorexpr import polyhedral
from tensorexpr.polyhedral import Recent
from tensorexpr.bounds import read_sites
from tensorexpr.ir import (INDEX_DTYPE, Binary, Compute, Const, Expr, Read, Reduce, Tensor, same,
                           tensor_inputs, walk)

I64 = INDEX_DTYPE


def offsets(reader: Tensor, target: Compute, base: Expr, params,
            axis: Optional[int] = None, where: Tuple[Expr, ...] = ()) -> Optional[Tuple[int, int]]:
    """``(lo, hi)`` of ``index of a read of target - base`` along ``target``'s carried
    axis (its first if it is no recurrence; ``axis``: that one instead) over all reads of ``target`` (or its self handle)
    in ``reader``; ``()`` if none runs, None if unbounded, not affine, or not analysable
    (scatter-adds, reads in bounds). ``where``: conditions on ``reader``'s axes, the
    points of it that run (``codegen.checkpoint_kept``: a tensor computed at some rows)."""
    if not isinstance(reader, Compute):
        return None
    uids = {target.uid} | ({target.self_ref.uid} if target.self_ref is not None else set())
    c = axis if axis is not None else target.carry.axis if target.carry is not None else 0
    lo = hi = None
    found = False
    sites, in_bounds = reads_of(reader)
    for r, guards, raxes in (x for u in uids for x in sites.get(u, ())):
        found = True
        rng = polyhedral.offset_range(tuple(reader.axes) + tuple(raxes),
                                      tuple(guards) + tuple(where), r.indices[c], base, params)
        if rng is None:
            return None
        if rng == ():
            continue
        lo = rng[0] if lo is None else min(lo, rng[0])
        hi = rng[1] if hi is None else max(hi, rng[1])
    if uids & in_bounds:
        return None
    if not found and target.uid in {t.uid for t in tensor_inputs(reader)}:
        return None
    return () if lo is None else (lo, hi)


def reads_of(reader: Compute) -> Tuple[Dict[int, List], set]:
    """``({uid: read sites}, uids read in reduction bounds)`` of ``reader``'s body: the
    read sites (``tensorexpr.bounds.read_sites``) of each tensor it reads, in order, and
    the tensors read in the bounds of its reductions, which ``read_sites`` does not see.

    >>> import tensorexpr as te
    >>> x = te.placeholder((4,), name="x")
    >>> y = te.compute((3,), lambda i: x[i] + x[i + 1], name="y")
    >>> sites, bounds = reads_of(y)
    >>> [str(r) for r, _, _ in sites[x.uid]], bounds
    (['x[i]', 'x[i + 1]'], set())
    """
    # A checkpoint plan asks for the offsets of every reader's reads of every tensor
    # a turn has rows of, along each of its axes: the body is walked once.
    got = _READS.get((reader.uid,), lambda: (reader, _reads_of(reader)))
    return got[1] if got[0] is reader else _reads_of(reader)


#: the read sites :func:`reads_of` found (with their reader: a uid names one tensor)
_READS = Recent(256, plain=True)


def _reads_of(reader: Compute) -> Tuple[Dict[int, List], set]:
    sites: Dict[int, List] = {}
    for r, guards, raxes in read_sites(reader.body):
        sites.setdefault(r.tensor.uid, []).append((r, guards, raxes))
    in_bounds = {y.tensor.uid for x in walk(reader.body, unique=True) if isinstance(x, Reduce)
                 for ax in x.axes for b in (ax.lo, ax.hi) for y in walk(b, unique=True)
                 if isinstance(y, Read)}
    return sites, in_bounds


def window(e: Compute, params) -> Optional[int]:
    """How many steps back (along its direction) the recurrence ``e`` reads itself:
    ``w >= 1`` (None: not a constant distance).

    >>> import tensorexpr as te
    >>> d = te.placeholder((9,), name="d")
    >>> e = te.recurrence((9,), lambda e, t: d[t] + te.select(t < 2, 0.0, e[t - 2]), name="e")
    >>> window(e, ())
    2
    """
    rng = offsets(e, e, e.axes[e.carry.axis], params)
    if rng is None or rng == ():
        return None
    return -rng[0] if e.carry.step > 0 else rng[1]


def reads(x: Tensor, t: Tensor) -> bool:
    """Does ``x`` read ``t``?"""
    return any(p.uid == t.uid for p in tensor_inputs(x))


def last_rows(reader: Tensor, e: Compute, params) -> Optional[int]:
    """``m`` such that ``reader`` reads only the last ``m`` steps of ``e`` (0: none; the
    steps of a tensor that is no recurrence: its first axis, ascending)."""
    T = e.dims[e.carry.axis if e.carry is not None else 0]
    if e.carry is None or e.carry.step > 0:
        last = Const(T.value - 1, I64) if isinstance(T, Const) else Binary("sub", T, Const(1, I64),
                                                                              I64)
        rng = offsets(reader, e, last, params)
        return None if rng is None else (0 if rng == () else 1 - rng[0])
    rng = offsets(reader, e, Const(0, I64), params)
    return None if rng is None else (0 if rng == () else rng[1] + 1)


def _last_rows(reader: Tensor, es: Sequence[Compute], params) -> Optional[int]:
    """:func:`last_rows` over each of ``es`` (the most; None if one is read otherwise)."""
    got = [last_rows(reader, y, params) for y in es]
    return None if None in got else max(got)


def has_reduce(t: Compute) -> bool:
    """Does ``t``'s body hold a reduction? The C backend may vectorize its sum, and the
    order of a vectorized sum can depend on the alignment of the rows read, which a
    ring changes: such a tensor runs inside a checkpointed gradient only by steps, as
    the full tape runs it (``codegen.recurrence_steps``)."""
    return any(isinstance(x, Reduce) for x in walk(t.body, unique=True))


@dataclass
class Rows:
    """:func:`classify`'s answer: the tensors run a row at a time, in program order."""

    fore: List[Tuple[Compute, int, int, int]] = field(default_factory=list)
    # (tensor, step axis, lo, hi): turn t needs its rows [t + lo, t + hi]
    consumers: List[Tuple[Compute, int, int]] = field(default_factory=list)
    # (tensor, step axis, shift): row a at turn a + shift
    sums: List = field(default_factory=list)  # codegen.adjoint_sums plans, added per turn
    early: List[Tensor] = field(default_factory=list)  # after de, computed before the turns
    need: List[Tuple[int, int]] = field(default_factory=list)  # e's rows, from the turn
    es: set = field(default_factory=set)  # uids of the forward recurrences (one group)
    des: set = field(default_factory=set)  # uids of their adjoints
    look_d: int = 0  # de's rows ahead of the turn read
    taken: set = field(default_factory=set)  # uids computed at the turns or after them
    ringed: set = field(default_factory=set)  # consumers read only at the turns


def _step_axis(x: Compute, targets: Dict[int, Tuple[Compute, int]], params):
    """``(axis, {uid: offsets})``: the axis of ``x`` within a constant distance of which
    it reads every tensor of ``targets`` (uid -> (tensor, its step axis)) it reads, the
    nearest (with constant sizes every read is within some distance of every axis). An
    axis of one point is a step axis only if no other axis is one: any read is within a
    constant distance of it (the leading axis ``p0`` of the Jacobian-shaped gradient of a
    loss of shape ``(1,)``, ``dhs[p0, t] = select(t == T - 1, 2 hs[t], 0)``, reads ``hs``
    at distance ``T - 1`` of ``p0`` as exactly as at distance 0 of ``t``).

    >>> import tensorexpr as te
    >>> x = te.placeholder((5, 2), name="x")
    >>> hs = te.compute((5, 2), lambda t, b: x[t, b] * 3.0, name="hs")
    >>> dhs = te.compute((1, 5, 2), lambda p, t, b: te.select(t == 4, 2.0 * hs[t, b], 0.0),
    ...                  name="dhs")
    >>> a, got = _step_axis(dhs, {hs.uid: (hs, 0)}, ())
    >>> a, list(got.values())
    (1, [(0, 0)])
    """
    read = [u for u in targets if reads(x, targets[u][0])]
    best = None
    for a, ax in enumerate(x.axes):
        got = {}
        for u in read:
            t, ta = targets[u]
            got[u] = offsets(x, t, ax, params, ta)
            if got[u] is None:
                break
        else:
            spread = sum(r[1] - r[0] for r in got.values() if r)
            if best is None or (_one_point(x.dims[a]), spread) < best[0]:
                best = ((_one_point(x.dims[a]), spread), a, got)
    return None if best is None else best[1:]


def _one_point(n: Expr) -> bool:
    return isinstance(n, Const) and n.value == 1


def by_steps_ok(x: Compute, a: int, steps) -> bool:
    """A tensor holding sums runs a row at a time only as every build runs it: by steps
    (``steps``: the ``codegen.recurrence_steps`` plans by uid) along its axis ``a``.

    >>> import tensorexpr as te
    >>> x = te.placeholder((4, 3), name="x")
    >>> y = te.compute((4, 3), lambda t, r: x[t, r] * 2.0, name="y")
    >>> by_steps_ok(y, 0, {})  # (no sum: any row is the same C)
    True
    """
    if not has_reduce(x):
        return True
    p = steps.get(x.uid)
    return p is not None and p.t is x and p.axis == a


def refuse(why: Optional[list], reason: str) -> None:
    """None (the full tape), with ``reason`` noted in ``why`` (a list, or None) if it has
    none yet: the schedule names the first unsupported condition met.

    >>> why = []; refuse(why, "a reason"); refuse(why, "another"); why
    ['a reason']
    """
    if why is not None and not why:
        why.append(reason)
    return None


def classify(e, de, order: Sequence[Tensor], outputs, params,
             sums=None, steps=None, why: Optional[list] = None, kept=frozenset()) -> Optional[Rows]:
    """The rows of the tensors after ``e`` in ``order`` (see the module docstring), or
    None when one of them has no place in a turn (the reason noted in ``why``, as
    :func:`refuse` does). ``outputs``: uids of the program's
    outputs; ``sums``, ``steps``: the ``codegen.adjoint_sums`` and
    ``codegen.recurrence_steps`` plans by uid. ``e`` and ``de`` may be tuples: a group
    of recurrences run in lockstep (``codegen.checkpoint``) and their adjoints, in
    program order; :attr:`Rows.need` then holds the rows of every one of them. ``kept``:
    uids of the tensors computed before the reversals from the rows the plans keep
    (``codegen.checkpoint_kept``), where the program has them."""
    sums, steps = sums or {}, steps or {}
    es = (e,) if isinstance(e, Tensor) else tuple(e)
    des = (de,) if isinstance(de, Tensor) else tuple(de)
    T = es[0].dims[0]
    pos = {t.uid: k for k, t in enumerate(order)}
    first_de = min(pos[d.uid] for d in des)
    readers: Dict[int, List[Tensor]] = {}
    for x in order:
        for p in tensor_inputs(x):
            readers.setdefault(p.uid, []).append(x)
    out = Rows(es={x.uid for x in es}, des={x.uid for x in des})
    # uid -> (tensor, step axis): what a turn has rows of (e and de: their carried axis)
    stepped: Dict[int, Tuple[Compute, int]] = {x.uid: (x, 0) for x in es + des}
    fore: Dict[int, List] = {}  # uid -> [tensor, axis, lo, hi, its reads]
    shift: Dict[int, int] = {}  # consumers
    on_adjoint = set(out.des)  # the tensors depending on an adjoint
    read_by_de = {p.uid for d in des for p in tensor_inputs(d)}
    last_only: List[Tensor] = []  # after de, reading only e's last rows
    for x in order[pos[es[0].uid] + 1:]:
        if any(p.uid in on_adjoint for p in tensor_inputs(x)):
            on_adjoint.add(x.uid)
        if x.uid in stepped:
            continue
        # (a forward tensor a later adjoint reads, after an earlier one in the program: a
        # lower layer's forward sums h1[t - 1] @ U1)
        before = pos[x.uid] < first_de or (x.uid not in on_adjoint and x.uid in read_by_de)
        on_fore = any(reads(x, f[0]) for f in fore.values())
        on_e = any(reads(x, y) for y in es)
        if before:
            # (read by an adjoint but after the first in the program, where the reversal
            # runs: computed before the turns, or the turns would read it unwritten)
            late = pos[x.uid] > first_de
            if not (on_e or on_fore) or x.uid in kept:
                out.early += [x] if late else []
                continue
            m = None if on_fore else _last_rows(x, es, params)
            if m is not None and not (isinstance(T, Const) and m >= T.value):
                out.early += [x] if late else []
                continue  # computed as the full tape computes it (from e's last rows)
            got = None
            if isinstance(x, Compute) and x.carry is None:
                got = _step_axis(x, {u: v for u, v in stepped.items() if u not in out.des},
                                 params)
            if got is None and m is not None:
                out.early += [x] if late else []
                continue  # (every row of e, kept: exact, nothing saved)
            if got is None:
                return refuse(why, f"{x.name} reads {_names(es)} other than within a constant "
                                   f"distance of one of its axes or at its last steps")
            if x.uid in outputs:
                return refuse(why, f"{x.name}, computed along the steps, is an output")
            if not by_steps_ok(x, got[0], steps):
                return refuse(why, f"{x.name} holds a sum along the steps that does not run "
                                   f"by steps")
            fore[x.uid] = [x, got[0], None, None, got[1]]
            stepped[x.uid] = (x, got[0])
            continue
        on_de = any(reads(x, y) for y in des)
        on_turns = on_de or on_e or on_fore or any(
            reads(x, c) for c in (stepped[u][0] for u in shift))
        if on_turns and any(p.uid in out.taken and p.uid not in shift
                            for p in tensor_inputs(x)):
            return refuse(why, f"{x.name} reads a sum over the steps or a tensor computed "
                               f"after the turns")
        if x.uid in sums and on_turns:  # a sum over the steps, added a step at a time
            if not _sum_reads(sums[x.uid], x, T, stepped, fore, shift, out, params):
                return refuse(why, f"the sum over the steps {x.name} cannot add a step at its "
                                   f"turn (it reads the gradient at an earlier step, or "
                                   f"another turn's rows)")
            out.sums.append(sums[x.uid])
            out.taken.add(x.uid)
            continue
        if on_turns:
            late = [(r, sums[r.uid]) for r in readers.get(x.uid, []) if r.uid in sums]
            got = _consumer(x, T, stepped, fore, shift, out, params, steps, late)
            if got is None:
                if not (on_de or on_fore) and _last_rows(x, es, params) is not None \
                        and not any(reads(x, stepped[u][0]) for u in shift):
                    out.early.append(x)  # only the last steps of e: before the turns
                    last_only.append(x)
                    continue
                if not (on_de or on_e or on_fore or x.uid in sums):
                    # only consumers, at rows of no single turn (a bidirectional RNN's
                    # dx[t] reads the reversed layer's dxr[T - 1 - t]): after the turns,
                    # reading them whole
                    out.taken.add(x.uid)
                    continue
                return refuse(why, f"{x.name} reads the rows run along the steps at no single "
                                   f"turn (the gradient at an earlier step, another turn's "
                                   f"rows, or not within a constant distance of an axis)")
            a, c = got
            out.consumers.append((x, a, c))
            shift[x.uid] = c
            stepped[x.uid] = (x, a)
            out.taken.add(x.uid)
        elif any(p.uid in out.taken for p in tensor_inputs(x)):
            out.taken.add(x.uid)
        else:
            out.early.append(x)
    if not out.consumers and not out.sums:
        return refuse(why, "no tensor reads the gradient a step at a time")
    # (those reading e's last rows from its ring: before the turns recompute it)
    out.early = _needed(out.early, list(des) + [c for c, *_ in out.consumers] + last_only
                        + [p.t for p in out.sums] + [f[0] for f in fore.values()])
    # the rows of the forward tensors each turn needs, from their readers down
    for d in des:
        for y in es:
            rng = offsets(d, y, d.axes[0], params)
            if rng is None:
                return refuse(why, f"{d.name} reads {y.name} not within a constant distance "
                                   f"of its step")
            out.need += [rng] if rng else []
        for y in des:  # (an adjoint read by a later one: rows the turns computed)
            rng = offsets(d, y, d.axes[0], params) if y is not d and reads(d, y) else ()
            if rng is None or (rng and rng[0] < 0):
                return refuse(why, f"{d.name} reads {y.name} at an earlier step")
            out.look_d = max([out.look_d] + list(rng[1:]))
        for u in shift:  # (a consumer read by a later adjoint: at the same turn only)
            x, a = stepped[u]
            if reads(d, x) and (shift[u] or offsets(d, x, d.axes[0], params, a) != (0, 0)):
                return refuse(why, f"{d.name} reads {x.name} at another turn")
        for u, f in fore.items():
            got = offsets(d, f[0], d.axes[0], params, f[1])
            if got is None:
                return refuse(why, f"{d.name} reads {f[0].name} not within a constant "
                                   f"distance of its step")
            _widen(f, got)
    for f in reversed(list(fore.values())):
        if f[2] is None:
            continue  # read by nothing that runs at the turns
        for u, rng in f[4].items():
            if not rng:
                continue
            lo, hi = rng
            if u in out.es:
                out.need.append((f[2] + lo, f[3] + hi))
            else:
                _widen(fore[u], (f[2] + lo, f[3] + hi))
    for f in fore.values():
        if f[2] is None:  # (nothing would compute it)
            return refuse(why, f"{f[0].name} reads {_names(es)} at every step, and nothing "
                               f"run at the turns reads it")
    out.fore = [(f[0], f[1], f[2], f[3]) for f in fore.values()]
    # a consumer read only at the turns (by consumers and sums) needs its turn's rows only
    inside = set(shift) | {p.t.uid for p in out.sums} | out.des
    out.ringed = {u for u in shift if u not in outputs
                  and all(r.uid in inside for r in readers.get(u, []))}
    return out


def _needed(early: List[Tensor], run: List[Tensor]) -> List[Tensor]:
    """The tensors of ``early`` (in order) that what runs at the turns, ``run``, reads, or
    reads through others of them: computed before the turns. The rest read nothing run
    at the turns either, and stay where the program has them (another group's
    recurrences and gradients, in a program checkpointing several)."""
    mine = {x.uid for x in early}
    need, todo = {x.uid for x in run}, list(run)
    while todo:
        for q in tensor_inputs(todo.pop()):
            if q.uid in mine and q.uid not in need:
                need.add(q.uid)
                todo.append(q)
    return [x for x in early if x.uid in need]


def _names(ts) -> str:
    return ", ".join(t.name for t in ts)


def _widen(f: List, rng) -> None:
    """Forward tensor ``f`` ([tensor, axis, lo, hi, reads]) is read at ``rng`` from the turn."""
    if not rng:
        return
    f[2] = rng[0] if f[2] is None else min(f[2], rng[0])
    f[3] = rng[1] if f[3] is None else max(f[3], rng[1])


def _turn_reads(x: Compute, base: Expr, c: int, stepped, fore, shift, out, params) -> bool:
    """Record what ``x``'s row at turn ``t`` (read at ``base``, its row ``t - c``) reads,
    relative to the turn; False if it cannot: ``de`` at an earlier step, or another
    consumer at another turn's row."""
    for u, (t, ta) in stepped.items():
        if not reads(x, t):
            continue
        rng = offsets(x, t, base, params, ta)
        if rng is None:
            return False
        if rng == ():
            continue
        lo, hi = rng[0] - c, rng[1] - c
        if u in out.es:
            out.need.append((lo, hi))
        elif u in out.des:
            if lo < 0:
                return False
            out.look_d = max(out.look_d, hi)
        elif u in fore:
            _widen(fore[u], (lo, hi))
        elif u in shift and (lo + shift[u], hi + shift[u]) != (0, 0):
            return False  # (a consumer's rows are computed at their own turn only)
    return True


def _consumer(x: Tensor, T: Expr, stepped, fore, shift, out, params, steps, late):
    """``(axis, shift)`` of a consumer, or None. ``late``: ``(tensor, plan)`` of the sums
    over the steps reading it."""
    if not isinstance(x, Compute) or x.carry is not None:
        return None
    got = _step_axis(x, stepped, params)
    if got is None or not by_steps_ok(x, got[0], steps):
        return None
    a, rng = got
    # row a at the turn of the consumers it reads, or of the sums reading it (a sum adds
    # step t at turn t), else at turn a (de's rows it reads are there: de's rows >= t)
    c = [rng[u][0] + shift[u] for u in rng if u in shift and rng[u]]
    for r, p in late:
        o = offsets(r, x, p.axis, params, a)
        if o:
            c.append(-o[0])
    c = c[0] if c else 0
    n = x.dims[a]
    if c < 0 or not ((c == 0 and same(n, T)) or (isinstance(n, Const) and isinstance(T, Const)
                                                 and n.value + c <= T.value)):
        return None  # (rows no turn would compute)
    if not _turn_reads(x, x.axes[a], c, stepped, fore, shift, out, params):
        return None
    return a, c


def _sum_reads(p, x: Compute, T: Expr, stepped, fore, shift, out, params) -> bool:
    """Can the sum over the steps ``x`` (plan ``p``) add step ``t`` at turn ``t``?"""
    lo, hi = p.bounds()  # within the turns [0, T), for every value of the sizes
    first = polyhedral.offset_range((), (), lo, Const(0, I64), params)
    last = polyhedral.offset_range((), (), hi, T, params)
    if not (first and first[0] >= 0 and last and last[1] <= 0):
        return False
    return _turn_reads(x, p.axis, 0, stepped, fore, shift, out, params)

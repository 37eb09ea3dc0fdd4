"""Tensors before the reversals that read checkpointed recurrences only at kept rows.

A checkpointed recurrence ``e`` (``codegen.checkpoint``) is not kept whole: after its
forward sweep its ring holds its last rows, and nothing holds the others. A tensor
computed between the forward sweeps and the reversals may still read it, and be read
by the adjoints of several recurrences, if it reads ``e`` only at rows a plan keeps:

* ``e``'s *last* rows, which its forward ring holds at the end of the sweep (the plan's
  ``last``);
* ``e``'s *first* rows, which its forward sweep copies into a store of their own as it
  computes them (the plan's ``first``, ``checkpoint_plan.Segments.firsts``);

no more of them than a step of ``e`` reads (its window, and the step itself): a few
rows at any ``T`` (a tensor reading ``e`` along the steps is a forward row of its plan).

Only the points of a tensor that are read count: a tensor all of whose readers read
it at a few rows along its first axis is computed at those rows only (in a ring of
them), and reads ``e`` at the rows those points read. The loss of a bidirectional
RNN's last step is such a program: ``y[t] = h[t] + g[T - 1 - t]`` is read at
``y[T - 1]`` only (by ``dy = 2 y[T - 1]``), which reads ``h``'s last row and ``g``'s
first; ``dy``, read by ``dh[t]`` and ``dg[T - 1 - t]``, is computed where it is read
(:func:`where_read`), from ``y``'s row, and no recurrence counts it as an adjoint's
path to the other (``checkpoint_groups.adjoints``). A group is planned with them only
when it cannot be planned otherwise (``checkpoint_plan``), and, as every plan, only if
it then keeps fewer bytes than the full tape (``checkpoint_memory``).

:func:`kept` finds those tensors. Which rows of a tensor are read is proven with isl
(``checkpoint_rows.offsets`` over the points where each reader runs); every element
computed is the same C expression as in the full tape, from the same values.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional, Sequence, Tuple

from tensorexpr.ir import (INDEX_DTYPE, Binary, Compute, Const, Expr, Read, Reduce, Tensor,
                           tensor_inputs, walk)

from .checkpoint_rows import offsets, window
from .patterns import cheap

I64 = INDEX_DTYPE


@dataclass
class Kept:
    """A tensor computed before the reversals from kept rows: ``rows``, the rows of its
    first axis computed (``(lo, hi)``, IR expressions, both included; None: all of
    them); ``last`` and ``first``: recurrence uid -> how many of its last (first) rows
    it reads, itself or through the tensors it reads that are computed where they are
    read (``kept``'s ``inline``).

    >>> import tensorexpr as te
    >>> y = te.compute((5, 2), lambda t, b: te.placeholder((5, 2), name="x")[t, b], name="y")
    >>> k = Kept(y, (Const(4, I64), Const(4, I64)))
    >>> k.count(), [str(c) for c in k.where()]
    (1, ['(t >= 4)', '(t <= 4)'])
    """

    tensor: Compute
    rows: Optional[Tuple[Expr, Expr]] = None
    last: Dict[int, int] = field(default_factory=dict)
    first: Dict[int, int] = field(default_factory=dict)

    def count(self) -> Optional[int]:
        """How many rows are computed (None: all, or not a constant number)."""
        d = None if self.rows is None else _diff(self.rows[1], self.rows[0])
        return None if d is None else d + 1

    def where(self) -> Tuple[Expr, ...]:
        """The conditions on its axes of the points computed."""
        if self.rows is None:
            return ()
        ax = self.tensor.axes[0]
        return (ax >= self.rows[0], ax <= self.rows[1])


def _sub(a: Expr, k: int) -> Expr:
    if isinstance(a, Const):
        return Const(a.value - k, I64)
    return a if k == 0 else Binary("sub", a, Const(k, I64), I64)


def _rows_read(reader: Tensor, x: Compute, where, params) -> Optional[Tuple[Expr, Expr]]:
    """The rows ``(lo, hi)`` of ``x``'s first axis ``reader`` reads at its points
    ``where``, anchored at ``x``'s last row or its first (None: not constant so; ``()``:
    none)."""
    n = x.dims[0]
    rng = offsets(reader, x, _sub(n, 1), params, 0, where)
    if rng == ():
        return ()
    if rng is not None:
        return _sub(n, 1 - rng[0]), _sub(n, 1 - rng[1])
    rng = offsets(reader, x, Const(0, I64), params, 0, where)
    if rng is None or rng == ():
        return rng
    return Const(rng[0], I64), Const(rng[1], I64)


def _union(a, b):
    """The rows of both ranges, when both have the same anchor (None otherwise)."""
    if a == ():
        return b
    if b == ():
        return a
    if a is None or b is None:
        return None
    lo, hi = (_cmp(a[0], b[0]), _cmp(a[1], b[1]))
    return None if lo is None or hi is None else (lo[0], hi[1])


def _cmp(p: Expr, q: Expr):
    """``(min, max)`` of two row expressions differing by a constant (None if not)."""
    d = _diff(p, q)
    if d is None:
        return None
    return (q, p) if d > 0 else (p, q)


def _diff(p: Expr, q: Expr) -> Optional[int]:
    def split(e):
        if isinstance(e, Const):
            return None, e.value
        if isinstance(e, Binary) and e.op == "sub" and isinstance(e.b, Const):
            return e.a, -e.b.value
        return e, 0
    (a, x), (b, y) = split(p), split(q)
    return x - y if a == b else None


def _count(reader: Compute, e: Compute, where, params) -> Optional[Tuple[str, int]]:
    """``("last", m)`` or ``("first", f)``: ``reader`` (at its points ``where``) reads
    only ``e``'s last ``m`` (first ``f``) rows, no more than a step of ``e`` reads (its
    window, and the step itself): a few rows at any ``T``, never the rows along the
    steps a forward tensor reads (a GRU's ``h[t - 1] @ U``, ``checkpoint_rows``); None
    otherwise."""
    T, w = e.dims[0], window(e, params)
    few = (w or 0) + 1
    rng = offsets(reader, e, _sub(T, 1), params, 0, where)
    if rng is not None and rng != () and rng[1] <= 0 and 1 - rng[0] <= few:
        return "last", 1 - rng[0]
    rng = offsets(reader, e, Const(0, I64), params, 0, where)
    if rng is not None and rng != () and rng[0] >= 0 and rng[1] + 1 <= few:
        return "first", rng[1] + 1
    return None


def kept(order: Sequence[Tensor], outputs, params, inline=frozenset()) -> Dict[int, Kept]:
    """uid -> :class:`Kept`: the tensors of ``order`` (a program's, in order) before its
    first descending recurrence that read the checkpointed ascending recurrences only at
    their first or last rows (at the points of them that are read), directly or through
    other such tensors; ``inline``: the uids of the tensors computed where they are read
    (whose reads count as their readers').

    >>> import tensorexpr as te
    >>> x = te.placeholder((5, 2), name="x")
    >>> h = te.recurrence((5, 2), lambda h, t, b: te.tanh(x[t, b] + te.select(
    ...     t == 0, 0.0, h[t - 1, b])), name="h", checkpoints=2)
    >>> g = te.recurrence((5, 2), lambda g, t, b: te.tanh(x[4 - t, b] + te.select(
    ...     t == 0, 0.0, g[t - 1, b])), name="g", checkpoints=2)
    >>> y = te.compute((5, 2), lambda t, b: h[t, b] + g[4 - t, b], name="y")
    >>> L = te.compute((), lambda: y[4, 0] * y[4, 1], name="L")
    >>> order = [t for t in te.ir.topo_order([L]) if not isinstance(t, te.ir.Placeholder)]
    >>> k = kept(order, {L.uid}, ())[y.uid]
    >>> k.rows, k.last == {h.uid: 1}, k.first == {g.uid: 1}
    ((4, 4), True, True)
    """
    es = {t.uid: t for t in order if isinstance(t, Compute) and t.carry is not None
          and t.carry.step > 0 and t.carry.axis == 0 and t.checkpoints}
    if not es:
        return {}
    pos = {t.uid: n for n, t in enumerate(order)}
    start = min(pos[u] for u in es)
    stop = next((n for n, t in enumerate(order) if isinstance(t, Compute)
                 and t.carry is not None and t.carry.step < 0), len(order))
    # the candidates: tensors of no recurrence between, depending on a recurrence of es
    cands: Dict[int, Compute] = {}
    for t in order[start:stop]:
        if (isinstance(t, Compute) and t.carry is None and t.uid not in outputs
                and any(p.uid in es or p.uid in cands for p in tensor_inputs(t))):
            cands[t.uid] = t
    readers: Dict[int, list] = {}
    for t in order:
        for p in tensor_inputs(t):
            readers.setdefault(p.uid, []).append(t)
    # the rows of each that are read, from its readers down
    got: Dict[int, Kept] = {}
    for t in reversed(list(cands.values())):
        rows = () if t.dims else None
        for r in readers.get(t.uid, []) if t.dims else ():
            # (a reader of no such rows, or an output: at every point of it)
            rows = _union(rows, _rows_read(r, t, got[r.uid].where() if r.uid in got else (),
                                           params))
            if rows is None:
                break
        k = got[t.uid] = Kept(t, rows if rows != () else None)
        if isinstance(t.dims[0] if t.dims else None, Const) and (k.count() or 0) >= t.dims[0].value:
            k.rows = None  # (every row)
    # then what each reads, in program order: only kept rows of es, and kept tensors. An
    # inlined one reading first rows is evaluated in its readers' loops, where the reads
    # of those rows go to their store: each of its readers must be kept too, or it is not
    banned: set = set()
    while True:
        out = _reading_kept(cands, es, got, banned, inline, params)
        more = {u for u, k in out.items() if u in inline and k.first
                and any(r.uid not in out for r in readers.get(u, []))}
        if not more:
            return out
        banned |= more


def _reading_kept(cands, es, got, banned, inline, params) -> Dict[int, Kept]:
    """The tensors of ``cands`` (not ``banned``) reading only kept rows of ``es`` and
    tensors so (``got``: the rows of each that are read); see :func:`kept`."""
    out: Dict[int, Kept] = {}
    for t in cands.values():
        k = Kept(t, got[t.uid].rows)
        ok = t.uid not in banned
        for p in tensor_inputs(t) if ok else ():
            if p.uid in es:
                c = _count(t, es[p.uid], k.where(), params)
                if c is None:
                    ok = False
                    break
                side = k.last if c[0] == "last" else k.first
                side[p.uid] = max(side.get(p.uid, 0), c[1])
            elif p.uid in cands:
                if p.uid not in out:
                    ok = False
                    break
                if p.uid in inline:  # (its reads are evaluated in t's loops)
                    for side, more in ((k.last, out[p.uid].last), (k.first, out[p.uid].first)):
                        for u, m in more.items():
                            side[u] = max(side.get(u, 0), m)
        if ok and not (set(k.last) & set(k.first)):
            out[t.uid] = k
    return out


def where_read(kp: Dict[int, Kept], order: Sequence[Tensor], inline,
               rewritten) -> Tuple[set, set]:
    """``(where_read, stored)``: uids of the tensors of ``kp`` to compute where they are
    read, stored nowhere, and of those of ``kp`` to store although ``inline`` has them
    computed where they are read (``inline``: those uids, whose reads count as their
    readers'). The first are those computed at every row (a reversal reads each),
    elementwise and cheap (``patterns.cheap``), read outside any sum, from values no later
    part of the program rewrites (``rewritten``: the uids of the tensors in rings the
    reversals or rolling states overwrite), such as the tensors of ``kp`` in rings of the
    few rows read (stored, then: the second set). A turn then computes the row it reads:
    the loss of a bidirectional RNN's last step, ``dy[t] = 2 select(t == T - 1, y[T - 1],
    0)``, read by ``dh[t]`` and ``dg`` at ``T - 1 - t``, keeps no row but ``y``'s last
    (stored in its ring of one row before the reversals, which hold it to the end)
    instead of ``T`` rows of ``dy``.

    >>> import tensorexpr as te
    >>> x = te.placeholder((5, 2), name="x")
    >>> h = te.recurrence((5, 2), lambda h, t, b: te.tanh(x[t, b] + te.select(
    ...     t == 0, 0.0, h[t - 1, b])), name="h", checkpoints=2)
    >>> y = te.compute((5, 2), lambda t, b: h[t, b] * 3.0, name="y")
    >>> dy = te.compute((5, 2), lambda t, b: 2.0 * te.select(t == 4, y[4, b], 0.0), name="dy")
    >>> order = [h, y, dy]
    >>> kp = {u: k for u, k in kept(order, set(), ()).items()}
    >>> [order[0].name] + sorted(k.tensor.name for k in kp.values())
    ['h', 'dy', 'y']
    >>> [[kp[u].tensor.name for u in us] for us in where_read(kp, order, {y.uid}, {h.uid})]
    [['dy'], ['y']]
    """
    by_uid = {t.uid: t for t in order}
    memo: Dict[int, bool] = {}

    stored: set = set()

    def ringed(p: Tensor) -> bool:  # (a tensor of kp in a ring of the rows read)
        return p.uid in kp and kp[p.uid].count() is not None

    def stable(p: Tensor) -> bool:
        if p.uid not in memo:
            memo[p.uid] = False  # (no circle: the program is a DAG)
            memo[p.uid] = p.uid not in rewritten and (
                p.uid not in inline or ringed(p) or all(stable(q) for q in tensor_inputs(p)))
        return memo[p.uid]

    def store(p: Tensor) -> None:  # (the inlined ones read, down to the stored ones)
        if p.uid in inline:
            if ringed(p):
                stored.add(p.uid)
                return
            for q in tensor_inputs(p):
                store(q)

    insums: set = set()  # uids of the tensors read inside a sum somewhere
    for t in order:
        for red in walk(t.body, unique=True) if isinstance(t, Compute) else ():
            if isinstance(red, Reduce):
                insums |= {x.tensor.uid for x in walk(red, unique=True) if isinstance(x, Read)}
    out = set()
    for u, k in kp.items():
        t = by_uid.get(u)
        if (t is None or k.rows is not None or u in inline or u in insums
                or any(isinstance(x, Reduce) for x in walk(t.body, unique=True))
                or not cheap(t.body)):
            continue
        if all(stable(p) for p in tensor_inputs(t)):
            out.add(u)
            for p in tensor_inputs(t):
                store(p)
    return out, stored

"""Checkpointed recurrences along any axis: their carried axis made the first.

``codegen.checkpoint`` runs a checkpointed gradient a step at a time, and keeps the
steps of the recurrence ``e`` and of its adjoint ``de`` in rings and checkpoints of
*rows*: contiguous blocks of everything at one step, which is ``e[t]`` when the carried
axis is ``e``'s first. A recurrence along another axis (``h[b, t, j]``, a batch-first
RNN; the adjoint ``dL[0, t, b, j]`` of a loss of shape ``(1,)``, whose Jacobian-shaped
gradients lead with the output's axis) has no such rows. Rather than teach every ring,
checkpoint copy and lockstep loop of that machinery a strided row, :func:`carry_first`
rewrites the program so that it sees only recurrences whose steps are rows: each
checkpointed recurrence (``checkpoints=k``) and each adjoint of one
(``codegen.checkpoint_groups.adjoints``) whose carried axis is not its first becomes
the same tensor with its axes permuted, the carried axis first and the others in their
order (``h[b, t, j]`` is stored as ``h[t, b, j]``), and every read of it, its own
included, indexes it so permuted. Nothing else moves: the tensors run along the steps
(forward rows, per-step consumers such as ``dx[b, t, j]``) may have their step axis
anywhere already (``codegen.checkpoint_rows``), and outputs keep the caller's layout.

Only the layout changes: every element is the same expression of the same operands,
and the loops of a recurrence run its carried axis outermost in either layout; a sum
over the previous step reads the same innermost axis. The rewrite runs in every build of
a program with a checkpointed recurrence (as ``codegen.adjoint_sums`` does), so the
full tape (``ScheduleOptions(checkpoint=False)``) and both checkpointed modes lower the
same program, and their gradients stay identical bit for bit. A recurrence that is an
output keeps its layout (and its full tape: an output is never checkpointed).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Sequence, Tuple

from tensorexpr.ir import (Carry, Compute, Read, ScatterAdd, SelfRef, Tensor, fresh_uid,
                           tensor_inputs, topo_order)
from tensorexpr.transform import map_reads

from .checkpoint_groups import adjoints


def movable(order: Sequence[Tensor], outputs) -> List[Compute]:
    """The recurrences of ``order`` whose carried axis :func:`carry_first` moves first:
    checkpointed ascending ones and their adjoints, carried along another axis, none an
    output (``outputs``: uids).

    >>> import tensorexpr as te
    >>> x = te.placeholder((2, 5), name="x")
    >>> h = te.recurrence((2, 5), lambda h, b, t: te.tanh(x[b, t] + te.select(
    ...     t > 0, h[b, t - 1], 0.0)), name="h", checkpoints=2)
    >>> L = te.compute((), lambda: h[0, 4] + h[1, 4], name="L")
    >>> (dx,) = te.differentiate(L, [x])
    >>> [t.name for t in movable(te.ir.topo_order([dx]), {dx.uid})]
    ['h', 'dh']
    """
    ck = [t for t in order if isinstance(t, Compute) and t.carry is not None
          and t.checkpoints is not None and t.carry.step > 0]
    if not ck:
        return []
    readers: Dict[int, List[Tensor]] = {}
    for x in order:
        for p in tensor_inputs(x):
            readers.setdefault(p.uid, []).append(x)
    found = {t.uid: t for t in ck + adjoints(ck, readers)}
    return [t for t in order if t.uid in found and t.carry.axis != 0 and t.uid not in outputs]


def _perm(t: Compute) -> Tuple[int, ...]:
    """The old position of each new axis: the carried one, then the others in order."""
    c = t.carry.axis
    return (c,) + tuple(k for k in range(len(t.axes)) if k != c)


def carry_first(outputs) -> Tuple[Dict[int, Tensor], List[Tuple[Compute, Compute]]]:
    """Every tensor reachable from ``outputs`` by uid (each rewritten one keeps its uid,
    but a moved recurrence, of another shape, has a fresh one), the recurrences of
    :func:`movable` stored with their carried axis first and every read of them
    permuted so; and ``(new, old)`` for each recurrence moved.

    >>> import tensorexpr as te
    >>> x = te.placeholder((2, 5), name="x")
    >>> h = te.recurrence((2, 5), lambda h, b, t: x[b, t] + te.select(
    ...     t > 0, h[b, t - 1], 0.0), name="h", checkpoints=2)
    >>> y = te.compute((2,), lambda b: h[b, 4] * 2.0, name="y")
    >>> done, moved = carry_first([y])
    >>> print(moved[0][0])
    h[t, b] = x[b, t] + select(t > 0, h[t - 1, b], 0.0)    for t in [0, 5), b in [0, 2)    float32    (recurrence: t runs ascending)
    >>> print(done[y.uid])
    y[b] = h[4, b] * 2.0    for b in [0, 2)    float32
    """
    order = topo_order(list(outputs))
    move = {t.uid for t in movable(order, {t.uid for t in outputs})}
    done: Dict[int, Tensor] = {}
    # uid of an old tensor (or self handle) -> (its new version, the permutation)
    perms: Dict[int, Tuple[Tensor, Tuple[int, ...]]] = {}
    moved: List[Tuple[Compute, Compute]] = []

    def fix(r: Read):
        u = r.tensor.uid
        if u in perms:
            new, p = perms[u]
            return Read(new, tuple(r.indices[k] for k in p), r.dtype)
        if u in done and done[u] is not r.tensor:
            return Read(done[u], r.indices, r.dtype)
        return r

    for t in order:
        old = t
        if isinstance(t, Compute) and t.uid in move:
            p = _perm(t)
            me = SelfRef(t.self_ref.name, tuple(t.dims[k] for k in p), t.dtype, fresh_uid(),
                         t.self_ref.origin)
            perms[t.self_ref.uid] = (me, p)
            t = replace(t, dims=me.dims, uid=fresh_uid(), axes=tuple(t.axes[k] for k in p),
                        body=map_reads(t.body, fix), self_ref=me,
                        carry=Carry(0, t.carry.step))
            perms[old.uid] = (t, p)
            moved.append((t, old))
        elif isinstance(t, Compute) and t.body is not None:
            body = map_reads(t.body, fix)
            t = t if body is t.body else replace(t, body=body)
        elif isinstance(t, ScatterAdd):
            t = replace(t, indices=tuple(map_reads(i, fix) for i in t.indices),
                        value=map_reads(t.value, fix),
                        where=None if t.where is None else map_reads(t.where, fix))
        done[old.uid] = t
    return done, moved

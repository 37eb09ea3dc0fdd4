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
included, indexes it so permuted; so does a tensor between two such recurrences read
at the lower one's step (a GRU layer's input projections ``h1[b, t] @ Wz2``, run in
lockstep with the layers by ``codegen.checkpoint_groups``, a row of each per step:
:func:`between`), which is why this runs after ``passes.hoist`` makes them tensors.
Nothing else moves: the tensors run along the steps (forward rows, per-step consumers
such as ``dx[b, t, j]``) may have their step axis anywhere already
(``codegen.checkpoint_rows``), and outputs keep the caller's layout.

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
from typing import Dict, List, Optional, Sequence, Tuple

from tensorexpr.ir import (Carry, Compute, Read, SelfRef, Tensor, fresh_uid,
                           tensor_inputs, topo_order, walk)
from tensorexpr.transform import map_reads, map_tensor_reads

from .checkpoint_groups import adjoints


def moves(order: Sequence[Tensor], outputs) -> Dict[int, int]:
    """uid -> the axis :func:`carry_first` moves first, for the tensors of ``order`` it
    moves: the checkpointed ascending recurrences and their adjoints carried along
    another axis (the carried one), and the tensors between two checkpointed
    recurrences that read the lower one a step at a time along another axis (that one:
    :func:`between`); none an output (``outputs``: uids).

    >>> import tensorexpr as te
    >>> x = te.placeholder((2, 5), name="x")
    >>> h = te.recurrence((2, 5), lambda h, b, t: te.tanh(x[b, t] + te.select(
    ...     t > 0, h[b, t - 1], 0.0)), name="h", checkpoints=2)
    >>> L = te.compute((), lambda: h[0, 4] + h[1, 4], name="L")
    >>> (dx,) = te.differentiate(L, [x])
    >>> order = te.ir.topo_order([dx])
    >>> [(t.name, a) for t in order for u, a in moves(order, {dx.uid}).items() if u == t.uid]
    [('h', 1), ('dh', 1)]
    """
    ck = [t for t in order if isinstance(t, Compute) and t.carry is not None
          and t.checkpoints is not None and t.carry.step > 0]
    if not ck:
        return {}
    readers: Dict[int, List[Tensor]] = {}
    for x in order:
        for p in tensor_inputs(x):
            readers.setdefault(p.uid, []).append(x)
    found = {t.uid for t in ck + adjoints(ck, readers)}
    out = {t.uid: t.carry.axis for t in order if t.uid in found and t.carry.axis != 0}
    for x in order:
        a = between(x, ck, readers)
        if a is not None:
            out[x.uid] = a
    return {u: a for u, a in out.items() if u not in outputs}


def between(x: Tensor, ck: Sequence[Compute], readers) -> Optional[int]:
    """The axis along which ``x``, a tensor between two of the checkpointed recurrences
    ``ck`` (a layer's input projections ``h1[b, t] @ Wz2``, made a tensor of its own by
    ``passes.hoist``, read by the next layer), reads the lower one's steps, if not its
    first (else None): ``codegen.checkpoint_groups`` runs such a tensor in lockstep with
    the layers, a row of each per step. ``readers``: uid -> the tensors reading it.

    >>> import tensorexpr as te
    >>> x = te.placeholder((2, 5), name="x")
    >>> h = te.recurrence((2, 5), lambda h, b, t: te.tanh(x[b, t] + te.select(
    ...     t > 0, h[b, t - 1], 0.0)), name="h", checkpoints=2)
    >>> p = te.compute((2, 5), lambda b, t: h[b, t] * 3.0, name="p")
    >>> g = te.recurrence((2, 5), lambda g, b, t: te.tanh(p[b, t] + te.select(
    ...     t > 0, g[b, t - 1], 0.0)), name="g", checkpoints=2)
    >>> between(p, [h, g], {p.uid: [g]})
    1
    """
    if not isinstance(x, Compute) or x.carry is not None or x.body is None:
        return None
    uids = {t.uid for t in ck}
    if not any(r.uid in uids for r in readers.get(x.uid, [])):
        return None
    got = set()
    for r in walk(x.body, unique=True):
        if isinstance(r, Read) and r.tensor.uid in uids:
            # (read at its step exactly, the lockstep's shape; group() checks the rest)
            ix = r.indices[r.tensor.carry.axis]
            got.add(next((k for k, ax in enumerate(x.axes) if ix is ax), None))
    return got.pop() if len(got) == 1 and not got & {None, 0} else None


def _perm(t: Compute, c: int) -> Tuple[int, ...]:
    """The old position of each new axis: ``c`` (the steps'), then the others in order."""
    return (c,) + tuple(k for k in range(len(t.axes)) if k != c)


def carry_first(outputs) -> Tuple[Dict[int, Tensor], List[Tuple[Compute, Compute]]]:
    """Every tensor reachable from ``outputs`` by uid (each rewritten one keeps its uid,
    but a moved recurrence, of another shape, has a fresh one), the recurrences of
    :func:`moves` stored with the axis it gives first and every read of them permuted
    so; and ``(new, old)`` for each recurrence moved.

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
    move = moves(order, {t.uid for t in outputs})
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
        if isinstance(t, Compute) and t.uid in move and t.carry is None:
            p = _perm(t, move[t.uid])
            t = replace(t, dims=tuple(t.dims[k] for k in p), uid=fresh_uid(),
                        axes=tuple(t.axes[k] for k in p), body=map_reads(t.body, fix))
            perms[old.uid] = (t, p)
            moved.append((t, old))
        elif isinstance(t, Compute) and t.uid in move:
            p = _perm(t, move[t.uid])
            me = SelfRef(t.self_ref.name, tuple(t.dims[k] for k in p), t.dtype, fresh_uid(),
                         t.self_ref.origin)
            perms[t.self_ref.uid] = (me, p)
            t = replace(t, dims=me.dims, uid=fresh_uid(), axes=tuple(t.axes[k] for k in p),
                        body=map_reads(t.body, fix), self_ref=me,
                        carry=Carry(0, t.carry.step))
            perms[old.uid] = (t, p)
            moved.append((t, old))
        else:
            t = map_tensor_reads(t, fix)
        done[old.uid] = t
    return done, moved

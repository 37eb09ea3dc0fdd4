"""Which recurrences a checkpointed gradient runs together, and their adjoints.

``codegen.checkpoint`` checkpoints recurrences by *groups* (several independent ones
in a program are each reversed by their own plan, one after the other:
``codegen.checkpoint_plan``). A group is a checkpointed ascending recurrence ``e`` and
the later ones of the same steps that read the group at their own step or earlier (the
layers of a stacked RNN; a GRU layer on an RNN layer), with the tensors between them
that read the group a step at a time (a layer's input projections ``h1 @ Wz2``, which
``passes.hoist`` makes tensors of their own). They run in lockstep: a forward step
computes the row of each, in program order; a checkpoint holds the state of each; the
reversal runs their adjoints (:func:`adjoints`) a step (a segment) at a time.
:func:`group` finds the candidates; ``checkpoint`` keeps the longest prefix of them
whose gradient has the supported shape (``codegen.checkpoint_rows.classify``), down to
``e`` alone.
"""
from __future__ import annotations

from typing import List, Sequence

from tensorexpr.ir import Compute, same, tensor_inputs

from .checkpoint_rows import offsets, reads, window


def group(e: Compute, order, outputs, params) -> List[Compute]:
    """The recurrences checkpointed with ``e``, in lockstep: ``e`` and the later ascending
    recurrences with checkpoints, of the same steps along their first axis, that read
    the group's members (if at all) at steps no later than their own, up to the first
    other tensor depending on a member (the group's forward steps run where its last
    member is in the program). Layers of a stacked RNN are one group. Tensors between
    two recurrences that read members so, the first axis their step (a layer's input
    projections ``h @ Wz``), are members too: a step computes their row in turn.

    >>> import tensorexpr as te
    >>> x = te.placeholder((6, 2), name="x")
    >>> h = te.recurrence((6, 2), lambda h, t, r: te.tanh(x[t, r] + te.select(
    ...     t == 0, 0.0, h[t - 1, r])), name="h", checkpoints=2)
    >>> g = te.recurrence((6, 2), lambda g, t, r: te.tanh(h[t, r] + te.select(
    ...     t == 0, 0.0, g[t - 1, r])), name="g", checkpoints=2)
    >>> [t.name for t in group(h, list(te.ir.topo_order([g]))[1:], set(), ())]
    ['h', 'g']
    """
    es, tainted = [e], {e.uid}
    T = e.dims[0]
    for x in order[order.index(e) + 1:]:
        ins = {p.uid for p in tensor_inputs(x)}
        if (isinstance(x, Compute) and x.dims and same(x.dims[0], T) and x.uid not in outputs
                and (x.carry is None and ins & tainted or x.carry is not None
                     and x.checkpoints and x.carry.step > 0 and x.carry.axis == 0
                     and window(x, params) is not None)
                and not (ins & (tainted - {y.uid for y in es}))
                and all(_no_later(x, y, params) for y in es)):
            es.append(x)
            tainted.add(x.uid)
        elif ins & tainted:
            break
    while es[-1].carry is None:  # (read by no later recurrence: a forward row at most)
        es.pop()
    return es


def _no_later(x: Compute, y: Compute, params) -> bool:
    """Does ``x`` read ``y`` (if at all) within a constant distance of its step, at most 0?"""
    if not reads(x, y):
        return True
    rng = offsets(x, y, x.axes[0], params, 0)
    return rng is not None and (rng == () or rng[1] <= 0)


def adjoints(es: Sequence[Compute], readers, kept=frozenset()) -> List[Compute]:
    """The descending recurrences reading ``es``, or reading them only through tensors
    that are no recurrences (a GRU's forward sums and hoisted gates); ``readers``: uid
    -> the tensors reading it. ``kept``: uids of tensors computed before the reversals
    from the rows the plans keep (``codegen.checkpoint_kept``): a recurrence reached
    only through them is no adjoint of ``es`` when another is reached otherwise (the
    seed ``dy`` of a bidirectional RNN's last step, read by both layers' adjoints).

    >>> import tensorexpr as te
    >>> u = te.placeholder((6,), name="u")
    >>> e = te.recurrence((6,), lambda e, t: te.sin(u[t] + te.select(t > 0, e[t - 1], 0.0)),
    ...                   name="e")
    >>> L = te.compute((), lambda: e[5], name="L")
    >>> order = list(te.ir.topo_order(te.differentiate(L, [u])))
    >>> readers = {}
    >>> for x in order[1:]:
    ...     for p in te.ir.tensor_inputs(x):
    ...         readers.setdefault(p.uid, []).append(x)
    >>> [d.name for d in adjoints([e], readers)]
    ['de']
    """
    for stop in (kept, frozenset()):
        via, des, todo = {e.uid for e in es}, [], list(es)
        while todo:
            for x in readers.get(todo.pop().uid, []):
                if not isinstance(x, Compute) or x.uid in via or x.uid in stop:
                    continue
                if x.carry is None:
                    via.add(x.uid)
                    todo.append(x)
                elif x.carry.step < 0 and x not in des:
                    des.append(x)
        if des:
            return des
    return des

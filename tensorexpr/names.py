"""Tensor names apart: one name, one tensor, within a program.

Names are for people: a schedule line (``dE: scatter-rows``), ``f.schedule["dE"]``,
an ``out=`` message and the comments of the generated C name tensors, and two
tensors of one name make all of these ambiguous. Separate calls of
``te.differentiate`` each name their gradients alike (``dE`` twice; an LSTM's
``s_sum`` from four gates), so ``te.build`` gives every computed tensor whose name an
earlier one of the program already holds the first free ``name_2``, ``name_3``...
(:func:`names_apart`). Placeholders keep theirs: they are the function's
parameters. Only names change: uids, bodies and so the generated code stay.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Sequence, Tuple

from .ir import Compute, Placeholder, Read, ScatterAdd, Tensor, tensor_inputs, topo_order
from .transform import map_tensor_reads


def free_name(name: str, taken) -> str:
    """``name`` if ``taken`` does not hold it, else the first ``name_k`` (k = 2, 3...) it
    does not hold.

    >>> free_name("dE", {"dE", "dE_2"}), free_name("dW", {"dE"})
    ('dE_3', 'dW')
    """
    if name not in taken:
        return name
    k = 2
    while f"{name}_{k}" in taken:
        k += 1
    return f"{name}_{k}"


def names_apart(outputs: Sequence[Tensor], inputs: Sequence[Tensor]
                ) -> Tuple[List[Tensor], List[Tensor]]:
    """``(outputs, inputs)`` with every computed tensor named apart from the tensors
    before it in topological order (placeholders first): the second ``dE`` of a program
    is ``dE_2``. A renamed tensor keeps its uid, and its readers read it; tensors
    nothing renamed reaches are returned unchanged, so a program whose names are
    distinct is the caller's own graph.

    >>> import tensorexpr as te
    >>> X = te.placeholder((3,), name="X")
    >>> A = te.compute((3,), lambda i: X[i] * 2.0, name="Y")
    >>> B = te.compute((3,), lambda i: A[i] + 1.0, name="Y")
    >>> (a, b), _ = names_apart([A, B], [X])
    >>> a is A, b.name, b.uid == B.uid, str(b.body)
    (True, 'Y_2', True, '(Y[i] + 1.0)')
    """
    order = topo_order(list(outputs))
    # names held so far (placeholders first), and every name of the program: a new
    # name is neither
    taken = {t.name for t in order if isinstance(t, Placeholder)} | \
        {t.name for t in inputs if isinstance(t, Placeholder)}
    used = taken | {t.name for t in order} | {t.name for t in inputs}
    rename: Dict[int, str] = {}
    for t in order:
        if isinstance(t, Placeholder):
            continue
        if t.name in taken:
            rename[t.uid] = free_name(t.name, used)
            used.add(rename[t.uid])
        taken.add(rename.get(t.uid, t.name))
    if not rename:
        return list(outputs), list(inputs)
    new: Dict[int, Tensor] = {}

    def redirect(r: Read):
        t = new.get(r.tensor.uid)
        return r if t is None or t is r.tensor else Read(t, r.indices, r.dtype)

    for t in order:
        if t.uid not in rename and not any(p.uid in new for p in tensor_inputs(t)):
            continue
        if not isinstance(t, (Compute, ScatterAdd)):
            continue
        name = rename.get(t.uid, t.name)
        if isinstance(t, Compute) and t.self_ref is not None and name != t.name:
            # a recurrence reads itself by its self-reference, named alike
            new[t.self_ref.uid] = dataclasses.replace(t.self_ref, name=name)
        u = map_tensor_reads(t, redirect)
        if name != u.name:
            u = dataclasses.replace(u, name=name)
            if isinstance(u, Compute) and u.self_ref is not None:
                u = dataclasses.replace(u, self_ref=new[t.self_ref.uid])
        new[t.uid] = u
    return [new.get(t.uid, t) for t in outputs], list(inputs)


__all__ = ["free_name", "names_apart"]

"""Transposed copies of the inputs a recurrence reads across its vector lanes.

A recurrence carried along an axis other than its last runs its last axis ``r``
innermost, in vector lanes (``loops``, ``interchange``): ``Y[t, r] = max(Y[t - 1, r],
X[r, t])`` stores whole vectors of ``Y``. An input read with ``r`` in another
dimension than its last, like ``X[r, t]``, is then a gather: each lane reads its own
line of ``X``, lines a row of ``X`` apart. With rows ``2**k * 64`` bytes long those
lines all fall in a few cache sets, and a step evicts what the next step reads
(each line holds 16 steps of a lane): a running maximum of a 512 x 2048 ``X`` stored
``(T, R)`` took 3 ms forward and 40-50 ms with its gradient (whose adjoint reads
``X[r, t + 1]`` likewise), 0.15 ms and 1-1.5 ms with ``X`` given as ``(T, R)``.

:func:`rewrite` gives such a recurrence a transposed copy of the input
(``copies.transposed``: ``r``'s dimension moved last, a blocked transpose made once,
before everything that reads it) and reads that instead, in every build of the
program (a checkpointed one too): each element is computed by the same expression
from the same values. A copy is made only when

* the recurrence's carried axis is not its last (its last axis is the vector lanes),
* the read is of an input (a placeholder) with static sizes, at least
  :data:`MIN_BYTES`, and the lanes' dimension of it is at least a cache line apart
  (:data:`LINE`) per element: narrower rows are read a vector at a time anyway;
* no recurrence of the program asks for checkpoints: such a program asked for its
  scratch memory to be bounded by them, and a copy is as large as its input;
* the read indexes that dimension with the last axis itself, and no other dimension
  with it, and no index reads data (a data-dependent index is checked at run time,
  and its error must name the tensor the user wrote). One copy serves every read of
  the same input and dimension (the forward's and the adjoint's).

>>> import tensorexpr as te
>>> X = te.placeholder((256, 512), name="X")
>>> Y = te.recurrence((512, 256), lambda h, t, r: te.select(t > 0,
...     te.maximum(h[t - 1, r], X[r, t]), X[r, t]), name="Y")
>>> done, made = rewrite([Y])
>>> [c.name for c in made], print(done[Y.uid])
Y[t, r] = select(t > 0, max(Y[t - 1, r], X_T[t, r]), X_T[t, r])    for t in [0, 512), r in [0, 256)    float32    (recurrence: t runs ascending)
(['X_T'], None)
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from tensorexpr.ir import Axis, Compute, Placeholder, Read, Tensor, reads, topo_order, walk
from tensorexpr.transform import const_value, map_tensor_reads

from .copies import moved_read, transposed

#: a cache line: lanes reading elements this far apart or more each read their own line
LINE = 64

#: inputs smaller than this stay where they are (they stay cached whatever the order)
MIN_BYTES = 64 * 1024


def _uses(e, ax: Axis) -> bool:
    return any(isinstance(x, Axis) and x.uid == ax.uid for x in walk(e, unique=True))


def moved_dim(t: Compute, r: Read) -> Optional[int]:
    """The dimension of ``r``'s input to move last so that ``t``'s lanes read it along
    its rows, or None (see the module docstring for when).

    >>> import tensorexpr as te
    >>> X = te.placeholder((256, 512), name="X")
    >>> Y = te.recurrence((512, 256), lambda h, t, r: te.select(t > 0, h[t - 1, r]
    ...     + X[r, t], X[r, t]), name="Y")
    >>> moved_dim(Y, next(r for r in reads(Y.body) if r.tensor is X))
    0
    """
    x = r.tensor
    if not isinstance(x, Placeholder) or t.carry is None or t.carry.axis == t.ndim - 1:
        return None
    sizes = [const_value(d) for d in x.dims]
    if any(n is None for n in sizes) or x.ndim < 2:
        return None
    item = np.dtype(x.dtype).itemsize
    if int(np.prod(sizes)) * item < MIN_BYTES:
        return None
    if any(isinstance(x, Read) for i in r.indices for x in walk(i, unique=True)):
        return None  # a data-dependent index is checked at run time: its error names x
    lane = t.axes[-1]
    dims = [k for k, i in enumerate(r.indices) if _uses(i, lane)]
    if len(dims) != 1 or dims[0] == x.ndim - 1:
        return None
    p = dims[0]
    if not (isinstance(r.indices[p], Axis) and r.indices[p].uid == lane.uid):
        return None
    if int(np.prod(sizes[p + 1:])) * item < LINE:
        return None
    return p


def rewrite(outputs: Sequence[Tensor]) -> Tuple[Dict[int, Tensor], List[Compute]]:
    """Every tensor reachable from ``outputs`` by uid (a rewritten one keeps its uid),
    each recurrence reading the transposed copies :func:`moved_dim` asks for instead of
    the inputs, and the copies made (one per input and dimension)."""
    done: Dict[int, Tensor] = {}
    made: Dict[Tuple[int, int], Compute] = {}
    order = topo_order(list(outputs))
    if any(isinstance(t, Compute) and t.checkpoints is not None for t in order):
        return {t.uid: t for t in order}, []  # memory bounded by the checkpoints: no copies
    if not any(isinstance(t, Compute) and t.carry is not None and t.body is not None and
               any(moved_dim(t, r) is not None for r in reads(t.body)) for t in order):
        return {t.uid: t for t in order}, []

    def fix(r: Read):
        u = r.tensor.uid
        if u in done and done[u] is not r.tensor:
            return Read(done[u], r.indices, r.dtype)
        return r

    for t in order:
        old = t
        t = map_tensor_reads(t, fix)
        if isinstance(t, Compute) and t.carry is not None and t.body is not None:
            def move(r: Read, t=t):
                p = moved_dim(t, r)
                if p is None:
                    return r
                key = (r.tensor.uid, p)
                if key not in made:
                    made[key] = transposed(r.tensor, p)
                return moved_read(r, p, made[key])
            t = map_tensor_reads(t, move)
        done[old.uid] = t
    return done, list(made.values())

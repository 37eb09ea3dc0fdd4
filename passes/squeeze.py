"""Unit axes of a contraction: its sum is computed over the other axes.

The weight gradient of a 1x1 convolution is ``dW[f, c, 0, 0] = sum_{n, y, x} H[n, f, y, x]
* X[n, c, y, x]``: its innermost axis has one point, so no strategy of the table can
tile it along that axis (``rows`` and ``jam`` run lanes along the innermost axis) and
it ran as 4096 dot products of 8192 terms each, 4x a matrix product of the same
work. A computed tensor whose body is a reduction and whose innermost axis has one
point is computed instead as ``S`` over its axes of more than one point (``S[f, c]``,
the same sum, each unit axis at its one value), and the tensor reads it there
(``dW[f, c, y, x] = S[f, c]``: elementwise, a copy of ``S``'s size). Values are
unchanged: ``S`` adds the same terms.

>>> import tensorexpr as te
>>> H = te.placeholder((8, 16, 4, 4), name="H"); X = te.placeholder((8, 32, 4, 4), name="X")
>>> n, y, x = te.reduce_axis(8, "n"), te.reduce_axis(4, "y"), te.reduce_axis(4, "x")
>>> dW = te.compute((16, 32, 1, 1), lambda f, c, a, b: te.sum(
...     H[n, f, y, x] * X[n, c, y, x], axis=[n, y, x]), name="dW")
>>> done, made = squeeze([dW])
>>> print(made[0][0]); print(done[dW.uid])
dW_sq[f, c] = sum_{n in [0, 8), y in [0, 4), x in [0, 4)} (H[n, f, y, x] * X[n, c, y, x])    for f in [0, 16), c in [0, 32)    float32
dW[f, c, a, b] = dW_sq[f, c]    for f in [0, 16), c in [0, 32), a in [0, 1), b in [0, 1)    float32
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Tuple

from tensorexpr.ir import Axis, Compute, Read, Reduce, Tensor, fresh_uid, topo_order
from tensorexpr.transform import const_value, substitute

from .extract import redirect


def _unit(a) -> bool:
    lo, hi = const_value(a.lo), const_value(a.hi)
    return lo is not None and hi is not None and hi - lo == 1


def squeezable(t: Tensor) -> bool:
    """Is ``t`` a computed reduction (not a recurrence) whose innermost axis has one
    point, with some axis of more than one?

    >>> import tensorexpr as te
    >>> X = te.placeholder((4, 4), name="X"); k = te.reduce_axis(4, "k")
    >>> squeezable(te.compute((4, 1), lambda i, j: te.sum(X[i, k], axis=k)))
    True
    >>> squeezable(te.compute((4, 1), lambda i, j: X[i, j] * 2.0))
    False
    """
    return (isinstance(t, Compute) and t.body is not None and t.carry is None
            and t.self_ref is None and isinstance(t.body, Reduce) and len(t.axes) >= 2
            and _unit(t.axes[-1]) and not all(_unit(a) for a in t.axes))


def squeeze(outputs) -> Tuple[Dict[int, Tensor], List[Tuple[Compute, Tensor]]]:
    """Every tensor reachable from ``outputs``, those :func:`squeezable` reading their
    sum over the other axes, keyed by uid (a rewritten tensor keeps its uid), and
    ``(new tensor, the tensor it was made for)`` for each."""
    done: Dict[int, Tensor] = {}
    made: List[Tuple[Compute, Tensor]] = []
    for t in topo_order(list(outputs)):
        t = redirect(t, done)
        if squeezable(t):
            kept = [a for a in t.axes if not _unit(a)]
            fresh = [Axis(a.name, a.lo, a.hi, fresh_uid()) for a in kept]
            mapping = {a: a.lo for a in t.axes if _unit(a)}
            mapping.update(zip(kept, fresh))
            s = Compute(f"{t.name}_sq", tuple(a.hi for a in kept), t.dtype, fresh_uid(),
                        t.origin, axes=tuple(fresh), body=substitute(t.body, mapping))
            made.append((s, t))
            t = replace(t, body=Read(s, tuple(kept), t.dtype))
        done[t.uid] = t
    return done, made

"""Lowerings shared by the tensors of a program that are alike but for their names.

An LSTM's four gates are one computation over other weights: ``x @ Wi``, ``x @ Wf``...,
their sums over the last step ``h[t - 1] @ Ui``..., their weight gradients. Each is
lowered to the same loop nest but for the buffers it reads and stores and the names
of the variables it allocates. :func:`shape` describes a row sum
(``RowSumLowering.compute_rows``) with every tensor replaced by its *slot* (numbered
in order of first appearance, by buffer) and everything the lowering reads of it;
the first tensor of a shape is lowered, the others replay its lowering
(``codegen.replay``: their own fresh names, their own buffers in its slots, its notes
made again to their choice).

The shape holds whatever the lowering reads, so that two tensors of one shape are
lowered to the same nest, buffer for buffer:

* every node of the body and of the axes' bounds, as a DAG (a node met again is a
  reference to its first appearance: the lowering computes a sub-expression used
  twice into a local once); constants by type and ``repr`` (``0.0`` and ``-0.0``
  differ), axes by bounds and dtype, each numbered by uid, not by name: a name is
  another slot (a loop's note shows it: the replay renames it in the prose,
  ``codegen.replay``), so the gates' projections ``sum_{di} x[t, b, di] * Wi[di, j]``
  and ``sum_{df} ...`` share one lowering;
* per tensor: its slot, kind, dtype and dimensions, and what the lowerer keeps of it
  (``Lowerer.dims``, ``shifts``, ``rings``; inlined, then its axes and body too; the
  width of a zero-padded copy, ``codegen.copies``; run by steps, added a step at a
  time; its buffer's dtype and whether it is an input); a tensor with a padded-copy
  plan (``Lowerer.padded``) has no shape, nor a max or min (its lowering marks the
  sums under it as compared);
* per reduction, whether its value is compared (``Lowerer.compared``: added in the
  order written);
* size variables by the C variable the lowerer gives them (a slot too: a sum over an
  adjoint's steps has its own step variable, ``Lowerer.adjoint_step``), and whether each
  is an isl parameter; the parameters in order.

A lowering the replay could not repeat is lowered again each time (``codegen.replay``:
one that records an error site or a choice, or names a buffer outside its slots or a
tensor in its comments). ``ENABLED = False`` lowers every tensor again (the tests
compare the C of both ways).

>>> import tensorexpr as te
>>> from codegen.lower import Lowerer
>>> from codegen.signature import Signature
>>> x = te.placeholder((8, 16), name="x")
>>> W1, W2 = (te.placeholder((16, 16), name=n) for n in ("W1", "W2"))
>>> def proj(W, n):
...     k = te.reduce_axis(16, name="k")
...     return te.compute((8, 16), lambda i, j: te.sum(x[i, k] * W[k, j], axis=k), name=n)
>>> a, b = proj(W1, "a"), proj(W2, "b")
>>> c = te.compute((8, 16), lambda i, j: a[i, j] + b[i, j], name="c")
>>> lw = Lowerer(Signature([c], [x, W1, W2]))
>>> (sa, slots_a, axes_a), (sb, slots_b, _) = shape(lw, a, a.body), shape(lw, b, b.body)
>>> sa == sb, slots_a, slots_b, axes_a
(True, ('b0', 'b1', 'b3'), ('b0', 'b2', 'b4'), ('i', 'j', 'k'))
"""
from __future__ import annotations

from dataclasses import fields
from typing import Dict, Optional, Tuple

from tensorexpr.ir import Axis, Const, Node, Reduce, SizeVar, Tensor

from .copies import padded_width

#: False: no two tensors share a lowering
ENABLED = True

#: the most nodes :func:`shape` walks (a larger body is lowered as itself)
LARGEST = 20000

_FIELDS: Dict[type, Tuple[str, ...]] = {}


class _NoShape(Exception):
    pass


def shape(lw, t, red) -> Optional[Tuple[tuple, Tuple[str, ...], Tuple[str, ...]]]:
    """``(shape, slots, axes)``: the row sum ``t`` (its reduction ``red``) as lowerer ``lw``
    would lower it, with its tensors, size variables and axes' names as slots (see the
    module docstring), the buffer or C variable of each slot and the name of each axis
    (in order of first appearance); None when it has none (``ENABLED`` off, a
    padded-copy plan, a body too large)."""
    if not ENABLED:
        return None
    slots: Dict[str, int] = {}
    tensors: Dict[int, int] = {}
    axes: Dict[int, int] = {}
    names: list = []
    nodes: Dict[int, int] = {}
    budget = [LARGEST]

    def tensor(x: Tensor):
        seen = tensors.get(x.uid)
        if seen is not None:
            return ("tensor", seen)
        b = lw.buf.get(x.uid)
        if b is None or x.uid in lw.padded:
            raise _NoShape
        tensors[x.uid] = len(tensors)
        slot = slots.setdefault(b.name, len(slots))
        inline = x.uid in lw.inline
        return ("tensor", slot, type(x).__name__, x.dtype, of(x.dims), b.dtype, b.readonly,
                of(lw.dims.get(x.uid)), lw.shifts.get(x.uid), of(lw.rings.get(x.uid)),
                padded_width(x), x.uid in lw.steps, x.uid in lw.adjoint_sums, inline,
                (of(x.axes), of(x.body)) if inline else None)

    def of(x):
        budget[0] -= 1
        if budget[0] < 0:
            raise _NoShape
        cls = type(x)
        if cls is tuple or cls is list:
            return (cls.__name__,) + tuple(of(y) for y in x)
        if x is None or cls in (int, bool, str):
            return (cls.__name__, x)
        if cls is float:
            return ("float", repr(x))
        if isinstance(x, Tensor):
            return tensor(x)
        if not isinstance(x, Node):
            raise _NoShape
        if cls is SizeVar:  # (by the C variable it is: a step's differs per sum)
            v = lw.sizes.get(x.name)
            return ("size", x.name if v is None else slots.setdefault(v.name, len(slots)),
                    x.dtype, x.name in lw.params)
        if cls is Axis:
            k = axes.get(x.uid)
            if k is not None:
                return ("axis", k)
            axes[x.uid] = len(axes)
            names.append(x.name)
            return ("axis", len(axes) - 1, x.dtype, of(x.lo), of(x.hi))
        k = nodes.get(id(x))
        if k is not None:  # (the same node again: a DAG's shared sub-expression)
            return ("node", k)
        nodes[id(x)] = len(nodes)
        if cls is Const:
            return ("const", type(x.value).__name__, repr(x.value), x.dtype)
        fs = _FIELDS.get(cls)
        if fs is None:
            fs = _FIELDS[cls] = tuple(f.name for f in fields(x))
        if cls is Reduce and x.op in ("max", "min"):
            raise _NoShape  # (its lowering marks the sums under it compared: not replayed)
        out = (cls.__name__,) + tuple(of(getattr(x, f)) for f in fs)
        return out + ((id(x) in lw.compared,) if cls is Reduce else ())

    try:
        params = tuple(of(SizeVar(n)) for n in lw.params)
        key = (params, of(t.axes), of(t.body), of(red), tensor(t), t.carry is None)
    except (_NoShape, RecursionError):
        return None
    finally:  # (of and tensor call themselves: a cycle the collector alone would free)
        of = tensor = None  # noqa: F811, F841
    # (a node's id is only a key while the node lives: the shape keeps none of them,
    # and t, red and the lowerer keep every node walked alive until it is made)
    return key, tuple(sorted(slots, key=slots.get)), tuple(names)

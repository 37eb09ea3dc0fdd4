"""Extraction: a sub-expression of a tensor's body becomes a tensor of its own.

The new tensor ranges over the box of the sub-expression's free axes, each
shifted to start at 0, and the body reads it at each axis minus its start.
:mod:`passes.normalize` extracts reductions this way (a reduction inside an
expression becomes its own tensor), :mod:`passes.hoist` costly sub-expressions
that do not use every axis they are evaluated under.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, Tuple

from tensorexpr.ir import (Axis, Binary, Compute, Const, Expr, INDEX_DTYPE, Read, Reduce,
                           ScatterAdd, SizeVar, Tensor, fresh_uid, walk)
from tensorexpr.transform import free_axes, map_reads, substitute


def has_reduce(e: Expr) -> bool:
    """Does ``e`` hold a reduction anywhere?

    >>> import tensorexpr as te
    >>> k = te.reduce_axis(3, name="k")
    >>> has_reduce(te.sum(k * 1.0, axis=k) + 1.0), has_reduce(k + 1)
    (True, False)
    """
    return any(isinstance(x, Reduce) for x in walk(e, unique=True))


def is_canonical(t: Tensor) -> bool:
    """Elementwise, or one reduction at the top whose body and where are elementwise
    (what :func:`passes.normalize.normalize` leaves as it is; here, apart from isl).

    >>> import tensorexpr as te
    >>> A = te.placeholder((4, 8), name="A")
    >>> k = te.reduce_axis(8, name="k")
    >>> is_canonical(te.compute((4,), lambda i: te.sum(A[i, k], axis=k)))
    True
    >>> is_canonical(te.compute((4,), lambda i: te.sum(A[i, k], axis=k) / 8.0))
    False
    """
    if not isinstance(t, Compute):
        return True
    b = t.body
    if isinstance(b, Reduce):
        return not has_reduce(b.body) and (b.where is None or not has_reduce(b.where))
    return not has_reduce(b)


def is_box(e: Expr) -> bool:
    """Do the free axes of ``e`` range over a box (their bounds hold no other axis)?

    >>> import tensorexpr as te
    >>> from tensorexpr.ir import Axis, Const
    >>> i = Axis("i", Const(0, "int64"), Const(4, "int64"), 1)
    >>> k = te.reduce_axis((0, 4), name="k")
    >>> j = Axis("j", Const(0, "int64"), i + 1, 2)
    >>> is_box(i * k), is_box(i * j)
    (True, False)
    """
    return all(not free_axes(a.lo) and not free_axes(a.hi) for a in free_axes(e))


def _zero(e: Expr) -> bool:
    return isinstance(e, Const) and e.value == 0


def _extent(a: Axis) -> Expr:
    if _zero(a.lo) and isinstance(a.hi, (Const, SizeVar)):
        return a.hi  # (a size is >= 1)
    if isinstance(a.lo, Const) and isinstance(a.hi, Const):
        return Const(max(a.hi.value - a.lo.value, 0), INDEX_DTYPE)
    # a symbolic range may be empty at some sizes ([2, n) at n = 1): never a negative size
    return Binary("max", a.hi - a.lo, Const(0, INDEX_DTYPE), INDEX_DTYPE)


def extract(e: Expr, name: str, origin: str, order=None) -> Tuple[Compute, Read]:
    """A tensor computing ``e`` over the box of its free axes (:func:`is_box` must
    hold), in the order of ``order`` (the same axes; default: first use in ``e``), and
    the read of it that equals ``e`` where ``e`` is evaluated.

    >>> import tensorexpr as te
    >>> X = te.placeholder((8,), name="X")
    >>> t = te.reduce_axis((1, 8), name="t")
    >>> G, read = extract(te.exp(X[t]), "G", "here")
    >>> print(G); print(read)
    G[t] = exp(X[t + 1])    for t in [0, 7)    float32
    G[t - 1]
    """
    free = free_axes(e)
    if order is not None:
        assert {a.uid for a in order} == {a.uid for a in free}, "order must hold the free axes"
        free = list(order)
    axes = [Axis(a.name, Const(0, INDEX_DTYPE), _extent(a), fresh_uid()) for a in free]
    shift = {a: (n if _zero(a.lo) else n + a.lo) for a, n in zip(free, axes)}
    at = tuple(a if _zero(a.lo) else a - a.lo for a in free)
    s = Compute(name, tuple(a.hi for a in axes), e.dtype, fresh_uid(), origin,
                axes=tuple(axes), body=substitute(e, shift))
    return s, Read(s, at, e.dtype)


def redirect(t: Tensor, done: Dict[int, Tensor]) -> Tensor:
    """``t`` reading, for each tensor it reads whose uid is in ``done``, that new version
    (``t`` itself if none changed): a pass that rewrote some tensors of a program,
    keeping their uids, redirects their readers in order.

    >>> import tensorexpr as te
    >>> A = te.placeholder((3,), name="A"); B = te.placeholder((3,), name="B")
    >>> C = te.compute((3,), lambda i: A[i] + 1.0, name="C")
    >>> print(redirect(C, {A.uid: B}))
    C[i] = B[i] + 1.0    for i in [0, 3)    float32
    """
    def fix(e: Expr) -> Expr:
        return map_reads(e, lambda r: Read(done[r.tensor.uid], r.indices, r.dtype)
                         if r.tensor.uid in done and done[r.tensor.uid] is not r.tensor else r)

    match t:
        case Compute():
            body = fix(t.body)
            return t if body is t.body else dataclasses.replace(t, body=body)
        case ScatterAdd():
            return dataclasses.replace(
                t, indices=tuple(fix(i) for i in t.indices), value=fix(t.value),
                where=None if t.where is None else fix(t.where))
    return t

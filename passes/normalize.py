"""Reduction extraction: every compute becomes elementwise or a single top-level reduction.

``te.sum(X[i, k], axis=k) / 9.0`` becomes ``S[i] = sum_k X[i, k]`` and
``T[i] = S[i] / 9.0``. Differentiation needs this form: a reduction's value
appears in its consumers' partial derivatives (softmax's denominator), and as
its own tensor it is computed once instead of once per gradient element.
A normalised tensor keeps its ``uid``: it holds the same values.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Tuple

from tensorexpr.ir import (Axis, Compute, Const, Expr, Read, Reduce, ScatterAdd, Select,
                           Tensor, Unary, fresh_uid, INDEX_DTYPE, topo_order, walk)
from tensorexpr.transform import free_axes, map_reads, rebuild, substitute


def _has_reduce(e: Expr) -> bool:
    return any(isinstance(x, Reduce) for x in walk(e, unique=True))


def is_canonical(t: Tensor) -> bool:
    """Elementwise, or one reduction at the top whose body and where are elementwise."""
    if not isinstance(t, Compute):
        return True
    b = t.body
    if isinstance(b, Reduce):
        return not _has_reduce(b.body) and (b.where is None or not _has_reduce(b.where))
    return not _has_reduce(b)


def _extract(t: Compute, new: List[Tensor]) -> Expr:
    """``t.body`` with inner reductions replaced by reads of new tensors (appended to ``new``)."""

    def go(e: Expr, guards: Tuple[Expr, ...], top: bool) -> Expr:
        match e:
            case Select(c, a, b, dt):
                c2 = go(c, guards, False)
                a2 = go(a, guards + (c,), False)
                b2 = go(b, guards + (Unary("not", c, "bool"),), False)
                return e if (c2 is c and a2 is a and b2 is b) else Select(c2, a2, b2, dt)
            case Reduce(op, body, axes, where, dt):
                inner_g = guards if where is None else guards + (where,)
                body2 = go(body, inner_g, False)
                where2 = None if where is None else go(where, guards, False)
                r = e if (body2 is body and where2 is where) else Reduce(op, body2, axes, where2, dt)
                if top or _reads_self(r, t):
                    return r  # a recurrence's own values cannot leave its body
                return _hoist(t, r, guards, new)
            case _:
                return rebuild(e, lambda x: go(x, guards, False))

    return go(t.body, (), True)


def _reads_self(e: Expr, t: Compute) -> bool:
    ref = t.self_ref
    return ref is not None and any(isinstance(x, Read) and x.tensor.uid == ref.uid
                                   for x in walk(e, unique=True))


def _hoist(t: Compute, r: Reduce, guards, new: List[Tensor]) -> Read:
    free = free_axes(r)
    axes = [Axis(a.name, Const(0, INDEX_DTYPE), a.hi - a.lo if not _zero(a.lo) else a.hi,
                 fresh_uid()) for a in free]
    shift = {a: (n if _zero(a.lo) else n + a.lo) for a, n in zip(free, axes)}
    own = {a.uid for a in free}
    # Guards that depend only on the hoisted axes keep the reduction from being
    # evaluated where the original program never evaluated it.
    usable = [g for g in guards if {x.uid for x in free_axes(g)} <= own]
    where = r.where
    for g in usable:
        where = g if where is None else (where & g)
    body = Reduce(r.op, r.body, r.axes, where, r.dtype)
    body = substitute(body, shift)
    s = Compute(f"{t.name}_{r.op}", tuple(a.hi for a in axes), r.dtype, fresh_uid(), t.origin,
                axes=tuple(axes), body=body)
    key = _shape_key(s)
    for old in new:  # the same reduction written twice in one body is computed once
        if _shape_key(old) == key:
            return Read(old, tuple(free), r.dtype)
    new.append(s)
    return Read(s, tuple(free), r.dtype)


def _shape_key(t: Compute) -> Expr:
    """``t``'s body with its axes and reduction axes renamed positionally (for CSE)."""
    r = t.body
    canon_out = {a: Axis(f"_o{k}", a.lo, a.hi, -1 - k) for k, a in enumerate(t.axes)}
    canon_red = tuple(Axis(f"_r{k}", a.lo, a.hi, -100 - k) for k, a in enumerate(r.axes))
    sub = dict(canon_out)
    sub.update(dict(zip(r.axes, canon_red)))
    body = substitute(r.body, sub)
    where = None if r.where is None else substitute(r.where, sub)
    return (tuple(t.dims), Reduce(r.op, body, canon_red, where, r.dtype))


def _zero(e: Expr) -> bool:
    return isinstance(e, Const) and e.value == 0


def normalize(outputs, owners: Dict[int, int] = None) -> Dict[int, Tensor]:
    """Canonical forms of every tensor reachable from ``outputs``, keyed by ``uid``.

    Reads are redirected to the canonical producers; extracted reductions are
    new tensors (also in the result). If ``owners`` is given it receives, for each
    extracted tensor, the uid of the tensor it was extracted from.

    >>> import tensorexpr as te
    >>> X = te.placeholder((3, 4), name="X")
    >>> k = te.reduce_axis(4, name="k")
    >>> M = te.compute((3,), lambda i: te.sum(X[i, k], axis=k) / 4.0, name="M")
    >>> sorted(t.name for t in normalize([M]).values())
    ['M', 'M_sum', 'X']
    """
    out: Dict[int, Tensor] = {}
    for t in topo_order(outputs):
        before = set(out)
        out[t.uid] = _canonical(_redirect(t, out), out)
        if owners is not None:
            for uid in set(out) - before - {t.uid}:
                owners[uid] = t.uid
    return out


def _redirect(t: Tensor, done: Dict[int, Tensor]) -> Tensor:
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


def _canonical(t: Tensor, out: Dict[int, Tensor]) -> Tensor:
    if is_canonical(t):
        return t
    new: List[Tensor] = []
    body = _extract(t, new)
    for s in new:
        out[s.uid] = s
    return dataclasses.replace(t, body=body)

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

from tensorexpr.ir import (Axis, Binary, Compute, Expr, Read, Reduce, Select,
                           Tensor, Unary, topo_order, walk)
from tensorexpr.transform import free_axes, rebuild, substitute
from tensorexpr.names import free_name

from .extract import extract, has_reduce, is_box, is_canonical, redirect


def hoist_reductions(t: Compute, taken=frozenset()) -> List[Tuple[Reduce, Read]]:
    """Each reduction inside ``t.body`` paired with a read of a new tensor computing it.

    Outermost first; the body itself (a top-level reduction) and reductions reading
    ``t``'s own values stay. ``te.differentiate`` uses it on a recurrence's body
    whose self-reads became reads of the finished tensor: a partial derivative then
    reads the sum over the previous step instead of recomputing it in every term.

    >>> import tensorexpr as te
    >>> X = te.placeholder((3, 4), name="X")
    >>> k = te.reduce_axis(4, name="k")
    >>> M = te.compute((3,), lambda i: te.exp(te.sum(X[i, k], axis=k)), name="M")
    >>> [(str(r), str(read)) for r, read in hoist_reductions(M)]
    [('(sum_{k in [0, 4)} X[i, k])', 'M_sum[i]')]
    """
    found: List[Tuple[Reduce, Read]] = []
    _extract(t, [], found, set(taken))
    return found[::-1]


def _extract(t: Compute, new: List[Tensor], found=None, taken=None) -> Expr:
    """``t.body`` with inner reductions replaced by reads of new tensors (appended to ``new``).

    ``guards`` are the conditions under which a sub-expression is evaluated, already
    extracted themselves: a guard then reads a reduction's tensor instead of holding
    the reduction, which may bind the same axis as the one it guards (a reduce axis
    reused by sibling reductions, ``select(sum_k X[k] > 0, sum_k X[k], ...)``).
    """

    def go(e: Expr, guards: Tuple[Expr, ...], top: bool) -> Expr:
        match e:
            case Select(c, a, b, dt):
                c2 = go(c, guards, False)
                a2 = go(a, guards + (c2,), False)
                b2 = go(b, guards + (Unary("not", c2, "bool"),), False)
                return e if (c2 is c and a2 is a and b2 is b) else Select(c2, a2, b2, dt)
            case Binary("and" | "or" as op, a, b, dt):
                # the right operand is evaluated only where the left leaves it open
                a2 = go(a, guards, False)
                b2 = go(b, guards + ((a2 if op == "and" else Unary("not", a2, "bool")),), False)
                return e if (a2 is a and b2 is b) else Binary(op, a2, b2, dt)
            case Reduce(op, body, axes, where, dt):
                # guards hold reads of extracted tensors, not reductions: a hoisted
                # reduction's where must stay elementwise
                where2 = None if where is None else go(where, guards, False)
                inner_g = guards if where2 is None else guards + (where2,)
                body2 = go(body, inner_g, False)
                r = e if (body2 is body and where2 is where) else Reduce(op, body2, axes, where2, dt)
                if top or _reads_self(r, t) or not is_box(r):
                    return r  # a recurrence's own values cannot leave its body
                read = _hoist(t, r, guards, new, taken)
                if found is not None:
                    found.append((e, read))
                return read
            case _:
                return rebuild(e, lambda x: go(x, guards, False))

    return go(t.body, (), True)


def _reads_self(e: Expr, t: Compute) -> bool:
    ref = t.self_ref
    return ref is not None and any(isinstance(x, Read) and x.tensor.uid == ref.uid
                                   for x in walk(e, unique=True))


def _hoist(t: Compute, r: Reduce, guards, new: List[Tensor], taken=None) -> Read:
    free = free_axes(r)
    own = {a.uid for a in free}
    # The reduction must not be evaluated where the original program never evaluated
    # it (its reads may be in range only there): guards that depend only on the
    # hoisted axes are kept, the affine rest is projected onto them (k == i - 1 over
    # an enclosing k in [0, n) keeps i >= 1). They come before the reduction's own
    # where, as they are evaluated before it, and `&` short-circuits. A guard reading
    # the recurrence's own values (or a reduction left inline for that reason) cannot
    # leave its body.
    movable = [g for g in guards if not has_reduce(g) and not _reads_self(g, t)]
    usable = [g for g in movable if {x.uid for x in free_axes(g)} <= own]
    rest = [g for g in movable if not {x.uid for x in free_axes(g)} <= own]
    implied = None
    if rest:
        # isl only here: most programs (te.saved_values normalizes every forward it
        # is given) have no such guard, and a process that needs no isl never loads it
        from tensorexpr.polyhedral import project
        implied = project(free, rest)
    where = None
    for g in ([implied] if implied is not None else []) + usable + (
            [r.where] if r.where is not None else []):
        where = g if where is None else (where & g)
    # several reductions of one body (an LSTM's four gates) are named apart: s_sum,
    # s_sum_2..., and apart from the program's other tensors (``taken``, which gets it)
    taken = set() if taken is None else taken
    name = free_name(f"{t.name}_{r.op}", taken | {x.name for x in new})
    s, read = extract(Reduce(r.op, r.body, r.axes, where, r.dtype), name, t.origin)
    key = reduction_key(s)
    for old in new:  # the same reduction written twice in one body is computed once
        if reduction_key(old) == key:
            return Read(old, read.indices, r.dtype)
    new.append(s)
    taken.add(name)
    return read


def reduction_key(t: Compute) -> tuple:
    """``t``'s shape and body (a reduction) with its axes renamed positionally.

    Two extracted reductions with ``same`` keys compute the same values: normalize
    computes a reduction written twice once, and ``te.build`` recognises the copies
    ``te.differentiate`` extracts from a forward tensor.

    >>> import tensorexpr as te
    >>> from tensorexpr.ir import same
    >>> A = te.placeholder((4, 8), name="A")
    >>> def row_sum(name):
    ...     k = te.reduce_axis(8, name="k")
    ...     return te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name=name)
    >>> same(reduction_key(row_sum("S")), reduction_key(row_sum("T")))
    True
    """
    r = t.body
    canon_out = {a: Axis(f"_o{k}", a.lo, a.hi, -1 - k) for k, a in enumerate(t.axes)}
    canon_red = tuple(Axis(f"_r{k}", a.lo, a.hi, -100 - k) for k, a in enumerate(r.axes))
    sub = dict(canon_out)
    sub.update(dict(zip(r.axes, canon_red)))
    body = substitute(r.body, sub)
    where = None if r.where is None else substitute(r.where, sub)
    return (tuple(t.dims), Reduce(r.op, body, canon_red, where, r.dtype))


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
    order = topo_order(outputs)
    taken = {t.name for t in order}
    for t in order:
        before = set(out)
        out[t.uid] = _canonical(redirect(t, out), out, taken)
        if owners is not None:
            for uid in set(out) - before - {t.uid}:
                owners[uid] = t.uid
    return out


def _canonical(t: Tensor, out: Dict[int, Tensor], taken: set) -> Tensor:
    if is_canonical(t):
        return t
    new: List[Tensor] = []
    body = _extract(t, new, None, taken)
    for s in new:
        out[s.uid] = s
    return dataclasses.replace(t, body=body)

"""Residue splitting of a row reduction's innermost axis (strided convolution gradients).

The gradient of a stride-``s`` convolution wrt its input reads the output gradient
at ``(x - kx) // s`` where ``(x - kx) % s == 0``: along the innermost output axis
``x`` the reads move every other point, so the row loops step by ``s`` and gather.
Writing ``x = s*q + r`` for each residue ``0 <= r < s`` turns ``(x - kx) // s`` into
``q + (r - kx) // s`` (contiguous in ``q``) and ``(x - kx) % s`` into
``(r - kx) % s`` (a condition on ``kx`` only): the identities
``(s*c*q + b) // s == c*q + b // s`` and ``(s*c*q + b) % s == b % s`` hold for
floor division and modulo of integers, so every point keeps its value.
``codegen.lower`` then computes the rows over ``q`` with ``r`` as one more outer
loop, and stores element ``q`` of a row at ``x = s*q + r``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

from tensorexpr.ir import (Axis, Binary, Compute, Const, Expr, Reduce, INDEX_DTYPE, fresh_uid,
                           walk, occurrences)
from tensorexpr.transform import const_value, rebuild, substitute

I64 = INDEX_DTYPE

#: largest stride split (each residue is one more pass over the reduction's loops)
MAX_FACTOR = 4


@dataclass(frozen=True)
class Split:
    """``tensor`` (over ``outer..., r, q``) computes ``orig`` with ``x = s*q + r``.

    ``red`` is the reduction inside ``tensor.body``; ``count`` the number of ``q``
    with ``s*q + r`` inside ``orig``'s last axis (an expression of ``r``)."""

    orig: Compute
    tensor: Compute
    red: Reduce
    s: int
    r: Axis
    q: Axis
    count: Expr


def factor(t: Compute, red: Reduce) -> Optional[int]:
    """The stride ``s`` to split ``t``'s innermost axis ``x`` by, or None: some floor
    division or modulo by the constant ``s`` (the only such divisor) has ``x`` in its
    dividend, linearly, and ``x`` starts at 0.

    >>> import tensorexpr as te
    >>> H = te.placeholder((4, 8), name="H")
    >>> k = te.reduce_axis((0, 3), name="k")
    >>> D = te.compute((4, 17), lambda i, x: te.sum(H[i, (x - k) // 2], axis=k,
    ...                where=((x - k) % 2 == 0) & (x >= k) & (x - k < 16)), name="D")
    >>> factor(D, next(e for e in walk(D.body, unique=True) if isinstance(e, Reduce)))
    2
    """
    if not t.axes or const_value(t.axes[-1].lo) != 0:
        return None
    x = t.axes[-1].uid
    found = set()
    for e in walk(t.body, unique=True):
        if (isinstance(e, Binary) and e.op in ("floordiv", "mod")
                and any(isinstance(a, Axis) and a.uid == x for a in walk(e.a, unique=True))):
            s = const_value(e.b)
            if s is None or _linear(e.a, x) is None:
                return None
            found.add(s)
    if len(found) != 1:
        return None
    s = found.pop()
    return s if 2 <= s <= MAX_FACTOR else None


def split(t: Compute, red: Reduce) -> Optional[Split]:
    """``t`` rewritten over ``(outer..., r, q)`` with ``x = s*q + r`` (see the module
    docstring), or None when :func:`factor` finds no stride."""
    s = factor(t, red)
    if s is None:
        return None
    x = t.axes[-1]
    n = x.hi
    r = Axis(f"{x.name}%{s}", Const(0, I64), Const(s, I64), fresh_uid())
    m = const_value(n)
    qhi = (Const(-(-m // s), I64) if m is not None else
           Binary("floordiv", Binary("add", n, Const(s - 1, I64), I64), Const(s, I64), I64))
    q = Axis(f"{x.name}//{s}", Const(0, I64), qhi, fresh_uid())
    xv = Binary("add", Binary("mul", Const(s, I64), q, I64), r, I64)
    body = _tidy(substitute(t.body, {x: xv}), q.uid, s)
    # the last q of a residue may fall outside x's range (s does not divide n)
    count = Binary("floordiv", Binary("add", Binary("sub", n, r, I64), Const(s - 1, I64), I64),
                   Const(s, I64), I64)
    # occurrences in the tree: a reduction object used twice is two reductions
    reds = [x for x, n in occurrences(body) if isinstance(x, Reduce) for _ in range(min(n, 2))]
    if len(reds) != 1:
        return None
    t2 = Compute(t.name, t.dims[:-1] + (Const(s, I64), q.hi), t.dtype, fresh_uid(), t.origin,
                 axes=t.axes[:-1] + (r, q), body=body)
    return Split(t, t2, reds[0], s, r, q, count)


def _linear(e: Expr, uid: int) -> Optional[int]:
    """``c`` when ``e`` is ``c * axis + (terms without it)``, None if the axis appears
    other than through +, - and multiplication by constants."""
    match e:
        case Axis():
            return 1 if e.uid == uid else 0
        case Binary("add" | "sub", a, b, _):
            la, lb = _linear(a, uid), _linear(b, uid)
            if la is None or lb is None:
                return None
            return la + lb if e.op == "add" else la - lb
        case Binary("mul", a, b, _):
            ca, cb = const_value(a), const_value(b)
            if ca is not None or cb is not None:
                other = _linear(b if ca is not None else a, uid)
                return None if other is None else (ca if ca is not None else cb) * other
    if any(isinstance(a, Axis) and a.uid == uid for a in walk(e, unique=True)):
        return None
    return 0


def _drop(e: Expr, uid: int) -> Expr:
    """``e`` (linear in the axis ``uid``) with the axis replaced by 0."""
    return substitute(e, {a: Const(0, I64) for a in walk(e, unique=True)
                          if isinstance(a, Axis) and a.uid == uid})


def _tidy(e: Expr, q: int, s: int) -> Expr:
    """``(s*c*q + b) // s`` as ``c*q + b // s`` and ``(s*c*q + b) % s`` as ``b % s``
    (exact for floor division and modulo)."""
    memo: Dict[int, Expr] = {}

    def go(x: Expr) -> Expr:
        if id(x) in memo:
            return memo[id(x)]
        out = rebuild(x, go)
        if (isinstance(out, Binary) and out.op in ("floordiv", "mod")
                and const_value(out.b) == s):
            lin = _linear(out.a, q)
            if lin is not None and lin != 0 and lin % s == 0:
                rest = Binary(out.op, _drop(out.a, q), out.b, out.dtype)
                if out.op == "mod":
                    out = rest
                else:
                    qa = next(a for a in walk(out.a, unique=True) if isinstance(a, Axis) and a.uid == q)
                    term = qa if lin == s else Binary("mul", Const(lin // s, I64), qa, I64)
                    out = Binary("add", term, rest, out.dtype)
        memo[id(x)] = out
        return out

    return go(e)

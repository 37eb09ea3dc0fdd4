"""Residue splitting of a row reduction's innermost axis (strided convolution gradients).

The gradient of a stride-``s`` convolution wrt its input reads the output gradient
at ``(x - kx) // s`` where ``(x - kx) % s == 0``: along the innermost output axis
``x`` the reads move every other point, so the row loops step by ``s`` and gather.
Writing ``x = s*q + r`` for each residue ``0 <= r < s`` turns ``(x - kx) // s`` into
``q + (r - kx) // s`` (contiguous in ``q``) and ``(x - kx) % s`` into
``(r - kx) % s`` (a condition on ``kx`` only): the identities
``(s*c*q + b) // s == c*q + b // s`` and ``(s*c*q + b) % s == b % s`` hold for
floor division and modulo of integers (``codegen.residue_algebra``), so every point
keeps its value.
``codegen.lower`` then computes the rows over ``q`` with ``r`` as one more outer
loop, and stores element ``q`` of a row at ``x = s*q + r``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tensorexpr.ir import (Axis, Binary, Compute, Const, Expr, Reduce, INDEX_DTYPE, fresh_uid,
                           walk, occurrences)
from tensorexpr.transform import const_value, substitute

from .residue_algebra import linear, tidy

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
            if s is None or linear(e.a, x) is None:
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
    body = tidy(substitute(t.body, {x: xv}), q.uid, s)
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

"""The ``split`` strategy's plan: an element-wise tensor read through ``j // c`` as ``c``
unrolled residues of a loop over ``q``, cut where its clamps change.

A nearest or bilinear upsampling reads its input at ``(x - 1) // 2`` and ``(x + 1) // 2``,
clamped to the row (``max(..., 0)``, ``min(..., w - 1)``), with weights chosen by
``x % 2``. Along the innermost output axis ``x`` those reads are gathers (every index
computed with the floor-division helper, then loaded one lane at a time) and the loop ran
scalar, at half the speed of JAX. Writing ``x = c*q + r`` for each residue ``0 <= r < c``
(``c`` the divisor), the identities of ``codegen.residue_algebra`` make every ``// c`` of
an index with ``x`` in its dividend step by 1 along ``q`` and every ``% c`` a constant:
``(x - 1) // 2`` is ``q - 1`` for ``r = 0`` and ``q`` for ``r = 1``. The clamps are then
tests on ``q`` alone, and the loop over ``q`` is cut where they change value
(``codegen.piecewise``): in the long middle piece each residue's body is straight-line
code over contiguous reads, and the ``c`` residues store ``c`` interleaved elements per
``q``. Every point keeps its value: only which loop computes it changes.

A length that is not a multiple of ``c`` ends with a piece of one ``q`` storing the first
``n % c`` residues alone (the interleaving of ``codegen.residue_classes``' classes, 33
points of 17 even and 16 odd ones).

Taken when ``x`` (static, from 0, at least ``c`` long) appears in the dividend of a
floor division or modulo by a constant ``c`` of ``[2, MAX_FACTOR]`` (the only such
divisor), linearly, one of them a floor division, no reduction in the body, and every
``// c`` and ``% c`` folds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

from tensorexpr.ir import (Axis, Binary, Compute, Const, Expr, INDEX_DTYPE, Read, Reduce, fresh_uid,
                           is_float, walk)
from tensorexpr.transform import const_value, substitute

from . import piecewise
from .residue_algebra import fold_indices, linear, tidy

I64 = INDEX_DTYPE

#: largest divisor split (each residue is one more copy of the body)
MAX_FACTOR = 4


@dataclass(frozen=True)
class Residues:
    """``t``'s innermost axis as ``c*q + r``: ``pieces`` of the loop over ``q``, each
    ``(lo, hi, bodies)`` with one body per residue ``r`` (an expression of ``q`` and the
    outer axes; fewer in a last piece where the axis ends before ``c*q + c``)."""

    c: int
    q: Axis
    pieces: Tuple[Tuple[int, int, Tuple[Expr, ...]], ...]


def divisor(t: Compute) -> Optional[int]:
    """The ``c`` that ``t``'s innermost axis is read through (see the module docstring),
    or None.

    >>> import tensorexpr as te
    >>> X = te.placeholder((5,), name="X")
    >>> Y = te.compute((10,), lambda x: X[te.maximum((x - 1) // 2, 0)], name="Y")
    >>> divisor(Y)
    2
    """
    if not t.axes:
        return None
    j = t.axes[-1]
    n, lo = const_value(j.hi), const_value(j.lo)
    if n is None or lo != 0:
        return None
    found, floors = set(), False
    for x in walk(t.body, unique=True):
        if isinstance(x, Reduce):
            return None
        if isinstance(x, Binary) and x.op in ("floordiv", "mod") and j in set(walk(x.a)):
            c = const_value(x.b)
            if c is None or not linear(x.a, j.uid):
                return None
            found.add(c)
            floors = floors or x.op == "floordiv"
    if len(found) != 1 or not floors:
        return None
    c = found.pop()
    return c if 2 <= c <= MAX_FACTOR and n >= c else None


def plan(t: Compute) -> Optional[Residues]:
    """The split of ``t``'s innermost axis (module docstring), or None when it does not
    apply or some ``// c`` or ``% c`` does not fold.

    >>> import tensorexpr as te
    >>> X = te.placeholder((5,), name="X")
    >>> Y = te.compute((10,), lambda x: X[te.maximum((x - 1) // 2, 0)]
    ...                + X[te.minimum((x + 1) // 2, 4)], name="Y")
    >>> p = plan(Y)
    >>> for lo, hi, bodies in p.pieces: print(lo, hi, [str(b) for b in bodies])
    0 1 ['(X[0] + X[x//2])', '(X[x//2] + X[x//2 + 1])']
    1 4 ['(X[x//2 + -1] + X[x//2])', '(X[x//2] + X[x//2 + 1])']
    4 5 ['(X[x//2 + -1] + X[x//2])', '(X[x//2] + X[4])']
    """
    c = divisor(t)
    if c is None:
        return None
    j = t.axes[-1]
    n = const_value(j.hi)
    q = Axis(f"{j.name}//{c}", Const(0, I64), Const(-(-n // c), I64), fresh_uid())
    bodies = []
    for r in range(c):
        at = Binary("add", Binary("mul", Const(c, I64), q, I64), Const(r, I64), I64)
        body = fold_indices(tidy(substitute(t.body, {j: at}), q.uid, c))
        if any(isinstance(x, Binary) and x.op in ("floordiv", "mod") and q in set(walk(x.a))
               for x in walk(body, unique=True)):
            return None
        bodies.append(body)
    cut = piecewise.pieces_of(bodies, q)
    if cut is None:
        cut = [(0, const_value(q.hi), tuple(bodies))]
    if n % c:
        # the last q holds the first n % c residues alone: a piece of its own
        lo, hi, last = cut.pop()
        cut += [(lo, hi - 1, last)] if hi - 1 > lo else []
        cut.append((hi - 1, hi, last[:n % c]))
    return Residues(c, q, tuple(cut))


def row_divisions(p: Residues) -> List[Expr]:
    """The floor divisions and modulos of ``p``'s bodies that do not move with ``q`` (and
    read nothing): the same along a row, computed once before its loops.

    >>> import tensorexpr as te
    >>> X = te.placeholder((6, 6), name="X")
    >>> Y = te.compute((10, 10), lambda y, x: X[(y + 1) // 2, (x + 1) // 2], name="Y")
    >>> [str(e) for e in row_divisions(plan(Y))]
    ['((y + 1) // 2)']
    """
    out: List[Expr] = []
    seen = set()
    for _, _, bodies in p.pieces:
        for body in bodies:
            for x in walk(body, unique=True):
                if (isinstance(x, Binary) and x.op in ("floordiv", "mod") and x not in seen
                        and not is_float(x.dtype) and p.q not in set(walk(x))
                        and not any(isinstance(y, (Read, Reduce)) for y in walk(x))):
                    seen.add(x)
                    out.append(x)
    return out

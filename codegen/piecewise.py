"""Index-set splitting: a loop cut where the tests on its index change value.

A clamped stencil reads ``X[max(i - 1, 0)]``; its gradient, gathered by isl, adds
``select(i >= 1, H[i - 1], 0) + select(i == 0, H[0], 0) + ...``. Evaluated as
written, every point of the loop over ``i`` runs the tests, and the reads under
them cannot be plain vector loads (a lane may not read past the array): the loop
runs scalar, at a fraction of memory bandwidth. Yet the tests only change value
near the ends: ``[0, n)`` splits into ``[0, 1)``, ``[1, n - 1)`` and ``[n - 1, n)``,
in each of which every test on ``i`` is a constant, and the long middle piece is
straight-line code over contiguous reads.

:func:`pieces` finds the tests: comparisons and integer ``max``/``min`` whose two
sides differ by an affine function of one axis alone (isl checks it on the
axis's box). Such a test changes value at most once (``==`` and ``!=`` at one
point), next to the root of that function, so cutting the range around each
root leaves pieces where every test is constant. Each piece's body has its tests
replaced by their values there and is simplified. Only the branch a ``select``
takes at a point is kept, which is exactly what the IR evaluates there: the
pieces compute the same values as the whole loop.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import floor
from typing import Dict, List, Optional, Sequence, Tuple

from passes.simplify import simplify
from tensorexpr import polyhedral
from tensorexpr.ir import (BINARY_CMP, Axis, Binary, Compute, Const, Expr, INDEX_DTYPE, Read,
                           Reduce, SizeVar, fresh_uid, is_float, walk)
from tensorexpr.transform import const_value, eval_int, replace_subexpr, substitute

#: at most this many pieces per loop (each is one more loop in the generated code)
MAX_PIECES = 5
#: an outer axis is cut only for rows at least this long (pieces of 1-column tensors
#: are as scalar as the whole; each piece is lowered on its own: time)
MIN_ROW = 8


def _tests(body: Expr, j: Axis) -> List[Tuple[Binary, int, int]]:
    """The tests of ``body`` on ``j`` alone: ``(node, c0, c1)`` with the difference of
    the node's two sides ``c0 + c1 * j`` (``c1 != 0``)."""
    out, seen = [], set()
    for x in walk(body, unique=True):
        if not (isinstance(x, Binary) and (x.op in BINARY_CMP or x.op in ("max", "min"))):
            continue
        if is_float(x.a.dtype) or is_float(x.b.dtype) or x in seen:
            continue
        inside = list(walk(x, unique=True))
        if any(isinstance(y, (Read, SizeVar)) for y in inside):
            continue
        axes = {y.uid for y in inside if isinstance(y, Axis)}
        if axes != {j.uid}:
            continue
        form = polyhedral.affine_form(x.a - x.b, [j])
        if form is None or form[1][0] == 0:
            continue
        seen.add(x)
        out.append((x, form[0], form[1][0]))
    return out


def _value(test: Binary, at: int, j: Axis) -> Expr:
    """``test`` at ``j = at``: a boolean constant, or the side a max/min picks."""
    if test.op in BINARY_CMP:
        return Const(bool(eval_int(substitute(test, {j: Const(at, j.dtype)}))), "bool")
    a, b = (eval_int(substitute(s, {j: Const(at, j.dtype)})) for s in (test.a, test.b))
    # a tie takes the first side (the moving one, as users write max(i - 1, 0)): the
    # middle piece then reaches the clamp's last point
    return test.a if a == b or (a > b) == (test.op == "max") else test.b


def pieces(body: Expr, j: Axis) -> Optional[List[Tuple[int, int, Expr]]]:
    """``[(lo, hi, body_there), ...]`` covering ``j``'s range in order, each with the
    tests of ``body`` on ``j`` alone replaced by their values; None when ``body``
    has no such test, ``j``'s bounds are not constants, or it would take more than
    ``MAX_PIECES`` pieces.

    >>> import tensorexpr as te
    >>> X = te.placeholder((10,), name="X")
    >>> Y = te.compute((10,), lambda i: X[te.maximum(i - 1, 0)] + X[i], name="Y")
    >>> [(lo, hi, str(b)) for lo, hi, b in pieces(Y.body, Y.axes[0])]
    [(0, 1, '(X[0] + X[i])'), (1, 10, '(X[i - 1] + X[i])')]
    >>> # a reflection: the min's test is affine only once abs has taken its value
    >>> Z = te.compute((10,), lambda i: X[te.minimum(te.abs(i - 2), 10 - te.abs(i - 2))])
    >>> [(lo, hi) for lo, hi, _ in pieces(Z.body, Z.axes[0])]
    [(0, 2), (2, 8), (8, 10)]
    """
    lo, hi = const_value(j.lo), const_value(j.hi)
    if lo is None or hi is None or hi - lo < 2:
        return None
    # asked of the same tensor by fusion planning and lowering: answered once (the
    # objects are kept with the answer, so their ids are not reused while it lives)
    hit = _ASKED.get((id(body), id(j)))
    if hit is not None and hit[0] is body and hit[1] is j:
        return hit[2]
    found = _pieces((body,), j, lo, hi)
    out = None if found is None else [(a, b, bodies[0]) for a, b, bodies in found]
    _ASKED[(id(body), id(j))] = (body, j, out)
    if len(_ASKED) > 256:
        _ASKED.pop(next(iter(_ASKED)))
    return out


def pieces_of(bodies: Sequence[Expr], j: Axis
              ) -> Optional[List[Tuple[int, int, Tuple[Expr, ...]]]]:
    """:func:`pieces` of several bodies over one loop (each stored by the loop's points):
    ``[(lo, hi, bodies_there), ...]``, the cuts those of all the bodies' tests.

    >>> import tensorexpr as te
    >>> X = te.placeholder((10,), name="X")
    >>> i = te.compute((9,), lambda i: X[i]).axes[0]
    >>> [(lo, hi, [str(b) for b in bs]) for lo, hi, bs in pieces_of(
    ...     [X[te.maximum(i - 1, 0)], X[te.minimum(i + 1, 8)]], i)]
    [(0, 1, ['X[0]', 'X[i + 1]']), (1, 8, ['X[i - 1]', 'X[i + 1]']), (8, 9, ['X[i - 1]', 'X[8]'])]
    """
    lo, hi = const_value(j.lo), const_value(j.hi)
    if lo is None or hi is None or hi - lo < 2:
        return None
    return _pieces(tuple(bodies), j, lo, hi)


#: the last answers of :func:`pieces`
_ASKED: Dict[Tuple[int, int], tuple] = {}


def _pieces(bodies: Tuple[Expr, ...], j: Axis, lo: int, hi: int
            ) -> Optional[List[Tuple[int, int, Tuple[Expr, ...]]]]:
    tests, seen = [], set()
    for body in bodies:
        for x in _tests(body, j):
            if x[0] not in seen:
                seen.add(x[0])
                tests.append(x)
    if not tests:
        return None
    cuts = {lo, hi}
    for _, c0, c1 in tests:
        # the side of 0 the difference c0 + c1*j is on changes only next to its root
        r = floor(Fraction(-c0, c1))
        cuts.update(p for p in (r, r + 1, r + 2) if lo < p < hi)
    bounds = sorted(cuts)
    spans: List[Tuple[int, int, tuple]] = []
    for a, b in zip(bounds, bounds[1:]):
        first = tuple(_value(t, a, j) for t, _, _ in tests)
        last = tuple(_value(t, b - 1, j) for t, _, _ in tests)
        if not _same_values(first, last):
            return None  # not constant on the span: the tests were not what they seemed
        if spans and _same_values(spans[-1][2], first):
            spans[-1] = (spans[-1][0], b, first)
        else:
            spans.append((a, b, first))
    if len(spans) > MAX_PIECES:
        return None
    out = []
    for a, b, values in spans:
        there = []
        for e in bodies:
            for (t, _, _), v in zip(tests, values):
                e = replace_subexpr(e, t, v)
            there.append(simplify(e))
        out.append((a, b, tuple(there)))
    # A test whose sides were not affine until the inner tests took their values
    # (a reflection min(max(s, -s), 2 (n - 1) - max(s, -s)) is affine in each piece of
    # max(s, -s)) is cut in turn, within its piece.
    refined = []
    for a, b, there in out:
        sub = _pieces(there, j, a, b) if b - a >= 2 else None
        refined.extend(sub or [(a, b, there)])
    return refined if len(refined) <= MAX_PIECES else out


def _same_values(xs: tuple, ys: tuple) -> bool:
    """Do two rows of test values (constants or picked sides) agree?"""
    return all(x is y or (isinstance(x, Const) and isinstance(y, Const) and x.value == y.value)
               for x, y in zip(xs, ys))


@dataclass(frozen=True)
class Cut:
    """Pieces of a tensor along its axis ``d`` (:func:`cut`): ``spans`` as :func:`pieces`
    gives them."""

    d: int
    axis: str
    spans: Tuple[Tuple[int, int, Expr], ...]
    inner: bool  # ``d`` is the innermost axis

    def params(self) -> tuple:
        """What the schedule prints: the pieces, and the axis when not the innermost."""
        spans = ("pieces", tuple((lo, hi) for lo, hi, _ in self.spans))
        return (spans,) if self.inner else (spans, ("axis", self.axis))


def cut(t: Compute) -> Optional[Cut]:
    """Where to cut ``t`` into pieces: along its innermost axis where tests on it change
    value (:func:`pieces`), or, when it has none and ``t`` holds sums, along the
    innermost outer axis that has such tests (each piece then a tensor of its own: the
    boundary rows of an upsampling's gradient add sums the other rows do not, and tests
    of the row inside the vector loop over the columns kept it scalar). None if no
    axis has tests.

    >>> import tensorexpr as te
    >>> X = te.placeholder((10, 8), name="X")
    >>> k = te.reduce_axis(2, "k")
    >>> Y = te.compute((10, 8), lambda i, j: te.sum(X[k, j], axis=k, where=(i >= 1) | (k == 0)),
    ...                name="Y")
    >>> c = cut(Y)
    >>> c.axis, [(lo, hi) for lo, hi, _ in c.spans]
    ('i', [(0, 1), (1, 10)])
    """
    if not t.axes:
        return None
    found = pieces(t.body, t.axes[-1])
    if found is not None:
        return Cut(t.ndim - 1, t.axes[-1].name, tuple(found), True)
    if not any(isinstance(x, Reduce) for x in walk(t.body, unique=True)):
        return None
    n = const_value(t.axes[-1].hi) - const_value(t.axes[-1].lo) \
        if const_value(t.axes[-1].hi) is not None and const_value(t.axes[-1].lo) is not None \
        else None
    if n is not None and n < MIN_ROW:
        return None  # too short a row for vector lanes: more pieces would only cost
    for d in reversed(range(t.ndim - 1)):
        found = pieces(t.body, t.axes[d])
        if found is not None and holds_sums(found):
            return Cut(d, t.axes[d].name, tuple(found), False)
    return None


def holds_sums(cut: Sequence[Tuple[int, int, Expr]]) -> bool:
    """Does a piece of ``cut`` (:func:`pieces`) hold a reduction? Then each piece is
    lowered as a tensor of its own (:func:`piece_tensors`).

    >>> import tensorexpr as te
    >>> X = te.placeholder((10,), name="X")
    >>> Y = te.compute((10,), lambda i: X[te.maximum(i - 1, 0)] + X[i], name="Y")
    >>> holds_sums(pieces(Y.body, Y.axes[0]))
    False
    """
    return any(isinstance(x, Reduce) for _, _, body in cut for x in walk(body, unique=True))


def piece_tensors(t: Compute, cut: Sequence[Tuple[int, int, Expr]], d: int = -1
                  ) -> List[Tuple[Compute, int]]:
    """``(tensor, lo)`` per piece ``(lo, hi, body)`` of ``cut``: ``t`` over ``[lo, hi)`` of
    its axis ``d`` (the innermost by default), shifted to start at 0 (its element ``x``
    there is ``t``'s ``x + lo``).

    >>> import tensorexpr as te
    >>> X = te.placeholder((10,), name="X")
    >>> Y = te.compute((10,), lambda i: X[te.maximum(i - 1, 0)] + X[i], name="Y")
    >>> for p, lo in piece_tensors(Y, pieces(Y.body, Y.axes[0])): print(lo, p)
    0 Y[0:1][i] = X[0] + X[i]    for i in [0, 1)    float32
    1 Y[1:10][i] = X[(i + 1) - 1] + X[i + 1]    for i in [0, 9)    float32
    """
    d = d % t.ndim
    j = t.axes[d]
    out = []
    for lo, hi, body in cut:
        jj = Axis(j.name, Const(0, INDEX_DTYPE), Const(hi - lo, INDEX_DTYPE), fresh_uid())
        at = jj if lo == 0 else Binary("add", jj, Const(lo, INDEX_DTYPE), INDEX_DTYPE)
        where = ", ".join(f"{lo}:{hi}" if k == d else ":" for k in range(t.ndim))
        name = f"{t.name}[{lo}:{hi}]" if d == t.ndim - 1 else f"{t.name}[{where}]"
        sub = Compute(name, tuple(t.dims[:d]) + (jj.hi,) + tuple(t.dims[d + 1:]), t.dtype,
                      fresh_uid(), t.origin, axes=tuple(t.axes[:d]) + (jj,) + tuple(t.axes[d + 1:]),
                      body=simplify(substitute(body, {j: at})))
        out.append((sub, lo))
    return out

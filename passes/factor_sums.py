"""Reduction-invariant factors out of sums: ``sum_r f(o) g(o, r) = f(o) * sum_r g(o, r)``.

The gradient of pairwise squared distances ``Y[i, j] = sum_k (A[i, k] - B[j, k])^2`` is

    dA[i, k] = sum_j 2 * (H[i, j] * (A[i, k] - B[j, k]))

a subtract and two multiplies per point of ``(i, k, j)``. Expanded over the difference
and split into one sum per term, each term's factors that do not use ``j`` leave its
sum:

    dA[i, k] = 2 * (A[i, k] * (sum_j H[i, j]) - sum_j H[i, j] * B[j, k])

The first sum no longer uses ``k``: :mod:`passes.hoist` stores it once per ``i`` (a row
sum); the second is a contraction the strategy table tiles. This is the algebra numpy's
reference (``2 (A * rowsum(H) - H @ B)``) and users write by hand.

A sum (over a box, not in a recurrence, its value compared nowhere: a max's gradient
tests a recomputed body for a tie with the stored maximum; its body free of max/min
reductions and of selects on data) is rewritten when the cost model says it pays
(:func:`factored`): of the candidate forms (its body's sums of products split as
written, or with products of one term and a sum multiplied out: :func:`expand`; a
product of two sums is never multiplied out, ``(x - m)^2`` as ``x^2 - 2xm + m^2``
cancels), the one with the fewest floating-point operations per point (counted on
the IR: :func:`flops`) is taken if it has no more than the sum as written and one of
its sums misses an axis the sum used (``MIN_REDUNDANCY`` points at least). Per point:
a sum that misses axes around it counts once per point of the axes it uses, as
:mod:`passes.hoist` stores it (``sum_j H[i, j] * s[j]`` beside ``A[i, k]``: once per
``i``). A factor leaves a sum only where it was evaluated at every point the sum is:
the sum has no ``where`` and a non-empty constant range, or each read of the factor
stays in range (a condition on a term stays with it, per term).

Values change only by float rounding (a sum is added in another order and grouping,
as numpy's reference and a user's hand-written form are); like
:mod:`passes.simplify`, ``x * 0`` is taken as 0 (a factor moved out of an empty sum).
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Dict, List, Optional, Tuple

from tensorexpr.bounds import inside_by_intervals
from tensorexpr.ir import (Binary, Compute, Const, Expr, Read, Reduce, Select, Tensor, Unary,
                           children, is_float, postorder, same, tensor_inputs, topo_order, walk)
from tensorexpr.transform import bottom_up, free_axes

from .contexts import contexts
from .extract import redirect
from .hoist import MIN_REDUNDANCY, box_points

#: the most terms an expanded body may have
MAX_TERMS = 16
#: the points a symbolic extent counts for in :func:`flops` (many: leading terms decide)
SYMBOLIC_POINTS = 1 << 16

#: a term of an expanded body: its coefficient and its factors (their product)
Term = Tuple[float, Tuple[Expr, ...]]


def points(axes) -> float:
    """The points of the box of ``axes``; a symbolic extent counts ``SYMBOLIC_POINTS``.

    >>> import tensorexpr as te
    >>> points([te.reduce_axis(8, "k"), te.reduce_axis((2, 6), "j")])
    32.0
    """
    return box_points(axes, SYMBOLIC_POINTS)


def flops(e: Expr) -> float:
    """Floating-point operations of one evaluation of ``e``: one per float operation,
    a sum's body, where and accumulation once per point of its axes (both branches of
    a select count: an upper bound). Index arithmetic is not counted.

    >>> import tensorexpr as te
    >>> X = te.placeholder((8, 4), name="X"); k = te.reduce_axis(4, "k")
    >>> i = te.reduce_axis(8, "i")
    >>> flops(te.sum(2.0 * X[i, k], axis=k))
    8.0
    """
    cost: Dict[int, float] = {}
    for x in postorder(e):
        if id(x) in cost:
            continue
        match x:
            case Reduce(_, body, axes, where, _):
                inner = cost[id(body)] + 1 + (cost[id(where)] if where is not None else 0)
                c = points(axes) * inner
            case Read():
                c = 0.0
            case _:
                c = sum(cost[id(k)] for k in children(x))
                if isinstance(x, (Binary, Unary)) and is_float(x.dtype):
                    c += 1
        cost[id(x)] = c
    return cost[id(e)]


def expand(e: Expr, distribute: bool) -> Optional[List[Term]]:
    """``e`` as a sum of terms ``coefficient * product of factors`` (float constants
    become coefficients): sums, differences and negations are split, products of
    ``e``'s type flattened, and with ``distribute`` a product of one term and a sum
    multiplied out (a product of two sums stays one factor: a square of a difference
    multiplied out loses its digits to cancellation); None past ``MAX_TERMS`` terms.

    >>> import tensorexpr as te
    >>> A = te.placeholder((4,), name="A"); B = te.placeholder((4,), name="B")
    >>> e = 2.0 * (A[0] * (A[1] - B[1]))
    >>> [(c, [str(f) for f in fs]) for c, fs in expand(e, True)]
    [(2.0, ['A[0]', 'A[1]']), (-2.0, ['A[0]', 'B[1]'])]
    >>> [(c, [str(f) for f in fs]) for c, fs in expand(e, False)]
    [(2.0, ['A[0]', '(A[1] - B[1])'])]
    >>> d = A[1] - B[1]
    >>> [(c, [str(f) for f in fs]) for c, fs in expand(d * d, True)]
    [(1.0, ['(A[1] - B[1])', '(A[1] - B[1])'])]
    """
    dt = e.dtype
    memo: Dict[int, Optional[List[Term]]] = {}

    def go(x: Expr) -> Optional[List[Term]]:
        if id(x) in memo:
            return memo[id(x)]
        out: Optional[List[Term]]
        match x:
            case Binary("add" | "sub" as op, a, b, d) if d == dt and a.dtype == b.dtype == dt:
                ta, tb = go(a), go(b)
                out = None if ta is None or tb is None else ta + (
                    tb if op == "add" else [(-c, f) for c, f in tb])
            case Unary("neg", a, d) if d == dt and a.dtype == dt:
                ta = go(a)
                out = None if ta is None else [(-c, f) for c, f in ta]
            case Binary("mul", a, b, d) if d == dt and a.dtype == b.dtype == dt:
                ta, tb = go(a), go(b)
                if ta is None or tb is None:
                    out = None
                else:
                    # a sum inside a product stays one factor, unless distributing it
                    # over one term: (a - b) * (a - b) multiplied out would cancel
                    # (a variance as E[x^2] - E[x]^2)
                    if not distribute or (len(ta) > 1 and len(tb) > 1):
                        ta = ta if len(ta) == 1 else [(1.0, (a,))]
                        tb = tb if len(tb) == 1 else [(1.0, (b,))]
                    out = [(ca * cb, fa + fb) for ca, fa in ta for cb, fb in tb]
            case Const(v, d) if d == dt:
                out = [(float(v), ())]
            case _:
                out = [(1.0, (x,))]
        if out is not None and len(out) > MAX_TERMS:
            out = None
        memo[id(x)] = out
        return out

    try:
        return go(e)
    finally:
        go = None  # noqa: F811, F841 (it calls itself: a cycle holding its memo)


def _same_factors(a: Tuple[Expr, ...], b: Tuple[Expr, ...]) -> bool:
    """Are ``a`` and ``b`` the same factors, in any order?"""
    if len(a) != len(b):
        return False
    left = list(b)
    for f in a:
        k = next((k for k, g in enumerate(left) if hash(f) == hash(g) and same(f, g)), None)
        if k is None:
            return False
        left.pop(k)
    return True


def _product(fs, dtype: str) -> Optional[Expr]:
    out = None
    for f in fs:
        out = f if out is None else Binary("mul", out, f, dtype)
    return out


def _scaled(c: float, e: Optional[Expr], dtype: str) -> Expr:
    """``|c| * e`` (``e`` None: 1)."""
    if e is None:
        return Const(abs(c), dtype)
    return e if abs(c) == 1 else Binary("mul", Const(abs(c), dtype), e, dtype)


def _signed_sum(parts: List[Tuple[float, Optional[Expr]]], dtype: str) -> Expr:
    """``c0 * e0 + c1 * e1 + ...`` with a sign folded into each add or subtract (a
    positive part first: ``b - a``, not ``-a + b``)."""
    first = next((k for k, (c, _) in enumerate(parts) if c > 0), 0)
    parts = [parts[first]] + parts[:first] + parts[first + 1:]
    out = None
    for c, e in parts:
        x = _scaled(c, e, dtype)
        if out is None:
            out = x if c > 0 else Unary("neg", x, dtype)
        else:
            out = Binary("add" if c > 0 else "sub", out, x, dtype)
    return out


def _split(red: Reduce, terms: List[Term], movable) -> Tuple[Expr, List[Expr]]:
    """``red`` as sums of its terms, each term's factors that ``movable`` allows out of
    its sum (those not using its axes) multiplied outside: terms alike but for those
    factors share one sum (their factors summed outside), terms alike but for the sums'
    bodies share one factor (their bodies summed inside). Also the sums made (a
    constant summed over a box is a count, not a sum)."""
    dt = red.dtype
    # by the factors staying inside: [inside, [(c, outside)]]
    by_inside: List[Tuple[Tuple[Expr, ...], List[Tuple[float, Tuple[Expr, ...]]]]] = []
    for c, fs in terms:
        out = tuple(f for f in fs if movable(f))
        inside = tuple(f for f in fs if not movable(f))
        for k, (ins, outs) in enumerate(by_inside):
            if _same_factors(ins, inside):
                outs.append((c, out))
                break
        else:
            by_inside.append((inside, [(c, out)]))
    # each: (c, outside expression or None, [(c, inside factors)])
    items: List[Tuple[float, Optional[Expr], Tuple[Expr, ...], list]] = []
    for inside, outs in by_inside:
        if len(outs) == 1:
            c, out = outs[0]
            key, outer = out, _product(out, dt)
        else:
            c, key = 1.0, None
            outer = _signed_sum([(c_, _product(o, dt)) for c_, o in outs], dt)
        for k, (c0, o0, key0, body) in enumerate(items):
            if key is not None and key0 is not None and _same_factors(key, key0):
                body.append((c / c0, inside))
                break
        else:
            items.append((c, outer, key, [(1.0, inside)]))
    parts, sums = [], []
    for c, outer, _, body in items:
        inner = _signed_sum([(cb, _product(fs, dt)) for cb, fs in body], dt)
        if (isinstance(inner, Const) and red.where is None
                and all(isinstance(a.lo, Const) and isinstance(a.hi, Const) for a in red.axes)):
            s = Const(inner.value * points(red.axes), dt)  # a constant summed: a count
        else:
            s = Reduce("sum", inner, red.axes, red.where, dt)
            sums.append(s)
        parts.append((c, s if outer is None else Binary("mul", outer, s, dt)))
    # a coefficient common to every part leaves the sum of parts
    scale = abs(parts[0][0])
    if scale != 1 and all(abs(c) == scale for c, _ in parts):
        return Binary("mul", Const(scale, dt), _signed_sum([(c / scale, e) for c, e in parts], dt),
                      dt), sums
    return _signed_sum(parts, dt), sums


def _per_point(e: Expr, sums, around) -> float:
    """:func:`flops` of ``e`` per point of the axes ``around`` it, where each of ``sums``
    that misses some of those axes (``MIN_REDUNDANCY`` points at least) is computed
    once per point of the axes it uses (:mod:`passes.hoist` stores it)."""
    total = flops(e)
    for s in sums:
        used = {a.uid for a in free_axes(s)}
        n = points([a for a in around if a.uid not in used])
        if n >= MIN_REDUNDANCY:
            total -= flops(s) * (1 - 1 / n)
    return total


def _leave_alone(red: Reduce) -> bool:
    """Does ``red``'s body hold what the rewrite must not touch: a max or min reduction, a
    select on data (which points are evaluated depends on values)?"""
    for x in walk(red.body, unique=True):
        if isinstance(x, Reduce) and x.op != "sum":
            return True
        if isinstance(x, Select) and any(isinstance(y, Read) for y in walk(x.cond, unique=True)):
            return True
    return False


def factored(red: Reduce, bound: Dict[int, object]) -> Optional[Expr]:
    """``red`` with its reduction-invariant factors out of its terms' sums, if that pays
    (see the module docstring); None otherwise. ``bound``: the axes around ``red`` by
    uid (the tensor's and enclosing reductions').

    >>> import tensorexpr as te
    >>> H = te.placeholder((8, 8), name="H"); A = te.placeholder((8, 4), name="A")
    >>> B = te.placeholder((8, 4), name="B")
    >>> j = te.reduce_axis(8, "j")
    >>> dA = te.compute((8, 4), lambda i, k: te.sum(2.0 * (H[i, j] * (A[i, k] - B[j, k])),
    ...                 axis=j), name="dA")
    >>> print(factored(dA.body, {a.uid: a for a in dA.axes}))
    (2.0 * ((A[i, k] * (sum_{j in [0, 8)} H[i, j])) - (sum_{j in [0, 8)} (H[i, j] * B[j, k]))))
    """
    if red.op != "sum" or not is_float(red.dtype) or _leave_alone(red):
        return None
    own = {a.uid for a in red.axes}
    full = red.where is None and all(
        isinstance(a.lo, Const) and isinstance(a.hi, Const) and a.hi.value > a.lo.value
        for a in red.axes)
    around = list(bound.values())

    def movable(f: Expr) -> bool:
        if any(a.uid in own for a in free_axes(f)):
            return False
        if full:  # evaluated at every point the sum is
            return True
        # else evaluated where it was not: only if each read is proved in range there
        inner = list(walk(f, unique=True))
        return not any(isinstance(y, Reduce) for y in inner) and all(
            inside_by_intervals(r, around) for r in inner if isinstance(r, Read))

    used = {a.uid: a for a in free_axes(red)}
    before = _per_point(red, [red], around)
    best, best_cost = None, math.inf
    for distribute in (False, True):
        terms = expand(red.body, distribute)
        # terms with a zero coefficient add nothing (a sum of 0.0: no term at all, the
        # sum is left as it is, nothing to gain)
        terms = None if terms is None else [t for t in terms if t[0] != 0]
        if not terms:
            continue
        e, sums = _split(red, terms, movable)
        missed = [[a for uid, a in used.items() if uid not in {b.uid for b in free_axes(s)}]
                  for s in sums]
        # a sum that no longer uses an axis: stored once, smaller (terms that became a
        # count alone save a few operations of a loop that still reads the data, and
        # sum_i (X - mean) as sum_i X - N * mean cancels: a norm's gradient ran slower)
        pays = any(m and points(m) >= MIN_REDUNDANCY for m in missed)
        cost = _per_point(e, sums, around)
        if pays and cost <= before and cost < best_cost:
            best, best_cost = e, cost
    return best


def factor_sums(t: Tensor) -> Tensor:
    """``t`` with each sum of its body :func:`factored` where that pays; recurrences,
    and sums whose value is compared (a max's tie test), are left as written.

    >>> import tensorexpr as te
    >>> H = te.placeholder((8, 8), name="H"); A = te.placeholder((8, 4), name="A")
    >>> s = te.placeholder((8,), name="s"); B = te.placeholder((8, 4), name="B")
    >>> j = te.reduce_axis(8, "j")
    >>> G = te.compute((8, 4), lambda i, k: te.sum(H[i, j] * (A[i, k] * s[j] - B[j, k]),
    ...                axis=j), name="G")
    >>> print(factor_sums(G).body)
    ((A[i, k] * (sum_{j in [0, 8)} (H[i, j] * s[j]))) - (sum_{j in [0, 8)} (H[i, j] * B[j, k])))
    """
    if not isinstance(t, Compute) or t.body is None or t.self_ref is not None \
            or t.carry is not None:
        return t
    new: Dict[int, Expr] = {}
    for x, bound, _, compared in contexts(t):
        if isinstance(x, Reduce) and not compared and id(x) not in new:
            e = factored(x, bound)
            if e is not None:
                new[id(x)] = e
    if not new:
        return t
    return replace(t, body=bottom_up(t.body, lambda y: y, stop=lambda y: new.get(id(y))))


def compared_tensors(order) -> set:
    """The uids of the tensors of ``order`` (a program's tensors) whose values reach a
    comparison or a max or min somewhere, directly or through other tensors: their sums
    must round as written (a max's gradient recomputes its body in another program and
    tests it for a tie with the stored maximum).

    >>> import tensorexpr as te
    >>> X = te.placeholder((4, 4), name="X"); k = te.reduce_axis(4, "k")
    >>> S = te.compute((4, 4), lambda i, j: X[i, j] * 2.0, name="S")
    >>> M = te.compute((4,), lambda i: te.max(S[i, k], axis=k), name="M")
    >>> sorted(t.name for t in (S, X) if t.uid in compared_tensors([X, S, M]))
    ['S', 'X']
    """
    out: set = set()
    todo: List[Tensor] = []
    for t in order:
        if isinstance(t, Compute) and t.body is not None:
            todo += [x.tensor for x, _, _, cmp in contexts(t) if cmp and isinstance(x, Read)]
    while todo:
        t = todo.pop()
        if t.uid not in out:
            out.add(t.uid)
            todo += list(tensor_inputs(t))
    return out


def factor_all(outputs) -> Tuple[Dict[int, Tensor], List[Tensor]]:
    """Every tensor reachable from ``outputs`` after :func:`factor_sums`, keyed by uid (a
    rewritten tensor keeps its uid: it holds the same values up to rounding), and the
    tensors rewritten.

    >>> import tensorexpr as te
    >>> X = te.placeholder((8, 8), name="X"); k = te.reduce_axis(8, "k")
    >>> Y = te.compute((8,), lambda i: te.sum(X[i, k], axis=k), name="Y")
    >>> done, changed = factor_all([Y]); changed
    []
    """
    order = topo_order(list(outputs))
    kept = compared_tensors(order)
    done: Dict[int, Tensor] = {}
    changed: List[Tensor] = []
    for t in order:
        t = redirect(t, done)
        y = t if t.uid in kept else factor_sums(t)
        if y is not t:
            changed.append(y)
        done[y.uid] = y
    return done, changed


__all__ = ["compared_tensors", "expand", "factor_all", "factor_sums", "factored", "flops", "points"]

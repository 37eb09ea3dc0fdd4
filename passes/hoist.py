"""Invariant hoisting between tensors: a costly sub-expression evaluated under axes it
does not use becomes a tensor of its own, computed once per point of the axes it uses.

The gradient of a weight read inside a recurrence cell is

    dU[k, j] = sum_{t, b} (dh[t, b, j] * P[t, b, j]) * h[t - 1, b, k]

where ``P`` holds the sigmoids and tanhs of the forward's sums: evaluated inline,
``P`` is computed once for every ``k``, ``D`` times its own points. With
``G[t, b, j] = dh[t, b, j] * P[t, b, j]`` stored, ``dU`` is a contraction of two
stored tensors. A sub-expression is hoisted where

- it is costly: a floating-point transcendental (``COSTLY_OPS``) or a reduction;
- it does not use every axis around it (the tensor's axes and the axes of the
  reductions it is inside), and the axes it misses have at least
  ``MIN_REDUNDANCY`` points together (symbolic extents count as many);
- wherever it is evaluated, it is under the same conditions (a select's condition
  for its branches, the left operand of ``&``/``|`` for the right one, a
  reduction's where for its body), and those hold no reduction; conjuncts on axes it
  does not use must be affine and are projected onto the axes it uses (isl: "some
  value of the other axes satisfies them"): the new tensor holds it where the
  conditions hold (0 elsewhere, never read), so it is evaluated at exactly the
  points of its own axes where the original evaluated it, and its reads stay in
  range;
- in a recurrence, it does not read the recurrence's own values (the partials of
  an adjoint's sum over a step, ``P[t + 1, b, j']`` in ``sum_j' dh[t + 1, b, j'] *
  P[t + 1, b, j'] * U[j, j']``, are computed for every step before the sequential
  loop, in parallel, instead of once per column inside it);
- the axes it uses range over a box (their bounds hold no other axis), and the
  new tensor has at most ``MAX_ELEMENTS`` elements when its shape is known.

The largest such sub-expression is taken (top down), so the new tensor holds as
much of the invariant work as possible. Besides, when a body (not a recurrence's)
holds several reductions outside any other and any condition, without a where
(an LSTM's gates,
``x @ Wx + h @ Wh + b``), each becomes a tensor of its own: the strategy table
tiles a tensor's one sum, and two sums in one loop nest would be plain dot
products. Values are unchanged: the hoisted
expression is the same expression, stored in its own type.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Dict, List, Tuple

from tensorexpr.ir import (Axis, Binary, COSTLY_OPS, Compute, Const, Expr, Read, Reduce,
                           Select, Tensor, Unary, children, is_float, postorder,
                           reads, same, topo_order, walk)
from tensorexpr.polyhedral import seen_from
from tensorexpr.transform import bottom_up, free_axes

from .contexts import contexts
from .extract import extract, is_box, redirect

#: the points the axes a sub-expression misses must have together for it to be hoisted
MIN_REDUNDANCY = 4
#: the largest hoisted tensor (elements), when its shape is known
MAX_ELEMENTS = 1 << 26


def _analysis(t: Compute):
    """``_uses(t.body) + (contexts(t),)``, kept for the last tensor asked: :func:`hoist`
    asks :func:`regroup`, then :func:`invariant_parts` of the same tensor when it
    regroups nothing (the tensor is immutable; kept with its answer, its id is not
    reused while kept). Read-only for the callers."""
    global _LAST
    last = _LAST  # (a tuple rebound whole: another thread's build at worst misses)
    if last[0] is t:
        return last[1]
    got = _uses(t.body) + (contexts(t),)
    _LAST = (t, got)
    return got


_LAST: tuple = (None, None)


def _uses(e: Expr) -> Tuple[Dict[int, frozenset], Dict[int, bool]]:
    """Per node of ``e`` (by id): the uids of the axes it uses freely, and whether it
    holds costly work (a float transcendental or a reduction)."""
    used: Dict[int, frozenset] = {}
    costly: Dict[int, bool] = {}
    for x in postorder(e, _children):
        kids = _children(x)
        u = frozenset().union(*(used[id(c)] for c in kids)) if kids else frozenset()
        c = any(costly[id(k)] for k in kids)
        match x:
            case Axis(uid=uid):
                u = frozenset({uid})
            case Reduce(axes=axes):
                u = u - {a.uid for a in axes}
                c = True
            case Unary(op, _, dt) | Binary(op, _, _, dt) if op in COSTLY_OPS and is_float(dt):
                c = True
        used[id(x)], costly[id(x)] = u, c
    return used, costly


def _children(x: Expr):
    if isinstance(x, Reduce):
        # the bounds of a reduction's axes are evaluated with it
        return tuple(b for a in x.axes for b in (a.lo, a.hi)) + children(x)
    return children(x)


def box_points(axes: List[Axis], symbolic: float = math.inf) -> float:
    """The points of the box of ``axes``; a symbolic extent counts ``symbolic``.

    >>> import tensorexpr as te
    >>> n = te.var("n")
    >>> box_points([te.reduce_axis(8), te.reduce_axis((2, 6))]), box_points([te.reduce_axis(n)])
    (32.0, inf)
    """
    n = 1.0
    for a in axes:
        if isinstance(a.lo, Const) and isinstance(a.hi, Const):
            n *= max(a.hi.value - a.lo.value, 0)
        else:
            n *= symbolic
    return n


def invariant_parts(t: Compute) -> List[Tuple[Expr, Tuple[Expr, ...]]]:
    """The sub-expressions of ``t``'s body to hoist (see the module docstring), outermost
    first, each with the conditions it is evaluated under.

    >>> import tensorexpr as te
    >>> X = te.placeholder((16, 8), name="X"); W = te.placeholder((8, 8), name="W")
    >>> k = te.reduce_axis(8, name="k")
    >>> Y = te.compute((16, 8), lambda i, j: te.sum(te.exp(X[i, k]) * W[k, j], axis=k), name="Y")
    >>> [(str(e), g) for e, g in invariant_parts(Y)]
    [('exp(X[i, k])', ())]
    """
    if not isinstance(t, Compute) or t.body is None:
        return []
    own = t.self_ref.uid if t.self_ref is not None else None
    used, costly, reached = _analysis(t)
    # a guarded part is hoisted only if it is evaluated under those guards wherever it
    # is: the stored tensor holds it only where they hold
    where: Dict[int, set] = {}
    compared = set()
    for x, _, guards, cmp in reached:
        where.setdefault(id(x), set()).add(id(guards))  # (one tuple per guard set)
        if cmp:
            compared.add(id(x))
    # several sums in one body (an LSTM's gates: x @ Wx + h @ Wh + b): each becomes a
    # tensor the strategy table can tile, instead of dot products inside one loop nest
    # (sums under a where, such as the pieces of a gradient over a concatenation, are
    # left to the table: each covers part of the output)
    outer = {id(x): x for x, bound, guards, _ in reached if isinstance(x, Reduce)
             and not guards and x.where is None and len(bound) == len(t.axes)
             and x is not t.body}
    distinct: List[Expr] = []
    for x in outer.values():  # one sum written twice is one sum (computed once)
        if not any(same(x, y) for y in distinct):
            distinct.append(x)
    several = set(outer) if len(distinct) > 1 and own is None else set()
    found: List[Tuple[Expr, Tuple[Expr, ...]]] = []
    done = set()
    inside = set()  # parts within a hoisted one: their occurrences go with it
    for x, bound, guards, _ in reached:
        if id(x) in done or id(x) in inside:
            continue
        if id(x) in compared and any(isinstance(y, Reduce) for y in walk(x, unique=True)):
            # a sum stored apart may be summed in another order than inline: where its
            # value is compared (a max's tie test) it must stay as written
            continue
        missing = [a for uid, a in bound.items() if uid not in used[id(x)]]
        if id(x) in several:
            if not (is_float(x.dtype) and is_box(x)):
                continue
        elif not (x is not t.body and costly[id(x)] and is_float(x.dtype) and missing
                  and box_points(missing) >= MIN_REDUNDANCY and is_box(x)
                  and not MAX_ELEMENTS < box_points(free_axes(x)) < math.inf):
            continue
        if own is not None and any(r.tensor.uid == own for r in reads(x)):
            continue  # a recurrence's own values cannot leave its body
        if guards and (len(where[id(x)]) > 1 or any(
                any(isinstance(y, Reduce) for y in walk(g, unique=True))
                or (own is not None and any(r.tensor.uid == own for r in reads(g)))
                for g, _ in guards)):
            continue
        # conditions on axes it does not use (an adjoint's w == 1 selecting the part of
        # a state a sum feeds, around factors without w) are projected onto its axes
        conds = seen_from([g if p else Unary("not", g, "bool") for g, p in guards],
                          [a for uid, a in bound.items() if uid in used[id(x)]])
        if conds is None:
            continue
        conds = tuple(conds)
        found.append((x, conds))
        done.add(id(x))
        inside |= {id(y) for y in walk(x, unique=True)}
    return found


#: the most factors of one product :func:`regroup` reorders
MAX_FACTORS = 16


def _factors(x: Expr) -> Tuple[List[Expr], List[frozenset]]:
    """The operands of the product chain ``x`` (``a * (b * c)``: a, b, c), left to right
    (nested products of another type end it), and for each product inside the chain,
    the ids of the operands it multiplies (``{id(b), id(c)}``)."""
    out: List[Expr] = []
    spans: List[Tuple[int, int]] = []  # each inner product's operands: out[lo:hi]
    stack: list = [(x, False)]
    starts: List[int] = []
    while stack:
        y, closing = stack.pop()
        if closing:
            spans.append((starts.pop(), len(out)))
        elif (isinstance(y, Binary) and y.op == "mul" and y.dtype == x.dtype
              and len(out) + len(stack) < MAX_FACTORS):
            starts.append(len(out))
            stack += [(y, True), (y.b, False), (y.a, False)]
        else:
            out.append(y)
    return out, [frozenset(id(f) for f in out[lo:hi]) for lo, hi in spans if hi - lo < len(out)]


def regroup(t: Compute) -> Compute:
    """``t`` with each product whose costly factors miss axes that the other factors use
    reordered so that those factors form a sub-product: ``dh[t, b, j] * (P[t, b, j] *
    h[t - 1, b, k])``, as the adjoint of ``sum_k h[t - 1, b, k] * U[k, j]`` is written,
    becomes ``(dh[t, b, j] * P[t, b, j]) * h[t - 1, b, k]``, whose first factor
    :func:`invariant_parts` can store once per ``(t, b, j)`` (a GRU's weight gradient then
    contracts two stored tensors). Factors are grouped by the axes they use, groups
    using fewer axes first. Float products are reassociated (their last bits may
    change), so never where a value is compared (a max's tie test must see the bits
    its forward computed).

    >>> import tensorexpr as te
    >>> A = te.placeholder((8, 8), name="A"); B = te.placeholder((8, 8), name="B")
    >>> k = te.reduce_axis(8, name="k")
    >>> Y = te.compute((8, 8), lambda i, j: te.sum((te.exp(A[i, k]) * B[k, j]) * B[k, i],
    ...                axis=k), name="Y")
    >>> print(regroup(Y).body)
    (sum_{k in [0, 8)} ((exp(A[i, k]) * B[k, i]) * B[k, j]))
    """
    if t.body is None:
        return t
    used, costly, reached = _analysis(t)
    bounds: Dict[int, set] = {}
    compared = set()
    for x, bound, _, cmp in reached:
        bounds.setdefault(id(x), set()).add(frozenset(bound))
        if cmp:
            compared.add(id(x))
    inner = set()  # products that are an operand of another product of their type
    nodes = [x for x in postorder(t.body, _children)
             if isinstance(x, Binary) and x.op == "mul" and is_float(x.dtype)]
    for x in nodes:
        inner |= {id(c) for c in (x.a, x.b) if isinstance(c, Binary) and c.op == "mul"
                  and c.dtype == x.dtype}
    new: Dict[int, Expr] = {}
    for x in nodes:
        if id(x) in inner or id(x) in compared or len(bounds.get(id(x), ())) != 1:
            continue
        (bound,) = bounds[id(x)]
        leaves, inner_sets = _factors(x)
        if len(leaves) < 3 or any(f.dtype != x.dtype for f in leaves):
            continue
        groups: Dict[frozenset, List[Expr]] = {}
        for f in leaves:
            groups.setdefault(used[id(f)], []).append(f)
        # the costly group using fewest axes first, then each time the group adding
        # fewest axes to those used so far (costly ones first among equals)
        hot = {g: any(costly[id(f)] for f in groups[g]) for g in groups}
        order, left, have = [], set(groups), frozenset()
        while left:
            g = min(left, key=lambda g: (len(g - have), not hot[g], len(g), sorted(g)))
            order.append(g)
            left.remove(g)
            have |= g
        # worth it: a first few groups hold costly work and miss axes the rest use
        # (the longest such prefix: the part invariant_parts will take; none, or one the
        # product already holds as a sub-product, leaves the product as written)
        seen: frozenset = frozenset()
        part = None
        for k, g in enumerate(order[:-1]):
            seen |= g
            if any(hot[h] for h in order[:k + 1]):
                rest = used[id(x)] - seen
                axes = [a for a in free_axes(x) if a.uid in rest and a.uid in bound]
                if axes and box_points(axes) >= MIN_REDUNDANCY:
                    part = frozenset(id(f) for h in order[:k + 1] for f in groups[h])
        if part is None or part in inner_sets or len(part) == 1:
            continue
        out = None
        for g in order:
            for f in groups[g]:
                out = f if out is None else Binary("mul", out, f, x.dtype)
        new[id(x)] = out
    if not new:
        return t
    return replace(t, body=bottom_up(t.body, lambda y: y, stop=lambda y: new.get(id(y))))


def hoist(t: Compute) -> Tuple[Compute, List[Compute]]:
    """``t`` reading the tensors its :func:`invariant_parts` became, and those tensors
    (named ``t.name + "_h" + n``); ``t`` itself and ``[]`` if there is none. A part
    evaluated under conditions is stored where they hold (0 elsewhere: never read).

    >>> import tensorexpr as te
    >>> X = te.placeholder((16, 8), name="X"); W = te.placeholder((8, 8), name="W")
    >>> k = te.reduce_axis(8, name="k")
    >>> Y = te.compute((16, 8), lambda i, j: te.sum(te.exp(X[i, k]) * W[k, j], axis=k), name="Y")
    >>> Y2, new = hoist(Y)
    >>> print(new[0]); print(Y2)
    Y_h0[i, k] = exp(X[i, k])    for i in [0, 16), k in [0, 8)    float32
    Y[i, j] = sum_{k in [0, 8)} (Y_h0[i, k] * W[k, j])    for i in [0, 16), j in [0, 8)    float32
    """
    t = regroup(t)
    parts = invariant_parts(t)
    if not parts:
        return t, []
    new: List[Compute] = []
    read_of: Dict[int, Read] = {}
    unguarded: List[Tuple[Expr, Read]] = []  # parts stored without conditions so far
    for e, conds in parts:
        twin = None if conds else next((r for x, r in unguarded if same(x, e)), None)
        if twin is not None:  # the same part written twice: stored once
            read_of[id(e)] = twin
            continue
        held = e
        if conds:
            cond = conds[0]
            for c in conds[1:]:
                cond = Binary("and", cond, c, "bool")
            held = Select(cond, e, Const(0.0, e.dtype) if is_float(e.dtype) else Const(0, e.dtype),
                          e.dtype)
        # axes in the order the part itself uses them (its reads' layout), not its guards'
        g, read = extract(held, f"{t.name}_h{len(new)}", t.origin, order=free_axes(e))
        new.append(g)
        read_of[id(e)] = read
        if not conds:
            unguarded.append((e, read))
    body = bottom_up(t.body, lambda x: x, stop=lambda x: read_of.get(id(x)))
    return replace(t, body=body), new


def hoist_invariants(outputs) -> Tuple[Dict[int, Tensor], List[Tuple[Compute, Tensor]]]:
    """Every tensor reachable from ``outputs`` with its invariant parts hoisted, keyed by
    uid (a rewritten tensor keeps its uid: it holds the same values), and ``(new
    tensor, the tensor it was hoisted from)`` for each tensor made, in order.

    >>> import tensorexpr as te
    >>> X = te.placeholder((16, 8), name="X"); W = te.placeholder((8, 8), name="W")
    >>> k = te.reduce_axis(8, name="k")
    >>> Y = te.compute((16, 8), lambda i, j: te.sum(te.exp(X[i, k]) * W[k, j], axis=k), name="Y")
    >>> done, made = hoist_invariants([Y])
    >>> [(g.name, t.name) for g, t in made], sorted(t.name for t in done.values())
    ([('Y_h0', 'Y')], ['W', 'X', 'Y', 'Y_h0'])
    """
    done: Dict[int, Tensor] = {}
    made: List[Tuple[Compute, Tensor]] = []
    for t in topo_order(list(outputs)):
        t = redirect(t, done)
        todo = [t]
        while todo:  # a hoisted tensor may hold invariant parts of its own reductions
            x = todo.pop()
            y, new = hoist(x) if isinstance(x, Compute) else (x, [])
            done[y.uid] = y
            made += [(g, t) for g in new]
            todo += new
    return done, made

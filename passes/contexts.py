"""Where a tensor's body evaluates each of its nodes: the axes bound around a node and
the conditions it is evaluated under. Passes that move a sub-expression out of a body
(``passes.hoist``, ``passes.share``) must store it only where it was evaluated (its
reads may be in range only there) and must not move what is compared.
"""
from __future__ import annotations

from tensorexpr.ir import TIE_TESTS, kept_on, Binary, Cast, Compute, Reduce, Select, Unary
from tensorexpr.transform import free_axes


#: guard sets a node is reported under exactly (per axes bound and comparedness)
MAX_GUARD_SETS = 16


def contexts(t: Compute):
    """Every way ``t``'s body reaches its nodes: ``(node, axes around it by uid,
    guards, compared)`` once each, where ``guards`` are the ``(condition, polarity)``
    under which the node is evaluated (a select's condition for its branches, the left
    operand of ``&``/``|`` for the right one, a reduction's where for its body) and
    ``compared`` says whether its value reaches an equality test (``ir.TIE_TESTS``: a sum
    moved out of one would be summed in another order than where it is written, and a
    tie test would see other bits) or a max's/min's body. A node reached under more than
    ``MAX_GUARD_SETS`` guard sets (selects nested in each other's branches) is reported
    under the first ``MAX_GUARD_SETS`` of them exactly and under weaker ones (outermost guard only) for
    the others, so the count stays linear in the body. Nodes
    inside a reduction whose axes' bounds hold other axes are not reached: no box
    holds them. Index expressions of reads are not visited.

    >>> import tensorexpr as te
    >>> X = te.placeholder((4,), name="X")
    >>> Y = te.compute((4,), lambda i: te.select(i > 0, te.exp(X[i - 1]), 0.0), name="Y")
    >>> [(str(x), [(str(g), p) for g, p in gs]) for x, _, gs, _ in contexts(Y)
    ...  if str(x).startswith("exp")]
    [('exp(X[i - 1])', [('(i > 0)', True)])]

    Equal guard sets are one tuple object: compare them by ``id`` (a chain of 1,000
    selects reaches its innermost nodes under 1,000 guards; spelling each set out per
    node made the walk quadratic in depth).

    Kept on the (immutable) tensor, as its inputs are (``ir.tensor_inputs``): the passes
    of a build ask again of the tensors the passes before left as they were
    (``passes.factor_sums`` twice, ``passes.hoist``, each round of ``passes.share``).
    Read-only for the callers.
    """
    return kept_on(t, "_contexts", lambda: tuple(_contexts(t)))


def _contexts(t: Compute) -> list:
    out = []
    seen = set()
    variants: dict = {}  # (node, axes, compared) -> guard sets it was reached under
    # a guard set is named by an int, (its parent set's, the new guard's id, polarity)
    # interned: the key of a node under 1,000 guards is not a tuple of 1,000 ids
    names: dict = {}
    sets: dict = {0: ()}  # name -> the one tuple of that guard set

    def extend(gk, guards, cond, polarity):
        k = names.setdefault((gk, id(cond), polarity), len(names) + 1)
        if k not in sets:
            sets[k] = guards + ((cond, polarity),)
        return k, sets[k]

    stack = [(t.body, {a.uid: a for a in t.axes}, 0, False)]
    while stack:
        x, bound, gk, cmp = stack.pop()
        guards = sets[gk]
        axes = frozenset(bound)
        key = (id(x), axes, gk, cmp)
        if key in seen:
            continue
        group = (id(x), axes, cmp)
        if guards and variants.get(group, 0) >= MAX_GUARD_SETS:
            # Nested selects reach a node under one guard set per path: 2**depth. Past
            # MAX_GUARD_SETS exact ones, a path keeps only its outermost guard (weaker:
            # more points, so a box over them still holds the node's), and the paths
            # below it merge. The exact ones already tell that it has several.
            gk, guards = extend(0, (), *guards[0])
            key = (id(x), axes, gk, cmp)
            if key in seen:
                continue
        seen.add(key)
        variants[group] = variants.get(group, 0) + 1
        out.append((x, bound, guards, cmp))
        match x:
            case Reduce(op, body, axes, where, _) if all(
                    not free_axes(a.lo) and not free_axes(a.hi) for a in axes):
                inner = {**bound, **{a.uid: a for a in axes}}
                # a max's or min's values are compared (its gradient tests for ties)
                c = cmp or op in ("max", "min")
                if where is not None:
                    stack.append((where, inner, gk, c))
                stack.append((body, inner, extend(gk, guards, where, True)[0]
                              if where is not None else gk, c))
            case Binary("and" | "or" as op, a, b, _):
                stack += [(b, bound, extend(gk, guards, a, op == "and")[0], cmp),
                          (a, bound, gk, cmp)]
            case Select(c, a, b, _):
                stack += [(b, bound, extend(gk, guards, c, False)[0], cmp),
                          (a, bound, extend(gk, guards, c, True)[0], cmp), (c, bound, gk, cmp)]
            case Binary(op, a, b, _):
                c = cmp or op in TIE_TESTS
                stack += [(b, bound, gk, c), (a, bound, gk, c)]
            case Unary(_, a, _) | Cast(a, _):
                stack.append((a, bound, gk, cmp))
    return out

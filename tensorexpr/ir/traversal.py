"""Traversal of the IR: children, walks, post-orders, the reads and inputs of
tensors, producers before consumers.

>>> from tensorexpr.ir import Const, Binary
>>> [str(c) for c in children(Binary("add", Const(1, "int64"), Const(2, "int64"), "int64"))]
['1', '2']
"""

from __future__ import annotations

import threading
from typing import Tuple

from .nodes import (kept_on, Expr, SizeVar, Axis, Binary, Unary, Cast, Select, Read, Reduce, Tensor,
                    SelfRef, Compute, ScatterAdd)

# {{{ traversal helpers


def children(e: Expr) -> Tuple[Expr, ...]:
    """The direct sub-expressions of ``e`` (axis bounds and tensors excluded).

    >>> import tensorexpr as te
    >>> X = te.placeholder((3,), name="X")
    >>> children(te.select(X[0] > 0.0, X[1], 2.0))
    ((X[0] > 0.0), X[1], 2.0)
    """
    # (a table by exact type, not a match statement: every walk of the IR asks, and the
    # classes have no subclasses; 4x faster)
    of = _CHILDREN.get(type(e))
    return () if of is None else of(e)


_CHILDREN = {
    Binary: lambda e: (e.a, e.b),
    Unary: lambda e: (e.a,),
    Cast: lambda e: (e.a,),
    Select: lambda e: (e.cond, e.a, e.b),
    Read: lambda e: tuple(e.indices),
    Reduce: lambda e: (e.body,) if e.where is None else (e.body, e.where),
}


def walk(e: Expr, unique: bool = False):
    """Pre-order iteration over ``e`` and all its sub-expressions.

    By default a node shared by several parents is visited once per path (the
    tree); ``unique=True`` visits each node object once, which stays linear on a
    DAG whose tree is exponentially large (``x = tanh(x) * 0.5 + x``).

    >>> from tensorexpr.ir import Const, Binary
    >>> x = Binary("add", Const(1, "int64"), Const(2, "int64"), "int64")
    >>> len(list(walk(Binary("mul", x, x, "int64")))), len(list(walk(x * x, unique=True)))
    (7, 4)
    """
    # (two loops, the lookups bound once: walks visit most nodes of every pass)
    kids = _CHILDREN.get
    stack = [e]
    pop, extend = stack.pop, stack.extend
    if not unique:
        while stack:
            x = pop()
            yield x
            of = kids(type(x))
            if of is not None:
                extend(reversed(of(x)))
        return
    seen: set = set()
    add = seen.add
    while stack:
        x = pop()
        if id(x) in seen:
            continue
        add(id(x))
        yield x
        of = kids(type(x))
        if of is not None:
            extend(reversed(of(x)))


def evaluated_with(e: Expr) -> Tuple[Expr, ...]:
    """The children of ``e`` evaluated wherever ``e`` is: not a select's branches, the
    right operand of ``&``/``|`` (each evaluated only where its condition allows) nor
    a reduction's body and where (evaluated over more axes).

    >>> import tensorexpr as te
    >>> X = te.placeholder((3,), name="X")
    >>> [str(c) for c in evaluated_with(te.select(X[0] > 0.0, X[1], X[2]))]
    ['(X[0] > 0.0)']
    """
    of = _EVALUATED.get(type(e))  # (by exact type, as children)
    return () if of is None else of(e)


_EVALUATED = {
    Cast: lambda e: (e.a,),
    Unary: lambda e: (e.a,),
    Binary: lambda e: (e.a,) if e.op in ("and", "or") else (e.a, e.b),
    Select: lambda e: (e.cond,),
    Read: lambda e: tuple(e.indices),
}


class _LastResults:
    """The results of ``fn`` for its last few arguments, kept by identity.

    Lowering asks for the post-order and occurrence counts of the same bodies many
    times; on a 10,000-deep gradient each walk is 60,000 nodes. Nodes are immutable,
    and the argument is held with its result, so its ``id`` cannot be reused.
    """

    def __init__(self, fn, size: int = 8):
        self.fn, self.size, self.kept = fn, size, {}
        self.lock = threading.Lock()  # programs may be built from several threads

    def __call__(self, e):
        hit = self.kept.get(id(e))
        if hit is None or hit[0] is not e:
            hit = (e, tuple(self.fn(e)))
            with self.lock:
                self.kept[id(e)] = hit
                while len(self.kept) > self.size:
                    del self.kept[next(iter(self.kept))]
        return list(hit[1])


def postorder(e: Expr, kids=None) -> list:
    """The distinct node objects of ``e``, children before parents (left to right);
    ``kids(x)`` gives the children to follow (default :func:`children`).

    >>> from tensorexpr.ir import Const, Binary
    >>> x = Binary("add", Const(1, "int64"), Const(2, "int64"), "int64")
    >>> [str(n) for n in postorder(Binary("mul", x, x, "int64"))]
    ['1', '2', '(1 + 2)', '((1 + 2) * (1 + 2))']
    """
    if kids is None:
        return _postorder_children(e)
    if kids is evaluated_with:  # the C lowering's staging asks for it at every expression
        return _postorder_evaluated(e)
    return _postorder(e, kids)


def _postorder(e: Expr, kids) -> list:
    out, seen, stack = [], set(), [(e, False)]
    while stack:
        x, expanded = stack.pop()
        if expanded:
            out.append(x)
            continue
        if id(x) in seen:
            continue
        seen.add(id(x))
        stack.append((x, True))
        stack.extend((c, False) for c in reversed(kids(x)))
    return out


_postorder_children = _LastResults(lambda e: _postorder(e, children))
_postorder_evaluated = _LastResults(lambda e: _postorder(e, evaluated_with))


def occurrences(e: Expr) -> list:
    """``(node, n)`` for each node object of ``e`` (pre-order), ``n`` its number of
    occurrences in ``e``'s tree: what ``walk(e)`` would count, in time linear in
    the DAG (``x * x`` holds ``x`` twice).

    >>> from tensorexpr.ir import Const, Binary
    >>> x = Binary("add", Const(1, "int64"), Const(2, "int64"), "int64")
    >>> [(str(n), k) for n, k in occurrences(Binary("mul", x, x, "int64"))]
    [('((1 + 2) * (1 + 2))', 1), ('(1 + 2)', 2), ('1', 2), ('2', 2)]
    """
    return _occurrences(e)


def _count_occurrences(e: Expr) -> list:
    order = postorder(e)[::-1]  # parents before children
    count = {id(e): 1}
    for x in order:
        for c in children(x):
            count[id(c)] = count.get(id(c), 0) + count[id(x)]
    return [(x, count[id(x)]) for x in walk(e, unique=True)]


_occurrences = _LastResults(_count_occurrences)


def reads(e: Expr):
    """All :class:`Read` nodes in ``e``, in pre-order (each node object once).

    >>> import tensorexpr as te
    >>> X = te.placeholder((3,), name="X")
    >>> reads(X[0] * X[X[1].astype("int64")])
    [X[0], X[int64(X[1])], X[1]]
    """
    return [x for x in walk(e, unique=True) if isinstance(x, Read)]


def tensor_exprs(t: Tensor) -> Tuple[Expr, ...]:
    """The expressions that define ``t`` (empty for placeholders).

    >>> import tensorexpr as te
    >>> X = te.placeholder((3,), name="X")
    >>> tensor_exprs(te.compute((3,), lambda i: X[i] * 2.0)), tensor_exprs(X)
    (((X[i] * 2.0),), ())
    """
    match t:
        case Compute():
            return (t.body,)
        case ScatterAdd():
            parts = tuple(t.indices) + (t.value,)
            return parts if t.where is None else parts + (t.where,)
        case _:
            return ()


def tensor_inputs(t: Tensor) -> Tuple[Tensor, ...]:
    """Tensors read by ``t``'s definition (each once, first-read order; no SelfRef).

    >>> import tensorexpr as te
    >>> X, Y = te.placeholder((3,), name="X"), te.placeholder((3,), name="Y")
    >>> [t.name for t in tensor_inputs(te.compute((3,), lambda i: Y[i] * X[i] + Y[0]))]
    ['Y', 'X']
    """
    # kept on the (immutable) tensor, as its hash is: passes and the lowering ask for a
    # tensor's inputs again and again (an LSTM's gradient: 725 walks of 47 bodies)
    return kept_on(t, "_inputs", lambda: _tensor_inputs(t))


def _tensor_inputs(t: Tensor) -> Tuple[Tensor, ...]:
    seen = {}
    for e in tensor_exprs(t):
        for r in reads(e):
            if not isinstance(r.tensor, SelfRef):
                seen.setdefault(r.tensor.uid, r.tensor)
        for x in walk(e, unique=True):
            if isinstance(x, Reduce):
                for ax in x.axes:
                    for b in (ax.lo, ax.hi):
                        for r in reads(b):
                            seen.setdefault(r.tensor.uid, r.tensor)
    return tuple(seen.values())


def topo_order(outputs) -> list:
    """Every tensor reachable from ``outputs``, producers before consumers.

    >>> import tensorexpr as te
    >>> A, B = te.placeholder((3,), name="A"), te.placeholder((3,), name="B")
    >>> C = te.compute((3,), lambda i: A[i] + B[i], name="C")
    >>> [t.name for t in topo_order([C])]
    ['A', 'B', 'C']
    """
    order, state = [], {}
    for out in outputs:
        stack = [(out, False)]
        while stack:
            t, done = stack.pop()
            if done:
                if state.get(t.uid) != 2:
                    state[t.uid] = 2
                    order.append(t)
                continue
            if state.get(t.uid):
                continue
            state[t.uid] = 1
            stack.append((t, True))
            for p in reversed(tensor_inputs(t)):
                if not state.get(p.uid):
                    stack.append((p, False))
    return order


def size_vars(e: Expr) -> set:
    """Names of the size variables used in ``e`` (including in axis bounds).

    >>> import tensorexpr as te
    >>> n, m = te.var("n"), te.var("m")
    >>> k = te.reduce_axis(m, name="k")
    >>> sorted(size_vars(te.sum(k + n, axis=k)))
    ['m', 'n']
    """
    out = set()
    for x in walk(e, unique=True):
        if isinstance(x, SizeVar):
            out.add(x.name)
        elif isinstance(x, Axis):
            out |= size_vars(x.lo) | size_vars(x.hi)
        elif isinstance(x, Reduce):
            for ax in x.axes:
                out |= size_vars(ax.lo) | size_vars(ax.hi)
    return out


# }}}

"""Generic expression rewriting: a mutator that rebuilds only what changed, substitution."""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence

from .ir import (Axis, Binary, Cast, Const, Expr, Read, Reduce, Select, SizeVar, Unary,
                 children, fresh_uid, kept_on, walk)


def rebuild(e: Expr, f: Callable[[Expr], Expr]) -> Expr:
    """``e`` with ``f`` applied to each direct child; ``e`` itself if nothing changed.

    >>> from tensorexpr.ir import Const
    >>> rebuild(Const(1, "int64"), lambda x: x)
    1
    """
    # (by a table of the exact type, as ir.children: every rewrite rebuilds every node)
    of = _REBUILD.get(type(e))
    return e if of is None else of(e, f)


def _rebuild_binary(e, f):
    a, b = e.a, e.b
    a2, b2 = f(a), f(b)
    return e if (a2 is a and b2 is b) else Binary(e.op, a2, b2, e.dtype)


def _rebuild_unary(e, f):
    a2 = f(e.a)
    return e if a2 is e.a else Unary(e.op, a2, e.dtype)


def _rebuild_cast(e, f):
    a2 = f(e.a)
    return e if a2 is e.a else Cast(a2, e.dtype)


def _rebuild_select(e, f):
    c, a, b = e.cond, e.a, e.b
    c2, a2, b2 = f(c), f(a), f(b)
    return e if (c2 is c and a2 is a and b2 is b) else Select(c2, a2, b2, e.dtype)


def _rebuild_read(e, f):
    idx = e.indices
    idx2 = tuple([f(x) for x in idx])
    return e if all(x is y for x, y in zip(idx, idx2)) else Read(e.tensor, idx2, e.dtype)


def _rebuild_reduce(e, f):
    body, where = e.body, e.where
    body2 = f(body)
    where2 = None if where is None else f(where)
    return e if (body2 is body and where2 is where) else Reduce(e.op, body2, e.axes, where2,
                                                                e.dtype)


_REBUILD = {Binary: _rebuild_binary, Unary: _rebuild_unary, Cast: _rebuild_cast,
            Select: _rebuild_select, Read: _rebuild_read, Reduce: _rebuild_reduce}


def bottom_up(e: Expr, post: Callable[[Expr], Expr],
              stop: Optional[Callable[[Expr], Optional[Expr]]] = None,
              memo: Optional[Dict[int, Expr]] = None) -> Expr:
    """Rewrite ``e`` children first: each node is rebuilt from its children's results
    and ``post`` gives its own. ``stop(x)``, if not None, is ``x``'s result and its
    children are left alone.

    Each node object is rewritten once (an expression is a DAG: ``x = tanh(x) + x``
    shares ``x``), and without recursion, so any depth works. ``memo`` (results by node
    id) may be shared by rewrites of several expressions by the same ``post`` and
    ``stop``: a node they share is then rewritten once for all (the caller keeps the
    expressions alive meanwhile, so that no id is reused).

    >>> from tensorexpr.ir import Const
    >>> bump = lambda x: Const(x.value + 1, x.dtype) if isinstance(x, Const) else x
    >>> bottom_up(Const(1, "int64") + 2, bump)
    (2 + 3)
    """
    if memo is None:
        memo = {}
    done = memo.__getitem__
    # (x, True): x's children are done, x is next; x's stop is asked once, when first met
    stack = [(e, False)]
    pop, push = stack.pop, stack.append
    while stack:
        x, expanded = pop()
        if expanded:
            memo[id(x)] = post(rebuild(x, lambda c: done(id(c))))
            continue
        if id(x) in memo:
            continue
        if stop is not None:
            y = stop(x)
            if y is not None:
                memo[id(x)] = y
                continue
        todo = [c for c in children(x) if id(c) not in memo]
        if todo:
            push((x, True))
            for c in reversed(todo):
                push((c, False))
            continue
        memo[id(x)] = post(rebuild(x, lambda c: done(id(c))))
    return memo[id(e)]


def interned(e: Expr, table: Optional[Dict[Expr, Expr]] = None) -> Expr:
    """``e`` with structurally equal sub-expressions made one object (hash-consing):
    the first met of each stands for all. ``table`` (node -> its one object) may be
    shared between calls, so that several expressions share their equal parts.

    Passes and backends key their work by identity (a local per node in C, a partial
    per node): the terms of a gradient, each built by its own substitution, hold equal
    copies of one chain, and each copy was computed again.

    >>> import tensorexpr as te
    >>> X = te.placeholder((4,), name="X")
    >>> e = interned(te.exp(X[0]) + te.exp(X[0]))
    >>> e.a is e.b
    True
    """
    if table is None:
        table = {}
    return bottom_up(e, lambda x: table.setdefault(x, x))


def substitute(e: Expr, mapping: Dict[Expr, Expr]) -> Expr:
    """Replace axes / size variables (keys, matched structurally) by expressions.

    Substitution respects binders: a reduction binds its own axes in its body and
    ``where``, so a key that is one of them is not replaced there, and a bound axis
    that occurs in a replacement is renamed first (a fresh axis) instead of
    capturing it. A bound axis whose bounds change is renamed too, as its new
    range makes it another axis.

    >>> import tensorexpr as te
    >>> from tensorexpr.ir import Axis, Const
    >>> i = Axis("i", Const(0, "int64"), Const(4, "int64"), 1)
    >>> substitute(i + 1, {i: Const(3, "int64")})
    (3 + 1)
    >>> X = te.placeholder((4,), name="X")
    >>> k = te.reduce_axis(4, name="k")
    >>> substitute(X[k] + te.sum(X[k], axis=k), {k: Const(2, "int64")})
    (X[2] + (sum_{k in [0, 4)} X[k]))
    """
    if not mapping:
        return e
    return _Substitution(mapping).go(e)


class _Substitution:
    """One substitution; reductions open a scope of their own. Iterative within a
    scope (any depth, each shared node once); Python recursion only follows the
    nesting of reductions."""

    def __init__(self, mapping: Dict[Expr, Expr]):
        self.mapping = mapping
        self._value_axes: Optional[set] = None

    def go(self, x: Expr) -> Expr:
        return bottom_up(x, lambda y: y, self.leaf)

    def leaf(self, x: Expr) -> Optional[Expr]:
        if isinstance(x, (Axis, SizeVar)) and x in self.mapping:
            return self.mapping[x]
        if isinstance(x, Reduce):
            return self.reduce(x)
        return None

    def value_axes(self) -> set:
        """uids of every axis in a replacement (only these can be captured)."""
        if self._value_axes is None:
            self._value_axes = {a.uid for v in self.mapping.values() for a in _all_axes(v)}
        return self._value_axes

    def captures(self, r: Reduce, ax: Axis) -> bool:
        """Would ``ax``, bound by ``r``, capture an axis of a replacement made inside ``r``?"""
        if ax.uid not in self.value_axes():
            return False
        inside = [r.body] if r.where is None else [r.body, r.where]
        used = {a.uid for part in inside for a in free_axes(part)}
        sizes = {x for part in inside for x in walk(part, unique=True) if isinstance(x, SizeVar)}
        for k, v in self.mapping.items():
            occurs = k.uid in used if isinstance(k, Axis) else k in sizes
            if occurs and not (isinstance(k, Axis) and k.uid == ax.uid) and \
                    ax.uid in {a.uid for a in _all_axes(v)}:
                return True
        return False

    def reduce(self, r: Reduce) -> Expr:
        inner = dict(self.mapping)
        axes = []
        for ax in r.axes:
            lo, hi = self.go(ax.lo), self.go(ax.hi)  # bounds are evaluated outside
            inner.pop(ax, None)  # shadowed: the reduction's own variable
            if lo is not ax.lo or hi is not ax.hi or self.captures(r, ax):
                nax = Axis(ax.name, lo, hi, fresh_uid())
                inner[ax] = nax
                ax = nax
            axes.append(ax)
        axes = tuple(axes)
        if len(inner) == len(self.mapping) and all(a is b for a, b in zip(axes, r.axes)):
            go = self.go  # the same substitution inside: share its memo
        else:
            go = _Substitution(inner).go if inner else (lambda x: x)
        body = go(r.body)
        where = None if r.where is None else go(r.where)
        if body is r.body and where is r.where and all(a is b for a, b in zip(axes, r.axes)):
            return r
        return Reduce(r.op, body, axes, where, r.dtype)


def _all_axes(e: Expr) -> list:
    """Every axis in ``e``, free or bound, and the axes in bounds of bound axes."""
    out = []
    for x in walk(e, unique=True):
        if isinstance(x, Axis):
            out.append(x)
            out += _all_axes(x.lo) + _all_axes(x.hi)
        elif isinstance(x, Reduce):
            for ax in x.axes:
                out.append(ax)
                out += _all_axes(ax.lo) + _all_axes(ax.hi)
    return out


def map_reads(e: Expr, fn: Callable[[Read], Expr]) -> Expr:
    """``e`` with every read ``r`` replaced by ``fn(r)`` (bottom-up: indices first).

    Shared sub-expressions are rewritten once. ``fn`` returns ``r`` to keep it.

    >>> import tensorexpr as te
    >>> A = te.placeholder((4,), name="A"); B = te.placeholder((4,), name="B")
    >>> map_reads(A[1] + A[2], lambda r: B[r.indices])
    (B[1] + B[2])
    """
    return bottom_up(e, lambda y: fn(y) if isinstance(y, Read) else y)


def map_tensor_reads(t, fn: Callable[[Read], Expr]):
    """The tensor ``t`` (same uid) with :func:`map_reads` applied to every expression of
    its definition (a compute's body; a scatter-add's indices, value and condition);
    ``t`` itself when nothing changes.

    >>> import tensorexpr as te
    >>> A = te.placeholder((4,), name="A"); B = te.placeholder((4,), name="B")
    >>> C = te.compute((4,), lambda i: A[i] * 2.0, name="C")
    >>> print(map_tensor_reads(C, lambda r: B[r.indices]))
    C[i] = B[i] * 2.0    for i in [0, 4)    float32
    """
    import dataclasses

    from .ir import Compute, ScatterAdd
    if isinstance(t, Compute) and t.body is not None:
        body = map_reads(t.body, fn)
        return t if body is t.body else dataclasses.replace(t, body=body)
    if isinstance(t, ScatterAdd):
        idx = tuple(map_reads(i, fn) for i in t.indices)
        value = map_reads(t.value, fn)
        where = None if t.where is None else map_reads(t.where, fn)
        if value is t.value and where is t.where and all(a is b for a, b in zip(idx, t.indices)):
            return t
        return dataclasses.replace(t, indices=idx, value=value, where=where)
    return t


def replace_subexpr(e: Expr, target: Expr, repl: Expr,
                    memo: Optional[Dict[int, Expr]] = None) -> Expr:
    """``e`` with every sub-expression structurally equal to ``target`` replaced by ``repl``.

    Inside a reduction that binds an axis free in ``target`` or ``repl`` nothing is
    replaced: there the axis is the reduction's own variable, another value. ``memo``:
    as :func:`bottom_up`'s, shared by the rewrites of several expressions with the same
    ``target`` and ``repl``.

    >>> import tensorexpr as te
    >>> x = te.const(1.0) + 2.0
    >>> replace_subexpr(x * 3.0, x, te.const(9.0))
    (9.0 * 3.0)
    """
    from .ir import same
    h = hash(target)
    scoped = {a.uid for a in free_axes(target) + free_axes(repl)}

    def stop(x: Expr) -> Optional[Expr]:
        if hash(x) == h and same(x, target):
            return repl
        if isinstance(x, Reduce) and any(a.uid in scoped for a in x.axes):
            return x  # it binds an axis of the target or the replacement: another scope
        return None

    return bottom_up(e, lambda x: x, stop, memo)


def replace_subexprs(e: Expr, pairs) -> Expr:
    """``e`` with :func:`replace_subexpr` of each ``(target, repl)`` of ``pairs`` applied in
    turn. A target whose hash is no sub-expression's cannot match and is skipped
    without rewriting ``e`` (the hashes are cached on the nodes; a gradient asks for
    several targets of each partial, most of which it does not hold).

    >>> import tensorexpr as te
    >>> x = te.const(1.0) + 2.0
    >>> replace_subexprs(x * 3.0, [(te.const(5.0), te.const(0.0)), (x, te.const(9.0))])
    (9.0 * 3.0)
    """
    return replace_subexprs_each([e], pairs)[0]


def replace_subexprs_each(exprs: Sequence[Expr], pairs) -> List[Expr]:
    """``[replace_subexprs(e, pairs) for e in exprs]``, each node shared by several of
    ``exprs`` rewritten once per target for all of them: the partials of a recurrence's
    body (an LSTM step's, one per read) share most of their factors, and each partial
    would otherwise be walked again for each target it holds.

    >>> import tensorexpr as te
    >>> x = te.const(1.0) + 2.0
    >>> [str(e) for e in replace_subexprs_each([x * 3.0, x + x, te.const(4.0)],
    ...                                        [(x, te.const(9.0))])]
    ['(9.0 * 3.0)', '(9.0 + 9.0)', '4.0']
    """
    exprs = list(exprs)
    present = None
    for target, repl in pairs:
        if present is None:
            present = _hashes(exprs)
        if hash(target) not in present:
            continue
        memo: Dict[int, Expr] = {}  # (exprs holds the nodes it is keyed by)
        new = [replace_subexpr(e, target, repl, memo) for e in exprs]
        if any(a is not b for a, b in zip(new, exprs)):
            exprs, present = new, None
    return exprs


def _hashes(exprs: Sequence[Expr]) -> set:
    """The hashes of every node of ``exprs``, each node object visited once for all."""
    seen: set = set()
    out: set = set()
    stack = list(exprs)
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        out.add(hash(x))
        stack.extend(children(x))
    return out


def free_axes(e: Expr) -> list:
    """Axes used in ``e`` that no reduction inside ``e`` binds (first-use order).

    >>> import tensorexpr as te
    >>> A = te.placeholder((4, 8), name="A")
    >>> k = te.reduce_axis(8, name="k")
    >>> from tensorexpr.ir import Axis, Const
    >>> i = Axis("i", Const(0, "int64"), Const(4, "int64"), 99)
    >>> [a.name for a in free_axes(te.sum(A[i, k], axis=k))]
    ['i']
    """
    # kept on the (immutable) node, as its hash is: the passes and the lowering ask again
    # of the same expressions (an LSTM gradient's build: 1,233 questions of 326)
    if not hasattr(e, "__dict__"):  # (not a node: nowhere to keep the answer)
        return _free_axes(e)
    return list(kept_on(e, "_free_axes", lambda: tuple(_free_axes(e))))


def _free_axes(e: Expr) -> list:
    out: Dict[int, Axis] = {}
    # An explicit stack (any depth) and each (node, bound axes) pair once (a DAG).
    seen = set()
    stack = [(e, frozenset())]
    while stack:
        x, bound = stack.pop()
        if (id(x), bound) in seen:
            continue
        seen.add((id(x), bound))
        match x:
            case Axis():
                if x.uid not in bound:
                    out.setdefault(x.uid, x)
            case Reduce(_, body, axes, where, _):
                inner = bound | {a.uid for a in axes}
                todo = [(b, bound) for ax in axes for b in (ax.lo, ax.hi)] + [(body, inner)]
                if where is not None:
                    todo.append((where, inner))
                stack.extend(reversed(todo))
            case _:
                stack.extend((c, bound) for c in reversed(children(x)))
    return list(out.values())


def flat_index(indices, dims) -> Expr:
    """The row-major element offset of ``indices`` in a tensor of constant ``dims``.

    >>> from tensorexpr.ir import Axis, Const
    >>> i = Axis("i", Const(0, "int64"), Const(4, "int64"), 1)
    >>> flat_index([i, Const(2, "int64")], [4, 5])
    ((i * 5) + 2)
    """
    from .ir import INDEX_DTYPE, Binary, Const
    if not indices:
        return Const(0, INDEX_DTYPE)
    out = indices[0]
    for x, n in zip(indices[1:], dims[1:]):
        out = Binary("add", Binary("mul", out, Const(n, INDEX_DTYPE), INDEX_DTYPE), x, INDEX_DTYPE)
    return out


def is_const(e: Expr, value=None) -> bool:
    """Is ``e`` a literal (equal to ``value`` if given)?

    >>> import tensorexpr as te
    >>> is_const(te.const(0)), is_const(te.const(0), 1), is_const(te.var("n"))
    (True, False, False)
    """
    return isinstance(e, Const) and (value is None or e.value == value)


def contains(e: Expr, pred: Callable[[Expr], bool]) -> bool:
    """Does any sub-expression of ``e`` satisfy ``pred``?

    >>> import tensorexpr as te
    >>> from tensorexpr.ir import SizeVar
    >>> contains(te.var("n") * 2 + 1, lambda x: isinstance(x, SizeVar))
    True
    """
    return any(pred(x) for x in walk(e, unique=True))


def const_value(e: Expr) -> Optional[int]:
    """The integer value of a literal, else None.

    >>> import tensorexpr as te
    >>> const_value(te.const(3)), const_value(te.const(0.5)), const_value(te.var("n"))
    (3, None, None)
    """
    return e.value if isinstance(e, Const) and not isinstance(e.value, float) else None


def eval_int(e: Expr) -> int:
    """Value of a closed integer expression (Python floor semantics).

    >>> import tensorexpr as te
    >>> eval_int(te.const(-7) // 2)
    -4
    """
    from .ir import Binary, Cast, Const, Select, Unary
    match e:
        case Const(v, _):
            return v
        case Cast(a, _):
            return int(eval_int(a))
        case Unary("neg", a, _):
            return -eval_int(a)
        case Unary("not", a, _):
            return not eval_int(a)
        case Select(c, a, b, _):
            return eval_int(a) if eval_int(c) else eval_int(b)
        case Binary(op, a, b, _):
            x, y = eval_int(a), eval_int(b)
            ops = {"add": lambda: x + y, "sub": lambda: x - y, "mul": lambda: x * y,
                   "floordiv": lambda: x // y if y else 0, "mod": lambda: x % y if y else 0,
                   "max": lambda: max(x, y), "min": lambda: min(x, y),
                   "lt": lambda: x < y, "le": lambda: x <= y, "eq": lambda: x == y,
                   "ne": lambda: x != y, "gt": lambda: x > y, "ge": lambda: x >= y,
                   "and": lambda: x and y, "or": lambda: x or y, "pow": lambda: x ** y}
            return ops[op]()
    raise ValueError(f"not a closed integer expression: {e}")

"""Static bounds checking: every affine read lies inside the tensor it reads.

A read is checked over the points where it is actually evaluated: the tensor's
box, the boxes of enclosing reductions, their ``where`` conditions, the
conditions of enclosing ``select`` branches and the left operands of enclosing
``&`` (``|``), whose right operand is evaluated only where the left one is true
(false). Conditions isl cannot represent
(data-dependent ones) are dropped, which can only enlarge the checked set.
Index dimensions that are data-dependent are left to the run-time check.
"""
from __future__ import annotations

from typing import Tuple

from .errors import BoundsError, describe
from .ir import (Axis, Binary, Compute, Const, Expr, Read, Reduce, ScatterAdd, Select,
                 SizeVar, Tensor, Unary, children, walk)
from .printer import expr_str, shape_str
from .transform import eval_int, substitute


def read_sites(e: Expr, guards: Tuple[Expr, ...] = (), axes: Tuple[Axis, ...] = ()):
    """Yield ``(read, guards, reduce_axes)`` for every read in ``e``.

    ``guards`` are the boolean conditions under which the read is evaluated and
    ``reduce_axes`` the reduction axes bound around it (outermost first). The
    right operand of ``a & b`` is guarded by ``a``, that of ``a | b`` by ``~a``. A
    sub-expression shared by several parents under the same guards is visited
    once (expressions are DAGs), with an explicit stack (any depth). A guard that only
    tests data (a comparison of values read, which every reader of these guards
    drops as not affine) is left out: selects nested on data would otherwise reach a
    shared read under 2**depth guard sets.

    >>> import tensorexpr as te
    >>> X = te.placeholder((4,), name="X")
    >>> i = te.reduce_axis(4, name="i")
    >>> [(str(r), [str(c) for c in g]) for r, g, _ in read_sites((i >= 1) & (X[i - 1] > 0.0))]
    [('X[i - 1]', ['(i >= 1)'])]
    >>> x = X[1]
    >>> [(str(r), g) for r, g, _ in read_sites(te.select(x > 0, x, 0.0))]
    [('X[1]', ())]
    >>> [str(g[0]) for _, g, _ in read_sites(te.select((i > 0) & (x > 0), X[i - 1], 0.0))][1:]
    ['((i > 0) & (X[1] > 0.0))']
    """
    # condition id -> does it only test data (see tests_data). Keyed by the condition
    # in the expression (alive throughout), never by a ``not`` made here: one dropped
    # would be freed and its id reused by the next
    data: dict = {}

    def keep(g, c, negated=False):
        if id(c) not in data:
            data[id(c)] = tests_data(c)
        if data[id(c)]:
            return g
        return g + (Unary("not", c, "bool") if negated else c,)

    seen = set()
    stack: list = [(e, guards, axes, False)]
    while stack:
        x, g, ax, emit = stack.pop()
        if emit:
            yield x, g, ax
            continue
        key = (id(x), tuple(id(c) for c in g), tuple(a.uid for a in ax))
        if key in seen:
            continue
        seen.add(key)
        match x:
            case Select(c, a, b, _):
                todo = [(c, g, ax, False), (a, keep(g, c), ax, False),
                        (b, keep(g, c, negated=True), ax, False)]
            case Binary("and", a, b, _):
                todo = [(a, g, ax, False), (b, keep(g, a), ax, False)]
            case Binary("or", a, b, _):
                todo = [(a, g, ax, False), (b, keep(g, a, negated=True), ax, False)]
            case Reduce(_, body, raxes, where, _):
                inner = ax + tuple(raxes)
                todo = [] if where is None else [(where, g, inner, False)]
                todo.append((body, g if where is None else keep(g, where), inner, False))
            case Read(_, idx, _):
                todo = [(i, g, ax, False) for i in idx] + [(x, g, ax, True)]
            case _:
                todo = [(c, g, ax, False) for c in children(x)]
        stack.extend(reversed(todo))


def tests_data(g: Expr) -> bool:
    """Is the condition ``g`` one test of values read (``X[i] > 0``, ``~(X[i] > 0)``),
    not a conjunction or disjunction that may hold an affine part?

    >>> import tensorexpr as te
    >>> X = te.placeholder((4,), name="X")
    >>> i = te.reduce_axis(4, name="i")
    >>> tests_data(~(X[i] > 0.0)), tests_data((i > 0) & (X[i] > 0.0)), tests_data(i > 0)
    (True, False, False)
    """
    while isinstance(g, Unary) and g.op == "not":
        g = g.a
    if isinstance(g, Binary) and g.op in ("and", "or"):
        return False
    return any(isinstance(x, (Read, Reduce)) for x in walk(g, unique=True))


def _definitions(t: Tensor):
    """``(expr, guards)`` pairs defining ``t``, over ``t``'s own axes."""
    match t:
        case Compute():
            return t.axes, [(t.body, ())]
        case ScatterAdd():
            g = () if t.where is None else (t.where,)
            parts = [(x, g) for x in t.indices] + [(t.value, g)]
            if t.where is not None:
                parts.append((t.where, ()))
            return t.axes, parts
    return (), []


def guard_set(space, g: Expr, over: bool = True):
    """A superset (``over``) or a subset of the points of ``space`` where ``g`` holds.

    Parts isl cannot represent (data-dependent comparisons) are widened to
    everything (or narrowed to nothing) one conjunct at a time, so that
    ``(i + k < 8) & (A[...] > 0)`` still proves a read of ``A[i + k]`` in range.

    >>> import tensorexpr as te
    >>> from tensorexpr.ir import Axis, Const
    >>> from tensorexpr.polyhedral import Space
    >>> i = Axis("i", Const(0, "int64"), Const(8, "int64"), 1)
    >>> X = te.placeholder((8,), name="X")
    >>> print(guard_set(Space([i]), (i < 3) & (X[i] > 0)))
    { [a1] : a1 <= 2 }
    """
    match g:
        case Binary("and", a, b, _):
            return guard_set(space, a, over) & guard_set(space, b, over)
        case Binary("or", a, b, _):
            return guard_set(space, a, over) | guard_set(space, b, over)
        case Unary("not", a, _):
            return guard_set(space, a, not over).complement()
    from .polyhedral import NotAffine
    try:
        return space.cond(g)
    except NotAffine:
        everything = space.universe()
        return everything if over else everything.complement()


def check_tensor(t: Tensor) -> None:
    """Raise :class:`BoundsError` if some affine read of ``t`` can leave its target.

    >>> import tensorexpr as te
    >>> A = te.placeholder((4,), name="A")
    >>> te.compute((4,), lambda i: A[i + 1], name="B")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tensorexpr.errors.BoundsError: tensor 'B' ... reads A[i + 1] outside ...
    """
    own_axes, parts = _definitions(t)
    for expr, guards0 in parts:
        for read, guards, raxes in read_sites(expr, guards0):
            axes = tuple(own_axes) + raxes
            if not inside_by_intervals(read, axes):
                _check_read(t, read, guards, axes)


def inside_by_intervals(read: Read, axes) -> bool:
    """Is ``read`` inside its target at every point of the box of ``axes``, by interval
    arithmetic on its indices? Guards are ignored (they only shrink the set), so True
    proves the read safe; False (not proved: symbolic sizes, a guard needed, an index
    interval arithmetic cannot bound) leaves it to isl. Most reads are proved here,
    so most definitions never import isl (~80 ms of a new process).

    >>> import tensorexpr as te
    >>> X = te.placeholder((8,), name="X")
    >>> i = Axis("i", Const(0, "int64"), Const(4, "int64"), 1)
    >>> inside_by_intervals(X[2 * i + 1], (i,)), inside_by_intervals(X[2 * i + 2], (i,))
    (True, False)
    """
    ranges = {}
    for ax in axes:
        if not (isinstance(ax.lo, Const) and isinstance(ax.hi, Const)):
            return False
        if ax.hi.value <= ax.lo.value:
            return True  # an empty box: the read is never evaluated
        ranges[ax.uid] = (ax.lo.value, ax.hi.value - 1)
    for ix, size in zip(read.indices, read.tensor.dims):
        got = _interval(ix, ranges)
        if got is None or not isinstance(size, Const) or got[0] < 0 or got[1] >= size.value:
            return False
    return True


def _interval(e: Expr, ranges):
    """``(lo, hi)`` bounding integer ``e`` over ``ranges`` (axis uid -> (lo, hi)), or
    None. Floor division and modulo by a positive constant (Python's semantics)."""
    match e:
        case Const(v, _) if isinstance(v, int) and not isinstance(v, bool):
            return v, v
        case Axis():
            return ranges.get(e.uid)
        case Unary("neg", a, _):
            r = _interval(a, ranges)
            return None if r is None else (-r[1], -r[0])
        case Binary(op, a, b, _) if op in ("add", "sub", "mul", "max", "min", "floordiv",
                                           "mod"):
            x, y = _interval(a, ranges), _interval(b, ranges)
            if x is None or y is None:
                return None
            if op == "add":
                return x[0] + y[0], x[1] + y[1]
            if op == "sub":
                return x[0] - y[1], x[1] - y[0]
            if op == "mul":
                ends = [p * q for p in x for q in y]
                return min(ends), max(ends)
            if op == "max":
                return max(x[0], y[0]), max(x[1], y[1])
            if op == "min":
                return min(x[0], y[0]), min(x[1], y[1])
            if y[0] != y[1] or y[0] <= 0:
                return None
            c = y[0]
            if op == "floordiv":
                return x[0] // c, x[1] // c
            return (x[0], x[1]) if 0 <= x[0] and x[1] < c else (0, c - 1)
    return None


def _check_read(t: Tensor, read: Read, guards, axes) -> None:
    from .polyhedral import NotAffine, Space, params_of  # isl: only when intervals fail
    target = read.tensor
    space = Space(axes, params_of(list(target.dims) + list(read.indices) + list(guards)))
    dom = space.box()
    for g in guards:
        dom = dom & guard_set(space, g)
    if dom.is_empty():
        return
    bad = None
    for d, (ix, size) in enumerate(zip(read.indices, target.dims)):
        try:
            pa = space.aff(ix)
        except NotAffine:
            continue  # data-dependent: checked when the kernel runs
        hi = space.aff(size)
        outside = dom & (pa.lt_set(space.vars[0]) | pa.ge_set(hi))
        if not outside.is_empty():
            bad = (d, outside)
            break
    if bad is None:
        return
    d, outside = bad
    pt = outside.sample_point()
    vals = space.point_values(pt)
    binding = {ax: Const(vals[ax.name], "int64") for ax in axes}
    binding.update({SizeVar(p): Const(vals[p], "int64") for p in space.params})
    where = ", ".join(f"{k} = {v}" for k, v in vals.items())
    try:
        idx_vals = tuple(eval_int(substitute(ix, binding)) for ix in read.indices)
        at = f" (index {idx_vals})"
    except Exception:
        at = ""
    raise BoundsError(
        f"{describe(t)} reads {expr_str(read)} outside {target.name!r} "
        f"(shape {shape_str(target.dims)}) at {where}{at}. Guard the read with "
        f"te.select(...) or where=..., shrink the domain, or pad the input")

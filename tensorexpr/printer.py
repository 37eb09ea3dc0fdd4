"""Readable, math-like text for expressions and tensor definitions (``str(tensor)``)."""
from __future__ import annotations

import numpy as np

from .ir import (Axis, Binary, Cast, Compute, Const, Expr, Placeholder, Read, Reduce,
                 ScatterAdd, Select, SelfRef, SizeVar, Tensor, Unary, children, postorder,
                 register_printer, topo_order, walk)

_SYM = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%",
        "pow": "**", "lt": "<", "le": "<=", "eq": "==", "ne": "!=", "gt": ">", "ge": ">=",
        "and": "&", "or": "|"}


def _const(c: Const) -> str:
    if c.dtype == "bool":
        return "true" if c.value else "false"
    if c.dtype == "float32":
        with np.errstate(over="ignore"):
            return str(np.float32(c.value))  # the shortest text of the float32 value: 0.1, not 0.100000001
    if isinstance(c.value, float):
        return repr(c.value) + "d"
    return str(c.value)


def _range(ax: Axis, shown: dict) -> str:
    return f"{shown.get(ax.uid, ax.name)} in [{_fmt(ax.lo, True, shown)}, {_fmt(ax.hi, True, shown)})"


def axis_names(exprs, first=()) -> dict:
    """``uid -> text`` for the axes of ``exprs`` whose name another axis already has.

    Two distinct axes may share a name (``te.reduce_axis(3, "j")`` inside a tensor
    with an axis ``j``, or an adjoint whose sum runs over the forward's ``j``); printed
    alike, ``U[j, j]`` would read as a diagonal. The axes in ``first``, then the
    free axes, keep their names; a later one is shown as ``j_2`` (a name not
    otherwise in use). Axes named once are not in the result.

    >>> import tensorexpr as te
    >>> U = te.placeholder((3, 3), name="U")
    >>> r = te.reduce_axis(3, "j")
    >>> S = te.compute((3,), lambda j: te.sum(U[j, r], axis=r), name="S")
    >>> print(S)
    S[j] = sum_{j_2 in [0, 3)} U[j, j_2]    for j in [0, 3)    float32
    >>> print(S.body)
    (sum_{j_2 in [0, 3)} U[j, j_2])
    """
    free: list = list(first)
    bound: list = []
    for e in exprs:
        for n in walk(e, unique=True):  # pre-order: an outer sum keeps its name
            if isinstance(n, Axis):
                free.append(n)
            elif isinstance(n, Reduce):
                bound.extend(n.axes)
                for a in n.axes:  # bounds of a sum may read enclosing axes (k in [i, n))
                    free.extend(x for b in (a.lo, a.hi) for x in postorder(b) if isinstance(x, Axis))
    bound_uids = {a.uid for a in bound}
    order = [a for a in free if a.uid not in bound_uids] + bound
    taken = {a.name for a in order}
    owner: dict = {}
    shown: dict = {}
    for a in order:
        if owner.setdefault(a.name, a.uid) == a.uid or a.uid in shown:
            continue
        k = 2
        while f"{a.name}_{k}" in taken:
            k += 1
        shown[a.uid] = f"{a.name}_{k}"
        taken.add(shown[a.uid])
    return shown


def expr_str(e: Expr) -> str:
    """Text of an expression, e.g. ``(A[i, k] * B[k, j])``.

    Operators are fully parenthesised (the outermost pair is kept here and
    dropped by :func:`tensor_str`), so the text never depends on precedence.
    A sizeable sub-expression used more than once is named once (``let $1 = ...
    in``), so the text grows with the expression's DAG, not its (possibly
    exponential) tree.

    >>> import tensorexpr as te
    >>> expr_str(te.const(2) + 1)
    '(2 + 1)'
    >>> x = te.placeholder((2,), name="X")[0]
    >>> for _ in range(5):
    ...     x = te.tanh(x) * 0.5 + x
    >>> expr_str(x)[:60]
    'let $1 = (tanh((tanh((tanh(X[0]) * 0.5) + X[0]) * 0.5) + ((t'
    >>> expr_str(x)[-45:]
    ' 0.5) + $1) * 0.5) + ((tanh($1) * 0.5) + $1))'
    """
    return _fmt(e, False)


# A shared sub-expression of more nodes than this is named instead of repeated.
LET_NODES = 32

#: expressions without sub-expressions (their text is their own)
_LEAVES = (Const, SizeVar, Axis)


def _fmt(e: Expr, top: bool, shown: dict | None = None) -> str:
    """``e`` as text; ``top`` says no operator surrounds it (so no parentheses needed).

    Arguments between brackets or commas (indices, call arguments) count as top.
    A reduction extends to the right (``sum_{k} body``) and a negation is a
    prefix: both are parenthesised inside an operator, else ``-s / 9.0`` could
    mean ``-(s / 9.0)`` and ``-x ** 2`` would read as ``-(x ** 2)``.
    ``shown`` renames axes (:func:`axis_names`; None: those of ``e`` alone).
    """
    if type(e) in _LEAVES:  # (a bound, a size: most calls; nothing to name nor rename)
        return "".join(_layout(e, top, {} if shown is None else shown))
    if shown is None:
        shown = axis_names([e])
    names = _shared_names(e)
    lets = [f"{names[id(n)]} = {''.join(_pieces(n, True, names, shown, bound=False))}"
            for n in postorder(e) if id(n) in names and n is not e]
    text = "".join(_pieces(e, top, names, shown, bound=False))
    return f"let {', '.join(lets)} in {text}" if lets else text


def _shared_names(e: Expr) -> dict:
    """``id -> $k`` for the sub-expressions of ``e`` worth naming (used twice, big)."""
    uses: dict = {}
    nodes = postorder(e)
    edges = 0
    for n in nodes:
        for c in children(n):
            uses[id(c)] = uses.get(id(c), 0) + 1
            edges += 1
    if edges == len(uses):  # (a tree: no node used twice, none to name)
        return {}
    # Children first: a node's size counts its named children as one node.
    size: dict = {}
    names: dict = {}
    for n in nodes:
        size[id(n)] = 1 + sum(1 if id(c) in names else size[id(c)] for c in children(n))
        if uses.get(id(n), 0) > 1 and size[id(n)] > LET_NODES:
            names[id(n)] = f"${len(names) + 1}"
    return names


def _pieces(e: Expr, top: bool, names: dict, shown: dict, bound: bool = True) -> list:
    """The text of ``e`` as a list of strings, built without recursion (any depth)."""
    out: list = []
    stack: list = [(e, top, bound)]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
            continue
        x, top_x, use_name = item
        if use_name and id(x) in names:
            out.append(names[id(x)])
            continue
        parts = _layout(x, top_x, shown)
        stack.extend(reversed([p if isinstance(p, str) else (p[0], p[1], True) for p in parts]))
    return out


def _layout(e: Expr, top: bool, shown: dict) -> list:
    """``e``'s text as strings and ``(child, child_top)`` pairs, in order."""
    def wrap(parts: list) -> list:
        return parts if top else ["("] + parts + [")"]

    match e:
        case Const():
            return [_const(e)]
        case Axis(name, _, _, uid):
            return [shown.get(uid, name)]
        case SizeVar(name):
            return [name]
        case Binary(op, a, b, _) if op in ("max", "min"):
            return [f"{op}(", (a, True), ", ", (b, True), ")"]
        case Binary(op, a, b, _):
            return wrap([(a, False), f" {_SYM[op]} ", (b, False)])
        case Unary("neg", Const(v, _) as a, _) if v < 0:
            return wrap(["-(", (a, True), ")"])  # not "--1": C reads that as a decrement
        case Unary("neg", Unary("neg") as a, _):
            return wrap(["-(", (a, True), ")"])
        case Unary("neg", a, _):
            return wrap(["-", (a, False)])
        case Unary("not", a, _):
            return ["~", (a, False)]
        case Unary(op, a, _):
            return [f"{op}(", (a, True), ")"]
        case Cast(a, dt):
            return [f"{dt}(", (a, True), ")"]
        case Select(c, a, b, _):
            return ["select(", (c, True), ", ", (a, True), ", ", (b, True), ")"]
        case Read(t, idx, _):
            parts: list = [f"{t.name}["]
            for k, i in enumerate(idx):
                parts += ([", "] if k else []) + [(i, True)]
            return parts + ["]"]
        case Reduce(op, body, axes, where, _):
            ranges = ", ".join(_range(a, shown) for a in axes)
            cond = [] if where is None else [" if ", (where, True)]
            return wrap([f"{op}_{{{ranges}"] + cond + ["} ", (body, False)])
    return [f"<{type(e).__name__}>"]


def shape_str(dims) -> str:
    """A shape as the user wrote it, sizes by name, for messages.

    >>> import tensorexpr as te
    >>> n = te.var("n")
    >>> shape_str(te.placeholder((n + 1, 3), name="A").dims), shape_str((4,))
    ('(n + 1, 3)', '(4,)')
    """
    items = [str(d) if isinstance(d, int) else _fmt(d, True) for d in dims]
    return f"({', '.join(items)}{',' if len(items) == 1 else ''})"


def tensor_str(t: Tensor) -> str:
    """The definition of a tensor in math-like notation.

    >>> import tensorexpr as te
    >>> A = te.placeholder((2, 3), name="A")
    >>> print(te.compute((3, 2), lambda i, j: A[j, i] * 2.0, name="T"))
    T[i, j] = A[j, i] * 2.0    for i in [0, 3), j in [0, 2)    float32
    """
    shape = ", ".join(_fmt(d, True) for d in t.dims)
    match t:
        case Compute():
            shown = axis_names([t.body], t.axes)
            head = f"{t.name}[{', '.join(shown.get(a.uid, a.name) for a in t.axes)}]"
            dom = ", ".join(_range(a, shown) for a in t.axes)
            body = _fmt(t.body, True, shown)
            extra = ""
            if t.carry is not None:
                ax = t.axes[t.carry.axis].name
                extra = f"    (recurrence: {ax} runs {'ascending' if t.carry.step > 0 else 'descending'})"
            where = f"    for {dom}" if dom else ""
            return f"{head} = {body}{where}    {t.dtype}{extra}"
        case ScatterAdd():
            shown = axis_names([*t.indices, t.value] + ([] if t.where is None else [t.where]), t.axes)
            idx = ", ".join(_fmt(i, True, shown) for i in t.indices)
            dom = ", ".join(_range(a, shown) for a in t.axes)
            cond = "" if t.where is None else f" if {_fmt(t.where, True, shown)}"
            return (f"{t.name}[{shape}] = 0;  {t.name}[{idx}] += {_fmt(t.value, True, shown)}"
                    f"    for {dom}{cond}    {t.dtype}")
        case Placeholder() | SelfRef():
            return f"{t.name}[{shape}]    {t.dtype} input"
    return repr(t)


def program_str(outputs) -> str:
    """Every definition reachable from ``outputs``, producers first.

    >>> import tensorexpr as te
    >>> A = te.placeholder((2,), name="A")
    >>> print(program_str([te.compute((2,), lambda i: A[i] + 1.0, name="B")]))
    A[2]    float32 input
    B[i] = A[i] + 1.0    for i in [0, 2)    float32
    """
    return "\n".join(tensor_str(t) for t in topo_order(outputs))


register_printer(expr_str, tensor_str)

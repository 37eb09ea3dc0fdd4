"""Readable, math-like text for expressions and tensor definitions (``str(tensor)``)."""
from __future__ import annotations

from .ir import (Axis, Binary, Cast, Compute, Const, Expr, Placeholder, Read, Reduce,
                 ScatterAdd, Select, SelfRef, SizeVar, Tensor, Unary)

_SYM = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%",
        "pow": "**", "lt": "<", "le": "<=", "eq": "==", "ne": "!=", "gt": ">", "ge": ">=",
        "and": "&", "or": "|"}


def _const(c: Const) -> str:
    if c.dtype == "bool":
        return "true" if c.value else "false"
    if isinstance(c.value, float):
        return repr(c.value) + ("" if c.dtype == "float32" else "d")
    return str(c.value)


def _range(ax: Axis) -> str:
    return f"{ax.name} in [{expr_str(ax.lo)}, {expr_str(ax.hi)})"


def expr_str(e: Expr) -> str:
    """Text of an expression, e.g. ``(A[i, k] * B[k, j])``.

    >>> import tensorexpr as te
    >>> expr_str(te.const(2) + 1)
    '(2 + 1)'
    """
    match e:
        case Const():
            return _const(e)
        case SizeVar(name) | Axis(name):
            return name
        case Binary(op, a, b, _) if op in ("max", "min"):
            return f"{op}({expr_str(a)}, {expr_str(b)})"
        case Binary(op, a, b, _):
            return f"({expr_str(a)} {_SYM[op]} {expr_str(b)})"
        case Unary("neg", a, _):
            return f"-{expr_str(a)}"
        case Unary("not", a, _):
            return f"~{expr_str(a)}"
        case Unary(op, a, _):
            return f"{op}({expr_str(a)})"
        case Cast(a, dt):
            return f"{dt}({expr_str(a)})"
        case Select(c, a, b, _):
            return f"select({expr_str(c)}, {expr_str(a)}, {expr_str(b)})"
        case Read(t, idx, _):
            return f"{t.name}[{', '.join(expr_str(i) for i in idx)}]"
        case Reduce(op, body, axes, where, _):
            ranges = ", ".join(_range(a) for a in axes)
            cond = "" if where is None else f" if {_strip(expr_str(where))}"
            return f"{op}_{{{ranges}{cond}}} {expr_str(body)}"
    return f"<{type(e).__name__}>"


def _strip(s: str) -> str:
    if s.startswith("(") and s.endswith(")"):
        depth = 0
        for k, ch in enumerate(s):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0 and k < len(s) - 1:
                return s
        return s[1:-1]
    return s


def tensor_str(t: Tensor) -> str:
    """The definition of a tensor in math-like notation.

    >>> import tensorexpr as te
    >>> A = te.placeholder((2, 3), name="A")
    >>> print(te.compute((3, 2), lambda i, j: A[j, i] * 2.0, name="T"))
    T[i, j] = (A[j, i] * 2.0)    for i in [0, 3), j in [0, 2)    float32
    """
    shape = ", ".join(expr_str(d) for d in t.dims)
    match t:
        case Compute():
            head = f"{t.name}[{', '.join(a.name for a in t.axes)}]"
            dom = ", ".join(_range(a) for a in t.axes)
            body = _strip(expr_str(t.body))
            extra = ""
            if t.carry is not None:
                ax = t.axes[t.carry.axis].name
                extra = f"    (recurrence: {ax} runs {'ascending' if t.carry.step > 0 else 'descending'})"
            where = f"    for {dom}" if dom else ""
            return f"{head} = {body}{where}    {t.dtype}{extra}"
        case ScatterAdd():
            idx = ", ".join(expr_str(i) for i in t.indices)
            dom = ", ".join(_range(a) for a in t.axes)
            cond = "" if t.where is None else f" if {_strip(expr_str(t.where))}"
            return (f"{t.name}[{shape}] = 0;  {t.name}[{idx}] += {_strip(expr_str(t.value))}"
                    f"    for {dom}{cond}    {t.dtype}")
        case Placeholder() | SelfRef():
            return f"{t.name}[{shape}]    {t.dtype} input"
    return repr(t)


def program_str(outputs) -> str:
    """Every definition reachable from ``outputs``, producers first."""
    from .ir import topo_order
    return "\n".join(tensor_str(t) for t in topo_order(outputs))

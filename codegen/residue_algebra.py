"""Index arithmetic modulo a stride: the identities every residue split relies on.

A residue split writes an axis ``x`` as ``s*q + r`` (``0 <= r < s``). For integers
``c``, ``q``, ``b`` and a stride ``s >= 1``, floor division and modulo (as the IR
defines them, for negative operands too) satisfy

    ``(s*c*q + b) // s == c*q + b // s``  and  ``(s*c*q + b) % s == b % s``

so after the substitution :func:`tidy` drops ``q`` out of every modulo by ``s`` and
moves it out of every floor division by ``s``: a condition ``(x - k) % s == 0`` no
longer moves with ``q``, and a read at ``(x - k) // s`` steps by 1 along ``q``.
Every point keeps its value. ``codegen.rowsum_residues`` splits an output row axis
this way, ``codegen.residue_split`` reduction and tap axes.

>>> from tensorexpr.ir import Axis, Const
>>> q = Axis("q", Const(0, "int64"), Const(8, "int64"), 1)
>>> k = Axis("k", Const(0, "int64"), Const(3, "int64"), 2)
>>> print(tidy((q * 2 + 1 - k) // 2, q.uid, 2))
(q + ((((0 * 2) + 1) - k) // 2))
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

from passes.simplify import simplify
from tensorexpr.ir import Axis, Binary, Const, Expr, Read, Reduce, Unary, INDEX_DTYPE, is_float, walk
from tensorexpr.transform import bottom_up, const_value, rebuild, substitute

I64 = INDEX_DTYPE


def linear(e: Expr, uid: int) -> Optional[int]:
    """``c`` when ``e`` is ``c * axis + (terms without it)``, None if the axis appears
    other than through +, - and multiplication by constants.

    >>> from tensorexpr.ir import Axis, Const
    >>> x = Axis("x", Const(0, "int64"), Const(8, "int64"), 1)
    >>> linear(3 * x - x + 1, x.uid), linear(x * x, x.uid), linear(Const(2, "int64"), x.uid)
    (2, None, 0)
    """
    match e:
        case Axis():
            return 1 if e.uid == uid else 0
        case Binary("add" | "sub", a, b, _):
            la, lb = linear(a, uid), linear(b, uid)
            if la is None or lb is None:
                return None
            return la + lb if e.op == "add" else la - lb
        case Binary("mul", a, b, _):
            ca, cb = const_value(a), const_value(b)
            if ca is not None or cb is not None:
                other = linear(b if ca is not None else a, uid)
                return None if other is None else (ca if ca is not None else cb) * other
        case Unary("neg", a, _):
            la = linear(a, uid)
            return None if la is None else -la
    if any(isinstance(a, Axis) and a.uid == uid for a in walk(e, unique=True)):
        return None
    return 0


def terms(e: Expr) -> Optional[Tuple[int, Dict[int, int], Dict[int, Axis]]]:
    """``(c, {uid: coefficient}, {uid: axis})`` when ``e`` is ``c + sum(a_i * axis_i)``
    written with +, -, negation and multiplication by integer constants (any bounds, a
    symbolic batch axis too), else None. Axes whose coefficients cancel are left out.

    >>> from tensorexpr.ir import Axis, Const
    >>> y = Axis("y", Const(0, "int64"), Const(8, "int64"), 1)
    >>> k = Axis("k", Const(0, "int64"), Const(3, "int64"), 2)
    >>> c, coef, _ = terms(2 * y + k - 1)
    >>> c, coef
    (-1, {1: 2, 2: 1})
    """
    axes: Dict[int, Axis] = {}
    for a in walk(e, unique=True):
        if isinstance(a, Axis):
            axes[a.uid] = a
    coef: Dict[int, int] = {}
    for uid in axes:
        c = linear(e, uid)
        if c is None:
            return None
        if c:
            coef[uid] = c
    zero = substitute(e, {a: Const(0, I64) for a in axes.values()}) if axes else e
    c0 = _int_value(zero)
    if c0 is None:
        return None
    return c0, coef, {u: axes[u] for u in coef}


def _int_value(e: Expr) -> Optional[int]:
    """The integer value of constant arithmetic ``e`` (+, -, *, neg), else None."""
    match e:
        case Const(v, _) if isinstance(v, int) and not isinstance(v, bool):
            return v
        case Binary("add" | "sub" | "mul", a, b, _):
            x, y = _int_value(a), _int_value(b)
            if x is None or y is None:
                return None
            return x + y if e.op == "add" else x - y if e.op == "sub" else x * y
        case Unary("neg", a, _):
            x = _int_value(a)
            return None if x is None else -x
    return None


def drop(e: Expr, uid: int) -> Expr:
    """``e`` (linear in the axis ``uid``) with the axis replaced by 0.

    >>> from tensorexpr.ir import Axis, Const
    >>> x = Axis("x", Const(0, "int64"), Const(8, "int64"), 1)
    >>> print(drop(2 * x + 3, x.uid))
    ((2 * 0) + 3)
    """
    return substitute(e, {a: Const(0, I64) for a in walk(e, unique=True)
                          if isinstance(a, Axis) and a.uid == uid})


def tidy(e: Expr, q: int, s: int) -> Expr:
    """``e`` with ``(s*c*q + b) // s`` written ``c*q + b // s`` and ``(s*c*q + b) % s``
    written ``b % s`` for the axis ``q`` (exact for floor division and modulo).

    >>> from tensorexpr.ir import Axis, Const
    >>> q = Axis("q", Const(0, "int64"), Const(8, "int64"), 1)
    >>> print(tidy((4 * q + 3) % 2, q.uid, 2))
    (((4 * 0) + 3) % 2)
    """
    memo: Dict[int, Expr] = {}

    def go(x: Expr) -> Expr:
        if id(x) in memo:
            return memo[id(x)]
        out = rebuild(x, go)
        if (isinstance(out, Binary) and out.op in ("floordiv", "mod")
                and const_value(out.b) == s):
            lin = linear(out.a, q)
            if lin is not None and lin != 0 and lin % s == 0:
                rest = Binary(out.op, drop(out.a, q), out.b, out.dtype)
                if out.op == "mod":
                    out = rest
                else:
                    qa = next(a for a in walk(out.a, unique=True)
                              if isinstance(a, Axis) and a.uid == q)
                    term = qa if lin == s else Binary("mul", Const(lin // s, I64), qa, I64)
                    out = Binary("add", term, rest, out.dtype)
        memo[id(x)] = out
        return out

    return go(e)


def decompose(e: Expr, s: int, residues: set) -> Optional[Tuple[Expr, Expr]]:
    """``(plane, quotient)`` with ``e == s*quotient + plane`` and ``0 <= plane < s`` at
    every point, both without floor division or modulo, or None: ``e`` is affine, its
    coefficients multiples of ``s`` but for at most one axis of ``residues`` (uids of
    axes over ``[0, s)``) with coefficient 1, and then a constant term that is a
    multiple of ``s`` too (the plane is that axis; else it is the constant's residue).

    >>> from tensorexpr.ir import Axis, Const
    >>> y = Axis("y", Const(0, "int64"), Const(8, "int64"), 1)
    >>> r = Axis("r", Const(0, "int64"), Const(2, "int64"), 2)
    >>> [str(x) for x in decompose(2 * y + r - 2, 2, {r.uid})]
    ['r', '(y + -1)']
    >>> [str(x) for x in decompose(2 * y + 3, 2, set())], decompose(2 * y + r + 1, 2, {r.uid})
    (['1', '(y + 1)'], None)
    """
    form = terms(e)
    if form is None:
        return None
    k, coef, axes = form
    res = [u for u in coef if u in residues]
    if any(c % s for u, c in coef.items() if u not in residues):
        return None
    if res:
        if len(res) > 1 or coef[res[0]] != 1 or k % s:
            return None
        plane: Expr = axes[res[0]]
    else:
        plane = Const(k % s, I64)
    quotient: Optional[Expr] = None
    for u, c in coef.items():
        if u in residues:
            continue
        term = axes[u] if c == s else Binary("mul", Const(c // s, I64), axes[u], I64)
        quotient = term if quotient is None else Binary("add", quotient, term, I64)
    off = k // s
    if quotient is None:
        quotient = Const(off, I64)
    elif off:
        quotient = Binary("add", quotient, Const(off, I64), I64)
    return plane, quotient


def fold_indices(e: Expr) -> Expr:
    """``e`` with its integer and boolean sub-expressions free of floats simplified
    (constants folded: ``(0 + 1) % 2`` is 1). Float arithmetic is left as written
    (``passes.simplify`` would drop ``x * 0``, not exact for a non-finite ``x``).

    >>> from tensorexpr.ir import Axis, Const
    >>> q = Axis("q", Const(0, "int64"), Const(8, "int64"), 1)
    >>> print(fold_indices(tidy((2 * q + 1 - 1) // 2, q.uid, 2)))
    q
    """
    def stop(x: Expr) -> Optional[Expr]:
        if isinstance(x, (Read, Reduce)) or is_float(x.dtype):
            return None
        if any(is_float(y.dtype) or isinstance(y, (Read, Reduce)) for y in walk(x, unique=True)):
            return None
        return simplify(x)

    return bottom_up(e, lambda x: x, stop)

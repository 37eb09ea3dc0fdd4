"""Arithmetic on loop-AST expressions: integer constants folded, casts only where needed.

Lowering builds index arithmetic from user code and isl bounds, which are full of
``+ 0``, ``* 1`` and constant sub-expressions; these helpers build the
:class:`~codegen.loopast.Op` nodes with those folded away, so the C text stays
small and the same program always gives the same text.

>>> from codegen.loopast import Var
>>> i = Var("i0", I64)
>>> add(mul(i, Lit(1, I64)), Lit(0, I64))
Var(name='i0', dtype='int64')
>>> fold("mul", Lit(6, I64), Lit(7, I64), I64)
Lit(value=42, dtype='int64')
"""
from __future__ import annotations

from typing import List, Sequence

from tensorexpr.ir import INDEX_DTYPE, is_float

from . import reference
from .loopast import Block, CExpr, Fail, If, Lit, Op, Stmt

#: the dtype of index arithmetic
I64 = INDEX_DTYPE


def wrap_int(v: int, dtype: str) -> int:
    """``v`` wrapped to a two's-complement integer of ``dtype`` (C's overflow).

    >>> wrap_int(2 ** 31, "int32")
    -2147483648
    """
    half = 1 << (31 if dtype == "int32" else 63)
    return (v + half) % (2 * half) - half


_FOLD = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
         "max": max, "min": min,
         "floordiv": lambda a, b: a // b if b else 0, "mod": lambda a, b: a % b if b else 0}


def fold(op: str, x: CExpr, y: CExpr, dtype: str) -> CExpr:
    """``Op(op, (x, y))``, with integer constants folded and ``+ 0``, ``* 1`` dropped
    (index arithmetic from user code and isl is full of them).

    >>> from codegen.loopast import Var
    >>> fold("sub", Var("n0", I64), Lit(0, I64), I64)
    Var(name='n0', dtype='int64')
    """
    if dtype in ("int32", "int64") and op in _FOLD:
        if isinstance(x, Lit) and isinstance(y, Lit):
            return Lit(wrap_int(_FOLD[op](int(x.value), int(y.value)), dtype), dtype)
        if op in ("add", "mul"):
            unit = 0 if op == "add" else 1
            if isinstance(x, Lit) and x.value == unit:
                return y
            if isinstance(y, Lit) and y.value == unit:
                return x
        if op == "sub" and isinstance(y, Lit) and y.value == 0:
            return x
    return Op(op, (x, y), dtype)


def ring_row(x: CExpr, rows: CExpr) -> CExpr:
    """``x mod rows`` for a positive ``rows`` (a ring's row count), as C's ``%`` without
    a helper: ``((x % rows) + rows) % rows``, right for a negative ``x`` too. The
    helper's sign tests kept the C compiler from hoisting a ring's row out of the
    innermost loops of a checkpointed RNN's steps (each step 5-10x slower).

    >>> from codegen.loopast import Var
    >>> ring_row(Lit(-3, I64), Lit(10, I64))
    Lit(value=7, dtype='int64')
    >>> ring_row(Var("s0", I64), Lit(10, I64)).op
    'rem'
    """
    if isinstance(x, Lit) and isinstance(rows, Lit):
        return fold("mod", x, rows, I64)
    return Op("rem", (Op("add", (Op("rem", (x, rows), I64), rows), I64), rows), I64)


def cast(x: CExpr, dtype: str) -> CExpr:
    """``x`` converted to ``dtype`` (unchanged if it already has it).

    >>> from codegen.loopast import Var
    >>> cast(Var("t0", "float32"), "float64").op
    'cast'
    """
    return x if x.dtype == dtype else Op("cast", (x,), dtype)


def add(a: CExpr, b: CExpr) -> CExpr:
    """``a + b`` of indices (int64), folded.

    >>> add(Lit(2, I64), Lit(3, I64)).value
    5
    """
    return fold("add", a, b, I64)


def mul(a: CExpr, b: CExpr) -> CExpr:
    """``a * b`` of indices (int64), folded.

    >>> mul(Lit(2, I64), Lit(3, I64)).value
    6
    """
    return fold("mul", a, b, I64)


def all_of(conds: Sequence[CExpr]) -> CExpr:
    """The conjunction ``c0 && c1 && ...`` of C conditions (at least one).

    >>> from codegen.loopast import Var
    >>> all_of([Var("a", "bool"), Var("b", "bool")]).op
    'and'
    """
    out = conds[0]
    for c in conds[1:]:
        out = Op("and", (out, c), "bool")
    return out


def identity(op: str, dtype: str) -> Lit:
    """The value of an empty ``op`` reduction (the reference backend's definition).

    >>> identity("max", "int32").value
    -2147483648
    """
    return Lit(reference.identity(op, dtype).item(), dtype)


def zero(dtype: str) -> Lit:
    """0 of ``dtype`` (False for bool).

    >>> zero("bool").value, zero("float32").value
    (False, 0.0)
    """
    return Lit(0.0 if is_float(dtype) else (False if dtype == "bool" else 0), dtype)


def checked(code: int, site: int, checks, ok: List[Stmt]) -> Stmt:
    """``if (index 0 bad) fail; else if (index 1 bad) fail; ... else ok``: ``checks``
    are ``(dimension, index variable, size)``; a bad index records error ``code`` at
    ``site`` (:class:`~codegen.loopast.Fail`).

    >>> checked(1, 0, [], [])
    Block(stmts=())
    """
    stmt: Stmt = Block(tuple(ok))
    for d, v, size in reversed(checks):
        bad = Op("or", (Op("lt", (v, Lit(0, I64)), "bool"), Op("ge", (v, size), "bool")), "bool")
        stmt = If(bad, Block((Fail(code, site, d, v, size),)),
                  stmt if isinstance(stmt, Block) else Block((stmt,)))
    return stmt

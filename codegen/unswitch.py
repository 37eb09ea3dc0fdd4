"""Loop unswitching: a condition a vector loop does not change is tested once, outside it.

A select on an outer axis with costly branches is lowered as an ``if`` inside the
innermost loop (an LSTM's state ``s[t, b, w, j] = select(w == 0, c, o * tanh(c))``:
``if (w == 0) {...} else {...}`` in the loop over ``j``). gcc does not if-convert such
a body (calls with branches of their own, a conditional load of the previous step),
so the loop ran in scalar code: 8x slower than the same body without the ``if``.
When the condition reads nothing the loop changes (no variable it assigns, no
memory), the loop is copied into both branches of one ``if`` around it, each copy
with the ``if`` resolved; each copy vectorizes. At most :data:`MAX_CONDITIONS`
conditions per loop are taken this way (``2 ** MAX_CONDITIONS`` copies).

>>> from codegen.loopast import Block, For, If, Lit, Op, Store, Var
>>> i, w = Var("i", "int64"), Var("w", "int64")
>>> c = Op("eq", (w, Lit(0, "int64")), "bool")
>>> body = Block((If(c, Block((Store("b", i, Lit(1.0, "float32")),)),
...                  Block((Store("b", i, Lit(2.0, "float32")),))),))
>>> (out,) = unswitch([For(i, Lit(0, "int64"), Lit(8, "int64"), 1, body, simd=True)])
>>> from codegen.cemit import emit
>>> from codegen.loopast import Kernel
>>> src = emit(Kernel("demo", (), (), (out,)))
>>> for line in src.splitlines():
...     if "b[" in line or "if" in line or "else" in line:
...         print(line)
  if (w == 0) {
      b[i] = 1.0f;
  } else {
      b[i] = 2.0f;
"""
from __future__ import annotations

from dataclasses import replace
from typing import List, Optional

from .loopast import (Accumulate, Assign, Block, CExpr, Decl, For, If, Region, Stmt, loads,
                      variables)

#: conditions taken out of one loop (each doubles the loop's code)
MAX_CONDITIONS = 2


def unswitch(stmts: List[Stmt]) -> List[Stmt]:
    """``stmts`` with loop-invariant ``if`` s of their vector loops tested outside them
    (see the module docstring)."""
    return [_stmt(s) for s in stmts]


def _stmt(s: Stmt) -> Stmt:
    match s:
        case Block(items):
            return Block(tuple(_stmt(x) for x in items))
        case If(c, then, orelse):
            return If(c, _stmt(then), None if orelse is None else _stmt(orelse))
        case Region(body, _):
            return replace(s, body=_stmt(body))
        case For() if s.simd:
            return _split(s, MAX_CONDITIONS)
        case For():
            return replace(s, body=_stmt(s.body))
    return s


def _assigned(s: Stmt, out: set) -> set:
    match s:
        case Decl(var, _) | Assign(var, _) | Accumulate(var, _, _):
            out.add(var.name)
        case Block(items):
            for x in items:
                _assigned(x, out)
        case If(_, then, orelse):
            _assigned(then, out)
            if orelse is not None:
                _assigned(orelse, out)
        case For(var=var, body=body):
            out.add(var.name)
            _assigned(body, out)
    return out


def _invariant_if(s: Stmt, changed: set) -> Optional[CExpr]:
    """The condition of the first ``if`` in ``s`` (outside nested loops) that reads no
    variable in ``changed`` and no memory."""
    match s:
        case Block(items):
            for x in items:
                c = _invariant_if(x, changed)
                if c is not None:
                    return c
        case If(c, then, orelse):
            if not loads(c) and not variables(c) & changed:
                return c
            return _invariant_if(then, changed) or (
                _invariant_if(orelse, changed) if orelse is not None else None)
    return None


def _resolve(s: Stmt, c: CExpr, value: bool) -> Stmt:
    """``s`` with every ``if`` on ``c`` replaced by the branch ``value`` takes."""
    match s:
        case Block(items):
            return Block(tuple(_resolve(x, c, value) for x in items))
        case If(cond, then, orelse) if cond == c:
            taken = then if value else orelse
            return _resolve(taken, c, value) if taken is not None else Block(())
        case If(cond, then, orelse):
            return If(cond, _resolve(then, c, value),
                      None if orelse is None else _resolve(orelse, c, value))
    return s


def _split(loop: For, budget: int) -> Stmt:
    if budget == 0:
        return loop
    c = _invariant_if(loop.body, _assigned(loop.body, {loop.var.name}))
    if c is None:
        return loop
    a, b = (replace(loop, body=_resolve(loop.body, c, v)) for v in (True, False))
    return If(c, Block((_split(a, budget - 1),)), Block((_split(b, budget - 1),)))


"""One finiteness scan of an input per kernel, before everything that tests it.

A sum over a zero-padded copy (``codegen.padcopy``) or over zero-staged rows
(``codegen.rowsum_masked``) adds ``0 * w`` terms that are exact only when the
weights ``w`` are finite: its lowering scans the weights' buffer into a flag
(``fin = sum(w[z] * 0)``, NaN if some weight is not) and runs the fast version
under ``if (fin == fin)``. Several such sums of one kernel read the same weights
(the residue classes of a strided convolution's input gradient read one ``W``; a
version for non-finite weights tests it again inside): an input does not change
while the kernel runs, so while lowering a program each input buffer gets one flag
(``Lowerer.finite_flag``) and :func:`hoist` keeps one scan of it, first in the
kernel, where every test of the flag sees it. A flag scanned once stays where it is.

The flag then is a scalar computed before everything else: the versioned nests
testing it can share one parallel region (``codegen.regions``), every thread taking
the same branch.

>>> from codegen.loopast import Block, Comment, Decl, For, Lit, Var
>>> fin, z = Var("fin0", "float32"), Var("k0", "int64")
>>> def scan():
...     return (Decl(fin, Lit(0.0, "float32")),
...             For(z, Lit(0, "int64"), Lit(8, "int64"), 1, Block(())))
>>> a, b = scan(), scan()
>>> body = [Block((Comment("A"),) + a), Block((Comment("B"),) + b)]
>>> out = hoist(body, {"b1": [a, b]})
>>> [type(s).__name__ for s in out[0].stmts], [type(s).__name__ for s in out[1].stmts]
(['Decl', 'For'], ['Comment'])
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Sequence, Tuple

from .loopast import Block, For, If, Region, Stmt


def hoist(body: List[Stmt], scans: Dict[str, Sequence[Tuple[Stmt, ...]]]) -> List[Stmt]:
    """``body`` (a kernel's top-level statements) with the scans of each buffer of
    ``scans`` scanned more than once (``(Decl, For)`` pairs, the statements themselves)
    taken out and one of them put first."""
    many = [v for v in scans.values() if len(v) > 1]
    if not many:
        return body
    drop = {id(s) for v in many for pair in v for s in pair}
    first = [s for v in many for s in v[0]]
    return [Block(tuple(first))] + [_without(s, drop) for s in body]


def _without(s: Stmt, drop: set) -> Stmt:
    """``s`` without the statements whose ids are in ``drop``."""
    match s:
        case Block(items):
            return Block(tuple(_without(x, drop) for x in items if id(x) not in drop))
        case If(c, then, orelse):
            return If(c, _without(then, drop), None if orelse is None else _without(orelse, drop))
        case For():
            return replace(s, body=_without(s.body, drop))
        case Region(body, _):
            return replace(s, body=_without(body, drop))
    return s

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
The flag never changes: a test of it inside a branch of the same test is decided
(the version for non-finite weights of a masked row sum, inside the version for
non-finite weights of a padded copy's sum, keeps its exact loops alone).

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

from .loopast import Block, For, If, Op, Region, Stmt


def hoist(body: List[Stmt], scans: Dict[str, Sequence[Tuple[Stmt, ...]]]) -> List[Stmt]:
    """``body`` (a kernel's top-level statements) with the scans of each buffer of
    ``scans`` scanned more than once (``(Decl, For)`` pairs, the statements themselves)
    taken out and one of them put first."""
    many = [v for v in scans.values() if len(v) > 1]
    if not many:
        return body
    drop = {id(s) for v in many for pair in v for s in pair}
    first = [s for v in many for s in v[0]]
    flags = {pair[0].var for v in many for pair in v}
    return [Block(tuple(first))] + [_without(s, drop, flags, {}) for s in body]


def _without(s: Stmt, drop: set, flags: set, known: dict) -> Stmt:
    """``s`` without the statements whose ids are in ``drop``, and with the tests of
    ``flags`` (``fin == fin``) that an enclosing ``if`` on the same test decided
    (``known``: test -> its value there) replaced by their branch: a version for
    non-finite weights that tests them again inside."""
    match s:
        case Block(items):
            return Block(tuple(_without(x, drop, flags, known) for x in items
                               if id(x) not in drop))
        case If(c, then, orelse) if c in known:
            taken = then if known[c] else orelse
            return Block(()) if taken is None else _without(taken, drop, flags, known)
        case If(c, then, orelse):
            decided = isinstance(c, Op) and c.op == "eq" and c.args[0] == c.args[1] \
                and c.args[0] in flags
            inner = (lambda v: {**known, c: v}) if decided else (lambda v: known)
            return If(c, _without(then, drop, flags, inner(True)),
                      None if orelse is None else _without(orelse, drop, flags, inner(False)))
        case For():
            return replace(s, body=_without(s.body, drop, flags, known))
        case Region(body, _):
            return replace(s, body=_without(body, drop, flags, known))
    return s

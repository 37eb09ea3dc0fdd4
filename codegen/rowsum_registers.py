"""Register tiles: a row tile's accumulators kept in vector registers.

``lower.Lowerer.compute_rows`` sums a tile of ``width`` lanes of ``rows`` rows into a
local accumulator array: loops over the reduction, then a loop over the lanes ``j``
adding each row's term, ``acc[(j - lo) + r * width] += f_r(j)``. gcc keeps such an
array in memory, so every FMA loads and stores its accumulator: a 256 x 512 x 256
product ran at 35 GFLOP/s on one Zen 3 core (numpy: 94), store-bound, whatever the
tile's shape.

:func:`registerize` rewrites every lane loop of the tile's nest into whole vectors:
one vector variable per vector of the accumulator, declared (zero) before the nest,
``acc_m = fma(a, b, acc_m)`` per vector in the loop body, stored into the array
after the nest (the epilogue reads it as before, behind a ``loopast.Fence``). A read whose offset moves with
``j`` one element per lane is a vector load; one that does not move is broadcast.
Anything else (a strided or data-dependent read, a call, a select, a cast, a max
reduction, a lane loop whose start is not a whole vector into the tile) leaves the
nest as it was. Each element still sums the same terms in the same order with the
same roundings (the vector FMA rounds once per lane, like ``fmaf``): the result is
bit for bit the scalar loops'. With the 6 x 16 tiles of AVX2 (``codegen.target``)
the product above runs at 83 GFLOP/s.

>>> from codegen.loopast import Block, For, Lit, Load, Op, Store, Var
>>> i64, f32 = "int64", "float32"
>>> k, j = Var("k", i64), Var("j", i64)
>>> a = Load("A", k, f32)                                   # broadcast
>>> b = Load("B", Op("add", (Op("mul", (k, Lit(16, i64)), i64), j), i64), f32)  # moves with j
>>> lane = For(j, Lit(0, i64), Lit(16, i64), 1,
...            Block((Store("acc", j, Op("mul", (a, b), f32), add=True),)))
>>> nest = [For(k, Lit(0, i64), Lit(4, i64), 1, Block((lane,)))]
>>> names = iter(f"v{n}" for n in range(9))
>>> before, body, after = registerize(nest, "acc", 16, f32, 8, lambda dt: Var(next(names), dt))
>>> [d.var for d in before]
[Var(name='v0', dtype='float32x8'), Var(name='v1', dtype='float32x8')]
>>> from codegen.cemit import _Emitter
>>> em = _Emitter(); em.stmt(Block(tuple(body)), 0); print("\\n".join(em.lines))
for (int64_t k = 0; k < 4; k += 1) {
  v0 = te_vfma_f32x8(te_splat_f32x8(A[k]), te_vload_f32x8(&B[k * 16]), v0);
  v1 = te_vfma_f32x8(te_splat_f32x8(A[k]), te_vload_f32x8(&B[k * 16 + 8]), v1);
}
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from .loopast import (Accumulate, Block, CExpr, Decl, Fence, For, If, Lit, Load, Op, Stmt, Store,
                      Var, flat, variables, vector_dtype)

I64 = "int64"
#: lane-by-lane operations a vector does as the scalar code would
_LANEWISE = ("add", "sub", "mul", "div", "neg")


class _Declined(Exception):
    """The nest has something the vector rewrite does not do: it stays as it was."""


def registerize(nest: List[Stmt], acc: str, size: int, elem: str, lanes: int,
                fresh: Callable[[str], Var], known: Optional[Dict[str, int]] = None
                ) -> Optional[Tuple[List[Stmt], List[Stmt], List[Stmt]]]:
    """``(before, nest, after)`` computing the sum tile ``acc`` (``size`` elements of
    ``elem``, starting at zero) in vector variables of ``lanes`` lanes, or None when
    some part of ``nest`` cannot be (see the module's docstring). ``fresh(dtype)``
    names a new variable; ``known``: variables of one value around the nest (a loop
    over a single tile, whose value isl has put into the lane loops' bounds)."""
    if size % lanes or elem not in ("float32", "float64"):
        return None
    vdt = vector_dtype(elem, lanes)
    regs = [fresh(vdt) for _ in range(size // lanes)]
    try:
        body = [_stmt(s, _Tile(acc, size, elem, lanes, regs, known or {})) for s in nest]
    except _Declined:
        return None
    zero = Op("splat", (Lit(0.0, elem),), vdt)
    before: List[Stmt] = [Decl(r, zero) for r in regs]
    after: List[Stmt] = [Store(acc, Lit(m * lanes, I64), r) for m, r in enumerate(regs)]
    return before, body, after + [Fence(acc, elem, size)]


@dataclass(frozen=True)
class _Tile:
    acc: str
    size: int
    elem: str
    lanes: int
    regs: List[Var]
    known: Mapping[str, int]


def _stmt(s: Stmt, tile: _Tile) -> Stmt:
    acc = tile.acc
    match s:
        case For(body=body) if any(_stores_to(x, acc) for x in body.stmts):
            return _lane_loop(s, tile)
        case For(body=body):
            return replace(s, body=Block(tuple(_stmt(x, tile) for x in body.stmts)))
        case Block(stmts):
            return Block(tuple(_stmt(x, tile) for x in stmts))
        case If(cond, then, orelse):
            if _reads(cond, acc):
                raise _Declined
            return If(cond, _stmt(then, tile), None if orelse is None else _stmt(orelse, tile))
        case Store(buf, _, value, _) if buf == acc or _reads(value, acc):
            raise _Declined  # a store of the tile outside a lane loop
        case Decl(_, init) if init is not None and _reads(init, acc):
            raise _Declined
        case Accumulate(_, _, value) if _reads(value, acc):
            raise _Declined
    return s


def _lane_loop(loop: For, tile: _Tile) -> Block:
    """The lane loop ``loop`` as whole vectors: per vector of its lanes, each term added
    to the accumulator vector it lands in."""
    acc, size, elem, lanes, regs, known = (tile.acc, tile.size, tile.elem, tile.lanes,
                                           tile.regs, tile.known)
    j = loop.var.name
    if loop.step != 1 or loop.descending:
        raise _Declined
    trip = _difference(loop.hi, loop.lo, known)
    if trip is None or trip <= 0 or trip % lanes:
        raise _Declined
    lo = _linear(loop.lo, j, known)
    if lo is None:
        raise _Declined
    out: List[Stmt] = []
    terms: List[Tuple[int, CExpr]] = []
    for s in flat(loop.body.stmts):
        match s:
            case Store(buf, at, value, True) if buf == acc and value.dtype == elem:
                # at = (j - lo) + c: the term of lane j lands at element c + (j - lo)
                lin = _linear(at, j, known)
                if lin is None or lin.pop(j, 0) != 1:
                    raise _Declined
                start = _plus(lin, lo)
                c = start.pop(1, 0)
                if start or c % lanes or c < 0 or c + trip > size:
                    raise _Declined
                terms.append((c, value))
            case Decl(_, init) if init is not None and j not in variables(init) \
                    and not _reads(init, acc):
                out.append(s)  # the same for every lane: computed once
            case _:
                raise _Declined
    vdt = vector_dtype(elem, lanes)
    # term by term, its vectors together: a row's broadcast is live for its own FMAs only
    # (vector by vector, every row's broadcast stayed live across the pass and, beside 12
    # accumulators, spilled the AVX2 registers)
    for c, value in terms:
        reads_j = _Reads(j)  # (one per term: its vectors share the answers)
        for u in range(trip // lanes):
            first = _add(loop.lo, u * lanes)
            out.append(Accumulate(regs[(c + u * lanes) // lanes], "sum",
                                  _vector(value, j, first, elem, vdt, reads_j)))
    return Block(tuple(out))


class _Reads:
    """Does an expression read variable ``j``? Memoized by node: asked of every
    sub-expression of a term, then again for each of its vectors (recomputing
    ``variables`` at every level was quadratic in the term's depth)."""

    def __init__(self, j: str):
        self.j = j
        self.memo: Dict[int, Tuple[CExpr, bool]] = {}

    def __call__(self, e: CExpr) -> bool:
        got = self.memo.get(id(e))
        if got is not None:
            return got[1]
        match e:
            case Var(name, _):
                found = name == self.j
            case Op(_, args, _):
                found = any([self(a) for a in args])
            case Load(_, off, _):
                found = self(off)
            case _:
                found = False
        self.memo[id(e)] = (e, found)  # (e kept: its id is not reused meanwhile)
        return found


def _vector(e: CExpr, j: str, first: CExpr, elem: str, vdt: str, reads_j: "_Reads"
            ) -> CExpr:
    """``e`` for the lanes ``j = first, first + 1, ...`` as one vector of type ``vdt``."""
    if not reads_j(e):
        if e.dtype != elem:
            raise _Declined
        return Op("splat", (e,), vdt)
    match e:
        case Load(buf, off, dt) if dt == elem:
            lin = _linear(off, j)
            if lin is None or lin.get(j) != 1:
                raise _Declined  # a strided or gathered read
            return Load(buf, _substitute(off, j, first), vdt)
        case Op(op, args, dt) if op in _LANEWISE and dt == elem:
            return Op(op, tuple(_vector(a, j, first, elem, vdt, reads_j) for a in args), vdt)
    raise _Declined


# {{{ affine forms of index expressions


def _linear(e: CExpr, j: str, known: Mapping[str, int] = MappingProxyType({})
            ) -> Optional[Dict[object, int]]:
    """``e`` as ``{term: coefficient}`` (``1`` for the constant, a variable's name, or a
    sub-expression not involving ``j`` taken whole), None if ``j`` enters it otherwise
    than linearly. Variables in ``known`` count as their values."""
    match e:
        case Lit(v, dt) if dt in ("int32", "int64"):
            return {1: int(v)}
        case Var(name, _) if name in known:
            return {1: known[name]} if known[name] else {}
        case Var(name, dt) if dt in ("int32", "int64"):
            return {name: 1}
        case Op("add", (a, b), _):
            la, lb = _linear(a, j, known), _linear(b, j, known)
            return None if la is None or lb is None else _plus(la, lb)
        case Op("sub", (a, b), _):
            la, lb = _linear(a, j, known), _linear(b, j, known)
            return None if la is None or lb is None else _plus(la, _scale(lb, -1))
        case Op("neg", (a,), _):
            la = _linear(a, j, known)
            return None if la is None else _scale(la, -1)
        case Op("mul", (a, b), _):
            la, lb = _linear(a, j, known), _linear(b, j, known)
            if la is None or lb is None:
                return None
            if set(la) <= {1}:
                return _scale(lb, la.get(1, 0))
            if set(lb) <= {1}:
                return _scale(la, lb.get(1, 0))
    return None if j in variables(e) else {e: 1}


def _plus(a: Dict[object, int], b: Dict[object, int]) -> Dict[object, int]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return {k: v for k, v in out.items() if v != 0}


def _scale(a: Dict[object, int], c: int) -> Dict[object, int]:
    return {k: v * c for k, v in a.items() if v * c != 0}


def _difference(hi: CExpr, lo: CExpr, known: Mapping[str, int]) -> Optional[int]:
    """``hi - lo`` when it is a constant."""
    lh, ll = _linear(hi, "", known), _linear(lo, "", known)
    if lh is None or ll is None:
        return None
    d = _plus(lh, _scale(ll, -1))
    return d.get(1, 0) if set(d) <= {1} else None


# }}}

# {{{ walking expressions


def _reads(e: CExpr, buf: str) -> bool:
    match e:
        case Load(b, off, _):
            return b == buf or _reads(off, buf)
        case Op(_, args, _):
            return any(_reads(a, buf) for a in args)
    return False


def _stores_to(s: Stmt, buf: str) -> bool:
    match s:
        case Store(b, _, _, _):
            return b == buf
        case Block(stmts):
            return any(_stores_to(x, buf) for x in stmts)
        case If(_, then, orelse):
            return _stores_to(then, buf) or (orelse is not None and _stores_to(orelse, buf))
    return False


def _substitute(e: CExpr, name: str, by: CExpr) -> CExpr:
    match e:
        case Var(n, _) if n == name:
            return by
        case Op(op, args, dt):
            new = tuple(_substitute(a, name, by) for a in args)
            if op == "add":  # j -> 0: no "+ 0" in the C
                new = tuple(a for a in new if a != Lit(0, I64)) or (Lit(0, I64),)
                if len(new) == 1:
                    return new[0]
            return Op(op, new, dt)
        case Load(buf, off, dt):
            return Load(buf, _substitute(off, name, by), dt)
    return e


def _add(a: CExpr, n: int) -> CExpr:
    if n == 0:
        return a
    if isinstance(a, Lit):
        return Lit(a.value + n, I64)
    return Op("add", (a, Lit(n, I64)), I64)

# }}}

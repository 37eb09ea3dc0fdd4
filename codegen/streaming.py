"""Non-temporal stores: large outputs written once go around the caches.

A plain store to a line not in cache first reads that line (write-allocate), so a
kernel that writes ``N`` bytes it never reads moves ``2N`` over the memory bus for
them. A non-temporal (streaming) store writes whole aligned vectors straight to
memory: ``N``. For a large gradient written once (a global max pool's ``dX``, 16 MiB:
one thread, the whole VJP 1.6-1.8 -> 1.0-1.2 ms, its buffers 64-byte aligned) that is much
of the kernel's time.
GCC ignores ``#pragma omp simd nontemporal(...)`` (no ``movnt`` emitted, GCC 12), so the
stores are written as such (``loopast.StreamStore``; the C helper is a plain store
where the target has no such instruction).

A buffer's stores stream when (:func:`plan`):

* the kernel's buffers (inputs, outputs, scratch) together hold at least the
  last-level cache (``target.Target.llc_bytes``): otherwise the output stays there
  for whoever reads it next, and a plain store to a line already cached (the
  output's memory reused from the previous call) costs no read from memory, while
  a streaming one always goes to memory (measured on one thread, 32 MiB L3: an
  outer product writing 4 MiB 0.15 -> 0.07 ms and 16 MiB 0.60 -> 0.30 ms with plain
  stores; a row L2 normalization of 8 MiB 0.43 -> 0.38 ms; a global max pool's
  16 MiB ``dX`` beside its 16 MiB input, 32 MiB in all, 1.3 -> 0.9-1.1 ms streamed);
* the tensor behind it has constant dims and at least ``Target.stream_bytes`` bytes
  (:data:`STREAM_BYTES`, 4 MiB);
* nothing in the kernel reads it (not read back soon, no accumulation in it);
* every store to it is plain (not ``+=``) in an innermost, ascending, serial ``simd``
  loop of step 1 without reduction clauses, at ``base + v`` (``v`` the loop's
  variable, ``base`` free of it: contiguous), in a body of declarations, assignments
  and that one store (every iteration writes its element), with constant bounds at
  least ``MIN_VECTORS`` vectors apart (long rows: whole lines written back to back);
* that body costs at most ``MAX_COST`` simple operations per element: the loop is
  bound by memory, where the write-allocate read is what streaming saves.

Each such loop ``for v in [lo, hi)`` becomes three (:func:`rewrite`): the elements
before the first vector-aligned address (plain stores), chunks of whole vectors each
computed into a local array by the same body, then streamed from it vector by
vector, then the rest (plain). ``loopast.Op("align_gap")`` finds the first aligned element at run time:
an array whose address is not a multiple of its element size streams nothing.
Values and the order each element's value is computed in are unchanged.

Streaming stores are weakly ordered: each thread runs a ``loopast.StoreFence``
(``sfence``) once, before the join of its parallel region (a parallel loop becomes
a region whose threads share its iterations without waiting, then fence), or after
the serial loop nest, so the stores are visible when the kernel returns. Nothing in
the kernel reads a streamed buffer, so no later loop needs them sooner. A fence
waits for the stores before it to reach memory: one per row cost more than the
streaming gained (a max pool's gradient, rows of 2 KiB; GELU, 4 KiB).
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Dict, List, Optional, Tuple

import numpy as np

from tensorexpr.transform import const_value

from . import target
from .loopast import (Assign, Block, CExpr, Comment, Decl, For, If, Kernel, Lit, Load, Local, Op,
                      Region, Stmt, Store, StoreFence, StreamStore, Var, variables, vector_dtype)

I64 = "int64"

#: stream stores to outputs at least this large (bytes; see :func:`plan`) by default:
#: the target's ``stream_bytes`` (``target.Target``) is what a build uses
STREAM_BYTES = target.Target.stream_bytes

#: vectors computed into a local array (by the loop's own vectorized body) before
#: they are streamed: one vector at a time, GCC vectorized a costly body (GELU's tanh)
#: worse than the whole row (0.7x)
CHUNK_VECTORS = 16

#: a streamed loop runs at least this many vectors (a constant trip count): a register
#: tile's row of 2 vectors (pdist's forward) ran at 0.69x streamed, its lines written a
#: few vectors at a time between other loops
MIN_VECTORS = 8

#: element types streamed (the vector stores ``codegen.cemit`` has for them)
_DTYPES = ("float32", "float64")


def _terms(e: CExpr) -> List[CExpr]:
    """The summands of a tree of ``add`` operations."""
    if isinstance(e, Op) and e.op == "add":
        return _terms(e.args[0]) + _terms(e.args[1])
    return [e]


def contiguous(off: CExpr, v: Var) -> Optional[CExpr]:
    """``base`` if ``off`` is ``base + v`` with ``base`` free of ``v`` (``Lit(0)`` for
    ``v`` alone), else None.

    >>> i, j = Var("i", I64), Var("j", I64)
    >>> contiguous(Op("add", (Op("mul", (i, Lit(8, I64)), I64), j), I64), j).op
    'mul'
    >>> contiguous(Op("mul", (j, Lit(2, I64)), I64), j) is None
    True
    """
    terms = _terms(off)
    mine = [t for t in terms if t == v]
    rest = [t for t in terms if t != v]
    if len(mine) != 1 or any(v.name in variables(t) for t in rest):
        return None
    base: CExpr = Lit(0, I64)
    for k, t in enumerate(rest):
        base = t if k == 0 else Op("add", (base, t), I64)
    return base


def _stores(s: Stmt, out: Dict[str, list], loads: set, loop: Optional[For] = None) -> None:
    """Collect, per buffer, the loops holding its stores (None: a store that cannot
    stream), and the buffers some expression loads."""
    def exprs(*es):
        for e in es:
            if e is not None:
                _loaded(e, loads)
    match s:
        case Block(stmts):
            for x in stmts:
                _stores(x, out, loads, loop)
        case Region(body, work):
            exprs(work)
            _stores(body, out, loads)
        case For():
            exprs(s.lo, s.hi, s.work)
            for x in s.body.stmts:
                _stores(x, out, loads, s)
        case If(cond, then, orelse):
            exprs(cond)
            _stores(then, out, loads, None)
            if orelse is not None:
                _stores(orelse, out, loads, None)
        case Store(buf, off, value, add):
            exprs(off, value)
            out.setdefault(buf, []).append(None if add else loop)
        case StreamStore(buf, off, value):
            exprs(off, value)
            out.setdefault(buf, []).append(None)
        case Decl(_, init):
            exprs(init)
        case Assign(_, value):
            exprs(value)
        case _:
            for f in ("value", "index", "size", "cond"):
                exprs(getattr(s, f, None))


def _loaded(e: CExpr, loads: set) -> None:
    # (a loop by exact type, not a recursive match: it visits every expression node of
    # the kernel)
    stack = [e]
    while stack:
        x = stack.pop()
        cls = type(x)
        if cls is Op:
            stack.extend(x.args)
        elif cls is Load:
            loads.add(x.buf)
            stack.append(x.offset)


#: at most this many operations (``_cost``) per element stored: a costlier body is
#: bound by its arithmetic, not by memory (GELU's tanh: 0.87x streamed)
MAX_COST = 16
#: what an operation costs, in simple operations (unlisted: 1)
_COSTS = {"div": 4, "sqrt": 4, "quot": 4, "rem": 4, "floordiv": 4, "mod": 4, "exp": 20,
          "log": 20, "tanh": 20, "sigmoid": 24, "sin": 20, "cos": 20, "pow": 30}


def _cost(e: Optional[CExpr]) -> int:
    """The operations (loads included) of the expression ``e``, weighted by ``_COSTS``.

    >>> x = Load("b0", Var("i", I64), "float32")
    >>> _cost(Op("tanh", (Op("mul", (x, x), "float32"),), "float32"))
    23
    """
    match e:
        case Load(_, off, _):
            return 1 + _cost(off) if isinstance(off, Load) else 1
        case Op(op, args, _):
            return _COSTS.get(op, 1) + sum(_cost(a) for a in args)
    return 0


def _lanes(dtype: str) -> int:
    return target.current().lanes(dtype)


def _streamable(loop: Optional[For], buf: str) -> bool:
    """Is ``loop`` an innermost simd loop whose body stores ``buf[base + v]`` once,
    among declarations and assignments only?"""
    if (loop is None or not loop.simd or loop.step != 1 or loop.descending or loop.parallel
            or loop.team or loop.reduction):
        return False
    lo, hi = loop.lo, loop.hi
    if not (isinstance(lo, Lit) and isinstance(hi, Lit)):
        return False
    stores = [s for s in loop.body.stmts if isinstance(s, Store)]
    others = [s for s in loop.body.stmts if not isinstance(s, (Store, Decl, Assign, Comment))]
    cost = sum(_cost(getattr(s, "value", None) or getattr(s, "init", None))
               for s in loop.body.stmts)
    return (not others and len(stores) == 1 and stores[0].buf == buf
            and stores[0].value.dtype in _DTYPES and cost <= MAX_COST
            and hi.value - lo.value >= MIN_VECTORS * _lanes(stores[0].value.dtype)
            and contiguous(stores[0].offset, loop.var) is not None)


def plan(kernel: Kernel, tensors) -> Dict[str, str]:
    """Buffer name -> the note of the tensor whose stores stream (see the module
    docstring); ``tensors[k]`` is behind ``kernel.buffers[k]``."""
    out: Dict[str, list] = {}
    loads: set = set()
    for s in kernel.body:
        _stores(s, out, loads)
    for f in kernel.functions:  # (not rewritten: what they store never streams)
        inside: Dict[str, list] = {}
        _stores(f.body, inside, loads)
        for buf in inside:
            out.setdefault(buf, []).append(None)
    chosen = {}
    sizes = [_bytes(b, t) for b, t in zip(kernel.buffers, tensors)]
    if sum(s or 0 for s in sizes) < target.current().llc_bytes:
        return chosen  # everything stays in the last-level cache: the next reader finds it there
    for b, t, size in zip(kernel.buffers, tensors, sizes):
        if b.readonly or b.name in loads or b.name not in out or b.dtype not in _DTYPES:
            continue
        if size is None:
            continue
        if size >= target.current().stream_bytes and all(_streamable(loop, b.name)
                                                          for loop in out[b.name]):
            chosen[b.name] = f"{t.name} ({size / (1 << 20):.3g} MiB written once)"
    return chosen


def _bytes(b, t) -> Optional[int]:
    """Bytes of buffer ``b`` (tensor ``t``), None for a symbolic size."""
    dims = [const_value(d) for d in t.dims]
    if any(d is None for d in dims):
        return None
    return math.prod(dims) * np.dtype(b.dtype).itemsize


class _Rewriter:
    def __init__(self, bufs):
        self.bufs = bufs
        self.count = 0

    def fresh(self, what: str) -> str:
        self.count += 1
        return f"nt{what}{self.count - 1}"

    def loop(self, f: For) -> List[Stmt]:
        """``f`` as a plain head, streamed chunks of whole vectors and a plain tail."""
        store = next(s for s in f.body.stmts if isinstance(s, Store))
        v, elem = f.var, store.value.dtype
        lanes = target.current().lanes(elem)
        vbytes = lanes * (4 if elem == "float32" else 8)
        chunk = lanes * CHUNK_VECTORS
        base = contiguous(store.offset, v)
        a, b = Var(self.fresh("a"), I64), Var(self.fresh("b"), I64)
        w, e, k = Var(self.fresh("w"), I64), Var(self.fresh("e"), I64), Var(self.fresh("k"), I64)
        stage = self.fresh("s")
        n = Op("sub", (f.hi, f.lo), I64)
        gap = Op("align_gap", (Load(store.buf, Op("add", (base, f.lo), I64), elem),
                               Lit(vbytes, I64), n), I64)
        whole = Op("mul", (Op("quot", (Op("sub", (f.hi, a), I64), Lit(lanes, I64)), I64),
                           Lit(lanes, I64)), I64)
        staged = tuple(Store(stage, Op("sub", (v, w), I64), s.value) if s is store else s
                       for s in f.body.stmts)
        vectors = For(w, a, b, chunk, Block((
            Decl(e, Op("min", (Op("add", (w, Lit(chunk, I64)), I64), b), I64)),
            Local(stage, elem, chunk),
            replace(f, lo=w, hi=e, body=Block(staged), work=None,
                    note=f"{f.note} (staged)".strip()),
            For(k, w, e, lanes, Block((
                StreamStore(store.buf, Op("add", (base, k), I64),
                            Load(stage, Op("sub", (k, w), I64), vector_dtype(elem, lanes))),)),
                note="its vectors: non-temporal stores"))),
            note="whole aligned vectors, through a local array")
        return [Decl(a, Op("add", (f.lo, gap), I64)), Decl(b, Op("add", (a, whole), I64)),
                replace(f, hi=a, note=f"{f.note} (to the first aligned vector)".strip()),
                vectors, replace(f, lo=b, note=f"{f.note} (the rest)".strip())]

    def streams(self, s: Stmt) -> bool:
        """Is ``s`` itself a loop whose stores stream?"""
        if not isinstance(s, For):
            return False
        store = next((x for x in s.body.stmts if isinstance(x, Store)), None)
        return store is not None and store.buf in self.bufs and _streamable(s, store.buf)

    def stmts(self, stmts) -> Tuple[List[Stmt], bool]:
        """``stmts`` rewritten, and whether some loop in them streams."""
        out: List[Stmt] = []
        did = False
        for s in stmts:
            new, d = self.stmt(s)
            out.extend(new)
            did = did or d
        return out, did

    def stmt(self, s: Stmt) -> Tuple[List[Stmt], bool]:
        match s:
            case Block(items):
                new, did = self.stmts(items)
                return [Block(tuple(new))], did
            case If(cond, then, orelse):
                t, d1 = self.stmts(then.stmts)
                e, d2 = (None, False) if orelse is None else self.stmts(orelse.stmts)
                return [If(cond, Block(tuple(t)), None if e is None else Block(tuple(e)))], d1 or d2
            case For() if self.streams(s):
                return self.loop(s), True
            case For():
                new, did = self.stmts(s.body.stmts)
                return ([replace(s, body=Block(tuple(new)))] if did else [s]), did
        return [s], False

    def top(self, s: Stmt) -> List[Stmt]:
        """``s`` (outside every loop) rewritten, each thread's stores fenced once: at the
        end of a parallel region (a parallel loop becomes a region whose threads share
        its iterations, then fence), after a serial loop."""
        match s:
            case For() if s.parallel:
                new, did = self.stmt(s)
                if not did:
                    return [s]
                loop = replace(new[0], parallel=False, team="for nowait")
                return [Region(Block((loop, StoreFence())), s.work)]
            case For():
                new, did = self.stmt(s)
                return new + [StoreFence()] if did else [s]
            case Region(body, _):
                new, did = self.stmts(body.stmts)
                return [replace(s, body=Block(tuple(new + [StoreFence()])))] if did else [s]
            case Block(items):
                return [Block(tuple(x for y in items for x in self.top(y)))]
            case If(cond, then, orelse):
                return [If(cond, Block(tuple(x for y in then.stmts for x in self.top(y))),
                           None if orelse is None else
                           Block(tuple(x for y in orelse.stmts for x in self.top(y))))]
        return [s]


def rewrite(kernel: Kernel, tensors) -> Tuple[Kernel, List[str]]:
    """``kernel`` with the stores of the buffers :func:`plan` picks streamed, and a line
    per such tensor for the schedule.

    >>> import tensorexpr as te
    >>> X = te.placeholder((2048, 1024), name="X")
    >>> Y = te.compute((2048, 1024), lambda i, j: X[i, j] * 2.0, name="Y")
    >>> with target.use(replace(target.current(), llc_bytes=8 << 20)):
    ...     print(te.build([Y], [X]).schedule)
    Y: loops
    streamed: Y (8 MiB written once)
    >>> with target.use(replace(target.current(), llc_bytes=32 << 20)):  # 16 MiB fit
    ...     print(te.build([Y], [X]).schedule)
    Y: loops
    """
    chosen = plan(kernel, tensors)
    if not chosen:
        return kernel, []
    rw = _Rewriter(set(chosen))
    body = [x for s in kernel.body for x in rw.top(s)]
    return replace(kernel, body=tuple(body)), list(chosen.values())

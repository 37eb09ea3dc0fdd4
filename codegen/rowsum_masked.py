"""Full-tile row loops: a row reduction's innermost loop over the whole tile, masked.

In a row reduction (``lower.Lowerer.compute_rows``) the innermost loop runs over
the row axis ``j`` of the tile, with bounds from isl. When those bounds move with
a reduction axis (a padded convolution: ``max(0, 1 - kx) <= x < min(32, 33 - kx)``,
a convolution gradient, a strided residue), the loop has a variable trip count:
the compiler cannot keep it in full vector registers and runs much of it in
scalar remainder code. Here such a loop instead runs over the whole tile, a
constant trip count, and tests ``lo <= j < hi`` at each point:

    if (lo < hi) {
      w = W[f, c, ky, kx];            // loads that do not move with j, hoisted
      for (j = start; j < end; j++)   // the whole tile
        if (lo <= j && j < hi) acc[j] += X[..., j + kx - 1] * w;
    }

The points computed and the order in which each element adds them are those of
the isl loop; only the loop shape changes. Loads that do not depend on ``j`` run
once before the loop, inside ``lo < hi`` (so only where the isl loop would have
run at least once, where they are valid: the same points are proven or checked).
The compiler turns the remaining conditional loads and stores into masked vector
operations.

Masked lanes still cost about twice an unmasked loop. When the point only adds
``R[idx(j)] * w`` (one row read, hoisted weights ``w``), :func:`_staged` gives an
unmasked version: the row is copied into a local array with zeros outside the
mask (``stage[j] = inside ? R[idx(j)] : 0``, a masked load) and every lane adds
``stage[j] * w``. Outside the mask that adds ``0 * w``, +0 or -0 when ``w`` is
finite, which changes no sum; so ``lower.compute_rows`` checks once, before the
loops, that the weights' buffers hold only finite values and runs that version,
else the masked one.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Optional, Tuple

from tensorexpr.ir import Axis, Binary, Const, Expr, Read, Reduce, Select, Unary, walk
from tensorexpr.polyhedral import LoopBlock, LoopFor, LoopIf, LoopLet, LoopPoint

from .loopast import (Accumulate, Assign, Block, CExpr, Decl, For, If, Lit, Load, Local, Op, Stmt,
                      Store, Var, loads, variables)

#: marks the iterator of a full-tile loop (its note in the generated code)
MARK = " (full tile)"


#: bounds may move with axes of at most this extent (a kernel's taps, a stride's
#: residues): the masked points are then a few per row, not most of it (a triangle)
SHORT = 8


def worth(body: Expr, op: str, j: Axis, rest) -> bool:
    """Is a reduction worth full-tile loops: a float sum of ``R[.., j ..] * w`` with one
    read moving with ``j`` and a factor ``w`` that does not move with it but reads
    something (a convolution's weight), and no condition tested point by point?
    Then the unmasked path applies (:func:`_staged`); masked loops alone were slower
    than isl's bounds for other sums (a max-pool's gradient: 3x).

    >>> import tensorexpr as te
    >>> X, W = te.placeholder((20,), name="X"), te.placeholder((3,), name="W")
    >>> k = te.reduce_axis(3, name="k")
    >>> Y = te.compute((18,), lambda j: te.sum(X[j + k] * W[k], axis=k), name="Y")
    >>> worth(Y.body.body, "sum", Y.axes[0], []), worth(Y.body.body, "max", Y.axes[0], [])
    (True, False)
    """
    if op != "sum" or rest or not (isinstance(body, Binary) and body.op == "mul"
                                   and body.dtype in ("float32", "float64")):
        return False

    def moves(e: Expr) -> bool:
        return any(isinstance(x, Axis) and x.uid == j.uid for x in walk(e, unique=True))

    for a, b in ((body.a, body.b), (body.b, body.a)):
        if (isinstance(a, Read) and moves(a) and not moves(b)
                and any(isinstance(x, Read) for x in walk(b, unique=True))
                and not any(isinstance(x, (Reduce, Select)) for x in walk(b, unique=True))):
            return True
    return False


def widen(tree, start: Expr, end: Expr, keep=()):
    """``tree`` (an isl loop tree over axes whose last is the row axis ``j``) with each
    innermost unit-step loop over ``j`` (its body a single point) replaced by a loop over ``[start, end)`` whose point
    runs where the old bounds hold, the whole inside ``if (lo < hi)``. ``j`` must be
    the innermost loop of the points (the other axes bound outside). Only loops
    whose bounds move with short axes (constant extent at most ``SHORT``) and the
    axes in ``keep`` (uids: the tile) are widened.

    Returns ``(tree, changed)``."""
    changed = False

    def moves(*es: Expr) -> bool:
        """Do the bounds move with an axis other than the tile's (not constant)?"""
        return any(isinstance(x, Axis) and x.uid not in keep for e in es for x in walk(e, unique=True))

    def short(e: Expr) -> bool:
        for x in walk(e, unique=True):
            if isinstance(x, Axis) and x.uid not in keep:
                span = _interval(x)
                if span is None or span[1] - span[0] >= SHORT:
                    return False
        return True

    def go(node):
        nonlocal changed
        match node:
            case LoopBlock(items):
                return LoopBlock(tuple(go(x) for x in items))
            case LoopFor(it, lo, hi, step, body):
                if (step == 1 and isinstance(body, LoopPoint) and isinstance(body.values[-1], Axis)
                        and body.values[-1].uid == it.uid
                        and not (_same(lo, start) and _same(hi, end))
                        and moves(lo, hi) and short(lo) and short(hi)):
                    changed = True
                    full = Axis(it.name + MARK, it.lo, it.hi, it.uid)
                    inside = Binary("and", Binary("ge", it, lo, "bool"),
                                    Binary("lt", it, hi, "bool"), "bool")
                    loop = LoopFor(full, start, end, 1, LoopIf(inside, body, None))
                    return LoopIf(Binary("lt", lo, hi, "bool"), loop, None)
                return LoopFor(it, lo, hi, step, go(body))
            case LoopLet(it, value, body):
                return LoopLet(it, value, go(body))
            case LoopIf(cond, then, orelse):
                return LoopIf(cond, go(then), None if orelse is None else go(orelse))
        return node

    out = go(tree)
    go = moves = short = None  # noqa: F811, F841 (go calls itself: a cycle)
    return out, changed


def _interval(e: Expr, depth: int = 0) -> Optional[Tuple[int, int]]:
    """Inclusive integer bounds of ``e`` over the boxes of its axes (whose bounds may
    be expressions of other axes: isl writes ``i3%2 <= kx < 2 + 1``), or None."""
    if depth > 8:
        return None
    match e:
        case Const(v, _) if isinstance(v, int):
            return (v, v)
        case Axis():
            lo, hi = _interval(e.lo, depth + 1), _interval(e.hi, depth + 1)
            return None if lo is None or hi is None else (lo[0], hi[1] - 1)
        case Binary(op, a, b, _) if op in ("add", "sub", "mul", "min", "max", "floordiv", "mod"):
            x, y = _interval(a, depth + 1), _interval(b, depth + 1)
            if x is None or y is None:
                return None
            if op == "add":
                return (x[0] + y[0], x[1] + y[1])
            if op == "sub":
                return (x[0] - y[1], x[1] - y[0])
            if op in ("min", "max"):
                f = min if op == "min" else max
                return (f(x[0], y[0]), f(x[1], y[1]))
            if op == "mul":
                ps = [u * v for u in x for v in y]
                return (min(ps), max(ps))
            if y[0] == y[1] and y[0] > 0:  # by a positive constant
                if op == "floordiv":
                    return (x[0] // y[0], x[1] // y[0])
                return (0, y[0] - 1)
        case Unary("neg", a, _):
            x = _interval(a, depth + 1)
            return None if x is None else (-x[1], -x[0])
    return None


def _same(a: Expr, b: Expr) -> bool:
    from tensorexpr.ir import same
    return same(a, b)


def hoist(stmts: List[Stmt], fresh, staged: Optional[set] = None) -> List[Stmt]:
    """``stmts`` with the loads of each full-tile loop (:func:`widen`) that do not depend
    on variables set inside it declared just before it (``fresh(dtype)`` names them).

    With ``staged`` (a set), loops that qualify take the unmasked path of
    :func:`_staged` instead, and the buffers whose hoisted values must then be finite
    are added to ``staged``: the caller runs this version only if they are."""
    out: List[Stmt] = []
    for s in stmts:
        match s:
            case Block(items):
                out.append(Block(tuple(hoist(list(items), fresh, staged))))
            case If(c, then, orelse):
                out.append(If(c, Block(tuple(hoist(list(then.stmts), fresh, staged))),
                              None if orelse is None else
                              Block(tuple(hoist(list(orelse.stmts), fresh, staged)))))
            case For() if s.note.endswith(MARK):
                s, pre = _lift_decls(s)
                inner = _defined(s.body) | {s.var.name}
                written = _stored(s.body)
                table: Dict[Load, Var] = {}
                decls: List[Stmt] = []

                def lift(x: CExpr) -> CExpr:
                    match x:
                        case Load(buf, off, dt) if not (variables(off) & inner) and buf not in written:
                            if x not in table:
                                table[x] = fresh(dt)
                                decls.append(Decl(table[x], x))
                            return table[x]
                        case Op(op, args, dt) if op != "select":  # a select's branches: as written
                            return Op(op, tuple(lift(a) for a in args), dt)
                    return x

                body = _map(s.body, lift, top=True)
                loop = replace(s, body=body)
                fast = None if staged is None else _staged(loop, decls, fresh, staged)
                out.extend(pre + decls + (fast or [loop]))
            case For():
                out.append(replace(s, body=Block(tuple(hoist(list(s.body.stmts), fresh,
                                                             staged)))))
            case _:
                out.append(s)
    return out


def _lift_decls(loop: For) -> Tuple[For, List[Stmt]]:
    """``loop`` without the integer declarations of its point that do not depend on
    anything set inside it (isl's ``k = 0`` for an axis of extent 1), and those
    declarations (to go before it)."""
    lifted: List[Stmt] = []
    moved: set = set()
    inner = _defined(loop.body) | {loop.var.name}

    def go(b: Block, depth: int) -> Block:
        items = []
        for x in b.stmts:
            if (isinstance(x, Decl) and x.init is not None and x.var.dtype == "int64"
                    and not loads(x.init) and not (variables(x.init) & (inner - moved))):
                lifted.append(x)
                moved.add(x.var.name)
            elif isinstance(x, Block):
                items.append(go(x, depth))
            elif isinstance(x, If) and depth == 0 and x.orelse is None:
                items.append(If(x.cond, go(x.then, depth + 1)))
            else:
                items.append(x)
        return Block(tuple(items))

    return replace(loop, body=go(loop.body, 0)), lifted


def _staged(loop: For, decls: List[Stmt], fresh, needs: set) -> Optional[List[Stmt]]:
    """The unmasked fast path of a full-tile loop whose masked point only adds products
    ``R[idx(j)] * w`` of one row read and hoisted loads ``w`` (``decls``) to
    accumulators:

        stage[j] = inside(j) ? R[idx(j)] : 0      (a masked load: never out of range)
        acc[..] += stage[j] * w                  (no mask)

    valid when every ``w`` is finite: a lane outside the mask then adds ``0 * w``, +0
    or -0, which leaves any sum unchanged (a sum that starts at +0 is never -0). The
    buffers the ``w`` come from are added to ``needs``; the caller runs this path only
    if all their elements are finite (else the masked loop). None if the loop is not
    so."""
    hoisted = {d.var: d.init for d in decls if isinstance(d, Decl)}
    if not (isinstance(loop.lo, (Lit, Var, Op)) and len(loop.body.stmts) == 1):
        return None
    width = _width(loop.lo, loop.hi)
    masked = loop.body.stmts[0]
    if width is None or not isinstance(masked, If) or masked.orelse is not None:
        return None
    items = _flatten(masked.then)
    if items is None or not items:
        return None
    row: Optional[Load] = None
    ws: List[Var] = []
    for st in items:
        if not (isinstance(st, Store) and st.add and isinstance(st.value, Op)
                and st.value.op == "mul" and st.value.dtype in ("float32", "float64")):
            return None
        a, b = st.value.args
        ld, w = (a, b) if isinstance(a, Load) else (b, a)
        if not (isinstance(ld, Load) and isinstance(w, Var) and isinstance(hoisted.get(w), Load)):
            return None
        if row is None:
            row = ld
        elif ld != row:
            return None
        ws.append(w)
    dt = row.dtype
    stage = fresh(dt)
    name = stage.name.replace("t", "stage", 1)
    k = Var(loop.var.name, loop.var.dtype)
    at = Op("sub", (k, loop.lo), "int64")
    fill = For(loop.var, loop.lo, loop.hi, 1, Block((
        Store(name, at, Op("select", (masked.cond, row, Lit(0.0, dt)), dt)),)),
        note=loop.note + " (staged)", simd=True)
    fast = replace(loop, body=Block(tuple(
        replace(st, value=Op("mul", (Load(name, at, dt), w), dt)) for st, w in zip(items, ws))),
        note=loop.note.replace(MARK, " (full tile, unmasked)"))
    needs.update(hoisted[w].buf for w in ws)
    return [Local(name, dt, width), fill, fast]


def _width(lo: CExpr, hi: CExpr) -> Optional[int]:
    """``hi - lo`` if it is a constant (``[c, c + w)`` or two literals), else None."""
    if isinstance(lo, Lit) and isinstance(hi, Lit):
        return int(hi.value) - int(lo.value)
    if isinstance(hi, Op) and hi.op == "add" and hi.args[0] == lo and isinstance(hi.args[1], Lit):
        return int(hi.args[1].value)
    return None


def _flatten(b: Block) -> Optional[List[Stmt]]:
    out: List[Stmt] = []
    for x in b.stmts:
        if isinstance(x, Block):
            inner = _flatten(x)
            if inner is None:
                return None
            out.extend(inner)
        else:
            out.append(x)
    return out


def _map(s, lift, top: bool = False):
    """``s`` with ``lift`` applied to the values it computes (not to the offsets it stores
    at), in the point's mask (``top``) but not in other conditionals: a load a run-time
    check guards stays behind its check."""
    match s:
        case Block(items):
            return Block(tuple(_map(x, lift, top) for x in items))
        case If(c, then, orelse):
            if not top:
                return s
            return If(c, _map(then, lift), None if orelse is None else _map(orelse, lift))
        case Store(buf, off, value, add):
            return Store(buf, off, lift(value), add)
        case Accumulate(var, op, value):
            return Accumulate(var, op, lift(value))
        case Assign(var, value):
            return Assign(var, lift(value))
        case Decl(var, init):
            return Decl(var, None if init is None else lift(init))
    return s


def _stored(s) -> set:
    """Names of the buffers and local arrays ``s`` stores to."""
    match s:
        case Block(items):
            return set().union(*(_stored(x) for x in items)) if items else set()
        case If(_, then, orelse):
            return _stored(then) | (set() if orelse is None else _stored(orelse))
        case For():
            return _stored(s.body)
        case Store(buf, _, _, _):
            return {buf}
    return set()


def _defined(s) -> set:
    """Names of the variables declared or assigned in ``s`` (and loop iterators)."""
    match s:
        case Block(items):
            return set().union(*(_defined(x) for x in items)) if items else set()
        case If(_, then, orelse):
            return _defined(then) | (set() if orelse is None else _defined(orelse))
        case For():
            return {s.var.name} | _defined(s.body)
        case Decl(var, _) | Assign(var, _):
            return {var.name}
        case Accumulate(var, _, _):
            return {var.name}
    return set()


"""Expression lowering: scalar IR (arithmetic, selects, reads, reductions) to loop-AST.

A mixin of :class:`codegen.lower.Lowerer`: ``expr`` turns an IR expression into a C
expression, appending the statements it needs (checked loads, reduction loops,
branches of a select) to a list; ``loops`` emits the loops over a reduction's or a
scatter's domain (tight isl bounds for its affine conditions).

>>> import tensorexpr as te
>>> from codegen.lower import Lowerer
>>> from codegen.signature import Signature
>>> from codegen.scope import Scope
>>> A = te.placeholder((4,), name="A")
>>> lw = Lowerer(Signature([A], [A]))
>>> out = []
>>> lw.expr(A[2] * 2.0, Scope({}, (), (), {}), out).op, out
('mul', [])
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Optional, Sequence

from tensorexpr import polyhedral
from tensorexpr.ir import (Axis, Binary, Cast, Compute, Const, Expr, Read, Reduce, Select, SizeVar,
                           Tensor, Unary, is_float, promote, walk, children, evaluated_with,
                           postorder)
from tensorexpr.transform import const_value, flat_index, free_axes
from tensorexpr.polyhedral import LoopBlock, LoopFor, LoopIf, LoopLet, LoopPoint

from . import target
from .cexpr import I64, add, cast, checked, fold, identity, mul, wrap_int, zero
from .loopast import (Accumulate, Assign, Block, CExpr, Decl, For, If, Lit, Load, Local, Op, Stmt,
                      Store, Var, lane_sums, loads, mark_inner_simd, simd_safe)
from .patterns import conj, where_form
from .program import READ_OUT_OF_RANGE, Site
from .residue_algebra import terms
from .scope import Scope


#: interleaved partial results of a max/min over one axis
LANES = 16
#: partial results of a long max or min (several vectors: see ``reduce``)
EXTREMUM_LANES = 64
#: a float sum keeps partial sums per value of its last axis if it has at most this many
PARTIAL_SUMS = 4096
#: the most levels of a float expression lowered into one C expression
STAGE = 64
#: a reduction visiting at most this many points per element (the product of its
#: axes' longest runs) is a window: its loops are unrolled (see ``reduce``)
WINDOW_POINTS = 16


class ExprLowering:
    """The expression half of :class:`codegen.lower.Lowerer` (uses its buffers, sizes, inlining)."""

    def __init__(self):
        self._affine: Dict[tuple, Optional[tuple]] = {}  # affine_offset's isl answers
        #: ids of float operations to compute once into a local (see ``_analyse``)
        self._bind: Dict[int, bool] = {}
        self._known: List[Expr] = []  # the analysed roots, kept alive: their ids are keys
        self._staging = False
        #: per node id: does a node strictly under it compute into a local? (valid while
        #: no ``_bind`` entry turns True: then cleared)
        self._below: Dict[int, bool] = {}
        #: ids of the float sums to add in the order written (``patterns.compared_sums``)
        self.compared: set = set()
        #: node id -> its rank in a post-order of all analysed roots (children first)
        self._rank: Dict[int, int] = {}
        #: node id -> the region its uses have in common (see ``_place``)
        self._region: Dict[int, int] = {}
        #: region -> (parent region, depth); region -> the bound nodes placed there
        #: that its code does not evaluate itself: only regions under it do
        self._regions: Dict[int, tuple] = {}
        self._placed: Dict[int, List[Expr]] = {}
        self._branch: Dict[tuple, int] = {}  # (node id, which child) -> its region

    # {{{ loops over a (reduction or scatter) domain

    def loops(self, axes: Sequence[Axis], where: Optional[Expr], scope: Scope, point,
              out: List[Stmt], runs: Optional[Dict[str, int]] = None) -> None:
        """Emit loops over ``axes``' box where ``where`` holds; ``point(scope, out)``
        emits the statements for one point. ``runs``: the loops over the axes of these
        names are unrolled, each to that many points (its longest run, :func:`unrolled`)."""
        conds = polyhedral.conjuncts(where)
        if conds:
            outer = scope.unbind(axes)
            tree, rest = polyhedral.loop_nest(axes, conds, outer.axes, outer.guards)
        else:
            tree, rest = LoopPoint(tuple(axes)), []
            for ax in reversed(axes):
                tree = LoopFor(ax, ax.lo, ax.hi, 1, tree)
        if runs:
            tree = unrolled(tree, runs)
        affine = [c for c in conds if not any(c is r for r in rest)]
        self.loop_tree(tree, axes, affine, rest, scope, {}, point, out)

    def loop_tree(self, node, axes, affine, rest, scope: Scope, iters: Dict[int, CExpr],
              point, out: List[Stmt]) -> None:
        # Loop bounds and conditions are pure integer expressions of the
        # iterators, the enclosing axes and the sizes.
        bscope = scope.child(env=iters)
        match node:
            case LoopBlock(items):
                for item in items:
                    self.loop_tree(item, axes, affine, rest, scope, iters, point, out)
            case LoopFor(it, lo, hi, step, body):
                v = self.fresh("k", I64)
                inner: List[Stmt] = []
                self.loop_tree(body, axes, affine, rest, scope, {**iters, it.uid: v},
                           point, inner)
                out.append(For(v, self.expr(lo, bscope, out), self.expr(hi, bscope, out), step,
                               Block(tuple(inner)), note=it.name))
            case LoopLet(it, value, body):
                v = self.fresh("k", I64)
                out.append(Decl(v, self.expr(value, bscope, out)))
                self.loop_tree(body, axes, affine, rest, scope, {**iters, it.uid: v},
                           point, out)
            case LoopIf(cond, then, orelse):
                a: List[Stmt] = []
                self.loop_tree(then, axes, affine, rest, scope, iters, point, a)
                b: Optional[List[Stmt]] = None
                if orelse is not None:
                    b = []
                    self.loop_tree(orelse, axes, affine, rest, scope, iters, point, b)
                out.append(If(self.expr(cond, bscope, out), Block(tuple(a)),
                              None if b is None else Block(tuple(b))))
            case LoopPoint(values):
                env: Dict[int, CExpr] = {}
                stmts: List[Stmt] = []
                for ax, val in zip(axes, values):
                    if isinstance(val, Axis) and val.uid in iters:
                        env[ax.uid] = iters[val.uid]
                    else:
                        v = self.fresh("k", I64)
                        stmts.append(Decl(v, self.expr(val, bscope, stmts)))
                        env[ax.uid] = v
                inner = scope.child(axes, affine, env)
                if rest:  # tested at each point, where the affine conjuncts hold
                    cond = self.expr(conj(rest), inner, stmts)
                    body: List[Stmt] = []
                    point(inner.child(guards=rest), body)
                    stmts.append(If(cond, Block(tuple(body))))
                else:
                    point(inner, stmts)
                out.append(Block(tuple(stmts)))
            case _:
                raise TypeError(f"unexpected loop tree node {node!r}")

    # }}}

    # {{{ expressions

    def _analyse(self, e: Expr) -> None:
        """Mark the float operations of ``e`` to compute into locals: those used more
        than once (an expression is a DAG; a gradient's partials share the forward's
        sub-expressions) and every ``STAGE``-th level of a deep one, so that the C
        text grows with the DAG and no C expression is deeper than ``STAGE``."""
        self._known.append(e)
        fanout: Dict[int, int] = {}
        height: Dict[int, int] = {}
        nodes = postorder(e)
        for x in nodes:
            kids = children(x)
            for c in kids:
                fanout[id(c)] = fanout.get(id(c), 0) + 1
            height[id(x)] = 1 + max((height[id(c)] for c in kids), default=-1)
        rank = self._rank
        for x in nodes:
            if id(x) not in rank:  # (a node's children were ranked before it)
                rank[id(x)] = len(rank)
            op = isinstance(x, (Binary, Unary, Cast, Select)) and is_float(x.dtype)
            bind = op and (fanout.get(id(x), 0) > 1 or height[id(x)] % STAGE == STAGE - 1)
            was = self._bind.get(id(x))
            if bind and not was:
                if was is False:
                    self._below.clear()  # (a node already analysed is now bound)
                self._bind[id(x)] = True
            elif was is None:
                self._bind[id(x)] = False
        self._place(e, nodes)

    def _place(self, e: Expr, nodes: List[Expr]) -> None:
        """Give each node of ``e`` the innermost region holding all its uses: regions
        are ``e`` itself and, under a region, a select's branches and the right operand
        of ``&``/``|`` (evaluated only where a condition holds) and a reduction's body.
        A bound node whose region is R but which only regions under R evaluate (the
        same value in the guarded terms of a gradient, ``select(g1, v * a, 0) +
        select(g2, v * b, 0)``) is listed for R: ``select`` computes it once, before the
        first select of R, where that is safe without the guards (``_speculable``)."""
        regions, region, branch = self._regions, self._region, self._branch
        root = len(regions) + 1
        regions[root] = (0, 0)
        if id(e) not in region:
            region[id(e)] = root
        direct: Dict[int, int] = {}  # node id -> a region evaluating it itself

        def lca(a: int, b: int) -> int:
            while a != b:
                (pa, da), (pb, db) = regions[a], regions[b]
                if da >= db:
                    a = pa
                if db >= da:
                    b = pb
                if not a or not b:
                    return root
            return a

        def sub(x, which, parent):
            key = (id(x), which)
            r = branch.get(key)
            if r is None:
                r = branch[key] = len(regions) + 1
                regions[r] = (parent, regions[parent][1] + 1)
            return r

        for x in reversed(nodes):  # parents before children
            here = region.get(id(x), root)
            match x:
                case Select(c, a, b, _):
                    uses = [(c, here), (a, sub(x, "a", here)), (b, sub(x, "b", here))]
                case Binary("and" | "or", a, b, _):
                    uses = [(a, here), (b, sub(x, "b", here))]
                case Reduce():
                    uses = [(c, sub(x, "body", here)) for c in children(x)]
                case _:
                    uses = [(c, here) for c in children(x)]
            for c, r in uses:
                old = region.get(id(c))
                region[id(c)] = r if old is None else lca(old, r)
                if r == here:
                    direct[id(c)] = r
        for x in nodes:  # (children first: the order to compute them in)
            r = region.get(id(x))
            if self._bind.get(id(x)) and r is not None and direct.get(id(x)) != r:
                self._placed.setdefault(r, []).append(x)

    def _speculable(self, x: Expr, scope: Scope, memo: Dict[int, bool]) -> bool:
        """Can ``x`` be computed in ``scope`` without the guards of the branches that
        use it: no reduction, no inlined tensor, no integer division by a variable,
        and every read proven in range here (a value computed and not used costs time,
        never a trap: -fno-trapping-math)."""
        for y in postorder(x):
            got = memo.get(id(y))
            if got is None:
                match y:
                    case Reduce():
                        got = False
                    case Read(tensor=t, indices=idx):
                        got = (t.uid in self.buf and t.uid not in self.inline
                               and all(scope.proves_inside(i, n, self.params)
                                       for i, n in zip(idx, self.dims[t.uid])))
                    case Binary("floordiv" | "mod", _, b, _):
                        got = isinstance(b, Const)
                    case _:
                        got = True
                memo[id(y)] = got
            if not got:
                return False
        return True

    def _binds_below(self, e: Expr) -> bool:
        """Is a node strictly under ``e`` computed into a local? (Else staging ``e`` has
        nothing to do: asked at every expression lowered, and most have nothing.)"""
        got = self._below.get(id(e))
        if got is None:
            below, bind = self._below, self._bind
            for x in postorder(e):
                if id(x) not in below:
                    below[id(x)] = any([bind[id(c)] or below[id(c)] for c in children(x)])
            got = below[id(e)]
        return got

    def expr(self, e: Expr, scope: Scope, out: List[Stmt]) -> CExpr:
        """``e`` as a C expression; statements it needs first are appended to ``out``.

        A float operation marked by ``_analyse`` is computed once into a local in
        ``out`` and reused from ``scope.memo`` (scopes end at select branches and
        guards, so nothing is hoisted out of them). Deep expressions are lowered
        children first in stages, so Python's stack stays ``STAGE`` levels deep."""
        if id(e) not in self._bind:
            self._analyse(e)
        if not self._staging and self._binds_below(e):
            self._staging = True
            try:
                for x in postorder(e, evaluated_with):
                    if x is not e and self._bind[id(x)] and ("cse", id(x)) not in scope.memo:
                        self.expr(x, scope, out)
            finally:
                self._staging = False
        if not self._bind[id(e)]:
            return self._expr(e, scope, out)
        # Keyed by identity: a structural key would compare deep expressions in full.
        key = ("cse", id(e))
        if key in scope.memo:
            return scope.memo[key]
        res = self._expr(e, scope, out)
        if not isinstance(res, (Var, Lit)):
            v = self.fresh("t", e.dtype)
            out.append(Decl(v, res))
            res = v
        scope.memo[key] = res
        return res

    def _expr(self, e: Expr, scope: Scope, out: List[Stmt]) -> CExpr:
        match e:
            case Const(v, dt):
                return Lit(v, dt)
            case SizeVar(name):
                return self.sizes[name]
            case Axis():
                if e.uid not in scope.env:
                    raise RuntimeError(f"internal error: axis {e.name} is not bound here")
                return scope.env[e.uid]
            case Cast(a, dt):
                x = self.expr(a, scope, out)
                return x if a.dtype == dt else Op("cast", (x,), dt)
            case Unary("stop_gradient", a, _):
                return self.expr(a, scope, out)  # only differentiation sees it
            case Unary(op, a, dt):
                x = cast(self.expr(a, scope, out), dt if op != "not" else "bool")
                if op == "neg" and isinstance(x, Lit) and dt in ("int32", "int64"):
                    return Lit(wrap_int(-int(x.value), dt), dt)
                return Op(op, (x,), dt)
            case Binary("and" | "or"):
                return self.logic(e, scope, out)
            case Binary(op, a, b, dt):
                if op in ("floordiv", "mod") and scope.memo and e in scope.memo:
                    return scope.memo[e]
                x, y = self.expr(a, scope, out), self.expr(b, scope, out)
                if a.dtype != b.dtype or op not in ("lt", "le", "eq", "ne", "gt", "ge"):
                    t = dt if op not in ("lt", "le", "eq", "ne", "gt", "ge") else \
                        promote(a.dtype, b.dtype)
                    x, y = cast(x, t), cast(y, t)
                if (op in ("floordiv", "mod") and dt in ("int32", "int64")
                        and not isinstance(x, Lit) and isinstance(y, Lit) and y.value > 0
                        and scope.proves_nonneg(a, self.params)):
                    # C's truncating / and % agree with floor semantics here, and
                    # vectorize (the helpers' sign tests do not)
                    return Op("quot" if op == "floordiv" else "rem", (x, y), dt)
                return fold(op, x, y, dt)
        if e in scope.memo:
            return scope.memo[e]
        match e:
            case Select():
                res = self.select(e, scope, out)
            case Read():
                res = self.read(e, scope, out)
            case Reduce():
                res = self.reduce(e, scope, out)
            case _:
                raise TypeError(f"the C backend cannot lower {type(e).__name__}")
        if isinstance(res, Var):
            scope.memo[e] = res
        return res

    def logic(self, e: Binary, scope: Scope, out: List[Stmt]) -> CExpr:
        """``a & b`` or ``a | b``, short-circuiting as ir.py says: ``b`` is lowered where
        ``a`` leaves the result open (a guard its reads are proven under), and the
        statements it needs (checked loads, reductions) run only there."""
        x = self.expr(e.a, scope, out)
        cond = e.a if e.op == "and" else Unary("not", e.a, "bool")
        inner: List[Stmt] = []
        y = self.expr(e.b, scope.child(guards=(cond,)), inner)
        if not inner:
            return Op(e.op, (x, y), "bool")  # C's && and || short-circuit too
        v = self.fresh("t", "bool")
        out.append(Decl(v, x))
        out.append(If(v if e.op == "and" else Op("not", (v,), "bool"),
                      Block(tuple(inner) + (Assign(v, y),))))
        return v

    def evaluated(self, e: Expr, scope: Scope, cache: Dict[int, Dict[int, Expr]]) -> Dict[int, Expr]:
        """The nodes computed into locals (``_analyse``) and not yet in ``scope`` that
        are evaluated wherever ``e`` is, by id: through the children evaluated with
        it (``evaluated_with``) and those evaluated in both branches of a select.
        ``cache``: the latter per select, for one question.

        Iterative: the selects under ``e`` are answered innermost first, from an
        explicit stack (a chain of 1,000 selects nested in each other's branches
        recursed once per level past Python's limit)."""
        found, missing = self._evaluated_flat(e, scope, cache)
        todo = list(missing)
        while todo:
            s = todo[-1]
            if id(s) in cache:
                todo.pop()
                continue
            common, below = None, []  # what both branches evaluate (b first: often nothing)
            for branch in (s.b, s.a):
                found_here, below = self._evaluated_flat(branch, scope, cache)
                if below:
                    break
                common = found_here if common is None else {
                    k: v for k, v in found_here.items() if k in common}
                if not common:
                    break
            if below:  # the selects under this branch are answered first
                todo.extend(below)
            else:
                cache[id(s)] = common or {}
                todo.pop()
        if missing:
            found, _ = self._evaluated_flat(e, scope, cache)
        return found

    def _evaluated_flat(self, e: Expr, scope: Scope, cache) -> tuple:
        """``(found, missing)``: what :meth:`evaluated` answers for ``e`` from the selects
        already in ``cache``, and the selects under ``e`` not yet in it."""
        found: Dict[int, Expr] = {}
        missing: List[Select] = []
        seen: set = set()
        stack = [e]
        while stack:
            x = stack.pop()
            if id(x) in seen:
                continue
            seen.add(id(x))
            if self._bind.get(id(x)):
                if ("cse", id(x)) in scope.memo:
                    continue  # computed here, with what it needs
                found[id(x)] = x
            if isinstance(x, Select):
                got = cache.get(id(x))
                if got is None:
                    missing.append(x)
                else:
                    found.update(got)
            stack.extend(evaluated_with(x))
        return found, missing

    def select(self, e: Select, scope: Scope, out: List[Stmt]) -> CExpr:
        # A value both branches compute is computed once, before them: the same
        # operations on every path (its reads' checks hold on each path, so on
        # their union), and a chain of selects sharing values stays a DAG in C
        # (each branch had its own copy: twice the C per level).
        placed = self._placed.pop(self._region.get(id(e)), None)
        if placed:
            # values the guarded regions under this one share: once, before them
            memo: Dict[int, bool] = {}
            for x in placed:
                if ("cse", id(x)) not in scope.memo and self._speculable(x, scope, memo):
                    self.expr(x, scope, out)
        cache: Dict[int, Dict[int, Expr]] = {}
        b = self.evaluated(e.b, scope, cache)
        if b:
            both = [x for k, x in self.evaluated(e.a, scope, cache).items() if k in b]
            for x in sorted(both, key=lambda x: self._rank[id(x)]):  # children first
                self.expr(x, scope, out)
        c = self.expr(e.cond, scope, out)
        sa, sb = scope.child(guards=(e.cond,)), scope.child(guards=(Unary("not", e.cond, "bool"),))
        la: List[Stmt] = []
        lb: List[Stmt] = []
        xa = cast(self.expr(e.a, sa, la), e.dtype)
        xb = cast(self.expr(e.b, sb, lb), e.dtype)
        if not la and not lb:
            if loads(xa) or loads(xb):
                # Loads under a condition keep loops scalar (gcc will not speculate
                # them). Where both branches are valid without the condition (reads
                # proven in range anyway, no checks), compute both and blend: the
                # untaken value is discarded (no traps: -fno-trapping-math).
                ta: List[Stmt] = []
                tb: List[Stmt] = []
                sites = len(self.sites)
                ya = cast(self.expr(e.a, scope.child(), ta), e.dtype)
                yb = cast(self.expr(e.b, scope.child(), tb), e.dtype)
                if not ta and not tb:
                    va, vb = self.fresh("t", e.dtype), self.fresh("t", e.dtype)
                    out.extend([Decl(va, ya), Decl(vb, yb)])
                    return Op("select", (c, va, vb), e.dtype)
                del self.sites[sites:]
            return Op("select", (c, xa, xb), e.dtype)
        v = self.fresh("t", e.dtype)
        out.append(Decl(v, None))
        out.append(If(c, Block(tuple(la) + (Assign(v, xa),)), Block(tuple(lb) + (Assign(v, xb),))))
        return v

    def read(self, e: Read, scope: Scope, out: List[Stmt]) -> CExpr:
        t = e.tensor
        if t.uid not in self.buf:
            raise RuntimeError(f"internal error: {t.name!r} has no buffer")
        idx: List[CExpr] = []
        checks = []
        for d, (x, size) in enumerate(zip(e.indices, self.dims[t.uid])):
            known = scope.memo.get(("in range", x)) if scope.memo else None
            if known is not None:  # loaded and checked once per row (compute_gather_rows)
                idx.append(known)
                continue
            cx = self.expr(x, scope, out)
            if not scope.proves_inside(x, size, self.params):
                v = self.fresh("t", I64)
                out.append(Decl(v, cx))
                cx = v
                checks.append((d, v, self.size_expr(size)))
            idx.append(cx)
        if t.uid in self.inline:
            return self.inlined(t, e, idx, checks, out)
        if not checks:
            flat = self.affine_offset(e, scope)
            return Load(self.buf[t.uid].name,
                        flat if flat is not None else self.offset(t.uid, idx), e.dtype)
        load = Load(self.buf[t.uid].name, self.offset(t.uid, idx), e.dtype)
        v = self.fresh("t", e.dtype)
        out.append(Decl(v, zero(e.dtype)))
        out.append(checked(READ_OUT_OF_RANGE, self.error_site(self.owner, e), checks,
                            [Assign(v, load)]))
        return v

    def affine_offset(self, e: Read, scope: Scope) -> Optional[CExpr]:
        """The element offset of ``e`` as ``c + sum(a_k * axis_k)`` when its indices use
        ``//`` or ``%`` but the offset is affine anyway (a flatten's
        ``X[n, k // 256, k // 16 % 16, k % 16]`` is ``X.flat[n * 8192 + k]``): no
        division per element, and contiguous. None otherwise."""
        if not any(isinstance(y, Binary) and y.op in ("floordiv", "mod")
                   for x in e.indices for y in walk(x, unique=True)):
            return None
        indices, dims = self.stored_at(e.tensor.uid, e.indices)
        dims = [const_value(d) for d in dims]
        if any(n is None for n in dims):
            return None
        offset = flat_index(indices, dims)
        axes = free_axes(offset)
        if not all(ax.uid in scope.env for ax in axes):
            return None
        key = (offset, tuple(axes))
        if key not in self._affine:
            self._affine[key] = polyhedral.affine_form(offset, axes)
        form = self._affine[key]
        if form is None:
            return None
        c, coeffs = form
        out: CExpr = Lit(c, I64)
        for a, ax in zip(coeffs, axes):
            if a:
                out = add(out, mul(scope.env[ax.uid], Lit(a, I64)))
        return out

    def inlined(self, t: Compute, e: Read, idx: List[CExpr], checks, out: List[Stmt]) -> CExpr:
        """``t[idx]`` computed from ``t``'s body (after the same index checks as a load):
        its axes are bound to ``idx``, which lie in its box, so its own reads are
        proven or checked exactly as where ``t`` is stored."""
        scope = Scope({ax.uid: x for ax, x in zip(t.axes, idx)}, tuple(t.axes), (), {})
        owner, self.owner = self.owner, t
        try:
            if not checks:
                return cast(self.expr(t.body, scope, out), t.dtype)
            v = self.fresh("t", e.dtype)
            out.append(Decl(v, zero(e.dtype)))
            inner: List[Stmt] = []
            value = cast(self.expr(t.body, scope, inner), t.dtype)
            out.append(checked(READ_OUT_OF_RANGE, self.error_site(owner, e), checks,
                                inner + [Assign(v, value)]))
            return v
        finally:
            self.owner = owner

    def reduce(self, e: Reduce, scope: Scope, out: List[Stmt]) -> CExpr:
        acc = self.fresh("t", e.dtype)
        out.append(Decl(acc, identity(e.op, e.dtype)))
        # a sum whose value is compared (a max's tie test recomputes it elsewhere) adds
        # its points in the order written: no partial sums, no vector lanes
        written = id(e) in self.compared
        if e.op in ("max", "min"):
            self.compared |= {id(x) for x in walk(e, unique=True)
                              if isinstance(x, Reduce) and x.op == "sum"}
        body, where = where_form(e)
        if body is not e.body:
            e = Reduce(e.op, body, e.axes, where, e.dtype)
        runs = self.window(e, scope)
        if runs is not None:
            # A window (a few points per element: an upsampling's gradient adds 2 x 2
            # of them, 9 sums per element) is written out: no trip count left for the
            # compiler to doubt, no partial sums to zero and add up, and the element
            # loop around it runs in vector lanes. The points are added in loop order.
            def one(inner: Scope, stmts: List[Stmt]):
                stmts.append(Accumulate(acc, e.op, cast(self.expr(e.body, inner, stmts),
                                                        e.dtype)))
            self.loops(e.axes, e.where, scope, one, out, runs=runs)
            return acc
        # A float sum over several axes keeps one partial sum per value of its last
        # axis (a static box), added up at the end: the reassociation ir.py allows, so
        # the innermost loop runs in vector lanes without a horizontal sum per pass.
        last = e.axes[-1] if e.axes else None
        lo = const_value(last.lo) if last is not None else None
        hi = const_value(last.hi) if last is not None else None
        split = (e.op == "sum" and is_float(e.dtype) and len(e.axes) >= 2 and lo is not None
                 and hi is not None and 0 < hi - lo <= PARTIAL_SUMS and not written)
        scalar = written  # one accumulator, no lanes
        if split:
            # ... unless the last axis's loop runs fewer points than a vector holds (a
            # window of 2 in a bilinear upsampling's gradient): then no pass fills a
            # vector, and zeroing and adding up hi - lo partial sums per element costs
            # more than the points (15x the peers); such a loop is not worth lanes either
            outer = scope.unbind(e.axes)
            run = polyhedral.span(outer.axes + tuple(e.axes),
                                  outer.guards + ((e.where,) if e.where is not None else ()),
                                  last)
            scalar = run is not None and run < target.current().lanes(e.dtype)
            split = not scalar
        if (e.op in ("max", "min") and is_float(e.dtype) and len(e.axes) == 1
                and e.where is None and lo is not None and hi is not None
                and hi - lo >= 4 * LANES):
            # long rows: several vectors of partial results, so that the chain of
            # compare-and-select of one vector does not bound the pass (a global max
            # pool over 512 points ran at a third of PyTorch's speed)
            n = EXTREMUM_LANES if hi - lo >= 4 * EXTREMUM_LANES else LANES
            return self.lane_reduce(e, acc, lo, hi, scope, out, n)
        part = self.fresh("part", e.dtype).name if split else ""
        lanes: set = set()  # loop variables that index the partial sums

        def point(inner: Scope, stmts: List[Stmt]):
            v = cast(self.expr(e.body, inner, stmts), e.dtype)
            if split:
                x = inner.env[last.uid]
                if isinstance(x, Var):
                    lanes.add(x.name)
                stmts.append(Store(part, fold("sub", x, Lit(lo, I64), I64), v, add=True))
            else:
                stmts.append(Accumulate(acc, e.op, v))

        nest: List[Stmt] = []
        self.loops(e.axes, e.where, scope, point, nest)
        if split:
            z, k = self.fresh("k", I64), self.fresh("k", I64)
            out.append(Local(part, e.dtype, hi - lo))
            out.append(For(z, Lit(0, I64), Lit(hi - lo, I64), 1,
                           Block((Store(part, z, zero(e.dtype)),)), simd=True))
            out.extend(mark_inner_simd(nest, only=lambda f: f.var.name in lanes))
            # (in order: a reduction clause would let the compiler pick the association)
            out.append(For(k, Lit(0, I64), Lit(hi - lo, I64), 1,
                           Block((Accumulate(acc, "sum", Load(part, k, e.dtype)),))))
        elif e.op == "sum" and not scalar:  # any order (ir.py): lanes, spelled out
            out.extend(lane_sums(nest, [acc], self.fresh, LANES))
        else:
            out.extend(nest)
        return acc

    def window(self, e: Reduce, scope: Scope) -> Optional[Dict[str, int]]:
        """Axis name -> the most points its loop runs, for each axis of ``e``, when ``e``
        visits at most ``WINDOW_POINTS`` points per element (the product of those runs);
        else None. A loop's run is that of the domain's projection on it and the loops
        around it (``polyhedral.span`` with the inner axes free)."""
        names = [a.name for a in e.axes]
        if not e.axes or len(set(names)) != len(names):
            return None
        outer = scope.unbind(e.axes)
        axes = outer.axes + tuple(e.axes)
        guards = outer.guards + ((e.where,) if e.where is not None else ())
        runs: Dict[str, int] = {}
        total = 1
        conds = polyhedral.conjuncts(e.where)
        for k, a in enumerate(e.axes):
            lo, hi = const_value(a.lo), const_value(a.hi)
            if lo is not None and hi is not None and total * (hi - lo) <= WINDOW_POINTS:
                n: Optional[int] = hi - lo
            else:
                # a window's own bounds (y >= 2*i + 1, y <= 2*i + 2) answer without isl
                n = bounded_run(conds, a, {x.uid for x in e.axes})
                if n is None or total * n > WINDOW_POINTS:
                    n = polyhedral.span(axes, guards, a, self.params, free=e.axes[k + 1:])
            if n is None or n == 0 or total * n > WINDOW_POINTS:
                return None
            runs[a.name] = n
            total *= n
        return runs

    def lane_reduce(self, e: Reduce, acc: Var, lo: int, hi: int, scope: Scope,
                    out: List[Stmt], LANES: int = LANES) -> Var:
        """A max or min over one static axis as ``LANES`` interleaved partial results,
        combined at the end (any order gives the same maximum; ir.py leaves the order
        of reductions free); a length that is not a multiple of ``LANES`` puts its last
        points in the first lanes (a row of 1000 logits ran one scalar chain before:
        log-softmax cross-entropy's forward took 0.80 ms, 0.38 ms in lanes)."""
        part = self.fresh("part", e.dtype).name
        z, k0, lane, k = (self.fresh("k", I64) for _ in range(4))
        init = identity(e.op, e.dtype)
        out.append(Local(part, e.dtype, LANES))
        out.append(For(z, Lit(0, I64), Lit(LANES, I64), 1, Block((Store(part, z, init),)),
                       simd=True))
        # whole passes of LANES points, then the last (hi - lo) % LANES in the first lanes
        end = lo + (hi - lo) // LANES * LANES
        for at, n in ((k0, LANES), (Lit(end, I64), hi - end)):
            if n == 0:
                continue
            inner = scope.child(axes=e.axes, env={e.axes[0].uid: add(at, lane)})
            stmts: List[Stmt] = []
            v = cast(self.expr(e.body, inner, stmts), e.dtype)
            stmts.append(Store(part, lane, Op(e.op, (Load(part, lane, e.dtype), v), e.dtype)))
            body = Block(tuple(stmts))
            loop = For(lane, Lit(0, I64), Lit(n, I64), 1, body, simd=simd_safe(body))
            if at is k0:
                loop = For(k0, Lit(lo, I64), Lit(end, I64), LANES, Block((loop,)),
                           note=e.axes[0].name)
            else:
                loop = replace(loop, note=e.axes[0].name + " (the rest)")
            out.append(loop)
        # the lanes combined pairwise, halves at a time (a tree of vector operations, not
        # a chain of LANES scalar compare-and-selects: that chain took longer than the
        # pass over a row of 512 points); any order gives the same maximum
        width = LANES
        while width > 1 and width % 2 == 0:
            width //= 2
            h = self.fresh("k", I64)
            out.append(For(h, Lit(0, I64), Lit(width, I64), 1, Block((Store(
                part, h, Op(e.op, (Load(part, h, e.dtype),
                                   Load(part, add(h, Lit(width, I64)), e.dtype)), e.dtype)),)),
                simd=True))
        out.append(For(k, Lit(0, I64), Lit(width, I64), 1,
                       Block((Accumulate(acc, e.op, Load(part, k, e.dtype)),))))
        return acc

    def error_site(self, owner: Tensor, read: Optional[Read]) -> int:
        self.sites.append(Site(owner, read))
        return len(self.sites) - 1

    # }}}


def bounded_run(conds: Sequence[Expr], a: Axis, bound: set) -> Optional[int]:
    """An upper bound on how many values the axis ``a`` takes where the conjuncts
    ``conds`` hold, from a lower and an upper bound among them that differ by a
    constant (``y >= 2*i + 1`` and ``2*i + 2 >= y``: 2), each linear in ``a`` with
    coefficient +-1 and free of the other axes of ``bound`` (a sum's axes, which its
    loop over ``a`` may see change); None if no such pair.

    >>> from tensorexpr.ir import Axis, Const
    >>> i = Axis("i", Const(0, "int64"), Const(8, "int64"), 1)
    >>> y = Axis("y", Const(0, "int64"), Const(64, "int64"), 2)
    >>> bounded_run([y >= 2 * i + 1, 2 * i + 2 >= y], y, {y.uid}), bounded_run([y >= i], y, {y.uid})
    (2, None)
    """
    lows, highs = [], []  # (constant, other coefficients) of the bounds' other sides
    for c in conds:
        if not (isinstance(c, Binary) and c.op in ("ge", "gt", "le", "lt")):
            continue
        form = terms(Binary("sub", c.a, c.b, I64))  # c.a - c.b, compared with 0
        if form is None:
            continue
        k, coef, _ = form
        ca = coef.get(a.uid, 0)
        if abs(ca) != 1 or any(u in bound and u != a.uid for u in coef):
            continue
        rest = tuple(sorted((u, -ca * v) for u, v in coef.items() if u != a.uid))
        # ca*a + rest' + k (op) 0  ->  a (op') -ca*(rest' + k)
        strict = c.op in ("gt", "lt")
        value = -ca * k
        if (c.op in ("ge", "gt")) == (ca > 0):  # a >= value + rest (a > ...: + 1)
            lows.append((value + (1 if strict else 0), rest))
        else:  # a <= value + rest (a < ...: - 1)
            highs.append((value - (1 if strict else 0), rest))
    found = [h - lo + 1 for lo, r in lows for h, s in highs if r == s]
    return max(min(found), 0) if found else None


def unrolled(tree, runs: Dict[str, int]):
    """``tree`` (``polyhedral.loop_nest``) with each loop over an axis named in ``runs``
    written out: ``runs[name]`` copies of its body, the k-th at ``lo + k*step`` where
    that is below the loop's bound (a test the compiler folds when the window is full).

    >>> from tensorexpr.ir import Axis, Const
    >>> from tensorexpr.polyhedral import loop_nest
    >>> i = Axis("i", Const(0, "int64"), Const(8, "int64"), 1)
    >>> k = Axis("k", Const(0, "int64"), Const(16, "int64"), 2)
    >>> tree, _ = loop_nest([k], [k >= 2 * i, k <= 2 * i + 1], [i])  # always 2 points
    >>> [str(x.value) for x in unrolled(tree, {"k": 2}).items]
    ['(2 * i)', '((2 * i) + 1)']
    >>> k = Axis("k", Const(0, "int64"), Const(15, "int64"), 3)
    >>> tree, _ = loop_nest([k], [k >= 2 * i, k <= 2 * i + 1], [i])  # 1 point at i = 7
    >>> print(unrolled(tree, {"k": 2}).items[1].cond)
    (((2 * i) + 1) < (min(14, (2 * i) + 1) + 1))
    """
    match tree:
        case LoopFor(it, lo, hi, step, body) if it.name in runs:
            inner = unrolled(body, runs)
            copies = []
            for k in range(runs[it.name]):
                at = lo if k == 0 else Binary("add", lo, Const(k * step, I64), I64)
                room = terms(Binary("sub", hi, at, I64))
                if room is not None and not room[1]:  # the same affine form: known here
                    if room[0] > 0:
                        copies.append(LoopLet(it, at, inner))
                    continue
                copies.append(LoopIf(Binary("lt", at, hi, "bool"), LoopLet(it, at, inner), None))
            return LoopBlock(tuple(copies))
        case LoopFor(it, lo, hi, step, body):
            return LoopFor(it, lo, hi, step, unrolled(body, runs))
        case LoopLet(it, value, body):
            return LoopLet(it, value, unrolled(body, runs))
        case LoopIf(cond, then, orelse):
            return LoopIf(cond, unrolled(then, runs),
                          None if orelse is None else unrolled(orelse, runs))
        case LoopBlock(items):
            return LoopBlock(tuple(unrolled(x, runs) for x in items))
    return tree

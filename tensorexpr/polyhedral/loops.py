"""Loop nests: the tight loops isl scans a domain with, as a tree of our IR
(used by the C backend).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple, Union

import islpy as isl

from ..ir import (Axis, Binary, Const, Expr, Read, Select, SizeVar, Unary, INDEX_DTYPE, fresh_uid,
                  walk)
from ..ir import const as const_expr
from .spaces import CTX, NotAffine, dim_name, isl_val, params_of, Space
from .affine import is_index_arithmetic
from .recent import Recent
from .renamed import Renamed
from ..transform import substitute

# {{{ loop nests (used by codegen; owned by the C backend work)

# The C backend asks for the loops of a reduction whose ``where`` is (partly)
# affine: isl's AST builder gives tight bounds and strides, and the answer is
# translated to the small tree below so that no isl object leaves this module.



@dataclass(frozen=True)
class LoopFor:
    """``for iterator = lo; iterator < hi; iterator += step: body`` (``step >= 1``)."""

    iterator: Axis
    lo: Expr
    hi: Expr
    step: int
    body: "LoopTree"


@dataclass(frozen=True)
class LoopLet:
    """A loop isl proved to run once: ``iterator = value; body``."""

    iterator: Axis
    value: Expr
    body: "LoopTree"


@dataclass(frozen=True)
class LoopIf:
    cond: Expr
    then: "LoopTree"
    orelse: Optional["LoopTree"]


@dataclass(frozen=True)
class LoopBlock:
    items: Tuple["LoopTree", ...]


@dataclass(frozen=True)
class LoopPoint:
    """One point of the domain: the value of each requested axis, in order."""

    values: Tuple[Expr, ...]


LoopTree = Union[LoopFor, LoopLet, LoopIf, LoopBlock, LoopPoint]


def may_fail(e: Expr) -> bool:
    """Can evaluating ``e`` fail at run time: does it read at a data-dependent index
    (checked when the kernel runs, ir.py "Reads")? Affine and clamped reads are proven
    in range where they are evaluated; arithmetic never traps.

    >>> import tensorexpr as te
    >>> X = te.placeholder((4,), name="X")
    >>> I = te.placeholder((4,), dtype="int32", name="I")
    >>> may_fail(X[I[0]] > 0.0), may_fail(X[te.minimum(I.shape[0], 3)] > 0.0)
    (True, False)
    """
    return any(isinstance(x, Read) and not all(is_index_arithmetic(i) for i in x.indices)
               for x in walk(e, unique=True))


def conjuncts(cond: Optional[Expr]) -> List[Expr]:
    """``cond`` split at ``&`` (none for ``None``).

    >>> import tensorexpr as te
    >>> from tensorexpr.ir import Axis, Const
    >>> k = Axis("k", Const(0, "int64"), Const(8, "int64"), 5)
    >>> len(conjuncts((k > 1) & (k < 6) & (k % 2 == 0)))
    3
    """
    if cond is None:
        return []
    if isinstance(cond, Binary) and cond.op == "and":
        return conjuncts(cond.a) + conjuncts(cond.b)
    return [cond]


class PointSet:
    """The points of ``axes``' boxes where the affine conjuncts of ``guards`` hold.

    It contains every point where code guarded by ``guards`` runs (dropping the
    data-dependent conjuncts only enlarges it), so what holds on it holds there.

    >>> import tensorexpr as te
    >>> from tensorexpr.ir import Axis, Const
    >>> i = Axis("i", Const(0, "int64"), Const(8, "int64"), 5)
    >>> ps = PointSet([i], [i >= 1])
    >>> ps.within(i - 1, Const(8, "int64")), ps.within(i + 1, Const(8, "int64"))
    (True, False)
    """

    def __init__(self, axes: Sequence[Axis], guards: Sequence[Expr] = (),
                 params: Sequence[str] = ()):
        self.space = Space(axes, sorted(set(params) | set(params_of(list(guards)))))
        dom = self.space.box()
        for g in guards:
            for c in conjuncts(g):
                try:
                    dom = dom & self.space.cond(c)
                except NotAffine:
                    pass
        self.set = dom
        self._within: Dict[Tuple[Expr, Expr], bool] = {}

    @classmethod
    def of(cls, axes: Sequence[Axis], guards: Sequence[Expr] = (),
           params: Sequence[str] = ()) -> "PointSet":
        """:class:`PointSet` ``(axes, guards, params)``, shared with the last callers that
        asked for the same one (the IR is immutable and structurally hashed: lowering
        asks the same questions of the same scope in many places; a GRU's gradient
        built 184 sets for 1,445 questions).

        >>> from tensorexpr.ir import Axis, Const
        >>> i = Axis("i", Const(0, "int64"), Const(8, "int64"), 7)
        >>> PointSet.of([i], [i >= 1]) is PointSet.of([i], [i >= 1])
        True
        """
        return _SHARED.get((tuple(axes), tuple(guards), tuple(params)),
                           lambda: cls(axes, guards, params))

    def within(self, index: Expr, size: Expr) -> bool:
        """Is ``0 <= index < size`` at every point? False if either is not affine here.

        >>> from tensorexpr.ir import Axis, Const
        >>> i = Axis("i", Const(0, "int64"), Const(8, "int64"), 7)
        >>> PointSet([i]).within(i // 2, Const(4, "int64")), PointSet([i]).within(i * i, Const(64, "int64"))
        (True, False)
        """
        key = (index, size)
        known = self._within.get(key)
        if known is None:
            try:
                pa, hi = self.space.aff(index), self.space.aff(size)
            except NotAffine:
                known = False
            else:
                known = (self.set & (pa.lt_set(self.space.vars[0]) | pa.ge_set(hi))).is_empty()
            self._within[key] = known
        return known


#: the point sets :meth:`PointSet.of` shares
_SHARED = Recent(256)


def within(axes: Sequence[Axis], guards: Sequence[Expr], params: Sequence[str], index: Expr,
           size: Expr) -> bool:
    """:meth:`PointSet.within` of ``PointSet.of(axes, guards, params)``, answered once per
    question modulo the renaming of axes (``polyhedral.renamed``): the read checks of an
    LSTM's four gates are one question, asked of four point sets before.

    >>> from tensorexpr.ir import Axis, Const
    >>> i = Axis("i", Const(0, "int64"), Const(8, "int64"), 5)
    >>> within([i], [i >= 1], [], i - 1, Const(8, "int64"))
    True
    """
    key = (tuple(axes), tuple(guards), tuple(params), index, size)
    return _WITHIN.get(key, lambda: (PointSet.of(axes, guards, params).within(index, size),))[0]


#: the answers :func:`within` keeps
_WITHIN = Renamed(1024, lambda answer, mapping: answer)


def _renamed_nest(answer, mapping):
    """A :func:`loop_nest` answer ``(tree, rest)`` in terms of other axes (``mapping``,
    ``polyhedral.renamed``): an iterator whose bounds change is a new axis, as isl's
    answer for those axes would have made."""
    tree, rest = answer
    return _renamed_tree(tree, dict(mapping)), tuple(substitute(c, mapping) for c in rest)


def _renamed_tree(t: "LoopTree", m: Dict) -> "LoopTree":
    sub = lambda e: substitute(e, m)  # noqa: E731
    if isinstance(t, LoopBlock):
        return LoopBlock(tuple(_renamed_tree(x, m) for x in t.items))
    if isinstance(t, LoopIf):
        return LoopIf(sub(t.cond), _renamed_tree(t.then, m),
                      None if t.orelse is None else _renamed_tree(t.orelse, m))
    if isinstance(t, LoopPoint):
        return LoopPoint(tuple(sub(v) for v in t.values))
    it = t.iterator
    lo, hi = sub(it.lo), sub(it.hi)
    if lo is not it.lo or hi is not it.hi:
        new = Axis(it.name, lo, hi, fresh_uid())
        m = dict(m)
        m[it] = new
        it = new
    if isinstance(t, LoopLet):
        return LoopLet(it, sub(t.value), _renamed_tree(t.body, m))
    return LoopFor(it, sub(t.lo), sub(t.hi), t.step, _renamed_tree(t.body, m))


#: the loop nests :func:`loop_nest` shares, also with the nests of other axes of the same
#: ranges and conditions (``polyhedral.renamed``: an LSTM's gates)
_NESTS = Renamed(64, _renamed_nest, names=True)


def loop_nest(axes: Sequence[Axis], conds: Sequence[Expr], outer: Sequence[Axis] = (),
              facts: Sequence[Expr] = ()) -> Tuple[LoopTree, List[Expr]]:
    """Loops that visit exactly the points of ``axes``' box where the affine ``conds`` hold.

    ``outer`` are the enclosing axes, fixed while these loops run (isl sees them
    as parameters, like the sizes); ``facts`` are conditions known to hold there
    (enclosing guards; non-affine ones are ignored) that let isl drop tests.
    Returns ``(tree, rest)``: ``rest`` are the conditions of ``conds`` that are
    not affine (data-dependent), in their order; the caller tests them at each point,
    left to right. ``conds`` are conjuncts evaluated left to right (ir.py), so an
    affine one after a conjunct that may fail (:func:`may_fail`) is not made a loop
    bound, which would skip that failure: it stays in ``rest``. Loops are
    in the order of ``axes`` (the last innermost), with tight bounds and steps
    (``k % 2 == 0`` gives a loop stepping by 2); each :class:`LoopPoint` gives
    the value of every axis of ``axes`` there.

    >>> import tensorexpr as te
    >>> from tensorexpr.ir import Axis, Const
    >>> k = Axis("k", Const(0, "int64"), Const(9, "int64"), 5)
    >>> tree, rest = loop_nest([k], [k % 2 == 0])
    >>> tree.step, rest
    (2, [])
    """
    # The same nest is asked for again and again (a register-tiled sum's main rows and
    # its last rows: half of an LSTM gradient's 44 nests). The IR and the trees are
    # immutable, so the last ones are shared, as PointSet.of shares sets.
    tree, rest = _NESTS.get((tuple(axes), tuple(conds), tuple(outer), tuple(facts)),
                            lambda: _loop_nest(list(axes), list(conds), list(outer),
                                               list(facts)))
    return tree, own_conditions(rest, conds)


def own_conditions(rest, conds) -> list:
    """The conditions of ``conds`` equal to those of ``rest`` (a kept answer's: in
    order, a subsequence): the caller's own objects. A kept condition is structurally
    equal to the caller's, but tensors compare by uid and a rewritten tensor keeps its
    uid: a read in a kept condition may read the tensor as an earlier build rewrote it
    (a squeezed ``M_sum`` reading that build's ``M_sum_sq``, which the next build has no
    buffer for).

    >>> import tensorexpr as te
    >>> X = te.placeholder((4,), name="X"); k = te.reduce_axis(4, "k")
    >>> mine = [k > 0, X[k] > 0.0]
    >>> kept = [X[k] > 0.0]
    >>> own_conditions(kept, mine)[0] is mine[1]
    True
    """
    out, j = [], 0
    for c in rest:
        while j < len(conds) and not conds[j] == c:
            j += 1
        out.append(conds[j] if j < len(conds) else c)
        j += 1
    return out


def _loop_nest(axes: List[Axis], conds: List[Expr], outer: List[Axis], facts: List[Expr]
               ) -> Tuple[LoopTree, Tuple[Expr, ...]]:
    sp = Space(outer + axes, params_of(list(conds) + list(facts) + outer + axes))
    dom, rest = sp.box(axes), []
    for c in conds:
        if rest and any(may_fail(r) for r in rest):
            rest.append(c)
            continue
        try:
            dom = dom & sp.cond(c)
        except NotAffine:
            rest.append(c)
    ctx = sp.box(outer)
    for f in facts:
        for c in conjuncts(f):
            try:
                ctx = ctx & sp.cond(c)
            except NotAffine:
                pass
    # Outer axes become parameters: the loops are generated for each fixed value.
    n_par, n_out = len(sp.params), len(outer)
    dom = dom.move_dims(isl.dim_type.param, n_par, isl.dim_type.set, 0, n_out)
    ctx = ctx.move_dims(isl.dim_type.param, n_par, isl.dim_type.set, 0, n_out).params()
    dom = dom.coalesce().set_tuple_name("S")
    sched = isl.Map.identity(dom.get_space().map_from_set()).intersect_domain(dom)
    sched = sched.reset_tuple_id(isl.dim_type.out)
    names = {p: SizeVar(p) for p in sp.params}
    names.update({dim_name(a): a for a in outer})
    prefix = "c"
    while any(n.startswith(prefix) for n in names):
        prefix = "_" + prefix
    ids = isl.IdList.alloc(CTX, len(axes))
    for k in range(len(axes)):
        ids = ids.add(isl.Id(f"{prefix}{k}"))
    build = isl.AstBuild.from_context(ctx).set_iterators(ids)
    node = build.node_from_schedule_map(isl.UnionMap.from_map(sched))
    shown = {f"{prefix}{k}": ax.name for k, ax in enumerate(axes)}  # loop k scans axes[k]
    return _ast_tree(node, names, shown), tuple(rest)


_AST_BIN = {"add": "add", "sub": "sub", "mul": "mul", "min": "min", "max": "max",
            "pdiv_q": "floordiv", "fdiv_q": "floordiv", "div": "floordiv",
            "pdiv_r": "mod", "zdiv_r": "mod", "eq": "eq", "le": "le", "lt": "lt",
            "ge": "ge", "gt": "gt", "and_": "and", "or_": "or", "and_then": "and",
            "or_else": "or"}


def _ast_expr(e: "isl.AstExpr", names: Dict[str, Expr]) -> Expr:
    """An isl AST expression as IR (isl's divisions are exact or have non-negative operands,
    so our floor division and modulo agree with them)."""
    t = e.get_type()
    if t == isl.ast_expr_type.id:
        return names[e.get_id().get_name()]
    if t == isl.ast_expr_type.int:
        return Const(e.get_val().to_python(), INDEX_DTYPE)
    op = e.get_op_type().name
    args = [_ast_expr(e.get_op_arg(k), names) for k in range(e.get_op_n_arg())]
    if op == "minus":
        return Unary("neg", args[0], args[0].dtype)
    if op in ("select", "cond"):
        return Select(args[0], args[1], args[2], args[1].dtype)
    if op in _AST_BIN:
        ir_op = _AST_BIN[op]
        out = args[0]
        for b in args[1:]:  # min/max may take more than two arguments
            dt = "bool" if ir_op in ("eq", "le", "lt", "ge", "gt", "and", "or") else INDEX_DTYPE
            out = Binary(ir_op, out, b, dt)
        return out
    raise NotImplementedError(f"isl AST operation {op} in a loop nest")


def _ast_tree(node: "isl.AstNode", names: Dict[str, Expr], shown: Dict[str, str]) -> LoopTree:
    t = node.get_type()
    if t == isl.ast_node_type.block:
        kids = node.block_get_children()
        return LoopBlock(tuple(_ast_tree(kids.get_at(k), names, shown)
                               for k in range(kids.n_ast_node())))
    if t == isl.ast_node_type.for_:
        it_name = node.for_get_iterator().get_id().get_name()
        lo = _ast_expr(node.for_get_init(), names)
        it = Axis(shown.get(it_name, it_name), lo, lo, fresh_uid())
        inner = dict(names)
        inner[it_name] = it
        if node.for_is_degenerate():
            return LoopLet(it, lo, _ast_tree(node.for_get_body(), inner, shown))
        hi = _upper(node.for_get_cond(), it_name, inner)
        step = node.for_get_inc().get_val().to_python()
        it = Axis(it.name, lo, hi, it.uid)
        inner[it_name] = it
        return LoopFor(it, lo, hi, step, _ast_tree(node.for_get_body(), inner, shown))
    if t == isl.ast_node_type.if_:
        orelse = (_ast_tree(node.if_get_else_node(), names, shown) if node.if_has_else_node()
                  else None)
        return LoopIf(_ast_expr(node.if_get_cond(), names),
                      _ast_tree(node.if_get_then_node(), names, shown), orelse)
    if t == isl.ast_node_type.user:
        call = node.user_get_expr()
        return LoopPoint(tuple(_ast_expr(call.get_op_arg(k), names)
                               for k in range(1, call.get_op_n_arg())))
    raise NotImplementedError(f"isl AST node {t} in a loop nest")


def _upper(cond: "isl.AstExpr", it_name: str, names: Dict[str, Expr]) -> Expr:
    """The exclusive upper bound of a loop from isl's ``it <= e`` / ``it < e`` condition."""
    op = cond.get_op_type().name
    if op in ("and_", "and_then"):
        a, b = (_upper(cond.get_op_arg(k), it_name, names) for k in (0, 1))
        return Binary("min", a, b, INDEX_DTYPE)
    lhs = cond.get_op_arg(0)
    if op in ("le", "lt") and lhs.get_type() == isl.ast_expr_type.id \
            and lhs.get_id().get_name() == it_name:
        e = _ast_expr(cond.get_op_arg(1), names)
        return Binary("add", e, Const(1, INDEX_DTYPE), INDEX_DTYPE) if op == "le" else e
    raise NotImplementedError(f"loop condition {cond} is not an upper bound on {it_name}")

# }}}


# {{{ read boxes as functions of the sizes (used by tensorexpr/blocks.py)

def image_bounds(reads: Sequence[Tuple[Sequence[Axis], Sequence[Expr], Sequence[Expr]]],
                 dims: Sequence[int], params: Sequence[str], facts: Sequence[Expr] = ()
                 ) -> List[Tuple[Expr, Expr, bool]]:
    """:func:`index_box` of several reads of one tensor (of shape ``dims``) as functions
    of the sizes: ``reads`` are ``(axes, guards, indices)`` whose axes' bounds are
    expressions of ``params``. Per dimension ``(lo, hi, whole)``: the half-open
    bounding box of every element read, within ``[0, dims[d])``, exact for every value
    of the sizes (``[0, 1)`` where no read runs); ``whole`` when an index is not affine
    or unbounded (the box is then all of the dimension). ``facts`` are affine conditions
    on the sizes known to hold (the expressions may be wrong where they do not).

    >>> import tensorexpr as te
    >>> from tensorexpr.ir import Axis, Const, binary
    >>> s, w = te.var("s"), te.var("w")
    >>> i = Axis("i", s - 1, s - 1 + w, 5)
    >>> (lo, hi, whole), = image_bounds([([i], [], [binary("max", i - 1, 0)])], [10], ["s", "w"])
    >>> print(lo)
    select(s == 1, 0, s - 2)
    """
    params = sorted(set(params))
    out: List[Tuple[Expr, Expr, bool]] = []
    space = Space([], params)
    ctx = space.context()
    for f in facts:
        ctx = ctx & space.cond(f)
    ctx = ctx.params()
    zero = isl.PwAff.zero_on_domain(isl.LocalSpace.from_space(ctx.get_space()))
    names = {p: SizeVar(p) for p in params}
    for d, n in enumerate(dims):
        lo = hi = None
        try:
            for axes, guards, indices in reads:
                ps = PointSet(axes, guards, params)
                got = isl.Map.from_pw_aff(ps.space.aff(indices[d]).intersect_domain(ps.set))
                got = got.range()
                if not got.is_empty():
                    a, b = got.dim_min(0), got.dim_max(0)  # isl.Error if unbounded
                    lo, hi = (a, b) if lo is None else (lo.union_min(a), hi.union_max(b))
        except (NotAffine, isl.Error):
            out.append((const_expr(0, INDEX_DTYPE), const_expr(n, INDEX_DTYPE), True))
            continue
        if lo is None:
            out.append((const_expr(0, INDEX_DTYPE), const_expr(min(1, n), INDEX_DTYPE), False))
            continue
        lo, hi = lo.max(zero), (hi + 1).min(zero.add_constant_val(isl_val(n)))
        rest = ctx.subtract(lo.domain())  # the sizes where no read runs: [0, 1)
        lo = lo.union_add(zero.intersect_domain(rest)).coalesce()
        hi = hi.union_add(zero.add_constant_val(isl_val(min(1, n))).intersect_domain(rest))
        build = isl.AstBuild.from_context(ctx)
        out.append((_ast_expr(build.expr_from_pw_aff(lo), names),
                    _ast_expr(build.expr_from_pw_aff(hi.coalesce()), names), False))
    return out

# }}}

"""The one module that speaks isl (islpy): everything else speaks our IR.

Our integer expressions over axes and size variables are translated to isl
piecewise quasi-affine functions and sets; answers come back as our IR. What
cannot be expressed (a data-dependent index, a product of two axes) raises
:class:`NotAffine`, and the caller falls back (runtime checks, scatter-add).

Conventions: every axis becomes a set dimension named ``a<uid>`` and every size
variable a parameter with its own name; sizes are assumed ``>= 1`` (a symbolic
size describes a non-empty dimension).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import islpy as isl

# ``const`` is a common local name here (an affine form's constant term).
from .ir import (Axis, Binary, Cast, Const, Expr, Read, Reduce, Select, SizeVar, Unary,
                 INDEX_DTYPE, binary, fresh_uid, is_int, walk)
from .ir import const as const_expr
from .printer import expr_str
from .transform import eval_int, free_axes, substitute

CTX = isl.DEFAULT_CONTEXT


class NotAffine(Exception):
    """The expression is not quasi-affine in the axes (isl cannot represent it)."""


def dim_name(ax: Axis) -> str:
    """The name of ``ax``'s isl dimension: unique by uid (two axes may share a name).

    >>> from tensorexpr.ir import Axis, Const
    >>> i = Axis("i", Const(0, "int64"), Const(8, "int64"), 7)
    >>> dim_name(i)
    'a7'
    """
    return f"a{ax.uid}"


def _val(v: int) -> isl.Val:
    return isl.Val.int_from_si(CTX, int(v))


def params_of(exprs: Iterable[Expr]) -> List[str]:
    """Size-variable names used by ``exprs`` and by the bounds of the axes they use.

    >>> import tensorexpr as te
    >>> from tensorexpr.ir import Axis, Const
    >>> j = Axis("j", Const(0, "int64"), te.var("m"), 3)
    >>> params_of([j + te.var("n")])
    ['m', 'n']
    """
    out: Dict[str, None] = {}
    stack = list(exprs)
    seen = set()
    while stack:
        e = stack.pop()
        for x in walk(e, unique=True):
            if isinstance(x, SizeVar):
                out.setdefault(x.name)
            elif isinstance(x, Axis) and x.uid not in seen:
                seen.add(x.uid)
                stack.extend((x.lo, x.hi))
            elif isinstance(x, Reduce):
                for ax in x.axes:
                    if ax.uid not in seen:
                        seen.add(ax.uid)
                        stack.extend((ax.lo, ax.hi))
    return sorted(out)


class Space:
    """A set space over ``axes`` (set dims, in order) with size-variable parameters.

    >>> import tensorexpr as te
    >>> from tensorexpr.ir import Axis, Const
    >>> n = te.var("n")
    >>> i = Axis("i", Const(0, "int64"), n, 7)
    >>> sp = Space([i], ["n"])
    >>> print(sp.box())
    [n] -> { [a7] : n > 0 and 0 <= a7 < n }
    """

    def __init__(self, axes: Sequence[Axis], params: Sequence[str] = ()):
        self.axes = list(axes)
        extra = params_of([a for a in self.axes])
        self.params = sorted(set(params) | set(extra))
        self.vars = isl.make_zero_and_vars([dim_name(a) for a in self.axes], self.params)
        self.by_uid = {a.uid: a for a in self.axes}
        self._consts: Dict[int, isl.PwAff] = {}

    def constant(self, v: int) -> isl.PwAff:
        """The constant ``v`` in this space (cached: islpy's scalar conversion is slow).

        >>> print(Space([]).constant(3))
        { [] -> [(3)] }
        """
        pa = self._consts.get(v)
        if pa is None:
            pa = self._consts[v] = self.vars[0].add_constant_val(_val(v))
        return pa

    # {{{ expressions -> isl

    def aff(self, e: Expr) -> isl.PwAff:
        """``e`` as a piecewise quasi-affine function of the axes; NotAffine otherwise.

        >>> from tensorexpr.ir import Axis, Const
        >>> i = Axis("i", Const(0, "int64"), Const(8, "int64"), 7)
        >>> print(Space([i]).aff(i // 2 + 1))
        { [a7] -> [(1 + floor((a7)/2))] }
        >>> Space([i]).aff(i * i)
        Traceback (most recent call last):
        tensorexpr.polyhedral.NotAffine: product of two non-constant indices: i * i
        """
        match e:
            case Const(v, dt) if is_int(dt) or dt == "bool":
                return self.constant(int(v))
            case SizeVar(name):
                if name not in self.vars:
                    raise NotAffine(f"size {name} is not a parameter of this space")
                return self.vars[name]
            case Axis():
                key = dim_name(e)
                if key not in self.vars:
                    raise NotAffine(f"axis {e.name} is not bound here")
                return self.vars[key]
            case Cast(a, dt) if is_int(dt) and is_int(a.dtype):
                return self.aff(a)
            case Unary("neg", a, dt) if is_int(dt):
                return -self.aff(a)
            case Binary(op, a, b, dt) if is_int(dt):
                return self._binary(op, a, b)
            case Select(c, a, b, dt) if is_int(dt):
                cond = self.cond(c)
                pa, pb = self.aff(a), self.aff(b)
                return pa.intersect_domain(cond).union_add(pb.intersect_domain(cond.complement()))
        raise NotAffine(f"not affine: {e}")

    def _binary(self, op: str, a: Expr, b: Expr) -> isl.PwAff:
        if op == "add":
            return self.aff(a) + self.aff(b)
        if op == "sub":
            return self.aff(a) - self.aff(b)
        if op == "mul":
            pa, pb = self.aff(a), self.aff(b)
            if not (pa.is_cst() or pb.is_cst()):
                raise NotAffine(f"product of two non-constant indices: {a} * {b}")
            return pa.mul(pb)
        if op in ("floordiv", "mod"):
            c = _const_int(b)
            if c is None or c <= 0:
                raise NotAffine(f"{'//' if op == 'floordiv' else '%'} by a non-constant or "
                                f"non-positive divisor: {b}")
            pa = self.aff(a)
            if op == "floordiv":
                return pa.scale_down_val(_val(c)).floor()
            return pa.mod_val(_val(c))
        if op == "max":
            return self.aff(a).max(self.aff(b))
        if op == "min":
            return self.aff(a).min(self.aff(b))
        raise NotAffine(f"operation {op} is not affine")

    def cond(self, e: Expr) -> isl.Set:
        """The set of points where the boolean ``e`` holds; NotAffine if not expressible.

        >>> from tensorexpr.ir import Axis, Const
        >>> i = Axis("i", Const(0, "int64"), Const(8, "int64"), 7)
        >>> print(Space([i]).cond((i % 2 == 0) & (i < 4)))
        { [a7] : (a7) mod 2 = 0 and a7 <= 3 }
        """
        match e:
            case Const(v, "bool"):
                return self.universe() if v else self.universe().complement()
            case Unary("not", a, _):
                return self.cond(a).complement()
            case Binary("and", a, b, _):
                return self.cond(a) & self.cond(b)
            case Binary("or", a, b, _):
                return self.cond(a) | self.cond(b)
            case Binary(op, a, b, _) if op in ("lt", "le", "eq", "ne", "gt", "ge"):
                if not (is_int(a.dtype) and is_int(b.dtype)):
                    raise NotAffine(f"comparison of non-integer values: {e}")
                pa, pb = self.aff(a), self.aff(b)
                return getattr(pa, f"{op}_set")(pb)
        raise NotAffine(f"condition is not affine: {e}")

    # }}}

    def universe(self) -> isl.Set:
        """Every point of the space (no constraint, not even the axes' bounds).

        >>> print(Space([], ["n"]).universe())
        [n] -> { [] }
        """
        return self.vars[0].le_set(self.vars[0])

    def context(self) -> isl.Set:
        """Every size variable is at least 1.

        >>> print(Space([], ["n"]).context())
        [n] -> { [] : n > 0 }
        """
        s = self.universe()
        for p in self.params:
            s = s & self.vars[p].ge_set(self.vars[0] + 1)
        return s

    def box(self, axes: Optional[Sequence[Axis]] = None) -> isl.Set:
        """``lo <= a < hi`` for the given axes (default: all), within the context.

        >>> from tensorexpr.ir import Axis, Const
        >>> i = Axis("i", Const(0, "int64"), Const(8, "int64"), 7)
        >>> print(Space([i]).box())
        { [a7] : 0 <= a7 <= 7 }
        """
        s = self.context()
        for ax in (self.axes if axes is None else axes):
            v = self.vars[dim_name(ax)]
            s = s & self.aff(ax.lo).le_set(v) & v.lt_set(self.aff(ax.hi))
        return s.coalesce()

    def point_values(self, point: isl.Point) -> Dict[str, int]:
        """``{axis or size name: value}`` of an isl point of this space.

        >>> from tensorexpr.ir import Axis, Const
        >>> i = Axis("i", Const(0, "int64"), Const(8, "int64"), 7)
        >>> sp = Space([i])
        >>> sp.point_values((sp.box() & sp.cond(i >= 7)).sample_point())
        {'i': 7}
        """
        out = {}
        for k, ax in enumerate(self.axes):
            out[ax.name] = point.get_coordinate_val(isl.dim_type.set, k).to_python()
        for k, p in enumerate(self.params):
            out[p] = point.get_coordinate_val(isl.dim_type.param, k).to_python()
        return out


def _const_int(e: Expr) -> Optional[int]:
    if isinstance(e, Const) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return e.value
    if isinstance(e, Cast):
        return _const_int(e.a)
    return None


def is_affine(e: Expr, space: Space) -> bool:
    """Can ``e`` be represented in ``space`` (quasi-affine in its axes and sizes)?

    >>> from tensorexpr.ir import Axis, Const
    >>> i = Axis("i", Const(0, "int64"), Const(8, "int64"), 7)
    >>> is_affine(2 * i + 1, Space([i])), is_affine(i * i, Space([i]))
    (True, False)
    """
    try:
        space.aff(e)
        return True
    except NotAffine:
        return False


# {{{ gathers (used by passes/differentiate; owned by the differentiate work)


class FiberPiece:
    """One piece of a gather: ``sum over free axes where cond`` with ``subst`` for the rest.

    ``subst`` maps each eliminated domain axis (by uid) to an expression of the
    target axes and the free axes; ``cond`` (None: always) restricts the free
    axes (and target axes) to the points of the fiber.
    """

    def __init__(self, free, subst, cond):
        self.free, self.subst, self.cond = tuple(free), dict(subst), cond

    def __repr__(self):
        s = ", ".join(f"{k}={expr_str(v)}" for k, v in self.subst.items())
        c = "" if self.cond is None else expr_str(self.cond)
        return f"FiberPiece(free={[a.name for a in self.free]}, {s}, if {c})"


def _extent(ax: Axis) -> int:
    lo, hi = _const_int(ax.lo), _const_int(ax.hi)
    return (hi - lo) if (lo is not None and hi is not None) else 1 << 30


def solve_fiber(target: Sequence[Axis], domain: Sequence[Axis], guards: Sequence[Expr],
                indices: Sequence[Expr]) -> List[FiberPiece]:
    """Invert a read: the points ``v`` of ``domain`` (under ``guards``) with ``indices(v) == target``.

    The read's pieces (a clamped index has several) are inverted separately. In
    each, as many domain axes as possible (the largest first) are eliminated,
    i.e. expressed through the target axes and the remaining *free* axes; the
    free axes, with ranges tightened by isl, become the reduction of a gather.
    Raises :class:`NotAffine` if the read is not quasi-affine.

    >>> import tensorexpr as te
    >>> from tensorexpr.ir import Axis, Const, fresh_uid
    >>> z = Const(0, "int64")
    >>> h = Axis("h", z, Const(16, "int64"), fresh_uid())
    >>> kh = Axis("kh", z, Const(3, "int64"), fresh_uid())
    >>> y = Axis("y", z, Const(33, "int64"), fresh_uid())
    >>> [p.free[0].name for p in solve_fiber([y], [h, kh], [], [2 * h + kh])]
    ['kh']
    """
    exprs = list(guards) + list(indices) + [a.lo for a in domain] + [a.hi for a in domain]
    exprs += [a.lo for a in target] + [a.hi for a in target]
    params = params_of(exprs)
    out: List[FiberPiece] = []
    for piece in _access_pieces(domain, guards, indices, params):
        out += _solve_piece(target, domain, list(guards) + ([piece] if piece is not None else []),
                            indices, params)
    return out


def _access_pieces(domain, guards, indices, params) -> List[Optional[Expr]]:
    """Conditions on ``domain`` under which ``indices`` is one affine function."""
    sp = Space(list(domain), params)
    dom = sp.box()
    for g in guards:
        dom = dom & sp.cond(g)
    affs = [sp.aff(ix).intersect_domain(dom) for ix in indices]
    if all(a.n_piece() <= 1 for a in affs):
        return [None]
    sets = [dom]
    for a in affs:  # common refinement of every index's pieces
        parts = []
        a.foreach_piece(lambda s, _aff: parts.append(s))
        sets = [x & p for x in sets for p in parts if not (x & p).is_empty()]
    return [set_expr(s, list(domain), params) for s in sets]


def _relation(order, target, domain, guards, indices, params) -> Tuple[Space, isl.Set]:
    sp = Space(list(order), params)
    s = sp.box(list(target) + list(domain))
    for g in guards:
        s = s & sp.cond(g)
    for t, ix in zip(target, indices):
        s = s & sp.aff(ix).eq_set(sp.vars[dim_name(t)])
    return sp, s


def _inputs_first(s: isl.Set, inputs: Sequence[Axis]) -> isl.Map:
    """``s`` as a map from ``inputs`` (dims of ``s``, by name) to its other dims."""
    m = isl.Map.from_range(s)
    for k, ax in enumerate(inputs):
        pos = m.find_dim_by_name(isl.dim_type.out, dim_name(ax))
        m = m.move_dims(isl.dim_type.in_, k, isl.dim_type.out, pos, 1)
    return m


def _solve_piece(target, domain, guards, indices, params) -> List[FiberPiece]:
    dependent: List[Axis] = []
    # one relation, its dims moved for each trial and for the solution (building it
    # again per trial was half of a convolution gradient's build time)
    _, full = _relation(list(target) + list(domain), target, domain, guards, indices, params)
    for ax in sorted(domain, key=lambda a: (-_extent(a), domain.index(a))):
        trial = dependent + [ax]
        free = [a for a in domain if a not in trial]
        if _inputs_first(full, list(target) + free).is_single_valued():
            dependent = trial
    free = [a for a in domain if a not in dependent]
    if full.is_empty():
        return []
    # the map's outputs are the dependent axes in the domain's order
    dependent = [a for a in domain if a in dependent]
    pma = isl.PwMultiAff.from_map(_inputs_first(full, list(target) + free)).coalesce()
    pieces = []
    pma.foreach_piece(lambda dom, ma: pieces.append((dom, ma)))
    out = []
    for dom, ma in pieces:
        out.append(_piece(target, free, dependent, dom, ma, params))
    return out


def _piece(target, free, dependent, dom: isl.Set, ma: isl.MultiAff, params) -> FiberPiece:
    """One piece of the inverted read, with tightened (or fixed) free axes."""
    nt = len(target)
    over_free = dom.project_out(isl.dim_type.set, 0, nt)
    names: List[Expr] = list(target)
    new_free: List[Axis] = []
    subst: Dict[int, Expr] = {}
    for k, ax in enumerate(free):
        lo, hi = _single_aff(over_free.dim_min(k), params), _single_aff(over_free.dim_max(k), params)
        if lo is not None and hi is not None and _const_int(lo) is not None \
                and _const_int(lo) == _const_int(hi):
            names.append(lo)  # a single point: no loop needed
            subst[ax.uid] = lo
            continue
        lo = ax.lo if lo is None else _fold(lo)
        hi = ax.hi if hi is None else _fold(hi + 1)
        nax = Axis(ax.name, lo, hi, fresh_uid())
        names.append(nax)
        new_free.append(nax)
        subst[ax.uid] = nax
    for k, ax in enumerate(dependent):
        subst[ax.uid] = _aff_expr(ma.get_at(k), names, params)
    # Fix the single-point axes inside the piece's own space before gisting.
    fixed = [(k, e) for k, e in enumerate(names[nt:]) if not isinstance(e, Axis)]
    dom2 = dom
    for k, e in fixed:
        dom2 = dom2.fix_val(isl.dim_type.set, nt + k, _val(_const_int(e)))
    keep = [k for k, e in enumerate(names[nt:]) if isinstance(e, Axis)]
    drop = [nt + k for k in range(len(names) - nt) if k not in keep]
    for d in sorted(drop, reverse=True):
        dom2 = dom2.project_out(isl.dim_type.set, d, 1)
    names_kept = list(target) + new_free
    context = Space(names_kept, params).box()
    cond = set_expr(_align(dom2, context).gist(context), names_kept, params)
    return FiberPiece(new_free, subst, cond)


def _fold(e: Expr) -> Expr:
    """Constant-fold a bound (``4 + 1`` -> ``5``) so printed ranges stay readable."""
    try:
        return const_expr(eval_int(e), INDEX_DTYPE)
    except (ValueError, KeyError, TypeError):
        return e


def _align(s: isl.Set, like: isl.Set) -> isl.Set:
    """``s`` with the dimension ids of ``like`` (same dims, positionally)."""
    s = isl.align_spaces(s, like) if s.dim(isl.dim_type.param) != like.dim(isl.dim_type.param) else s
    for k in range(like.dim(isl.dim_type.set)):
        s = s.set_dim_name(isl.dim_type.set, k, like.get_dim_name(isl.dim_type.set, k))
    return s


def _single_aff(pa: isl.PwAff, params) -> Optional[Expr]:
    """A one-piece, div-free affine bound of parameters as IR; None otherwise."""
    pieces = []
    pa.foreach_piece(lambda s, a: pieces.append(a))
    if len(pieces) != 1 or pieces[0].dim(isl.dim_type.div):
        return None
    return _aff_expr(pieces[0], [], params)


def simplify_affine(e: Expr) -> Expr:
    """``e`` rewritten by isl when it is one affine piece: ``2*(i//2) + i%2`` becomes ``i``.

    Expressions that are not affine, or are piecewise, come back unchanged.

    >>> from tensorexpr.ir import Axis, Const
    >>> i = Axis("i", Const(0, "int64"), Const(8, "int64"), 1)
    >>> simplify_affine((i // 2) * 2 + (i - 2 * (i // 2)))
    i
    """
    axes = free_axes(e)
    params = params_of([e])
    try:
        pa = Space(axes, params).aff(e)
    except NotAffine:
        return e
    pieces = []
    pa.foreach_piece(lambda s, a: pieces.append(a))
    if len(pieces) != 1:
        return e
    return _aff_expr(pieces[0], axes, params)


def _lin(aff: isl.Aff, names, params) -> Tuple[Dict, int, int]:
    """``aff`` as ({term: coefficient}, constant, denominator); terms are IR expressions."""
    den = aff.get_denominator_val().to_python()
    terms: Dict = {}

    def add(key, coef):
        c = (coef * den)
        c = c.to_python() if hasattr(c, "to_python") else c
        if c:
            terms[key] = terms.get(key, 0) + c

    for k, ax in enumerate(names):
        add(ax, aff.get_coefficient_val(isl.dim_type.in_, k))
    for k in range(aff.dim(isl.dim_type.param)):
        add(SizeVar(aff.get_dim_name(isl.dim_type.param, k)),
            aff.get_coefficient_val(isl.dim_type.param, k))
    for k in range(aff.dim(isl.dim_type.div)):
        c = aff.get_coefficient_val(isl.dim_type.div, k)
        if not c.is_zero():
            arg = aff.get_div(k)
            nterms, nconst, q = _lin(arg, names, params)
            floor_e = _render(nterms, nconst) // q if q != 1 else _render(nterms, nconst)
            add(("div", floor_e, tuple(nterms.items()), nconst, q), c)
    const = (aff.get_constant_val() * den).to_python()
    return terms, const, den


def _term(key) -> Expr:
    return key[1] if isinstance(key, tuple) else key  # ("div", floor_expr, ...)


def _render(terms: Dict, const: int) -> Expr:
    """``sum(c * term) + const`` with subtraction for negative coefficients."""
    out = None
    for key, c in sorted(terms.items(), key=lambda kv: kv[1] < 0):
        t = _term(key)
        mag = t if abs(c) == 1 else abs(c) * t
        if out is None:
            out = mag if c > 0 else -mag
        else:
            out = out + mag if c > 0 else out - mag
    if out is None:
        return const_expr(const, INDEX_DTYPE)
    if const:
        out = out + const if const > 0 else out - (-const)
    return out


def _aff_expr(aff: isl.Aff, names, params) -> Expr:
    terms, const, den = _lin(aff, names, params)
    divs = [k for k in terms if isinstance(k, tuple)]
    if den == 1 and len(divs) == 1 and terms[divs[0]] == 1:
        # floor(n / q) + r  ==  floor((n + q r) / q): one division reads better
        _, _, nterms, nconst, q = divs[0]
        num = dict(nterms)
        for k, v in terms.items():
            if k is not divs[0]:
                num[k] = num.get(k, 0) + q * v
        num = {k: v for k, v in num.items() if v}
        return _render(num, nconst + q * const) // q
    e = _render(terms, const)
    return e // den if den != 1 else e


def _constraint_expr(c: isl.Constraint, names, params) -> Expr:
    terms, const, den = _lin(c.get_aff(), names, params)
    divs = [k for k in terms if isinstance(k, tuple)]
    if c.is_equality() and len(divs) == 1:
        # `num - q*floor(num/q) == 0` reads better as `num % q == 0`
        d = divs[0]
        _, floor_e, nterms, nconst, q = d
        f = -terms[d]
        rest = {k: v for k, v in terms.items() if k is not d}
        if q > 1 and abs(f) == q:
            s = f // q
            nt = dict(nterms)
            if rest == {k: s * v for k, v in nt.items()} and const == s * nconst:
                return binary("eq", _render(nt, nconst) % q, 0)
    pos = {k: v for k, v in terms.items() if v > 0}
    neg = {k: -v for k, v in terms.items() if v < 0}
    lhs = _render(pos, const if const > 0 else 0)
    rhs = _render(neg, -const if const < 0 else 0)
    return binary("eq" if c.is_equality() else "ge", lhs, rhs)


def set_expr(s: isl.Set, names, params) -> Optional[Expr]:
    """An isl set over ``names`` as an IR condition (None for the universe).

    >>> from tensorexpr.ir import Axis, Const
    >>> i = Axis("i", Const(0, "int64"), Const(8, "int64"), 7)
    >>> sp = Space([i])
    >>> set_expr(sp.cond((i >= 2) & (i % 2 == 0)), [i], [])
    (((i % 2) == 0) & (i >= 2))
    >>> print(set_expr(sp.universe(), [i], []))
    None
    """
    s = s.coalesce().compute_divs()
    if s.plain_is_universe():
        return None
    alts = []
    for bs in s.get_basic_sets():
        conj = None
        for c in bs.get_constraints():
            e = _constraint_expr(c, names, params)
            conj = e if conj is None else binary("and", conj, e)
        alts.append(conj if conj is not None else const_expr(True))
    out = alts[0]
    for a in alts[1:]:
        out = binary("or", out, a)
    return out


# }}}


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

    def within(self, index: Expr, size: Expr) -> bool:
        """Is ``0 <= index < size`` at every point? False if either is not affine here.

        >>> from tensorexpr.ir import Axis, Const
        >>> i = Axis("i", Const(0, "int64"), Const(8, "int64"), 7)
        >>> PointSet([i]).within(i // 2, Const(4, "int64")), PointSet([i]).within(i * i, Const(64, "int64"))
        (True, False)
        """
        try:
            pa, hi = self.space.aff(index), self.space.aff(size)
        except NotAffine:
            return False
        return (self.set & (pa.lt_set(self.space.vars[0]) | pa.ge_set(hi))).is_empty()


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
    axes, outer = list(axes), list(outer)
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
    return _ast_tree(node, names, shown), rest


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


# {{{ recurrence windows (checkpointing; used by codegen/checkpoint.py)


def offset_range(axes: Sequence[Axis], guards: Sequence[Expr], index: Expr, base: Expr,
                 params: Sequence[str] = ()) -> Optional[Tuple[int, ...]]:
    """The least and greatest value of ``index - base`` over the points of ``axes``'
    boxes where the affine conjuncts of ``guards`` hold, for every value of the sizes.

    ``()`` when there is no such point (the read never runs), None when the range
    is unbounded or not affine. Dropping non-affine guards only enlarges the set,
    so the answer is a sound bound on where a read can go.

    >>> import tensorexpr as te
    >>> from tensorexpr.ir import Axis, Const
    >>> n = te.var("n")
    >>> t = Axis("t", Const(0, "int64"), n, 11)
    >>> offset_range([t], [t >= 2], t - 2, t), offset_range([t], [t == n - 1], t, n - 1)
    ((-2, -2), (0, 0))
    >>> offset_range([t], [], n - 1, t) is None  # the last row, read from every step
    True
    """
    ps = PointSet(axes, guards, sorted(set(params) | set(params_of([index, base]))))
    sp = ps.space
    try:
        pa = sp.aff(index) - sp.aff(base)
    except NotAffine:
        return None
    if ps.set.is_empty():
        return ()
    vals = isl.Map.from_pw_aff(pa.intersect_domain(ps.set)).range()
    vals = vals.project_out(isl.dim_type.param, 0, vals.dim(isl.dim_type.param))
    if vals.is_empty():
        return ()
    if not vals.is_bounded():
        return None

    def end(s: isl.Set) -> int:
        return s.sample_point().get_coordinate_val(isl.dim_type.set, 0).to_python()

    return end(vals.lexmin()), end(vals.lexmax())


def index_box(axes: Sequence[Axis], guards: Sequence[Expr], indices: Sequence[Expr]
              ) -> Optional[List[Optional[Tuple[int, int]]]]:
    """The bounding box of the image of a read: for each index of ``indices``, its
    least and greatest value over the points of ``axes``' (constant) boxes where the
    affine conjuncts of ``guards`` hold; None for an index that is not affine (a
    data-dependent one) or unbounded. None instead of the list when there is no
    such point (the read never runs). Dropping non-affine guards only enlarges the
    set, so the box holds every element the read can touch.

    >>> from tensorexpr.ir import Axis, Const
    >>> i = Axis("i", Const(4, "int64"), Const(8, "int64"), 5)
    >>> index_box([i], [i >= 5], [binary("max", i - 1, 0), i * i])
    [(4, 6), None]
    >>> index_box([i], [i >= 9], [i]) is None
    True
    """
    ps = PointSet(axes, guards, params_of(list(indices)))
    if ps.set.is_empty():
        return None
    out: List[Optional[Tuple[int, int]]] = []
    for ix in indices:
        try:
            pa = ps.space.aff(ix)
        except NotAffine:
            out.append(None)
            continue
        vals = isl.Map.from_pw_aff(pa.intersect_domain(ps.set)).range()
        vals = vals.project_out(isl.dim_type.param, 0, vals.dim(isl.dim_type.param))
        if not vals.is_bounded():
            out.append(None)
            continue
        lo, hi = (v.sample_point().get_coordinate_val(isl.dim_type.set, 0).to_python()
                  for v in (vals.lexmin(), vals.lexmax()))
        out.append((lo, hi))
    return out


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
    >>> from tensorexpr.ir import Axis, Const
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
        lo, hi = lo.max(zero), (hi + 1).min(zero.add_constant_val(_val(n)))
        rest = ctx.subtract(lo.domain())  # the sizes where no read runs: [0, 1)
        lo = lo.union_add(zero.intersect_domain(rest)).coalesce()
        hi = hi.union_add(zero.add_constant_val(_val(min(1, n))).intersect_domain(rest))
        build = isl.AstBuild.from_context(ctx)
        out.append((_ast_expr(build.expr_from_pw_aff(lo), names),
                    _ast_expr(build.expr_from_pw_aff(hi.coalesce()), names), False))
    return out

# }}}


# {{{ affine forms (used by codegen/views.py: outputs that are strided views of inputs)


def is_index_arithmetic(e: Expr) -> bool:
    """Is ``e`` integer arithmetic of constants, axes and sizes alone (what isl and
    ``eval_int`` can evaluate), with no read of data, no reduction and no float?

    >>> import tensorexpr as te
    >>> from tensorexpr.ir import Axis, Const
    >>> k = Axis("k", Const(0, "int64"), Const(12, "int64"), 7)
    >>> I = te.placeholder((12,), dtype="int32", name="I")
    >>> is_index_arithmetic(te.minimum(k // 4, 2)), is_index_arithmetic(I[k] % 3)
    (True, False)
    """
    for x in walk(e):
        match x:
            case Const(_, dt) | SizeVar(dtype=dt) | Axis(dtype=dt) if is_int(dt) or dt == "bool":
                pass
            case Binary(_, _, _, dt) | Unary(_, _, dt) | Cast(_, dt) | Select(_, _, _, dt) \
                    if is_int(dt) or dt == "bool":
                pass
            case _:
                return False
    return True


def affine_form(e: Expr, axes: Sequence[Axis]) -> Optional[Tuple[int, Tuple[int, ...]]]:
    """``(c, (a_1, ..., a_n))`` such that ``e == c + a_1 * axes[0] + ... + a_n * axes[-1]``
    at every point of the axes' box (constant bounds, no size variables), or None.

    Floor division and modulo are exact here, so a flattening index that is affine
    only on the box (``(k // 4) * 4 + k % 4 == k``) is recognised.

    >>> from tensorexpr.ir import Axis, Const
    >>> k = Axis("k", Const(0, "int64"), Const(12, "int64"), 7)
    >>> affine_form((k // 4) * 8 + k % 4, [k])   # not affine: jumps every 4 points
    >>> affine_form((k // 4) * 4 + k % 4 + 3, [k])
    (3, (1,))
    """
    if not is_index_arithmetic(e):
        return None  # a data-dependent index has no value to sample at a point
    los = [_const_int(ax.lo) for ax in axes]
    his = [_const_int(ax.hi) for ax in axes]
    if any(v is None for v in los + his) or any(h <= lo for lo, h in zip(los, his)):
        return None
    if params_of([e] + list(axes)):
        return None

    def at(point) -> int:
        return int(eval_int(substitute(e, {ax: Const(v, INDEX_DTYPE)
                                           for ax, v in zip(axes, point)})))

    try:
        base = at(los)
        coeffs = []
        for k in range(len(axes)):
            if his[k] - los[k] == 1:
                coeffs.append(0)  # a single point: any stride describes it
                continue
            step = list(los)
            step[k] += 1
            coeffs.append(at(step) - base)
        c = base - sum(a * lo for a, lo in zip(coeffs, los))
        sp = Space(list(axes), [])
        f = sp.aff(e)
        cand = sp.constant(c)
        for a, ax in zip(coeffs, axes):
            cand = cand + sp.vars[dim_name(ax)] * sp.constant(a)
        box = sp.box()
        if not box.is_subset(f.eq_set(cand)):
            return None
    except (NotAffine, ZeroDivisionError, TypeError):
        return None
    return c, tuple(coeffs)

# }}}


# {{{ implied conditions (used by codegen/padcopy.py: sums over zero-padded copies)


def implies(axes: Sequence[Axis], guards: Sequence[Expr], cond: Expr,
            params: Sequence[str] = ()) -> bool:
    """Does ``cond`` hold at every point of ``axes``' boxes where ``guards`` hold?

    False when ``cond`` or a guard is not affine (conservative: the caller drops
    ``cond`` from a loop's domain only when the answer is True).

    >>> from tensorexpr.ir import Axis, Const
    >>> x = Axis("x", Const(0, "int64"), Const(36, "int64"), 5)
    >>> k = Axis("k", Const(0, "int64"), Const(3, "int64"), 6)
    >>> implies([x, k], [x - 2 * k >= 0, x - 2 * k < 32], x >= 2 * k)
    True
    >>> implies([x, k], [x - 2 * k >= 0], x - 2 * k < 32)
    False
    """
    sp = Space(list(axes), sorted(set(params) | set(params_of(list(guards) + [cond]))))
    try:
        dom = sp.box()
        for g in guards:
            for c in conjuncts(g):
                dom = dom & sp.cond(c)
        return dom.is_subset(sp.cond(cond))
    except NotAffine:
        return False

# }}}


# {{{ guards seen from fewer axes (used by passes/normalize.py: hoisted reductions)


def project(keep: Sequence[Axis], guards: Sequence[Expr]) -> Optional[Expr]:
    """A condition on the axes ``keep`` that holds wherever some values of the other
    axes of ``guards`` (within their boxes) satisfy ``guards``' affine conjuncts;
    None when that says nothing beyond ``keep``'s boxes.

    A reduction computed on its own over ``keep`` must not be evaluated where its
    enclosing guards never let the program evaluate it; conjuncts isl cannot
    represent are dropped, which only enlarges the set.

    >>> from tensorexpr.ir import Axis, Const
    >>> i = Axis("i", Const(0, "int64"), Const(5, "int64"), 11)
    >>> k = Axis("k", Const(0, "int64"), Const(5, "int64"), 12)
    >>> print(project([i], [k == i - 1]))
    (i >= 1)
    >>> print(project([i], [k <= i]))
    None
    """
    affine, axes, params = [], {a.uid: a for a in keep}, set()
    for g in guards:
        for c in conjuncts(g):
            try:
                Space(list(free_axes(c)), params_of([c])).cond(c)
            except NotAffine:
                continue
            affine.append(c)
            for a in free_axes(c):
                axes.setdefault(a.uid, a)
            params |= set(params_of([c]))
    others = [a for uid, a in axes.items() if uid not in {k.uid for k in keep}]
    if not affine:
        return None
    sp = Space(list(keep) + others, sorted(params))
    s = sp.box()
    for c in affine:
        s = s & sp.cond(c)
    s = s.project_out(isl.dim_type.set, len(keep), len(others))
    if s.is_empty():
        return const_expr(False)
    context = Space(list(keep), sorted(params)).box()
    return set_expr(_align(s, context).gist(context), list(keep), sorted(params))

# }}}

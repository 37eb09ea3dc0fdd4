"""Gathers: the points of a domain that an access maps to a target point (the
fibers ``passes/differentiate`` sums over), and isl's answers as our IR.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import islpy as isl

from ..ir import Axis, Expr, SizeVar, INDEX_DTYPE, binary, fresh_uid
from ..ir import const as const_expr
from ..printer import expr_str
from ..transform import eval_int, free_axes, substitute
from .renamed import Renamed
from .spaces import NotAffine, dim_name, isl_val, params_of, Space, const_int

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
    lo, hi = const_int(ax.lo), const_int(ax.hi)
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
    # (an LSTM's gates invert the same reads of other axes: polyhedral.renamed)
    key = (tuple(target), tuple(domain), tuple(guards), tuple(indices))
    return _FIBERS.get(key, lambda: _solve_fiber(target, domain, guards, indices))


def _solve_fiber(target, domain, guards, indices) -> List[FiberPiece]:
    exprs = list(guards) + list(indices) + [a.lo for a in domain] + [a.hi for a in domain]
    exprs += [a.lo for a in target] + [a.hi for a in target]
    params = params_of(exprs)
    out: List[FiberPiece] = []
    for piece in _access_pieces(domain, guards, indices, params):
        out += _solve_piece(target, domain, list(guards) + ([piece] if piece is not None else []),
                            indices, params)
    return out


def _renamed_fiber(pieces: List[FiberPiece], mapping) -> List[FiberPiece]:
    """:func:`solve_fiber`'s answer for the question of ``mapping``'s new axes: each
    piece's free axes new ones (allocated in the order isl's answer allocates them),
    everything else renamed."""
    uids = {a.uid: b.uid for a, b in mapping.items()}
    out = []
    for p in pieces:
        m = dict(mapping)
        free = []
        for ax in p.free:
            nax = Axis(ax.name, substitute(ax.lo, m), substitute(ax.hi, m), fresh_uid())
            m[ax] = nax
            free.append(nax)
        out.append(FiberPiece(free, {uids.get(u, u): substitute(e, m) for u, e in p.subst.items()},
                              None if p.cond is None else substitute(p.cond, m)))
    return out


#: the answers of :func:`solve_fiber`, renamed for every question (each makes its own
#: free axes)
_FIBERS = Renamed(256, _renamed_fiber, names=True, exact=False)


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
        if lo is not None and hi is not None and const_int(lo) is not None \
                and const_int(lo) == const_int(hi):
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
        dom2 = dom2.fix_val(isl.dim_type.set, nt + k, isl_val(const_int(e)))
    keep = [k for k, e in enumerate(names[nt:]) if isinstance(e, Axis)]
    drop = [nt + k for k in range(len(names) - nt) if k not in keep]
    for d in sorted(drop, reverse=True):
        dom2 = dom2.project_out(isl.dim_type.set, d, 1)
    names_kept = list(target) + new_free
    context = Space(names_kept, params).box()
    cond = set_expr(align_like(dom2, context).gist(context), names_kept, params)
    return FiberPiece(new_free, subst, cond)


def _fold(e: Expr) -> Expr:
    """Constant-fold a bound (``4 + 1`` -> ``5``) so printed ranges stay readable."""
    try:
        return const_expr(eval_int(e), INDEX_DTYPE)
    except (ValueError, KeyError, TypeError):
        return e


def align_like(s: isl.Set, like: isl.Set) -> isl.Set:
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
    # (differentiation tidies every index of every read it substitutes into, the same
    # few again and again: an LSTM's gradient asked 658 times for 82 answers; an
    # unchanged index comes back as the caller's own object)
    got = _SIMPLIFIED.get((e,), lambda: _simplify_affine(e))
    return e if got is _UNCHANGED else got


_UNCHANGED = object()


def _renamed_expr(e, mapping):
    return e if e is _UNCHANGED else substitute(e, mapping)


#: the answers :func:`simplify_affine` keeps (_UNCHANGED: none simpler), shared by the
#: indices of other axes of the same ranges (``polyhedral.renamed``)
_SIMPLIFIED = Renamed(512, _renamed_expr)


def _simplify_affine(e: Expr):
    axes = free_axes(e)
    params = params_of([e])
    try:
        pa = Space(axes, params).aff(e)
    except NotAffine:
        return _UNCHANGED
    pieces = []
    pa.foreach_piece(lambda s, a: pieces.append(a))
    if len(pieces) != 1:
        return _UNCHANGED
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

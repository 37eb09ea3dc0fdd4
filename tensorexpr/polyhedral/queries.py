"""Questions asked of isl: the offsets a recurrence reads back, conditions implied
by guards, guards seen from fewer axes.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import islpy as isl

from ..ir import Axis, Const, Expr, binary, fresh_uid  # noqa: F401 - binary: the example
from ..ir import const as const_expr
from ..transform import free_axes, substitute
from .spaces import NotAffine, params_of, Space
from .fibers import align_like, set_expr
from .loops import conjuncts, PointSet
from .renamed import Renamed, unchanged

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
    # A checkpoint plan asks of each read site the offset from each axis of its
    # reader, for each reader and recurrence, again as groups are tried: an LSTM's
    # gradient asked 498 times for 200 answers. The IR is immutable: answers are kept.
    key = (tuple(axes), tuple(guards), index, base, tuple(params))
    return _OFFSETS.get(key, lambda: (_offset_range(axes, guards, index, base, params),))[0]


#: the answers :func:`offset_range` keeps (each in a tuple: None is an answer)
_OFFSETS = Renamed(512, unchanged)


def _offset_range(axes, guards, index, base, params):
    # (the point set is shared with the questions of other bases and indices)
    ps = PointSet.of(axes, guards, sorted(set(params) | set(params_of([index, base]))))
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



def span(axes: Sequence[Axis], guards: Sequence[Expr], axis: Axis,
         params: Sequence[str] = (), free: Sequence[Axis] = ()) -> Optional[int]:
    """The most values ``axis`` (one of ``axes``) takes while the other axes stay fixed,
    over the points of the boxes where the affine conjuncts of ``guards`` hold: the
    longest trip count of a loop over ``axis`` innermost. An upper bound (dropped
    non-affine guards only enlarge the set); 0 when there is no point, None when
    unbounded. ``free``: axes of ``axes`` that may change too (the loops inside the
    one over ``axis``: its trip count is that of the projection).

    >>> from tensorexpr.ir import Axis, Const, fresh_uid
    >>> i = Axis("i", Const(0, "int64"), Const(32, "int64"), fresh_uid())
    >>> y = Axis("y", Const(0, "int64"), Const(64, "int64"), fresh_uid())
    >>> span([i, y], [y >= 2 * i, y <= 2 * i + 1], y), span([i, y], [], y)
    (2, 64)
    >>> span([i, y], [y == i], i), span([i, y], [y == i], i, free=[y])
    (1, 32)
    """
    # the largest y' - y over pairs of points that differ in y (and the free axes) alone
    twins = {a: Axis(f"{a.name}'", a.lo, a.hi, fresh_uid())
             for a in [axis] + [f for f in free if f.uid != axis.uid]}
    moved = [substitute(g, twins) for g in guards]
    r = offset_range(list(axes) + list(twins.values()), list(guards) + moved, twins[axis],
                     axis, params)
    if r is None:
        return None
    return 0 if r == () else r[1] + 1

# }}}


# {{{ read boxes (used by tensorexpr/blocks.py: the halos of Dask blocks)


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
    # (passes.share asks it of each site of each form, again each round: an LSTM's
    # gradient asked 81 times for 19 boxes)
    key = (tuple(axes), tuple(guards), tuple(indices))
    got = _INDEX_BOXES.get(key, lambda: (_index_box(axes, guards, indices),))[0]
    return None if got is None else list(got)


#: the answers :func:`index_box` keeps
_INDEX_BOXES = Renamed(256, unchanged)


def _index_box(axes, guards, indices) -> Optional[Tuple[Optional[Tuple[int, int]], ...]]:
    ps = PointSet.of(axes, guards, params_of(list(indices)))
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
    return tuple(out)

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


def project(keep: Sequence[Axis], guards: Sequence[Expr], strict: bool = False) -> Optional[Expr]:
    """A condition on the axes ``keep`` that holds wherever some values of the other
    axes of ``guards`` (within their boxes) satisfy ``guards``' affine conjuncts;
    None when that says nothing beyond ``keep``'s boxes.

    A reduction computed on its own over ``keep`` must not be evaluated where its
    enclosing guards never let the program evaluate it; conjuncts isl cannot
    represent are dropped, which only enlarges the set, unless ``strict``: then
    they raise :class:`NotAffine` (the caller needs the exact projection).

    >>> from tensorexpr.ir import Axis, Const
    >>> i = Axis("i", Const(0, "int64"), Const(5, "int64"), 11)
    >>> k = Axis("k", Const(0, "int64"), Const(5, "int64"), 12)
    >>> print(project([i], [k == i - 1]))
    (i >= 1)
    >>> print(project([i], [k <= i]))
    None
    >>> print(project([i], [k != 2], strict=True))
    None
    """
    affine, axes, params = [], {a.uid: a for a in keep}, set()
    for g in guards:
        for c in conjuncts(g):
            try:
                Space(list(free_axes(c)), params_of([c])).cond(c)
            except NotAffine:
                if strict:
                    raise
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
    return set_expr(align_like(s, context).gist(context), list(keep), sorted(params))



def seen_from(conds: Sequence[Expr], axes: Sequence[Axis]) -> Optional[List[Expr]]:
    """``conds`` as conditions on ``axes`` alone: their conjuncts on those axes as
    written, and the others projected exactly onto ``axes`` (:func:`project`, strict);
    None when such a conjunct is not affine. Something computed over ``axes`` under
    these conditions is computed wherever some value of the other axes satisfies
    ``conds``: where the program evaluates it.

    >>> from tensorexpr.ir import Axis, Const
    >>> i = Axis("i", Const(0, "int64"), Const(5, "int64"), 21)
    >>> w = Axis("w", Const(0, "int64"), Const(2, "int64"), 22)
    >>> [str(c) for c in seen_from([(i >= 1) & (w == 1)], [i])]
    ['(i >= 1)']
    >>> print(seen_from([w == i - 3], [i]))   # (i <= 4 holds on i's box)
    [(i >= 3)]
    """
    used = {a.uid for a in axes}
    keep: List[Expr] = []
    other: List[Expr] = []
    for c in conds:
        for q in conjuncts(c):
            (keep if {a.uid for a in free_axes(q)} <= used else other).append(q)
    if not other:
        return keep
    try:
        implied = project(axes, other, strict=True)
    except NotAffine:
        return None
    return keep + ([implied] if implied is not None else [])

# }}}

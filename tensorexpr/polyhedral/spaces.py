"""isl spaces of our axes and sizes: expressions to isl's affine forms and sets,
and the test whether an expression is affine.

>>> import tensorexpr as te
>>> dim_name(te.reduce_axis(3, name="k")).startswith("a")
True
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import islpy as isl

from .recent import Recent

from ..ir import Axis, Binary, Cast, Const, Expr, Reduce, Select, SizeVar, Unary, is_int, walk

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


def isl_val(v: int) -> isl.Val:
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


def zero_and_vars(dims: Tuple[str, ...], params: Tuple[str, ...]) -> Dict[str, isl.PwAff]:
    """``isl.make_zero_and_vars(dims, params)``: ``{0: zero, name: the dimension or
    parameter}`` as piecewise affine functions, made once per ``(dims, params)`` among
    the last asked (a lowering makes spaces over the same axes again and again: an
    LSTM gradient's 229 spaces have 70 kinds, and making one is most of its cost).
    The functions are values (isl operations make new ones), so spaces share them;
    the dict is the caller's to copy.

    >>> zero_and_vars(("a1",), ("n",)) is zero_and_vars(("a1",), ("n",))
    True
    >>> sorted(str(k) for k in zero_and_vars(("a1",), ("n",)))
    ['0', 'a1', 'n']
    """
    return _VARS.get((dims, params), lambda: isl.make_zero_and_vars(list(dims), list(params)))


#: the spaces' functions :func:`zero_and_vars` made
_VARS = Recent(256, plain=True)


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
        self.vars = dict(zero_and_vars(tuple(dim_name(a) for a in self.axes), tuple(self.params)))
        self.by_uid = {a.uid: a for a in self.axes}
        self._consts: Dict[int, isl.PwAff] = {}

    def constant(self, v: int) -> isl.PwAff:
        """The constant ``v`` in this space (cached: islpy's scalar conversion is slow).

        >>> print(Space([]).constant(3))
        { [] -> [(3)] }
        """
        pa = self._consts.get(v)
        if pa is None:
            pa = self._consts[v] = self.vars[0].add_constant_val(isl_val(v))
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
        tensorexpr.polyhedral.spaces.NotAffine: product of two non-constant indices: i * i
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
            c = const_int(b)
            if c is None or c <= 0:
                raise NotAffine(f"{'//' if op == 'floordiv' else '%'} by a non-constant or "
                                f"non-positive divisor: {b}")
            pa = self.aff(a)
            if op == "floordiv":
                return pa.scale_down_val(isl_val(c)).floor()
            return pa.mod_val(isl_val(c))
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
        # Every point set and loop nest starts from a box, most of them from one of a few
        # (a tensor's axes with those of its sums): an LSTM's gradient asked for 389 boxes
        # of 150 kinds. The conversions to isl dominate: each box is made once.
        key = (tuple(self.axes), tuple(self.params), None if axes is None else tuple(axes))
        return _BOXES.get(key, lambda: self._box(axes))

    def _box(self, axes: Optional[Sequence[Axis]]) -> isl.Set:
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


#: the boxes :meth:`Space.box` made (their space and axes name them)
_BOXES = Recent(256)


def const_int(e: Expr) -> Optional[int]:
    if isinstance(e, Const) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return e.value
    if isinstance(e, Cast):
        return const_int(e.a)
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

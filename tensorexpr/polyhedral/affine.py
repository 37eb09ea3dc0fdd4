"""Affine forms: index arithmetic and its coefficients over axes (used by
``codegen/views.py``: outputs that are strided views of inputs).
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import islpy as isl

from ..ir import Axis, Binary, Cast, Const, Expr, Select, SizeVar, Unary, INDEX_DTYPE, is_int, walk
from ..transform import eval_int, substitute
from .spaces import NotAffine, dim_name, params_of, Space, const_int

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
    los = [const_int(ax.lo) for ax in axes]
    his = [const_int(ax.hi) for ax in axes]
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

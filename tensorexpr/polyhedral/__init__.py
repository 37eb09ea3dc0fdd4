"""The one package that speaks isl (islpy): everything else speaks our IR.

Our integer expressions over axes and size variables are translated to isl
piecewise quasi-affine functions and sets; answers come back as our IR. What
cannot be expressed (a data-dependent index, a product of two axes) raises
:class:`NotAffine`, and the caller falls back (runtime checks, scatter-add).

Conventions: every axis becomes a set dimension named ``a<uid>`` and every size
variable a parameter with its own name; sizes are assumed ``>= 1`` (a symbolic
size describes a non-empty dimension).

Only the modules of this package import islpy: ``spaces`` (our expressions as isl
forms and sets), ``affine`` (affine forms of index arithmetic), ``fibers`` (gathers),
``loops`` (loop nests) and ``queries`` (recurrence windows, implied conditions,
projections); every public name is re-exported here.

>>> from tensorexpr.polyhedral import conjuncts
>>> conjuncts(None)
[]
"""
from __future__ import annotations

from .spaces import (CTX, NotAffine, dim_name, isl_val, params_of, Space, const_int,
    is_affine)  # noqa: F401
from .affine import (is_index_arithmetic, affine_form)  # noqa: F401
from .fibers import (FiberPiece, solve_fiber, align_like, simplify_affine,
    set_expr)  # noqa: F401
from .recent import Recent  # noqa: F401
from .loops import (LoopFor, LoopLet, LoopIf, LoopBlock, LoopPoint, LoopTree, may_fail,
    conjuncts, PointSet, loop_nest, image_bounds, within)  # noqa: F401
from .queries import (offset_range, span, index_box, implies, project, seen_from)  # noqa: F401

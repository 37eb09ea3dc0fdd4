"""The public language: placeholders, computes, reductions, math and selection.

Everything here builds immutable IR (``tensorexpr.ir``); nothing is evaluated
until ``te.build``.
"""
from __future__ import annotations

import inspect
import re
from typing import Callable, Optional, Union

import numpy as np

from . import ir
from .errors import TensorExprError, user_origin
# const, cast and as_expr are public here too: the typing rules live with the IR.
from .ir import (Axis, Compute, Const, Expr, Read, Reduce, Select, SelfRef, SizeVar,
                 Unary, Placeholder, as_expr, binary, cast, check_dtype, coerce_pair, const,
                 fresh_uid, is_float, promote, unary)
# Imported here, not lazily in _define: the first import of a submodule sets it as an
# attribute of the package, and `tensorexpr.recurrence` (the module) would then replace
# the public function `te.recurrence` after its first use.
from .recurrence import verify_order
from .transform import free_axes

Scalar = Union[bool, int, float]
ExprLike = Union[Expr, Scalar]

# {{{ operators


def _math(op: str, doc: str) -> Callable[[ExprLike], Expr]:
    def fn(x: ExprLike) -> Expr:
        return unary(op, x)
    fn.__name__ = op
    fn.__doc__ = (f"Elementwise {doc}.\n\n    >>> import tensorexpr as te\n"
                  f"    >>> te.{op}(te.const(1.0)).dtype\n    'float32'\n")
    return fn


exp = _math("exp", "e**x")
log = _math("log", "natural logarithm")
sqrt = _math("sqrt", "square root")
tanh = _math("tanh", "hyperbolic tangent")
sigmoid = _math("sigmoid", "logistic sigmoid 1/(1+exp(-x))")
sin = _math("sin", "sine")
cos = _math("cos", "cosine")
erf = _math("erf", "error function 2/sqrt(pi) * integral of exp(-t**2) from 0 to x")
abs = _math("abs", "absolute value (of the same type for integers)")  # noqa: A001 - numpy's name
floor = _math("floor", "floor (largest integer <= x, as a float; an integer is kept)")
ceil = _math("ceil", "ceiling (smallest integer >= x, as a float; an integer is kept)")


def stop_gradient(x: ExprLike) -> Expr:
    """``x`` in value, a constant to ``te.differentiate`` (like ``jax.lax.stop_gradient``).

    No adjoint flows into ``x`` through this use: e.g. a softmax's row maximum in
    ``exp(X[i, j] - stop_gradient(m[i]))``, whose exact contribution is zero and
    which would otherwise cost a tie count and a pass over ``X``. Integer and
    boolean values carry no gradient anyway and are returned unchanged.

    >>> import tensorexpr as te
    >>> X = te.placeholder((4,), name="X")
    >>> te.stop_gradient(X[0] * 2.0)
    stop_gradient(X[0] * 2.0)
    >>> te.stop_gradient(te.const(3)).dtype
    'int64'
    """
    x = as_expr(x)
    if not is_float(x.dtype) or isinstance(x, Const):
        return x
    return Unary("stop_gradient", x, x.dtype)


def maximum(a: ExprLike, b: ExprLike) -> Expr:
    """Elementwise maximum; on index expressions it clamps (``te.maximum(i - 1, 0)``).

    >>> import tensorexpr as te
    >>> te.maximum(te.const(1), 2).dtype
    'int64'
    """
    return binary("max", a, b)


def minimum(a: ExprLike, b: ExprLike) -> Expr:
    """Elementwise minimum; see :func:`maximum`.

    >>> import tensorexpr as te
    >>> te.minimum(te.const(1.0), 2).dtype
    'float32'
    """
    return binary("min", a, b)


def select(cond: ExprLike, a: ExprLike, b: ExprLike) -> Expr:
    """``a`` where ``cond`` holds, else ``b``; only the taken branch is evaluated.

    >>> import tensorexpr as te
    >>> X = te.placeholder((4,), name="X")
    >>> R = te.compute((4,), lambda i: te.select(X[i] > 0, X[i], 0.0), name="relu")
    """
    cond = as_expr(cond)
    if cond.dtype != "bool":
        raise TypeError(f"te.select needs a boolean condition; got {cond.dtype}")
    a, b = coerce_pair(a, b)
    t = promote(a.dtype, b.dtype)
    return Select(cond, cast(a, t), cast(b, t), t)


# }}}

# {{{ sizes, axes, tensors


def var(name: str) -> SizeVar:
    """A symbolic size, bound from the shapes of the arrays passed at call time.

    Any name works except one that starts like a number (isl refuses it) and
    ``a`` followed by digits (isl's names of the axes).

    >>> import tensorexpr as te
    >>> n = te.var("n")
    >>> te.placeholder((n, 3), name="A").shape
    (n, 3)
    """
    if not isinstance(name, str) or not name:
        raise TypeError("te.var needs a non-empty name")
    if re.match(r"\s*[+-]?[0-9]", name) or re.fullmatch(r"a[0-9]+", name):
        raise ValueError(f"te.var({name!r}): a size name must not start like a number, and "
                         f"a<digits> is reserved for axes; use e.g. 'n' or 'batch'")
    return SizeVar(name)


def _size(d, what: str) -> Expr:
    if isinstance(d, np.integer):
        d = int(d)
    if isinstance(d, int) and not isinstance(d, bool):
        if d < 0:
            raise ValueError(f"{what}: negative size {d}")
        return Const(d, ir.INDEX_DTYPE)
    if isinstance(d, Expr) and ir.is_int(d.dtype):
        for x in ir.walk(d, unique=True):
            if isinstance(x, (Axis, Read)):
                raise TypeError(f"{what}: a size may use te.var sizes and constants only, not {x}")
        # Domains are isl sets with the sizes as parameters: n * n or n ** 2 cannot be one.
        # isl is imported on first use, so `import tensorexpr` stays light.
        from .polyhedral import NotAffine, Space, params_of
        try:
            Space([], params_of([d])).aff(d)
        except NotAffine:
            raise TypeError(f"{what}: the size {d} is not affine in the te.var sizes; use +, -, "
                            f"* by a constant, // and % by a positive constant and "
                            f"te.maximum/te.minimum (or a new te.var)") from None
        return d
    raise TypeError(f"{what}: a size must be an int or an integer te.var expression, not {d!r}")


def _shape(shape, what: str):
    if isinstance(shape, (int, Expr)):
        shape = (shape,)
    return tuple(_size(d, what) for d in shape)


def placeholder(shape, dtype: str = "float32", name: Optional[str] = None) -> Placeholder:
    """An input tensor.

    >>> import tensorexpr as te
    >>> A = te.placeholder((2, 3), dtype="float64", name="A")
    >>> A.shape, A.dtype, A.name
    ((2, 3), 'float64', 'A')
    """
    dtype = check_dtype(dtype)
    uid = fresh_uid()
    name = name or f"placeholder{uid}"
    return Placeholder(name, _shape(shape, f"placeholder {name!r}"), dtype, uid, user_origin())


def reduce_axis(dom, name: Optional[str] = None) -> Axis:
    """A reduction variable over ``lo <= k < hi``; ``reduce_axis(n)`` means ``(0, n)``.

    >>> import tensorexpr as te
    >>> k = te.reduce_axis((0, 64), name="k")
    >>> te.reduce_axis(3).hi
    3
    """
    if isinstance(dom, (tuple, list)):
        if len(dom) != 2:
            raise ValueError("te.reduce_axis takes (lo, hi) or hi")
        lo, hi = dom
    else:
        lo, hi = 0, dom
    if isinstance(lo, (int, np.integer)) and not isinstance(lo, bool) and lo < 0:
        # axes start at 0 or above (their extents are sizes); a window around 0 is a shift
        width = hi - lo if isinstance(hi, (int, np.integer)) else f"{hi} + {-lo}"
        raise ValueError(f"te.reduce_axis(({lo}, {hi})): the lower bound {lo} is negative; "
                         f"shift the window: te.reduce_axis((0, {width})) and read "
                         f"X[... k - {-lo} ...] where X[... k ...] was read")
    uid = fresh_uid()
    return Axis(name or f"r{uid}", _size(lo, "reduce_axis"), _size(hi, "reduce_axis"), uid)


def _axis_names(fn: Callable, n: int, skip: int = 0, default: str = "i") -> list:
    """The names of ``fn``'s index parameters (after ``skip`` others), else i0, i1, ..."""
    try:
        params = [p.name for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names = params[skip:skip + n]
    return names if len(names) == n else [f"{default}{k}" for k in range(n)]


def _check_arity(fn: Callable, n: int, name: str, origin: str, recurrence: bool) -> None:
    """A clear error for ``te.compute((3, 4), lambda i: ...)`` instead of Python's own."""
    if not callable(fn):
        raise TypeError(f"tensor {name!r} (defined at {origin}): the definition must be a "
                        f"function of the indices, not {type(fn).__name__}")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        sig.bind(*range(n))
    except TypeError:
        what = (f"the tensor itself and {n - 1} index argument(s)" if recurrence else
                f"{n} index argument(s), one per dimension")
        raise TypeError(f"tensor {name!r} (defined at {origin}) has {n - recurrence} "
                        f"dimension(s), so its function must take {what}; it is "
                        f"{getattr(fn, '__name__', 'fn')}{sig}") from None


def _check_body(body: Expr, axes, name: str, origin: str, self_ref=None):
    """Reject axes used outside their scope: a bug the user should hear about here."""
    free = free_axes(body)
    own = {a.uid for a in axes}
    stray = [a for a in free if a.uid not in own]
    if stray:
        ax = stray[0]
        raise TensorExprError(
            f"tensor {name!r} (defined at {origin}) uses axis {ax.name!r} outside its scope: "
            f"a te.reduce_axis must be bound by te.sum/te.max/te.min(..., axis={ax.name}) "
            f"around its use, and another compute's axes cannot be used here")
    for x in ir.walk(body, unique=True):
        if isinstance(x, Reduce):
            for ax in x.axes:
                if ax.uid in own:
                    raise TensorExprError(
                        f"tensor {name!r} (defined at {origin}) reduces over its own axis "
                        f"{ax.name!r}; reduce over a te.reduce_axis instead")
    for r in ir.reads(body):
        if isinstance(r.tensor, SelfRef) and (self_ref is None or r.tensor.uid != self_ref.uid):
            raise TensorExprError(
                f"tensor {name!r} (defined at {origin}) reads recurrence handle "
                f"{r.tensor.name!r} outside its te.recurrence")


def compute(shape, fn: Callable, name: Optional[str] = None, dtype: Optional[str] = None) -> Compute:
    """A tensor defined pointwise: ``fn(*axes)`` gives element ``[axes]``.

    >>> import tensorexpr as te
    >>> A = te.placeholder((4, 8), name="A")
    >>> k = te.reduce_axis(8, name="k")
    >>> S = te.compute((4,), lambda i: te.sum(A[i, k], axis=k) / 8.0, name="mean")
    >>> S.shape
    (4,)
    """
    return _define(shape, fn, name, dtype, recurrence=False, checkpoints=None)


def recurrence(shape, fn: Callable, name: Optional[str] = None, dtype: Optional[str] = None,
               checkpoints: Union[int, str, None] = None) -> Compute:
    """A tensor defined in terms of strictly earlier elements of itself.

    ``fn(self, *axes)`` receives the tensor being defined as its first argument;
    reads of ``self`` must refer to points strictly earlier along one axis (that
    axis then runs sequentially, the others in parallel). Without a ``dtype`` the
    recurrence is float32, or wider if its body computes in a wider type (float64
    inputs give a float64 recurrence, not one rounded to float32 at every step).

    ``checkpoints=k`` bounds the memory of its gradient in the C backend to ``k``
    checkpoints and a few rows, at any ``T``: the backward pass recomputes the steps
    it needs by Griewank's binomial (revolve) schedule, the fewest forward steps
    possible with ``k`` slots (``codegen.revolve``; ``k = 1`` recomputes from the
    start for every step), with a gradient identical bit for bit to the full tape of
    the same program (``te.ScheduleOptions(checkpoint=False)``; the program written
    without ``checkpoints`` lowers its sums over the steps as whole products: the same
    values to rounding). ``checkpoints="auto"`` takes the fewest slots with which no
    step is computed more than three times (about ``sqrt(2 T)``). A symbolic ``T``
    runs plain segments instead (``k`` checkpoints, about ``k + 2 T/k`` rows;
    ``"auto"``: 64). RNN, GRU and LSTM cells, stacked and bidirectional layers are
    checkpointed; where a shape is not supported, where the plan would keep no fewer
    bytes than the full tape (few steps per checkpoint), and in the numpy backend, the
    full tape is kept and the schedule says why (``codegen.checkpoint``).
    Independently of ``checkpoints``, a recurrence read only at its last steps
    is kept in a ring of those rows instead of ``T``.

    >>> import tensorexpr as te
    >>> T, R = 8, 4
    >>> d = te.placeholder((R, T), name="d")
    >>> e = te.recurrence((T, R), lambda e, t, r: te.select(
    ...     t == 0, d[r, 0], 0.5 * d[r, t] + 0.5 * e[t - 1, r]), name="e", checkpoints=2)
    >>> e.checkpoints
    2
    >>> d64 = te.placeholder((T,), "float64", name="d64")
    >>> te.recurrence((T,), lambda e, t: te.select(t == 0, d64[0], e[t - 1] + d64[t])).dtype
    'float64'
    """
    if checkpoints is not None and checkpoints != "auto" and (
            isinstance(checkpoints, bool) or not isinstance(checkpoints, (int, np.integer))
            or checkpoints < 1):
        raise ValueError(f"tensor {name!r} (defined at {user_origin()}): checkpoints must be "
                         f"a positive int (how many checkpoints the gradient may keep), "
                         f"\"auto\" or None for the full tape, not {checkpoints!r}")
    return _define(shape, fn, name, dtype, recurrence=True,
                   checkpoints=checkpoints if checkpoints in (None, "auto") else int(checkpoints))


def _define(shape, fn, name, dtype, recurrence, checkpoints):
    origin = user_origin()
    uid = fresh_uid()
    name = name or f"compute{uid}"
    dims = _shape(shape, f"tensor {name!r}")
    _check_arity(fn, len(dims) + bool(recurrence), name, origin, recurrence)
    names = _axis_names(fn, len(dims), skip=int(bool(recurrence)))
    axes = tuple(Axis(nm, Const(0, ir.INDEX_DTYPE), d, fresh_uid()) for nm, d in zip(names, dims))
    self_ref = None
    if recurrence:
        own = check_dtype(dtype or ir.DEFAULT_FLOAT)
        while True:
            self_ref = SelfRef(name, dims, own, fresh_uid(), origin)
            body = fn(self_ref, *axes)
            wider = getattr(body, "dtype", own)
            if dtype is not None or not isinstance(wider, str) or promote(own, wider) == own:
                break
            # The body computes in a wider type than the recurrence was given (float64
            # inputs): keeping float32 would round every step silently; widen and redo.
            own = promote(own, wider)
        dtype = own
    else:
        body = fn(*axes)
    try:
        body = as_expr(body)
    except TypeError as exc:
        raise TypeError(f"tensor {name!r} (defined at {origin}): the function must return a "
                        f"scalar expression: {exc}") from None
    if dtype is not None:
        body = cast(body, check_dtype(dtype))
    _check_body(body, axes, name, origin, self_ref)
    t = Compute(name, dims, body.dtype, uid, origin, axes=axes, body=body,
                self_ref=self_ref, checkpoints=checkpoints)
    if recurrence:
        t = verify_order(t)
    from . import bounds  # imports isl only for reads intervals cannot prove inside
    bounds.check_tensor(t)
    return t


# }}}

# {{{ reductions


#: the elementwise function a user means when a reduction gets a value as its axis
_ELEMENTWISE = {"max": "maximum", "min": "minimum", "sum": None}


def _axes(axis, op: str = "sum") -> tuple:
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
    if not axes or not all(isinstance(a, Axis) for a in axes):
        hint = ""
        if _ELEMENTWISE.get(op) and not isinstance(axis, (list, tuple)):
            # te.max(x, 0.0): the reduction got a value where its axes go
            hint = (f"; te.{op} is a reduction over reduce axes: the elementwise "
                    f"{_ELEMENTWISE[op]} of two values is te.{_ELEMENTWISE[op]}(a, b)")
        raise TypeError(f"te.{op} at {user_origin()}: axis= takes a te.reduce_axis or a "
                        f"list of them, not {type(axis).__name__}{hint}")
    if len({a.uid for a in axes}) != len(axes):
        raise ValueError("the same reduce axis appears twice in one reduction")
    return axes


def _reduce(op: str, expr: ExprLike, axis, where) -> Reduce:
    body = as_expr(expr)
    axes = _axes(axis, op)
    if where is not None:
        where = as_expr(where)
        if where.dtype != "bool":
            raise TypeError(f"where= must be a boolean condition; got {where.dtype}")
    uids = {a.uid for a in axes}
    for part in (body,) if where is None else (body, where):
        for x in ir.walk(part, unique=True):
            if isinstance(x, Reduce) and any(a.uid in uids for a in x.axes):
                ax = next(a for a in x.axes if a.uid in uids)
                raise ValueError(f"te.{op} at {user_origin()}: reduce axis {ax.name!r} is bound "
                                 f"twice: by this te.{op} and by a reduction inside it; give "
                                 f"the inner reduction its own te.reduce_axis")
    dtype = body.dtype
    if dtype == "bool":
        body, dtype = cast(body, "int64"), "int64"
    return Reduce(op, body, axes, where, dtype)


def sum(expr: ExprLike, axis, where: Optional[ExprLike] = None) -> Reduce:  # noqa: A001
    """Sum of ``expr`` over the reduce axes (and where ``where`` holds).

    >>> import tensorexpr as te
    >>> A = te.placeholder((4, 8), name="A")
    >>> k = te.reduce_axis(8, name="k")
    >>> S = te.compute((4,), lambda i: te.sum(A[i, k], axis=k, where=k % 2 == 0))
    """
    return _reduce("sum", expr, axis, where)


def max(expr: ExprLike, axis, where: Optional[ExprLike] = None) -> Reduce:  # noqa: A001
    """Maximum of ``expr`` over the reduce axes (``-inf`` if empty).

    >>> import tensorexpr as te
    >>> X = te.placeholder((4, 8), name="X")
    >>> k = te.reduce_axis(8, name="k")
    >>> M = te.compute((4,), lambda i: te.max(X[i, k], axis=k))
    """
    return _reduce("max", expr, axis, where)


def min(expr: ExprLike, axis, where: Optional[ExprLike] = None) -> Reduce:  # noqa: A001
    """Minimum of ``expr`` over the reduce axes (``+inf`` if empty).

    >>> import tensorexpr as te
    >>> X = te.placeholder((4, 8), name="X")
    >>> k = te.reduce_axis(8, name="k")
    >>> M = te.compute((4,), lambda i: te.min(X[i, k], axis=k))
    """
    return _reduce("min", expr, axis, where)


# }}}

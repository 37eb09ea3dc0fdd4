"""Neural-network layers built from the primitives, named and shaped like ``torch.nn.functional``.

Every function takes te tensors (placeholders or computes) and returns a new
te tensor, whose name is derived from the input's (``x`` gives ``x_softmax``).
Arguments follow ``torch.nn.functional``: names, defaults, negative ``dim``\\ s,
ints or tuples for ``kernel_size``/``stride``/``padding``/``dilation``, optional
biases, NCHW activations and OIHW weights. Sizes may be symbolic (``te.var``)
where a function needs no static value: batch dimensions everywhere, and any
dimension of elementwise functions, reductions, ``linear`` and ``matmul``.

Differences from PyTorch, by design of a pure expression language:

* ``gelu(approximate="none")`` needs ``erf``, which is not a primitive: it is
  built from Abramowitz & Stegun 7.1.26 (``|error| <= 1.5e-7``), so it differs
  from torch's by at most ~1e-7 in value (and its gradient, that of the
  approximation, by ~1e-6); ``approximate="tanh"`` is torch's formula exactly.
* ``var`` (and ``std``-like uses) take ``correction`` as ``torch.var`` does,
  default 1 (Bessel's correction); ``layer_norm``, ``group_norm`` and
  ``batch_norm`` use the biased variance, as torch's layers do.
* ``batch_norm`` never updates running statistics (there is no state):
  ``training=True`` normalises by the batch's statistics; compute the new
  running averages from :func:`mean` and :func:`var` if you need them.
* the softmax family (``softmax``, ``log_softmax``, ``logsumexp``,
  ``cross_entropy``) subtracts the row maximum under :func:`te.stop_gradient`:
  its exact contribution to the gradient is zero, and without it the gradient
  would count ties and take another pass over ``x``.

>>> import numpy as np, tensorexpr as te
>>> x = te.placeholder((te.var("n"), 5), name="x")
>>> y = te.nn.softmax(x, dim=-1)
>>> y.name, y.shape
('x_softmax', (n, 5))
>>> out = te.build(y, backend="numpy")(np.zeros((2, 5), np.float32))
>>> bool(np.allclose(out, 0.2))
True
"""
from __future__ import annotations

import builtins
import math
from fractions import Fraction
from typing import Optional, Sequence, Tuple, Union

from . import api
from .errors import describe, user_origin
from .ir import Expr, Tensor, is_float, is_int

IntOrTuple = Union[int, Sequence[int]]

# {{{ helpers


def _check_tensor(x, fn: str, what: str = "input") -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"te.nn.{fn} at {user_origin()}: {what} must be a te tensor "
                        f"(te.placeholder or te.compute), not {type(x).__name__}")
    return x


def _float_tensor(x, fn: str, what: str = "input") -> Tensor:
    _check_tensor(x, fn, what)
    if not is_float(x.dtype):
        raise TypeError(f"te.nn.{fn}: {describe(x)} is {x.dtype}; {what} must be float32 or "
                        f"float64 (cast it with te.compute(..., lambda *i: x[i].astype(...)))")
    return x


def _ndim_at_least(x: Tensor, n: int, fn: str, layout: str) -> None:
    if x.ndim < n:
        raise ValueError(f"te.nn.{fn}: {describe(x)} has shape {x.shape}; expected at least "
                         f"{n} dimensions ({layout})")


def _dim(x: Tensor, dim: int, fn: str) -> int:
    """``dim`` in ``[0, x.ndim)`` (negative counts from the end, as in torch)."""
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"te.nn.{fn}: dim must be an int, not {dim!r}")
    if not -builtins.max(x.ndim, 1) <= dim < builtins.max(x.ndim, 1):
        raise IndexError(f"te.nn.{fn}: dim {dim} is out of range for {describe(x)} with "
                         f"{x.ndim} dimensions")
    return dim % builtins.max(x.ndim, 1)


def _dims(x: Tensor, dim, fn: str) -> Tuple[int, ...]:
    """``dim`` (an int, a sequence of them or None: every dimension) normalised and sorted."""
    if dim is None:
        return tuple(range(x.ndim))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    out = tuple(sorted({_dim(x, d, fn) for d in dims}))
    if len(out) != len(dims):
        raise ValueError(f"te.nn.{fn}: dim {dim!r} names a dimension twice")
    return out


def _tuple(v, n: int, what: str, fn: str) -> Tuple[int, ...]:
    """An int or a length-``n`` sequence of ints as an ``n``-tuple (torch's ``_pair``)."""
    vals = (v,) * n if isinstance(v, int) else tuple(v)
    if len(vals) != n or not all(isinstance(a, int) and not isinstance(a, bool) for a in vals):
        raise TypeError(f"te.nn.{fn}: {what} must be an int or a tuple of {n} ints, not {v!r}")
    return vals


def _static(x: Tensor, d: int, fn: str, why: str) -> int:
    s = x.shape[d]
    if not isinstance(s, int):
        raise ValueError(f"te.nn.{fn}: dimension {d} of {describe(x)} is the symbolic size "
                         f"{s}; {why} needs a static size there")
    return s


def _size_value(e) -> Expr:
    """A shape entry as an expression (ints become index constants)."""
    return api.const(e, "int64") if isinstance(e, int) else e


def _count(sizes) -> Expr:
    """The product of ``sizes`` as a float expression of the tensor's type (folded if static)."""
    static, symbolic = 1, []
    for s in sizes:
        if isinstance(s, int):
            static *= s
        else:
            symbolic.append(s)
    total = api.const(static, "int64")
    for s in symbolic:
        total = total * s
    return total if symbolic else static


def _as_float(v, dtype: str) -> Expr:
    return api.cast(v, dtype) if isinstance(v, Expr) else api.const(float(v), dtype)


def _same_shape(a: Tensor, b: Tensor, fn: str) -> None:
    from .ir import same
    if a.ndim != b.ndim or not all(same(p, q) for p, q in zip(a.dims, b.dims)):
        raise ValueError(f"te.nn.{fn}: {describe(b)} has shape {b.shape}; it must match "
                         f"{a.name!r}'s shape {a.shape}")


def _check_vector(v: Optional[Tensor], n, fn: str, what: str) -> None:
    """``v`` (optional) must be a float tensor of shape ``(n,)``."""
    from .ir import same
    if v is None:
        return
    _float_tensor(v, fn, what)
    if v.ndim != 1 or not same(v.dims[0], _size_value(n)):
        raise ValueError(f"te.nn.{fn}: {what} {describe(v)} has shape {v.shape}; expected "
                         f"({n},)")


def _reduced_shape(x: Tensor, dims, keepdim: bool) -> tuple:
    return tuple(1 if d in dims else x.shape[d] for d in range(x.ndim)) if keepdim else \
        tuple(x.shape[d] for d in range(x.ndim) if d not in dims)


def _reduce_over(x: Tensor, dims: Tuple[int, ...], keepdim: bool, op: str, elem,
                 name: str, scale=None) -> Tensor:
    """``op`` over ``dims`` of ``elem(full index)`` (divided by ``scale`` if given).

    The result keeps the other dimensions (as size 1 with ``keepdim``); its reduce
    axes are fresh, named after the dimension they run over.
    """
    keep = [d for d in range(x.ndim) if d not in dims]

    def body(*ax):
        raxes = [api.reduce_axis(x.shape[d], name=f"r{d}") for d in dims]
        idx = [None] * x.ndim
        for d, r in zip(dims, raxes):
            idx[d] = r
        outer = iter(ax if not keepdim else [a for d, a in enumerate(ax) if d not in dims])
        for d in keep:
            idx[d] = next(outer)
        value = elem(tuple(idx))
        if raxes:
            value = {"sum": api.sum, "max": api.max, "min": api.min}[op](value, axis=raxes)
        return value if scale is None else value / _as_float(scale, x.dtype)

    return api.compute(_reduced_shape(x, dims, keepdim), body, name=name)


def _row(stat: Tensor, idx, dims: Tuple[int, ...]) -> Expr:
    """``stat`` (a reduction over ``dims`` without keepdim) read at the full index ``idx``."""
    return stat[tuple(i for d, i in enumerate(idx) if d not in dims)]


def _stable_row_stats(x: Tensor, dim: int, fn: str):
    """The row max ``m`` and ``s = sum exp(x - stop_gradient(m))`` along ``dim``."""
    dims = (dim,)
    m = _reduce_over(x, dims, False, "max", lambda idx: x[idx], f"{x.name}_{fn}_max")
    s = _reduce_over(x, dims, False, "sum",
                     lambda idx: api.exp(x[idx] - api.stop_gradient(_row(m, idx, dims))),
                     f"{x.name}_{fn}_sum")
    return m, s


def _elementwise(x: Tensor, fn, name: str) -> Tensor:
    return api.compute(x.shape, lambda *i: fn(x[i]), name=name)


# }}}

# {{{ elementwise activations


def relu(x: Tensor) -> Tensor:
    """``max(x, 0)``; its gradient is 0 at 0, as torch's.

    >>> import tensorexpr as te
    >>> te.nn.relu(te.placeholder((3,), name="x")).name
    'x_relu'
    """
    _float_tensor(x, "relu")
    return _elementwise(x, lambda v: api.select(v > 0, v, 0.0), f"{x.name}_relu")


def sigmoid(x: Tensor) -> Tensor:
    """``1 / (1 + exp(-x))`` elementwise.

    >>> import tensorexpr as te
    >>> te.nn.sigmoid(te.placeholder((3,), name="x")).name
    'x_sigmoid'
    """
    _float_tensor(x, "sigmoid")
    return _elementwise(x, api.sigmoid, f"{x.name}_sigmoid")


def tanh(x: Tensor) -> Tensor:
    """``tanh(x)`` elementwise.

    >>> import tensorexpr as te
    >>> te.nn.tanh(te.placeholder((3,), name="x")).name
    'x_tanh'
    """
    _float_tensor(x, "tanh")
    return _elementwise(x, api.tanh, f"{x.name}_tanh")


# Abramowitz & Stegun 7.1.26: erf(z) = 1 - (a1 t + ... + a5 t^5) exp(-z^2), t = 1/(1 + p z)
_ERF_P = 0.3275911
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def erf(v: Expr) -> Expr:
    """``erf(v)`` to within 1.5e-7 (Abramowitz & Stegun 7.1.26), an expression.

    Odd by construction (a select on the sign, so its derivative at 0 is that of
    the positive branch, ~2/sqrt(pi)).

    >>> import numpy as np, tensorexpr as te
    >>> x = te.placeholder((3,), dtype="float64", name="x")
    >>> f = te.build(te.compute((3,), lambda i: te.nn.erf(x[i])), backend="numpy")
    >>> np.round(f(np.array([-1.0, 0.0, 0.5])), 6)
    array([-0.842701,  0.      ,  0.5205  ])
    """
    v = api.as_expr(v)
    if not is_float(v.dtype):
        v = api.cast(v, "float32")

    def positive(z):
        t = 1.0 / (1.0 + _ERF_P * z)
        poly = api.const(_ERF_A[-1], v.dtype)
        for a in reversed(_ERF_A[:-1]):
            poly = poly * t + a
        return 1.0 - poly * t * api.exp(-(z * z))

    return api.select(v >= 0, positive(v), -positive(-v))


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """``x * Phi(x)``, torch's ``gelu``; ``approximate="tanh"`` is torch's tanh formula.

    ``"none"`` uses :func:`erf`'s approximation (within 1.5e-7 of the exact erf).

    >>> import tensorexpr as te
    >>> te.nn.gelu(te.placeholder((3,), name="x"), approximate="tanh").name
    'x_gelu'
    """
    _float_tensor(x, "gelu")
    if approximate == "none":
        fn = lambda v: 0.5 * v * (1.0 + erf(v * (1.0 / math.sqrt(2.0))))  # noqa: E731
    elif approximate == "tanh":
        c = math.sqrt(2.0 / math.pi)
        fn = lambda v: 0.5 * v * (1.0 + api.tanh(c * (v + 0.044715 * v * v * v)))  # noqa: E731
    else:
        raise ValueError(f"te.nn.gelu: approximate must be 'none' or 'tanh', not "
                         f"{approximate!r}")
    return _elementwise(x, fn, f"{x.name}_gelu")


# }}}

# {{{ reductions and the softmax family


def sum(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:  # noqa: A001 - torch's name
    """Sum over ``dim`` (an int, a tuple, or None for all), as ``torch.sum``.

    >>> import tensorexpr as te
    >>> te.nn.sum(te.placeholder((2, 3, 4), name="x"), dim=(0, -1)).shape
    (3,)
    """
    _check_tensor(x, "sum")
    dims = _dims(x, dim, "sum")
    return _reduce_over(x, dims, keepdim, "sum", lambda idx: x[idx], f"{x.name}_sum")


def amax(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """Maximum over ``dim`` (an int, a tuple, or None for all), as ``torch.amax``.

    Its gradient splits evenly among tied maxima, as torch's ``amax``.

    >>> import tensorexpr as te
    >>> te.nn.amax(te.placeholder((2, 3), name="x"), dim=1, keepdim=True).shape
    (2, 1)
    """
    _check_tensor(x, "amax")
    dims = _dims(x, dim, "amax")
    return _reduce_over(x, dims, keepdim, "max", lambda idx: x[idx], f"{x.name}_amax")


def mean(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """Mean over ``dim`` (an int, a tuple, or None for all), as ``torch.mean``.

    >>> import tensorexpr as te
    >>> print(te.nn.mean(te.placeholder((2, 4), name="x"), dim=1))
    x_mean[i0] = (sum_{r1 in [0, 4)} x[i0, r1]) / 4.0    for i0 in [0, 2)    float32
    """
    _float_tensor(x, "mean")
    dims = _dims(x, dim, "mean")
    n = _count([x.shape[d] for d in dims])
    return _reduce_over(x, dims, keepdim, "sum", lambda idx: x[idx], f"{x.name}_mean", scale=n)


def _centered(x: Tensor, dims, what: str):
    """``(mu, d)``: the mean over ``dims`` and ``d = x - mu`` (two passes: no cancellation)."""
    n = _count([x.shape[d] for d in dims])
    mu = _reduce_over(x, dims, False, "sum", lambda idx: x[idx], f"{x.name}_{what}_mean",
                      scale=n)
    d = api.compute(x.shape, lambda *i: x[i] - _row(mu, i, dims), name=f"{x.name}_{what}_centered")
    return mu, d, n


def var(x: Tensor, dim=None, correction: Optional[int] = None, keepdim: bool = False,
        unbiased: Optional[bool] = None) -> Tensor:
    """Variance over ``dim``, as ``torch.var``: divides by ``N - correction``, default 1.

    ``unbiased=False`` (torch's older spelling) means ``correction=0``. With one
    element and ``correction=1`` the result is ``nan``/``inf`` (0/0), as in torch.

    >>> import tensorexpr as te
    >>> te.nn.var(te.placeholder((2, 4), name="x"), dim=-1, correction=0).name
    'x_var'
    """
    _float_tensor(x, "var")
    if unbiased is not None and correction is not None:
        raise ValueError("te.nn.var: give correction or unbiased, not both")
    corr = (0 if unbiased is False else 1) if correction is None else correction
    dims = _dims(x, dim, "var")
    _, d, n = _centered(x, dims, "var")
    denom = n - corr
    return _reduce_over(d, dims, keepdim, "sum", lambda idx: d[idx] * d[idx], f"{x.name}_var",
                        scale=denom)


def softmax(x: Tensor, dim: int) -> Tensor:
    """``exp(x) / sum exp(x)`` along ``dim``, shifted by the (stopped) row maximum.

    The gradient reads the exponentials and sends nothing to the row maximum:

    >>> import tensorexpr as te
    >>> x = te.placeholder((2, 5), name="x")
    >>> (dx,) = te.differentiate(te.nn.softmax(x, 1), [x], head=te.placeholder((2, 5), name="h"))
    >>> print(dx)  # doctest: +NORMALIZE_WHITESPACE
    dx[i0, i1] = dx_softmax_exp[i0, i1] * x_softmax_exp[i0, i1]
        for i0 in [0, 2), i1 in [0, 5)    float32
    """
    _float_tensor(x, "softmax")
    d = _dim(x, dim, "softmax")
    m = _reduce_over(x, (d,), False, "max", lambda idx: x[idx], f"{x.name}_softmax_max")
    # the exponentials once, as a tensor: the sum and the quotient read them, and so
    # does the gradient (dX = (dY - sum(dY * Y)) * ex / s) instead of recomputing exp
    ex = api.compute(x.shape, lambda *i: api.exp(x[i] - api.stop_gradient(_row(m, i, (d,)))),
                     name=f"{x.name}_softmax_exp")
    s = _reduce_over(ex, (d,), False, "sum", lambda idx: ex[idx], f"{x.name}_softmax_sum")
    return api.compute(x.shape, lambda *i: ex[i] / _row(s, i, (d,)), name=f"{x.name}_softmax")


def log_softmax(x: Tensor, dim: int) -> Tensor:
    """``x - logsumexp(x)`` along ``dim``, shifted by the (stopped) row maximum.

    >>> import tensorexpr as te
    >>> te.nn.log_softmax(te.placeholder((2, 5), name="x"), dim=-1).name
    'x_log_softmax'
    """
    _float_tensor(x, "log_softmax")
    d = _dim(x, dim, "log_softmax")
    m, s = _stable_row_stats(x, d, "log_softmax")
    return api.compute(x.shape, lambda *i: x[i] - api.stop_gradient(_row(m, i, (d,)))
                       - api.log(_row(s, i, (d,))), name=f"{x.name}_log_softmax")


def logsumexp(x: Tensor, dim, keepdim: bool = False) -> Tensor:
    """``log(sum(exp(x)))`` over ``dim`` (an int or a tuple), as ``torch.logsumexp``.

    >>> import tensorexpr as te
    >>> te.nn.logsumexp(te.placeholder((2, 5), name="x"), dim=1).shape
    (2,)
    """
    _float_tensor(x, "logsumexp")
    dims = _dims(x, dim, "logsumexp")
    m = _reduce_over(x, dims, False, "max", lambda idx: x[idx], f"{x.name}_logsumexp_max")
    s = _reduce_over(x, dims, False, "sum",
                     lambda idx: api.exp(x[idx] - api.stop_gradient(_row(m, idx, dims))),
                     f"{x.name}_logsumexp_sum")

    def body(*ax):
        if keepdim:
            ax = tuple(a for k, a in enumerate(ax) if k not in dims)
        return api.stop_gradient(m[ax]) + api.log(s[ax])
    return api.compute(_reduced_shape(x, dims, keepdim), body, name=f"{x.name}_logsumexp")


# }}}

# {{{ normalisation


def _affine(x: Tensor, mu: Tensor, rstd: Tensor, stat_idx, weight, bias, widx, name: str):
    """``(x - mu) * rstd * weight + bias``; ``stat_idx``/``widx`` map x's index to theirs."""
    def body(*i):
        y = (x[i] - mu[stat_idx(i)]) * rstd[stat_idx(i)]
        if weight is not None:
            y = y * weight[widx(i)]
        if bias is not None:
            y = y + bias[widx(i)]
        return y
    return api.compute(x.shape, body, name=name)


def _rstd(v: Tensor, eps: float, name: str) -> Tensor:
    return api.compute(v.shape, lambda *i: 1.0 / api.sqrt(v[i] + eps), name=name)


def layer_norm(x: Tensor, normalized_shape, weight: Optional[Tensor] = None,
               bias: Optional[Tensor] = None, eps: float = 1e-5) -> Tensor:
    """Normalise over the last ``len(normalized_shape)`` dims (biased variance), as torch.

    >>> import tensorexpr as te
    >>> x = te.placeholder((te.var("n"), 8), name="x")
    >>> te.nn.layer_norm(x, (8,), te.placeholder((8,), name="w")).shape
    (n, 8)
    """
    _float_tensor(x, "layer_norm")
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(ns)
    if k == 0 or k > x.ndim or tuple(x.shape[x.ndim - k:]) != ns:
        raise ValueError(f"te.nn.layer_norm: normalized_shape {ns} must be the last dimensions "
                         f"of {describe(x)}, whose shape is {x.shape}")
    for what, t in (("weight", weight), ("bias", bias)):
        if t is not None:
            _float_tensor(t, "layer_norm", what)
            if tuple(t.shape) != ns:
                raise ValueError(f"te.nn.layer_norm: {what} {describe(t)} has shape {t.shape}; "
                                 f"expected normalized_shape {ns}")
    dims = tuple(range(x.ndim - k, x.ndim))
    mu, d, n = _centered(x, dims, "ln")
    v = _reduce_over(d, dims, False, "sum", lambda idx: d[idx] * d[idx], f"{x.name}_ln_var",
                     scale=n)
    rstd = _rstd(v, eps, f"{x.name}_ln_rstd")
    lead = x.ndim - k
    return _affine(x, mu, rstd, lambda i: i[:lead], weight, bias, lambda i: i[lead:],
                   f"{x.name}_layer_norm")


def group_norm(x: Tensor, num_groups: int, weight: Optional[Tensor] = None,
               bias: Optional[Tensor] = None, eps: float = 1e-5) -> Tensor:
    """Normalise ``x`` of shape ``(N, C, *)`` over groups of ``C / num_groups`` channels.

    ``weight`` and ``bias`` are per channel, as in torch.

    >>> import tensorexpr as te
    >>> te.nn.group_norm(te.placeholder((2, 6, 4), name="x"), 3).name
    'x_group_norm'
    """
    _float_tensor(x, "group_norm")
    _ndim_at_least(x, 2, "group_norm", "N, C, *")
    C = _static(x, 1, "group_norm", "splitting channels into groups")
    if not isinstance(num_groups, int) or num_groups < 1 or C % num_groups:
        raise ValueError(f"te.nn.group_norm: {C} channels of {describe(x)} cannot be split "
                         f"into num_groups={num_groups!r} equal groups")
    for what, t in (("weight", weight), ("bias", bias)):
        _check_vector(t, C, "group_norm", what)
    cg = C // num_groups
    spatial = list(range(2, x.ndim))
    n = _count([cg] + [x.shape[d] for d in spatial])
    # x seen as (N, G, C/G, *): the statistics reduce over all but the first two
    xg = api.compute((x.shape[0], num_groups, cg) + tuple(x.shape[2:]),
                     lambda b, g, c, *s: x[(b, g * cg + c) + tuple(s)], name=f"{x.name}_groups")
    gdims = tuple(range(2, xg.ndim))
    mu, d, _ = _centered(xg, gdims, "gn")
    v = _reduce_over(d, gdims, False, "sum", lambda idx: d[idx] * d[idx], f"{x.name}_gn_var",
                     scale=n)
    rstd = _rstd(v, eps, f"{x.name}_gn_rstd")
    return _affine(x, mu, rstd, lambda i: (i[0], i[1] // cg), weight, bias, lambda i: (i[1],),
                   f"{x.name}_group_norm")


def batch_norm(x: Tensor, running_mean: Optional[Tensor] = None,
               running_var: Optional[Tensor] = None, weight: Optional[Tensor] = None,
               bias: Optional[Tensor] = None, training: bool = False, momentum: float = 0.1,
               eps: float = 1e-5) -> Tensor:
    """Normalise ``x`` of shape ``(N, C, *)`` per channel, as ``torch.nn.functional.batch_norm``.

    ``training=True`` uses the batch's statistics (biased variance over ``N`` and
    the spatial dims); otherwise ``running_mean``/``running_var`` (tensors of
    shape ``(C,)``). Running statistics are never updated (a tensor expression has
    no state), so ``momentum`` is accepted and unused.

    >>> import tensorexpr as te
    >>> te.nn.batch_norm(te.placeholder((4, 3, 5), name="x"), training=True).name
    'x_batch_norm'
    """
    _float_tensor(x, "batch_norm")
    _ndim_at_least(x, 2, "batch_norm", "N, C, *")
    C = x.shape[1]
    for what, t in (("weight", weight), ("bias", bias), ("running_mean", running_mean),
                    ("running_var", running_var)):
        _check_vector(t, C, "batch_norm", what)
    if training:
        dims = (0,) + tuple(range(2, x.ndim))
        mu, d, n = _centered(x, dims, "bn")
        v = _reduce_over(d, dims, False, "sum", lambda idx: d[idx] * d[idx],
                         f"{x.name}_bn_var", scale=n)
    elif running_mean is None or running_var is None:
        raise ValueError(f"te.nn.batch_norm({x.name!r}): running_mean and running_var are "
                         f"needed when training=False (as in torch); pass training=True to "
                         f"normalise by the batch's statistics")
    else:
        mu, v = running_mean, running_var
    rstd = _rstd(v, eps, f"{x.name}_bn_rstd")
    return _affine(x, mu, rstd, lambda i: (i[1],), weight, bias, lambda i: (i[1],),
                   f"{x.name}_batch_norm")


# }}}

# {{{ losses


def _reduction(t: Tensor, reduction: str, fn: str, name: str) -> Tensor:
    if reduction == "none":
        return t
    if reduction not in ("mean", "sum"):
        raise ValueError(f"te.nn.{fn}: reduction must be 'mean', 'sum' or 'none', not "
                         f"{reduction!r}")
    dims = tuple(range(t.ndim))
    scale = _count(t.shape) if reduction == "mean" else None
    return _reduce_over(t, dims, False, "sum", lambda idx: t[idx], name, scale=scale)


def cross_entropy(logits: Tensor, labels: Tensor, reduction: str = "mean") -> Tensor:
    """``-log_softmax(logits)[n, labels[n]]``, averaged over the batch (torch's default).

    ``logits`` is ``(N, C)``, ``labels`` integer class indices of shape ``(N,)``; a
    label outside ``[0, C)`` raises ``IndexError`` when the program runs. The
    gradient reads no tie count (the shift is stopped) and scatters into the
    labelled entries only.

    >>> import tensorexpr as te
    >>> n = te.var("n")
    >>> L = te.nn.cross_entropy(te.placeholder((n, 10), name="z"),
    ...                         te.placeholder((n,), dtype="int64", name="y"))
    >>> L.name, L.shape
    ('z_cross_entropy', ())
    """
    from .ir import same
    _float_tensor(logits, "cross_entropy", "logits")
    _check_tensor(labels, "cross_entropy", "labels")
    if logits.ndim != 2:
        raise ValueError(f"te.nn.cross_entropy: logits {describe(logits)} has shape "
                         f"{logits.shape}; expected (N, C)")
    if not is_int(labels.dtype) or labels.ndim != 1 or not same(labels.dims[0], logits.dims[0]):
        raise ValueError(f"te.nn.cross_entropy: labels {describe(labels)} must be integer class "
                         f"indices of shape ({logits.shape[0]},), not {labels.dtype} "
                         f"{labels.shape}")
    lse = logsumexp(logits, 1)
    per = api.compute((logits.shape[0],), lambda n: lse[n] - logits[n, labels[n]],
                      name=f"{logits.name}_nll")
    return _reduction(per, reduction, "cross_entropy", f"{logits.name}_cross_entropy")


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:  # noqa: A002
    """``(input - target) ** 2``, averaged (torch's default), summed or per element.

    >>> import tensorexpr as te
    >>> x, t = te.placeholder((3, 2), name="x"), te.placeholder((3, 2), name="t")
    >>> te.nn.mse_loss(x, t).shape
    ()
    """
    _float_tensor(input, "mse_loss")
    _float_tensor(target, "mse_loss", "target")
    _same_shape(input, target, "mse_loss")
    sq = api.compute(input.shape, lambda *i: (input[i] - target[i]) * (input[i] - target[i]),
                     name=f"{input.name}_sqerr")
    return _reduction(sq, reduction, "mse_loss", f"{input.name}_mse_loss")


# }}}

# {{{ products


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """``torch.matmul``: vector and matrix products, batch dims broadcast (size-1 dims).

    >>> import tensorexpr as te
    >>> a = te.placeholder((te.var("b"), 2, 3), name="a")
    >>> te.nn.matmul(a, te.placeholder((3, 4), name="w")).shape
    (b, 2, 4)
    """
    from .ir import same
    _float_tensor(a, "matmul")
    _float_tensor(b, "matmul", "other")
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("te.nn.matmul: both arguments need at least one dimension")
    K = a.shape[-1]
    kb = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if not same(_size_value(K), _size_value(kb)):
        raise ValueError(f"te.nn.matmul: {a.name!r} {a.shape} and {b.name!r} {b.shape}: the "
                         f"contracted sizes {K} and {kb} differ")
    a_batch = a.shape[:-2] if a.ndim >= 2 else ()
    b_batch = b.shape[:-2] if b.ndim >= 2 else ()
    nb = builtins.max(len(a_batch), len(b_batch))
    pa = (1,) * (nb - len(a_batch)) + tuple(a_batch)
    pb = (1,) * (nb - len(b_batch)) + tuple(b_batch)
    batch = []
    for p, q in zip(pa, pb):
        if same(_size_value(p), _size_value(q)) or q == 1:
            batch.append(p)
        elif p == 1:
            batch.append(q)
        else:
            raise ValueError(f"te.nn.matmul: batch dimensions of {a.name!r} {a.shape} and "
                             f"{b.name!r} {b.shape} do not broadcast")
    rows = (a.shape[-2],) if a.ndim >= 2 else ()
    cols = (b.shape[-1],) if b.ndim >= 2 else ()

    def pick(batch_ax, own_batch):
        # a size-1 batch dim broadcasts: read it at 0
        off = nb - len(own_batch)
        return tuple(0 if (own_batch[j] == 1 and batch[off + j] != 1) else batch_ax[off + j]
                     for j in range(len(own_batch)))

    def body(*ax):
        bax, rest = ax[:nb], ax[nb:]
        i = rest[:len(rows)]
        j = rest[len(rows):]
        k = api.reduce_axis(K, name="k")
        ai = pick(bax, a_batch) + tuple(i) + (k,)
        bi = pick(bax, b_batch) + ((k,) + tuple(j) if b.ndim >= 2 else (k,))
        return api.sum(a[ai] * b[bi], axis=k)

    return api.compute(tuple(batch) + rows + cols, body, name=f"{a.name}_matmul")


def linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    """``x @ weight.T + bias`` over the last dim of ``x``; ``weight`` is ``(out, in)``.

    >>> import tensorexpr as te
    >>> x = te.placeholder((te.var("n"), 8), name="x")
    >>> te.nn.linear(x, te.placeholder((3, 8), name="w"), te.placeholder((3,), name="b")).shape
    (n, 3)
    """
    from .ir import same
    _float_tensor(x, "linear")
    _float_tensor(weight, "linear", "weight")
    _ndim_at_least(x, 1, "linear", "*, in_features")
    if weight.ndim != 2 or not same(weight.dims[1], x.dims[-1]):
        raise ValueError(f"te.nn.linear: weight {describe(weight)} has shape {weight.shape}; "
                         f"expected (out_features, {x.shape[-1]})")
    _check_vector(bias, weight.shape[0], "linear", "bias")

    def body(*ax):
        k = api.reduce_axis(x.shape[-1], name="k")
        y = api.sum(x[tuple(ax[:-1]) + (k,)] * weight[ax[-1], k], axis=k)
        return y + bias[ax[-1]] if bias is not None else y

    return api.compute(tuple(x.shape[:-1]) + (weight.shape[0],), body, name=f"{x.name}_linear")


# }}}

# {{{ convolution and pooling


def _out_size(n: int, k: int, s: int, p: int, d: int, fn: str, x: Tensor) -> int:
    out = (n + 2 * p - d * (k - 1) - 1) // s + 1
    if out < 1:
        raise ValueError(f"te.nn.{fn}: {describe(x)}: an input of size {n} with kernel {k}, "
                         f"stride {s}, padding {p} and dilation {d} gives an empty output")
    return out


def _conv(x: Tensor, w: Tensor, b, stride, padding, dilation, groups: int, nd: int,
          fn: str) -> Tensor:
    _float_tensor(x, fn)
    _float_tensor(w, fn, "weight")
    if x.ndim != nd + 2 or w.ndim != nd + 2:
        raise ValueError(f"te.nn.{fn}: input {x.shape} and weight {w.shape} must have "
                         f"{nd + 2} dimensions (N, C, ...) and (O, C/groups, ...)")
    s, p, d = (_tuple(v, nd, nm, fn) for v, nm in ((stride, "stride"), (padding, "padding"),
                                                    (dilation, "dilation")))
    if builtins.min(s) < 1 or builtins.min(d) < 1 or builtins.min(p) < 0:
        raise ValueError(f"te.nn.{fn}: stride and dilation must be >= 1 and padding >= 0")
    C = _static(x, 1, fn, "the channels of a convolution")
    sp = [_static(x, 2 + j, fn, "a convolution's spatial dimension") for j in range(nd)]
    O, cg = w.shape[0], w.shape[1]
    ks = w.shape[2:]
    if not isinstance(groups, int) or groups < 1 or C % groups or O % groups or cg * groups != C:
        raise ValueError(f"te.nn.{fn}: input {x.name!r} has {C} channels and weight "
                         f"{w.name!r} shape {w.shape}; with groups={groups!r} the weight must "
                         f"be (O, C/groups, ...) with C and O divisible by groups")
    _check_vector(b, O, fn, "bias")
    og = O // groups
    outs = [_out_size(sp[j], ks[j], s[j], p[j], d[j], fn, x) for j in range(nd)]

    def body(n, o, *pos):
        c = api.reduce_axis(cg, name="c")
        kk = [api.reduce_axis(ks[j], name=f"k{j}") for j in range(nd)]
        src = [pos[j] * s[j] + kk[j] * d[j] - p[j] for j in range(nd)]
        ch = c if groups == 1 else (o // og) * cg + c
        term = x[(n, ch) + tuple(src)] * w[(o, c) + tuple(kk)]
        if builtins.any(p):
            inside = None
            for j in range(nd):
                if p[j]:
                    cond = (src[j] >= 0) & (src[j] < sp[j])
                    inside = cond if inside is None else inside & cond
            term = api.select(inside, term, 0.0)
        y = api.sum(term, axis=[c] + kk)
        return y + b[o] if b is not None else y

    return api.compute((x.shape[0], O) + tuple(outs), body, name=f"{x.name}_{fn}")


def conv1d(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride: IntOrTuple = 1,
           padding: IntOrTuple = 0, dilation: IntOrTuple = 1, groups: int = 1) -> Tensor:
    """1-d convolution (cross-correlation) of ``(N, C, L)`` with ``(O, C/groups, K)``.

    Zero padding is a guarded select: outside the input nothing is read.

    >>> import tensorexpr as te
    >>> x, w = te.placeholder((2, 4, 9), name="x"), te.placeholder((6, 2, 3), name="w")
    >>> te.nn.conv1d(x, w, stride=2, padding=1, groups=2).shape
    (2, 6, 5)
    """
    return _conv(x, weight, bias, stride, padding, dilation, groups, 1, "conv1d")


def conv2d(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride: IntOrTuple = 1,
           padding: IntOrTuple = 0, dilation: IntOrTuple = 1, groups: int = 1) -> Tensor:
    """2-d convolution of NCHW ``x`` with OIHW ``weight`` (``I = C / groups``), as torch.

    >>> import tensorexpr as te
    >>> x = te.placeholder((te.var("n"), 3, 8, 8), name="x")
    >>> te.nn.conv2d(x, te.placeholder((4, 3, 3, 3), name="w"), padding=1).shape
    (n, 4, 8, 8)
    """
    return _conv(x, weight, bias, stride, padding, dilation, groups, 2, "conv2d")


def conv_transpose2d(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None,
                     stride: IntOrTuple = 1, padding: IntOrTuple = 0,
                     output_padding: IntOrTuple = 0, groups: int = 1,
                     dilation: IntOrTuple = 1) -> Tensor:
    """The transpose (adjoint) of ``conv2d``; ``weight`` is ``(C, O/groups, kH, kW)``, as torch.

    Output size ``(H - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1``.
    Written as a gather: output ``y`` takes input ``iy = (y + padding - k * dilation) / stride``
    where that divides exactly and lies inside.

    >>> import tensorexpr as te
    >>> x, w = te.placeholder((1, 4, 5, 5), name="x"), te.placeholder((4, 2, 3, 3), name="w")
    >>> te.nn.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1).shape
    (1, 2, 10, 10)
    """
    fn = "conv_transpose2d"
    _float_tensor(x, fn)
    _float_tensor(weight, fn, "weight")
    if x.ndim != 4 or weight.ndim != 4:
        raise ValueError(f"te.nn.{fn}: input {x.shape} and weight {weight.shape} must be "
                         f"(N, C, H, W) and (C, O/groups, kH, kW)")
    s, p, op, d = (_tuple(v, 2, nm, fn) for v, nm in (
        (stride, "stride"), (padding, "padding"), (output_padding, "output_padding"),
        (dilation, "dilation")))
    if builtins.min(s) < 1 or builtins.min(d) < 1 or builtins.min(p) < 0 or builtins.min(op) < 0:
        raise ValueError(f"te.nn.{fn}: stride and dilation must be >= 1, padding and "
                         f"output_padding >= 0")
    if builtins.any(op[j] >= builtins.max(s[j], d[j]) for j in range(2)):
        raise ValueError(f"te.nn.{fn}: output_padding {op} must be smaller than stride or "
                         f"dilation (as in torch)")
    C = _static(x, 1, fn, "the channels of a convolution")
    sp = [_static(x, 2 + j, fn, "a convolution's spatial dimension") for j in range(2)]
    if weight.shape[0] != C or not isinstance(groups, int) or groups < 1 or C % groups:
        raise ValueError(f"te.nn.{fn}: input {x.name!r} has {C} channels; weight "
                         f"{weight.name!r} {weight.shape} must be (C, O/groups, kH, kW) with C "
                         f"divisible by groups={groups!r}")
    og, ks = weight.shape[1], weight.shape[2:]
    O, cg = og * groups, C // groups
    _check_vector(bias, O, fn, "bias")
    outs = [(sp[j] - 1) * s[j] - 2 * p[j] + d[j] * (ks[j] - 1) + op[j] + 1 for j in range(2)]
    if builtins.min(outs) < 1:
        raise ValueError(f"te.nn.{fn}: {describe(x)} gives an empty output {tuple(outs)}")

    def body(n, o, y, z):
        c = api.reduce_axis(cg, name="c")
        kk = [api.reduce_axis(ks[j], name=f"k{j}") for j in range(2)]
        num = [pos + p[j] - kk[j] * d[j] for j, pos in enumerate((y, z))]
        cond = None
        for j in range(2):
            ok = (num[j] >= 0) & (num[j] < sp[j] * s[j])
            if s[j] > 1:
                ok = ok & (num[j] % s[j] == 0)
            cond = ok if cond is None else cond & ok
        src = [num[j] // s[j] if s[j] > 1 else num[j] for j in range(2)]
        ch = c if groups == 1 else (o // og) * cg + c
        oc = o if groups == 1 else o % og
        t = api.sum(x[(n, ch) + tuple(src)] * weight[(ch, oc) + tuple(kk)], axis=[c] + kk,
                    where=cond)
        return t + bias[o] if bias is not None else t

    return api.compute((x.shape[0], O) + tuple(outs), body, name=f"{x.name}_{fn}")


def _pool_args(x: Tensor, kernel_size, stride, padding, dilation, fn: str):
    _float_tensor(x, fn)
    _ndim_at_least(x, 3, fn, "N, C, H, W or C, H, W")
    k = _tuple(kernel_size, 2, "kernel_size", fn)
    s = k if stride is None or stride == () else _tuple(stride, 2, "stride", fn)
    p = _tuple(padding, 2, "padding", fn)
    d = _tuple(dilation, 2, "dilation", fn)
    if builtins.min(k) < 1 or builtins.min(s) < 1 or builtins.min(d) < 1:
        raise ValueError(f"te.nn.{fn}: kernel_size, stride and dilation must be >= 1")
    if builtins.any(not 0 <= p[j] <= k[j] // 2 for j in range(2)):
        raise ValueError(f"te.nn.{fn}: padding {p} must be at least 0 and at most half the "
                         f"kernel size {k} (as in torch)")
    sp = [_static(x, x.ndim - 2 + j, fn, "pooling") for j in range(2)]
    outs = [_out_size(sp[j], k[j], s[j], p[j], d[j], fn, x) for j in range(2)]
    return k, s, p, d, sp, outs


def _pool(x: Tensor, kernel_size, stride, padding, dilation, fn: str, op: str, scale=None):
    k, s, p, d, sp, outs = _pool_args(x, kernel_size, stride, padding, dilation, fn)
    lead = x.ndim - 2

    def body(*ax):
        kk = [api.reduce_axis(k[j], name=f"k{j}") for j in range(2)]
        src = [ax[lead + j] * s[j] + kk[j] * d[j] - p[j] for j in range(2)]
        inside = None
        for j in range(2):
            if p[j]:
                c = (src[j] >= 0) & (src[j] < sp[j])
                inside = c if inside is None else inside & c
        red = api.max if op == "max" else api.sum
        # padding: -inf for max (outside points are skipped), zeros for the average
        v = red(x[tuple(ax[:lead]) + tuple(src)], axis=kk, where=inside)
        return v if scale is None else v / scale(k)

    return api.compute(tuple(x.shape[:lead]) + tuple(outs), body, name=f"{x.name}_{fn}")


def max_pool2d(x: Tensor, kernel_size: IntOrTuple, stride: Optional[IntOrTuple] = None,
               padding: IntOrTuple = 0, dilation: IntOrTuple = 1) -> Tensor:
    """Max over ``kernel_size`` windows (``stride`` defaults to the kernel), padding ``-inf``.

    Ties share the gradient evenly (torch gives it to one of them).

    >>> import tensorexpr as te
    >>> te.nn.max_pool2d(te.placeholder((1, 2, 7, 7), name="x"), 3, 2, 1).shape
    (1, 2, 4, 4)
    """
    return _pool(x, kernel_size, stride, padding, dilation, "max_pool2d", "max")


def avg_pool2d(x: Tensor, kernel_size: IntOrTuple, stride: Optional[IntOrTuple] = None,
               padding: IntOrTuple = 0) -> Tensor:
    """Mean over ``kernel_size`` windows; padded zeros count (torch's count_include_pad=True).

    >>> import tensorexpr as te
    >>> te.nn.avg_pool2d(te.placeholder((1, 2, 6, 6), name="x"), 2).shape
    (1, 2, 3, 3)
    """
    return _pool(x, kernel_size, stride, padding, 1, "avg_pool2d", "sum",
                 scale=lambda k: float(k[0] * k[1]))


# }}}

# {{{ indexing and layout


def embedding(idx: Tensor, table: Tensor) -> Tensor:
    """``table[idx]``: rows of ``table`` (``(num, dim)``) at integer ``idx`` of any shape.

    An index outside ``[0, num)`` raises ``IndexError`` when the program runs. The
    gradient w.r.t. ``table`` is a scatter-add over ``idx``.

    >>> import tensorexpr as te
    >>> i = te.placeholder((te.var("n"), 5), dtype="int64", name="tokens")
    >>> te.nn.embedding(i, te.placeholder((100, 16), name="E")).shape
    (n, 5, 16)
    """
    _check_tensor(idx, "embedding")
    _float_tensor(table, "embedding", "weight")
    if not is_int(idx.dtype):
        raise TypeError(f"te.nn.embedding: {describe(idx)} is {idx.dtype}; indices must be "
                        f"int32 or int64")
    if table.ndim != 2:
        raise ValueError(f"te.nn.embedding: {describe(table)} has shape {table.shape}; "
                         f"expected (num_embeddings, embedding_dim)")
    return api.compute(tuple(idx.shape) + (table.shape[1],),
                       lambda *ax: table[idx[tuple(ax[:-1])], ax[-1]],
                       name=f"{table.name}_embedding")


def _scale_ratio(n: int, size, scale_factor, j: int) -> Tuple[int, Fraction]:
    """Output size and the source step ``in / out`` torch uses for dimension ``j``."""
    if size is not None:
        out = size[j]
        return out, Fraction(n, out)
    sf = scale_factor[j]
    out = int(math.floor(n * sf))
    # torch steps by 1 / scale_factor (not n / out) when scale_factor is given
    return out, 1 / Fraction(sf).limit_denominator(1 << 20)


def interpolate(x: Tensor, size: Optional[IntOrTuple] = None,
                scale_factor: Optional[Union[float, Sequence[float]]] = None,
                mode: str = "nearest", align_corners: Optional[bool] = None) -> Tensor:
    """Resize the last two dims of ``(N, C, H, W)`` (modes ``nearest`` and ``bilinear``).

    ``bilinear`` uses ``align_corners=False`` (torch's default) unless told. Source
    positions are exact rationals (``in / out``, or ``1 / scale_factor`` as torch
    steps), so indices and weights are index arithmetic; torch computes them in
    floating point, which can differ for a non-integer ``scale_factor`` whose
    products land within rounding of an integer.

    >>> import tensorexpr as te
    >>> x = te.placeholder((1, 3, 4, 4), name="x")
    >>> te.nn.interpolate(x, scale_factor=2, mode="bilinear").shape
    (1, 3, 8, 8)
    """
    fn = "interpolate"
    _float_tensor(x, fn)
    if x.ndim != 4:
        raise ValueError(f"te.nn.interpolate: {describe(x)} has shape {x.shape}; expected "
                         f"(N, C, H, W)")
    if (size is None) == (scale_factor is None):
        raise ValueError("te.nn.interpolate: give exactly one of size and scale_factor")
    if mode not in ("nearest", "bilinear"):
        raise ValueError(f"te.nn.interpolate: mode {mode!r} is not supported; use 'nearest' "
                         f"or 'bilinear'")
    if mode == "nearest" and align_corners is not None:
        raise ValueError("te.nn.interpolate: align_corners applies to mode='bilinear' only")
    sp = [_static(x, 2 + j, fn, "interpolation") for j in range(2)]
    if size is not None:
        size = _tuple(size, 2, "size", fn)
    else:
        scale_factor = (scale_factor,) * 2 if isinstance(scale_factor, (int, float)) else \
            tuple(scale_factor)
        if len(scale_factor) != 2 or builtins.any(f <= 0 for f in scale_factor):
            raise ValueError(f"te.nn.interpolate: scale_factor {scale_factor!r} must be one or "
                             f"two positive numbers")
    dims = [_scale_ratio(sp[j], size, scale_factor, j) for j in range(2)]
    if builtins.any(o < 1 for o, _ in dims):
        raise ValueError(f"te.nn.interpolate: {describe(x)} would resize to an empty output")
    out_shape = (x.shape[0], x.shape[1]) + tuple(o for o, _ in dims)
    name = f"{x.name}_interpolate"

    if mode == "nearest":
        def body(n, c, y, z):
            src = [api.minimum((pos * r.numerator) // r.denominator, sp[j] - 1)
                   for j, (pos, (_, r)) in enumerate(zip((y, z), dims))]
            return x[n, c, src[0], src[1]]
        return api.compute(out_shape, body, name=name)

    def taps(pos, j):
        """(i0, i1, weight of i1) along dimension j: src = num / den, exactly."""
        out, r = dims[j]
        if align_corners:
            # src = pos * (in - 1) / (out - 1)
            num = pos * (sp[j] - 1) if out > 1 else pos * 0
            den = builtins.max(out - 1, 1)
        else:
            # src = (pos + 0.5) * r - 0.5, clamped at 0 below (as torch)
            num = api.maximum((2 * pos + 1) * r.numerator - r.denominator, 0)
            den = 2 * r.denominator
        i0 = api.minimum(num // den, sp[j] - 1)
        i1 = api.minimum(i0 + 1, sp[j] - 1)
        lam = (num - i0 * den).astype(x.dtype) / float(den)
        return i0, i1, lam

    def body(n, c, y, z):
        y0, y1, ly = taps(y, 0)
        x0, x1, lx = taps(z, 1)
        return ((1.0 - ly) * ((1.0 - lx) * x[n, c, y0, x0] + lx * x[n, c, y0, x1])
                + ly * ((1.0 - lx) * x[n, c, y1, x0] + lx * x[n, c, y1, x1]))

    return api.compute(out_shape, body, name=name)


def reshape(x: Tensor, shape) -> Tensor:
    """``x`` with the same elements in row-major order and another shape (one dim may be -1).

    Every dim but the first must be static (the first may be symbolic; the new first
    dim is then -1 or inferred).

    >>> import tensorexpr as te
    >>> te.nn.reshape(te.placeholder((te.var("n"), 4, 3), name="x"), (-1, 6)).shape
    ((n * 2), 6)
    """
    fn = "reshape"
    _check_tensor(x, fn)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    in_rest = [_static(x, d, fn, "reshape") for d in range(1, x.ndim)]
    rest_prod = math.prod(in_rest)
    if shape.count(-1) > 1 or builtins.any(
            not isinstance(s, int) or isinstance(s, bool) or s < -1 for s in shape):
        raise ValueError(f"te.nn.reshape: shape {shape} must hold ints >= 0 and at most one -1")
    first = x.shape[0] if x.ndim else 1
    if isinstance(first, int):
        total = first * rest_prod
        known = math.prod(s for s in shape if s != -1)
        if -1 in shape:
            if known == 0 or total % known:
                raise ValueError(f"te.nn.reshape: {describe(x)} of shape {x.shape} cannot be "
                                 f"viewed as {shape}")
            shape = tuple(total // known if s == -1 else s for s in shape)
        if math.prod(shape) != total:
            raise ValueError(f"te.nn.reshape: {describe(x)} of shape {x.shape} ({total} "
                             f"elements) cannot be viewed as {shape}")
        out_shape = shape
    else:
        out_rest = math.prod(shape[1:]) if shape else 1
        if not shape or shape[0] != -1 or -1 in shape[1:] or out_rest == 0 or \
                rest_prod % out_rest:
            raise ValueError(f"te.nn.reshape: {describe(x)} has the symbolic first size "
                             f"{first}; shape {shape} must be (-1, ...) with trailing sizes "
                             f"whose product divides {rest_prod}")
        out_shape = (first * (rest_prod // out_rest) if rest_prod // out_rest > 1 else first,) \
            + shape[1:]
    in_strides = [math.prod(in_rest[d:]) for d in range(x.ndim)]
    out_static = [s if isinstance(s, int) else None for s in out_shape]
    out_strides = [math.prod(out_static[d + 1:]) for d in range(len(out_shape))]

    def body(*ax):
        flat = None
        for a, st in zip(ax, out_strides):
            term = a * st if st != 1 else a
            flat = term if flat is None else flat + term
        if flat is None:
            flat = api.const(0, "int64")
        idx = []
        for d in range(x.ndim):
            q = flat // in_strides[d] if in_strides[d] != 1 else flat
            idx.append(q if d == 0 else q % x.shape[d])
        return x[tuple(idx)]

    return api.compute(out_shape, body, name=f"{x.name}_reshape")


def transpose(x: Tensor, dim0: int, dim1: int) -> Tensor:
    """``x`` with dimensions ``dim0`` and ``dim1`` swapped.

    >>> import tensorexpr as te
    >>> te.nn.transpose(te.placeholder((2, 3, 4), name="x"), 0, -1).shape
    (4, 3, 2)
    """
    _check_tensor(x, "transpose")
    a, b = _dim(x, dim0, "transpose"), _dim(x, dim1, "transpose")
    perm = list(range(x.ndim))
    perm[a], perm[b] = perm[b], perm[a]
    return permute(x, perm, name=f"{x.name}_transpose")


def permute(x: Tensor, dims: Sequence[int], name: Optional[str] = None) -> Tensor:
    """``x`` with its dimensions reordered: output dim ``k`` is input dim ``dims[k]``.

    >>> import tensorexpr as te
    >>> te.nn.permute(te.placeholder((2, 3, 4), name="x"), (2, 0, 1)).shape
    (4, 2, 3)
    """
    _check_tensor(x, "permute")
    perm = [_dim(x, d, "permute") for d in dims]
    if sorted(perm) != list(range(x.ndim)):
        raise ValueError(f"te.nn.permute: {tuple(dims)} is not a permutation of the "
                         f"{x.ndim} dims of {describe(x)}")
    inv = [perm.index(d) for d in range(x.ndim)]
    return api.compute(tuple(x.shape[d] for d in perm),
                       lambda *ax: x[tuple(ax[inv[d]] for d in range(x.ndim))],
                       name=name or f"{x.name}_permute")


def pad(x: Tensor, pad: Sequence[int], mode: str = "constant", value: float = 0.0) -> Tensor:
    """Pad (or crop, for negative amounts) with ``value``; ``pad`` starts at the last dim.

    As torch: ``pad=(left, right, top, bottom)`` pads the last dim by ``left``/``right``
    and the one before by ``top``/``bottom``. Outside ``x`` nothing is read (a select).

    >>> import tensorexpr as te
    >>> te.nn.pad(te.placeholder((2, 3), name="x"), (1, 2)).shape
    (2, 6)
    """
    fn = "pad"
    _check_tensor(x, fn)
    if mode != "constant":
        raise ValueError(f"te.nn.pad: mode {mode!r} is not supported; use 'constant'")
    pad = tuple(pad)
    if len(pad) % 2 or len(pad) // 2 > x.ndim or builtins.any(
            not isinstance(v, int) or isinstance(v, bool) for v in pad):
        raise ValueError(f"te.nn.pad: pad {pad} must hold pairs of ints, at most one pair per "
                         f"dimension of {describe(x)}")
    lo = [0] * x.ndim
    hi = [0] * x.ndim
    for j in range(len(pad) // 2):
        d = x.ndim - 1 - j
        lo[d], hi[d] = pad[2 * j], pad[2 * j + 1]
    shape = []
    for d in range(x.ndim):
        if lo[d] or hi[d]:
            n = _static(x, d, fn, "padding")
            if n + lo[d] + hi[d] < 0:
                raise ValueError(f"te.nn.pad: {describe(x)} dim {d} of size {n} cannot be "
                                 f"cropped by {-(lo[d] + hi[d])}")
            shape.append(n + lo[d] + hi[d])
        else:
            shape.append(x.shape[d])

    def body(*ax):
        src = tuple(a - lo[d] if lo[d] else a for d, a in enumerate(ax))
        inside = None
        for d in range(x.ndim):
            conds = []
            if lo[d] > 0:
                conds.append(src[d] >= 0)
            if hi[d] > 0:
                conds.append(src[d] < x.shape[d])
            for c in conds:
                inside = c if inside is None else inside & c
        v = x[src]
        return v if inside is None else api.select(inside, v, api.as_expr(value, x.dtype))

    return api.compute(tuple(shape), body, name=f"{x.name}_pad")


def concat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """``torch.cat``: the tensors one after another along ``dim``; other dims must agree.

    >>> import tensorexpr as te
    >>> a, b = te.placeholder((2, 3), name="a"), te.placeholder((2, 5), name="b")
    >>> te.nn.concat([a, b], dim=1).shape
    (2, 8)
    """
    from .ir import same
    tensors = list(tensors)
    if not tensors:
        raise ValueError("te.nn.concat: needs at least one tensor")
    first = _check_tensor(tensors[0], "concat")
    d = _dim(first, dim, "concat")
    for t in tensors[1:]:
        _check_tensor(t, "concat")
        if t.ndim != first.ndim or t.dtype != first.dtype or not all(
                same(p, q) for k, (p, q) in enumerate(zip(t.dims, first.dims)) if k != d):
            raise ValueError(f"te.nn.concat: {describe(t)} {t.shape} {t.dtype} does not fit "
                             f"{first.name!r} {first.shape} {first.dtype} along dim {d}")
    offsets, total = [], 0  # ints while the sizes are static, else size expressions
    for t in tensors:
        offsets.append(total)
        total = t.shape[d] if isinstance(total, int) and total == 0 else total + t.shape[d]

    def body(*ax):
        out = None
        for t, off in reversed(list(zip(tensors, offsets))):
            idx = tuple(a - off if k == d and not (isinstance(off, int) and off == 0) else a
                        for k, a in enumerate(ax))
            v = t[idx]
            end = t.shape[d] if isinstance(off, int) and off == 0 else off + t.shape[d]
            out = v if out is None else api.select(ax[d] < end, v, out)
        return out

    shape = tuple(total if k == d else first.shape[k] for k in range(first.ndim))
    return api.compute(shape, body, name=f"{first.name}_concat")


# }}}

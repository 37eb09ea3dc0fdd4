"""Reductions over chosen dimensions: torch's ``sum``, ``amax``, ``mean`` and ``var``,
and the helpers every other statistic of ``te.nn`` is built with.

:func:`reduce_over` reduces any elementwise body over a set of dimensions (the
others kept, as size 1 with ``keepdim``); :func:`reduced_at` reads such a
statistic back at a full index of the input, which is how the softmax family,
the normalisations and the losses broadcast a row statistic; :func:`centered`
is the two-pass mean and difference the variances share.

>>> import tensorexpr as te
>>> x = te.placeholder((2, 3, 4), name="x")
>>> sum(x, dim=1).shape, mean(x, dim=(0, 2), keepdim=True).shape
((2, 4), (1, 3, 1))
"""
from __future__ import annotations

from typing import Optional, Tuple

from .. import api
from ..ir import Expr, Tensor
from .arguments import check_float_tensor, check_tensor, compute, dim_indices


def element_count(sizes):
    """The product of ``sizes``: an int if all are static, else an index expression.

    >>> import tensorexpr as te
    >>> element_count([2, 3]), element_count([2, te.var("n")])
    (6, (2 * n))
    """
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


def reduced_shape(x: Tensor, dims, keepdim: bool) -> tuple:
    """The shape of ``x`` reduced over ``dims``: those dropped, or size 1 with ``keepdim``.

    >>> import tensorexpr as te
    >>> x = te.placeholder((2, 3, 4), name="x")
    >>> reduced_shape(x, (1,), False), reduced_shape(x, (1,), True)
    ((2, 4), (2, 1, 4))
    """
    return tuple(1 if d in dims else x.shape[d] for d in range(x.ndim)) if keepdim else \
        tuple(x.shape[d] for d in range(x.ndim) if d not in dims)


def reduce_over(x: Tensor, dims: Tuple[int, ...], keepdim: bool, op: str, elem,
                name: str, scale=None) -> Tensor:
    """``op`` over ``dims`` of ``elem(full index)`` (divided by ``scale`` if given).

    ``op`` is ``"sum"``, ``"max"`` or ``"min"``. The result keeps the other
    dimensions (as size 1 with ``keepdim``); its reduce axes are fresh, named
    after the dimension they run over.

    >>> import tensorexpr as te
    >>> x = te.placeholder((2, 3), name="x")
    >>> print(reduce_over(x, (1,), False, "sum", lambda idx: x[idx] * x[idx], "sq", scale=3))
    sq[i0] = (sum_{r1 in [0, 3)} (x[i0, r1] * x[i0, r1])) / 3.0    for i0 in [0, 2)    float32
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

    return compute(reduced_shape(x, dims, keepdim), body, name=name)


def reduced_at(stat: Tensor, idx, dims: Tuple[int, ...]) -> Expr:
    """``stat`` (a reduction over ``dims`` without keepdim) read at the full index ``idx``.

    >>> import tensorexpr as te
    >>> i, j, k = (te.var(c) for c in "ijk")
    >>> reduced_at(te.placeholder((2, 4), name="m"), (i, j, k), (1,))
    m[i, k]
    """
    return stat[tuple(i for d, i in enumerate(idx) if d not in dims)]


def centered(x: Tensor, dims, what: str):
    """``(mu, d, n)``: the mean over ``dims``, ``d = x - mu`` and the count ``n``.

    Two passes (the mean first, then squares of ``d``) do not cancel as
    ``E[x^2] - E[x]^2`` does; ``what`` goes into the names (``x_<what>_mean``).

    >>> import tensorexpr as te
    >>> mu, d, n = centered(te.placeholder((2, 4), name="x"), (1,), "ln")
    >>> mu.name, d.name, n
    ('x_ln_mean', 'x_ln_centered', 4)
    """
    n = element_count([x.shape[d] for d in dims])
    mu = reduce_over(x, dims, False, "sum", lambda idx: x[idx], f"{x.name}_{what}_mean",
                     scale=n)
    d = compute(x.shape, lambda *i: x[i] - reduced_at(mu, i, dims),
                    name=f"{x.name}_{what}_centered")
    return mu, d, n


def sum(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:  # noqa: A001 - torch's name
    """Sum over ``dim`` (an int, a tuple, or None for all), as ``torch.sum``.

    >>> import tensorexpr as te
    >>> te.nn.sum(te.placeholder((2, 3, 4), name="x"), dim=(0, -1)).shape
    (3,)
    """
    check_tensor(x, "sum")
    dims = dim_indices(x, dim, "sum")
    return reduce_over(x, dims, keepdim, "sum", lambda idx: x[idx], f"{x.name}_sum")


def amax(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """Maximum over ``dim`` (an int, a tuple, or None for all), as ``torch.amax``.

    Its gradient splits evenly among tied maxima, as torch's ``amax``.

    >>> import tensorexpr as te
    >>> te.nn.amax(te.placeholder((2, 3), name="x"), dim=1, keepdim=True).shape
    (2, 1)
    """
    check_tensor(x, "amax")
    dims = dim_indices(x, dim, "amax")
    return reduce_over(x, dims, keepdim, "max", lambda idx: x[idx], f"{x.name}_amax")


def mean(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """Mean over ``dim`` (an int, a tuple, or None for all), as ``torch.mean``.

    >>> import tensorexpr as te
    >>> print(te.nn.mean(te.placeholder((2, 4), name="x"), dim=1))
    x_mean[i0] = (sum_{r1 in [0, 4)} x[i0, r1]) / 4.0    for i0 in [0, 2)    float32
    """
    check_float_tensor(x, "mean")
    dims = dim_indices(x, dim, "mean")
    n = element_count([x.shape[d] for d in dims])
    return reduce_over(x, dims, keepdim, "sum", lambda idx: x[idx], f"{x.name}_mean", scale=n)


def var(x: Tensor, dim=None, correction: Optional[int] = None, keepdim: bool = False,
        unbiased: Optional[bool] = None) -> Tensor:
    """Variance over ``dim``, as ``torch.var``: divides by ``N - correction``, default 1.

    ``unbiased=False`` (torch's older spelling) means ``correction=0``. With one
    element and ``correction=1`` the result is ``nan``/``inf`` (0/0), as in torch.

    >>> import tensorexpr as te
    >>> te.nn.var(te.placeholder((2, 4), name="x"), dim=-1, correction=0).name
    'x_var'
    """
    check_float_tensor(x, "var")
    if unbiased is not None and correction is not None:
        raise ValueError("te.nn.var: give correction or unbiased, not both")
    corr = (0 if unbiased is False else 1) if correction is None else correction
    dims = dim_indices(x, dim, "var")
    _, d, n = centered(x, dims, "var")
    denom = n - corr
    return reduce_over(d, dims, keepdim, "sum", lambda idx: d[idx] * d[idx], f"{x.name}_var",
                       scale=denom)

"""The softmax family: ``softmax``, ``log_softmax`` and ``logsumexp``, numerically stable.

Each subtracts the row maximum under :func:`te.stop_gradient`: the shift's exact
contribution to the gradient is zero, and stopping it spares the gradient a
count of tied maxima and another pass over ``x``.

>>> import tensorexpr as te
>>> x = te.placeholder((2, 5), name="x")
>>> te.nn.softmax(x, dim=1).name, te.nn.logsumexp(x, dim=1).shape
('x_softmax', (2,))
"""
from __future__ import annotations

import math

from .. import api
from ..ir import Tensor
from .arguments import check_float_tensor, compute, dim_index, dim_indices
from .reductions import reduce_over, reduced_at, reduced_shape


def _stable_row_stats(x: Tensor, dim: int, fn: str):
    """The row max ``m`` and ``s = sum exp(x - stop_gradient(m))`` along ``dim``."""
    dims = (dim,)
    m = reduce_over(x, dims, False, "max", lambda idx: x[idx], f"{x.name}_{fn}_max")
    s = reduce_over(x, dims, False, "sum",
                    lambda idx: api.exp(x[idx] - api.stop_gradient(reduced_at(m, idx, dims))),
                    f"{x.name}_{fn}_sum")
    return m, s


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
    check_float_tensor(x, "softmax")
    d = dim_index(x, dim, "softmax")
    m = reduce_over(x, (d,), False, "max", lambda idx: x[idx], f"{x.name}_softmax_max")
    # the exponentials once, as a tensor: the sum and the quotient read them, and so
    # does the gradient (dX = (dY - sum(dY * Y)) * ex / s) instead of recomputing exp
    ex = compute(x.shape, lambda *i: api.exp(x[i] - api.stop_gradient(reduced_at(m, i, (d,)))),
                     name=f"{x.name}_softmax_exp")
    s = reduce_over(ex, (d,), False, "sum", lambda idx: ex[idx], f"{x.name}_softmax_sum")
    return compute(x.shape, lambda *i: ex[i] / reduced_at(s, i, (d,)), name=f"{x.name}_softmax")


def log_softmax(x: Tensor, dim: int) -> Tensor:
    """``x - logsumexp(x)`` along ``dim``, shifted by the (stopped) row maximum.

    >>> import tensorexpr as te
    >>> te.nn.log_softmax(te.placeholder((2, 5), name="x"), dim=-1).name
    'x_log_softmax'
    """
    check_float_tensor(x, "log_softmax")
    d = dim_index(x, dim, "log_softmax")
    m, s = _stable_row_stats(x, d, "log_softmax")
    return compute(x.shape, lambda *i: x[i] - api.stop_gradient(reduced_at(m, i, (d,)))
                       - api.log(reduced_at(s, i, (d,))), name=f"{x.name}_log_softmax")


def logsumexp(x: Tensor, dim, keepdim: bool = False) -> Tensor:
    """``log(sum(exp(x)))`` over ``dim`` (an int or a tuple), as ``torch.logsumexp``.

    >>> import tensorexpr as te
    >>> te.nn.logsumexp(te.placeholder((2, 5), name="x"), dim=1).shape
    (2,)
    """
    check_float_tensor(x, "logsumexp")
    dims = dim_indices(x, dim, "logsumexp")
    m = reduce_over(x, dims, False, "max", lambda idx: x[idx], f"{x.name}_logsumexp_max")
    # the shift: the row maximum where it is finite, else 0 (as torch and
    # jax.nn.logsumexp): a row of -inf (every state forbidden, a fully masked row) is
    # log(0) = -inf, one holding +inf is +inf; shifted by an infinite maximum both were
    # inf - inf = NaN. A tensor of its own: the gradient reads it, not a test per element
    c = compute(m.shape, lambda *r: api.select(api.abs(m[r]) < math.inf, m[r], 0.0),
                name=f"{x.name}_logsumexp_shift")
    s = reduce_over(x, dims, False, "sum",
                    lambda idx: api.exp(x[idx] - api.stop_gradient(reduced_at(c, idx, dims))),
                    f"{x.name}_logsumexp_sum")

    def body(*ax):
        if keepdim:
            ax = tuple(a for k, a in enumerate(ax) if k not in dims)
        return api.stop_gradient(c[ax]) + api.log(s[ax])
    return compute(reduced_shape(x, dims, keepdim), body, name=f"{x.name}_logsumexp")

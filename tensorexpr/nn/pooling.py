"""Pooling over 2-d windows of ``(N, C, H, W)`` or ``(C, H, W)``: ``max_pool2d``, ``avg_pool2d``.

>>> import tensorexpr as te
>>> te.nn.max_pool2d(te.placeholder((1, 2, 8, 8), name="x"), 2).shape
(1, 2, 4, 4)
"""
from __future__ import annotations

import builtins
from typing import Optional

from .. import api
from ..ir import Tensor
from .arguments import (IntOrTuple, check_float_tensor, check_ndim_at_least, compute, int_tuple,
                        static_size)
from .convolution import window_output_size


def _pool_args(x: Tensor, kernel_size, stride, padding, dilation, fn: str):
    check_float_tensor(x, fn)
    check_ndim_at_least(x, 3, fn, "N, C, H, W or C, H, W")
    k = int_tuple(kernel_size, 2, "kernel_size", fn)
    s = k if stride is None or stride == () else int_tuple(stride, 2, "stride", fn)
    p = int_tuple(padding, 2, "padding", fn)
    d = int_tuple(dilation, 2, "dilation", fn)
    if builtins.min(k) < 1 or builtins.min(s) < 1 or builtins.min(d) < 1:
        raise ValueError(f"te.nn.{fn}: kernel_size, stride and dilation must be >= 1")
    if builtins.any(not 0 <= p[j] <= k[j] // 2 for j in range(2)):
        raise ValueError(f"te.nn.{fn}: padding {p} must be at least 0 and at most half the "
                         f"kernel size {k} (as in torch)")
    sp = [static_size(x, x.ndim - 2 + j, fn, "pooling") for j in range(2)]
    outs = [window_output_size(sp[j], k[j], s[j], p[j], d[j], fn, x) for j in range(2)]
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

    return compute(tuple(x.shape[:lead]) + tuple(outs), body, name=f"{x.name}_{fn}")


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

"""Resizing images: ``interpolate`` (``nearest`` and ``bilinear``), with exact source positions.

>>> import tensorexpr as te
>>> te.nn.interpolate(te.placeholder((1, 1, 3, 3), name="x"), size=(6, 4)).shape
(1, 1, 6, 4)
"""
from __future__ import annotations

import builtins
import math
from fractions import Fraction
from typing import Optional, Sequence, Tuple, Union

from .. import api
from ..errors import describe
from ..ir import Tensor
from .arguments import IntOrTuple, check_float_tensor, compute, int_tuple, static_size


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
    check_float_tensor(x, fn)
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
    sp = [static_size(x, 2 + j, fn, "interpolation") for j in range(2)]
    if size is not None:
        size = int_tuple(size, 2, "size", fn)
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
        return compute(out_shape, body, name=name)

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

    return compute(out_shape, body, name=name)

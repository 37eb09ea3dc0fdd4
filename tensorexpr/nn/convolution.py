"""Convolutions: ``conv1d``, ``conv2d`` and ``conv_transpose2d`` (NCHW inputs, OIHW weights).

Zero padding is a guarded select or a where-clause: outside the input nothing is
read. :func:`window_output_size` is torch's output-size formula, shared with pooling.

>>> import tensorexpr as te
>>> x, w = te.placeholder((1, 3, 8, 8), name="x"), te.placeholder((4, 3, 3, 3), name="w")
>>> te.nn.conv2d(x, w, stride=2).shape
(1, 4, 3, 3)
"""
from __future__ import annotations

import builtins
from typing import Optional

from .. import api
from ..errors import describe
from ..ir import Tensor
from .arguments import IntOrTuple, check_float_tensor, check_vector, compute, int_tuple, static_size


def window_output_size(n: int, k: int, s: int, p: int, d: int, fn: str, x: Tensor) -> int:
    """Windows of size ``k`` (stride ``s``, padding ``p``, dilation ``d``) over ``n`` places.

    Torch's formula for convolutions and pooling; an empty output is an error
    about ``x`` (the input of layer ``fn``), not a tensor with a zero dimension.

    >>> import tensorexpr as te
    >>> x = te.placeholder((1, 1, 7), name="x")
    >>> window_output_size(7, 3, 2, 1, 1, "conv1d", x)
    4
    """
    out = (n + 2 * p - d * (k - 1) - 1) // s + 1
    if out < 1:
        raise ValueError(f"te.nn.{fn}: {describe(x)}: an input of size {n} with kernel {k}, "
                         f"stride {s}, padding {p} and dilation {d} gives an empty output")
    return out


def _conv(x: Tensor, w: Tensor, b, stride, padding, dilation, groups: int, nd: int,
          fn: str) -> Tensor:
    check_float_tensor(x, fn)
    check_float_tensor(w, fn, "weight")
    if x.ndim != nd + 2 or w.ndim != nd + 2:
        raise ValueError(f"te.nn.{fn}: input {x.shape} and weight {w.shape} must have "
                         f"{nd + 2} dimensions (N, C, ...) and (O, C/groups, ...)")
    s, p, d = (int_tuple(v, nd, nm, fn) for v, nm in ((stride, "stride"), (padding, "padding"),
                                                      (dilation, "dilation")))
    if builtins.min(s) < 1 or builtins.min(d) < 1 or builtins.min(p) < 0:
        raise ValueError(f"te.nn.{fn}: stride and dilation must be >= 1 and padding >= 0")
    C = static_size(x, 1, fn, "the channels of a convolution")
    sp = [static_size(x, 2 + j, fn, "a convolution's spatial dimension") for j in range(nd)]
    O, cg = w.shape[0], w.shape[1]
    ks = w.shape[2:]
    if not isinstance(groups, int) or groups < 1 or C % groups or O % groups or cg * groups != C:
        raise ValueError(f"te.nn.{fn}: input {x.name!r} has {C} channels and weight "
                         f"{w.name!r} shape {w.shape}; with groups={groups!r} the weight must "
                         f"be (O, C/groups, ...) with C and O divisible by groups")
    check_vector(b, O, fn, "bias")
    og = O // groups
    outs = [window_output_size(sp[j], ks[j], s[j], p[j], d[j], fn, x) for j in range(nd)]

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

    return compute((x.shape[0], O) + tuple(outs), body, name=f"{x.name}_{fn}")


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
    check_float_tensor(x, fn)
    check_float_tensor(weight, fn, "weight")
    if x.ndim != 4 or weight.ndim != 4:
        raise ValueError(f"te.nn.{fn}: input {x.shape} and weight {weight.shape} must be "
                         f"(N, C, H, W) and (C, O/groups, kH, kW)")
    s, p, op, d = (int_tuple(v, 2, nm, fn) for v, nm in (
        (stride, "stride"), (padding, "padding"), (output_padding, "output_padding"),
        (dilation, "dilation")))
    if builtins.min(s) < 1 or builtins.min(d) < 1 or builtins.min(p) < 0 or builtins.min(op) < 0:
        raise ValueError(f"te.nn.{fn}: stride and dilation must be >= 1, padding and "
                         f"output_padding >= 0")
    if builtins.any(op[j] >= builtins.max(s[j], d[j]) for j in range(2)):
        raise ValueError(f"te.nn.{fn}: output_padding {op} must be smaller than stride or "
                         f"dilation (as in torch)")
    C = static_size(x, 1, fn, "the channels of a convolution")
    sp = [static_size(x, 2 + j, fn, "a convolution's spatial dimension") for j in range(2)]
    if weight.shape[0] != C or not isinstance(groups, int) or groups < 1 or C % groups:
        raise ValueError(f"te.nn.{fn}: input {x.name!r} has {C} channels; weight "
                         f"{weight.name!r} {weight.shape} must be (C, O/groups, kH, kW) with C "
                         f"divisible by groups={groups!r}")
    og, ks = weight.shape[1], weight.shape[2:]
    O, cg = og * groups, C // groups
    check_vector(bias, O, fn, "bias")
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

    return compute((x.shape[0], O) + tuple(outs), body, name=f"{x.name}_{fn}")

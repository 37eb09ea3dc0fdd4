"""Normalisation layers: ``layer_norm``, ``group_norm`` and ``batch_norm``, as torch's.

Each computes (or is given) a mean and a variance, then ``(x - mean) / sqrt(var + eps)``
with an optional per-feature ``weight`` and ``bias``; the variances are biased, as
in torch's layers, and the means two-pass (:func:`~tensorexpr.nn.reductions.centered`).

>>> import tensorexpr as te
>>> te.nn.layer_norm(te.placeholder((2, 8), name="x"), 8).name
'x_layer_norm'
"""
from __future__ import annotations

from typing import Optional

from .. import api
from ..errors import describe
from ..ir import Tensor
from .arguments import check_float_tensor, check_ndim_at_least, check_vector, compute, static_size
from .reductions import centered, element_count, reduce_over


def _affine(x: Tensor, mu: Tensor, rstd: Tensor, stat_idx, weight, bias, widx, name: str):
    """``(x - mu) * rstd * weight + bias``; ``stat_idx``/``widx`` map x's index to theirs."""
    def body(*i):
        y = (x[i] - mu[stat_idx(i)]) * rstd[stat_idx(i)]
        if weight is not None:
            y = y * weight[widx(i)]
        if bias is not None:
            y = y + bias[widx(i)]
        return y
    return compute(x.shape, body, name=name)


def _rstd(v: Tensor, eps: float, name: str) -> Tensor:
    return compute(v.shape, lambda *i: 1.0 / api.sqrt(v[i] + eps), name=name)


def layer_norm(x: Tensor, normalized_shape, weight: Optional[Tensor] = None,
               bias: Optional[Tensor] = None, eps: float = 1e-5) -> Tensor:
    """Normalise over the last ``len(normalized_shape)`` dims (biased variance), as torch.

    >>> import tensorexpr as te
    >>> x = te.placeholder((te.var("n"), 8), name="x")
    >>> te.nn.layer_norm(x, (8,), te.placeholder((8,), name="w")).shape
    (n, 8)
    """
    check_float_tensor(x, "layer_norm")
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(ns)
    if k == 0 or k > x.ndim or tuple(x.shape[x.ndim - k:]) != ns:
        raise ValueError(f"te.nn.layer_norm: normalized_shape {ns} must be the last dimensions "
                         f"of {describe(x)}, whose shape is {x.shape}")
    for what, t in (("weight", weight), ("bias", bias)):
        if t is not None:
            check_float_tensor(t, "layer_norm", what)
            if tuple(t.shape) != ns:
                raise ValueError(f"te.nn.layer_norm: {what} {describe(t)} has shape {t.shape}; "
                                 f"expected normalized_shape {ns}")
    dims = tuple(range(x.ndim - k, x.ndim))
    mu, d, n = centered(x, dims, "ln")
    v = reduce_over(d, dims, False, "sum", lambda idx: d[idx] * d[idx], f"{x.name}_ln_var",
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
    check_float_tensor(x, "group_norm")
    check_ndim_at_least(x, 2, "group_norm", "N, C, *")
    C = static_size(x, 1, "group_norm", "splitting channels into groups")
    if not isinstance(num_groups, int) or num_groups < 1 or C % num_groups:
        raise ValueError(f"te.nn.group_norm: {C} channels of {describe(x)} cannot be split "
                         f"into num_groups={num_groups!r} equal groups")
    for what, t in (("weight", weight), ("bias", bias)):
        check_vector(t, C, "group_norm", what)
    cg = C // num_groups
    spatial = list(range(2, x.ndim))
    n = element_count([cg] + [x.shape[d] for d in spatial])
    # x seen as (N, G, C/G, *): the statistics reduce over all but the first two
    xg = compute((x.shape[0], num_groups, cg) + tuple(x.shape[2:]),
                     lambda b, g, c, *s: x[(b, g * cg + c) + tuple(s)], name=f"{x.name}_groups")
    gdims = tuple(range(2, xg.ndim))
    mu, d, _ = centered(xg, gdims, "gn")
    v = reduce_over(d, gdims, False, "sum", lambda idx: d[idx] * d[idx], f"{x.name}_gn_var",
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
    check_float_tensor(x, "batch_norm")
    check_ndim_at_least(x, 2, "batch_norm", "N, C, *")
    C = x.shape[1]
    for what, t in (("weight", weight), ("bias", bias), ("running_mean", running_mean),
                    ("running_var", running_var)):
        check_vector(t, C, "batch_norm", what)
    if training:
        dims = (0,) + tuple(range(2, x.ndim))
        mu, d, n = centered(x, dims, "bn")
        v = reduce_over(d, dims, False, "sum", lambda idx: d[idx] * d[idx],
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

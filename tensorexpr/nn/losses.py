"""Losses: ``cross_entropy``, ``mse_loss``, ``l1_loss``, ``smooth_l1_loss`` and
``binary_cross_entropy_with_logits``, reduced as torch's (``"mean"`` by default).

>>> import tensorexpr as te
>>> x, t = te.placeholder((3, 2), name="x"), te.placeholder((3, 2), name="t")
>>> te.nn.mse_loss(x, t, reduction="none").shape
(3, 2)
"""
from __future__ import annotations

from .. import api
from ..errors import describe
from ..ir import Tensor, is_int, same
from .arguments import check_float_tensor, check_same_shape, check_tensor, compute
from .reductions import element_count, reduce_over
from .softmax_family import logsumexp


def _reduction(t: Tensor, reduction: str, fn: str, name: str) -> Tensor:
    if reduction == "none":
        return t
    if reduction not in ("mean", "sum"):
        raise ValueError(f"te.nn.{fn}: reduction must be 'mean', 'sum' or 'none', not "
                         f"{reduction!r}")
    dims = tuple(range(t.ndim))
    scale = element_count(t.shape) if reduction == "mean" else None
    return reduce_over(t, dims, False, "sum", lambda idx: t[idx], name, scale=scale)


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
    check_float_tensor(logits, "cross_entropy", "logits")
    check_tensor(labels, "cross_entropy", "labels")
    if logits.ndim != 2:
        raise ValueError(f"te.nn.cross_entropy: logits {describe(logits)} has shape "
                         f"{logits.shape}; expected (N, C)")
    if not is_int(labels.dtype) or labels.ndim != 1 or not same(labels.dims[0], logits.dims[0]):
        raise ValueError(f"te.nn.cross_entropy: labels {describe(labels)} must be integer class "
                         f"indices of shape ({logits.shape[0]},), not {labels.dtype} "
                         f"{labels.shape}")
    lse = logsumexp(logits, 1)
    per = compute((logits.shape[0],), lambda n: lse[n] - logits[n, labels[n]],
                      name=f"{logits.name}_nll")
    return _reduction(per, reduction, "cross_entropy", f"{logits.name}_cross_entropy")


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:  # noqa: A002
    """``(input - target) ** 2``, averaged (torch's default), summed or per element.

    >>> import tensorexpr as te
    >>> x, t = te.placeholder((3, 2), name="x"), te.placeholder((3, 2), name="t")
    >>> te.nn.mse_loss(x, t).shape
    ()
    """
    check_float_tensor(input, "mse_loss")
    check_float_tensor(target, "mse_loss", "target")
    check_same_shape(input, target, "mse_loss")
    sq = compute(input.shape, lambda *i: (input[i] - target[i]) * (input[i] - target[i]),
                     name=f"{input.name}_sqerr")
    return _reduction(sq, reduction, "mse_loss", f"{input.name}_mse_loss")


def _pointwise(name: str, input: Tensor, target: Tensor, fn, reduction: str,  # noqa: A002
               what: str = "target") -> Tensor:
    check_float_tensor(input, name)
    check_float_tensor(target, name, what)
    check_same_shape(input, target, name)
    per = compute(input.shape, lambda *i: fn(input[i], target[i]), name=f"{input.name}_{name}_pt")
    return _reduction(per, reduction, name, f"{input.name}_{name}")


def l1_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:  # noqa: A002
    """``|input - target|``, averaged (torch's default), summed or per element; its
    gradient at ``input == target`` is 0, as torch's.

    >>> import tensorexpr as te
    >>> x, t = te.placeholder((3, 2), name="x"), te.placeholder((3, 2), name="t")
    >>> te.nn.l1_loss(x, t).shape
    ()
    """
    return _pointwise("l1_loss", input, target, lambda a, b: api.abs(a - b), reduction)


def smooth_l1_loss(input: Tensor, target: Tensor, reduction: str = "mean",  # noqa: A002
                   beta: float = 1.0) -> Tensor:
    """torch's: ``0.5 d^2 / beta`` where ``|d| < beta``, else ``|d| - 0.5 beta``
    (``d = input - target``; ``beta=0`` is ``l1_loss``).

    >>> import tensorexpr as te
    >>> x, t = te.placeholder((3, 2), name="x"), te.placeholder((3, 2), name="t")
    >>> te.nn.smooth_l1_loss(x, t, beta=0.5).shape
    ()
    """
    if beta < 0:
        raise ValueError(f"te.nn.smooth_l1_loss: beta must be >= 0, not {beta}")
    if beta == 0:
        return _pointwise("smooth_l1_loss", input, target, lambda a, b: api.abs(a - b),
                          reduction)

    def fn(a, b):
        d = a - b
        return api.select(api.abs(d) < beta, (0.5 / beta) * d * d, api.abs(d) - 0.5 * beta)
    return _pointwise("smooth_l1_loss", input, target, fn, reduction)


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor,  # noqa: A002
                                     reduction: str = "mean") -> Tensor:
    """``-(target log sigmoid(input) + (1 - target) log(1 - sigmoid(input)))``, as
    ``max(x, 0) - x t + log(1 + exp(-|x|))`` (torch's stable form: no overflow, no
    log of 0). ``target`` is a float tensor of probabilities.

    >>> import tensorexpr as te
    >>> x, t = te.placeholder((4,), name="x"), te.placeholder((4,), name="t")
    >>> te.nn.binary_cross_entropy_with_logits(x, t).shape
    ()
    """
    def fn(x, t):
        return api.maximum(x, 0.0) - x * t + api.log(1.0 + api.exp(-api.abs(x)))
    return _pointwise("binary_cross_entropy_with_logits", input, target, fn, reduction)

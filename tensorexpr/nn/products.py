"""Matrix products: ``matmul`` (``torch.matmul``, batch dims broadcast) and ``linear``.

>>> import tensorexpr as te
>>> x = te.placeholder((4, 8), name="x")
>>> te.nn.matmul(x, te.placeholder((8,), name="v")).shape
(4,)
"""
from __future__ import annotations

import builtins
from typing import Optional

from .. import api
from ..errors import describe
from ..ir import Tensor, same
from .arguments import check_float_tensor, check_ndim_at_least, check_vector, compute, size_expr


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """``torch.matmul``: vector and matrix products, batch dims broadcast (size-1 dims).

    >>> import tensorexpr as te
    >>> a = te.placeholder((te.var("b"), 2, 3), name="a")
    >>> te.nn.matmul(a, te.placeholder((3, 4), name="w")).shape
    (b, 2, 4)
    """
    check_float_tensor(a, "matmul")
    check_float_tensor(b, "matmul", "other")
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("te.nn.matmul: both arguments need at least one dimension")
    K = a.shape[-1]
    kb = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if not same(size_expr(K), size_expr(kb)):
        raise ValueError(f"te.nn.matmul: {a.name!r} {a.shape} and {b.name!r} {b.shape}: the "
                         f"contracted sizes {K} and {kb} differ")
    a_batch = a.shape[:-2] if a.ndim >= 2 else ()
    b_batch = b.shape[:-2] if b.ndim >= 2 else ()
    nb = builtins.max(len(a_batch), len(b_batch))
    pa = (1,) * (nb - len(a_batch)) + tuple(a_batch)
    pb = (1,) * (nb - len(b_batch)) + tuple(b_batch)
    batch = []
    for p, q in zip(pa, pb):
        if same(size_expr(p), size_expr(q)) or q == 1:
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

    return compute(tuple(batch) + rows + cols, body, name=f"{a.name}_matmul")


def linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    """``x @ weight.T + bias`` over the last dim of ``x``; ``weight`` is ``(out, in)``.

    >>> import tensorexpr as te
    >>> x = te.placeholder((te.var("n"), 8), name="x")
    >>> te.nn.linear(x, te.placeholder((3, 8), name="w"), te.placeholder((3,), name="b")).shape
    (n, 3)
    """
    check_float_tensor(x, "linear")
    check_float_tensor(weight, "linear", "weight")
    check_ndim_at_least(x, 1, "linear", "*, in_features")
    if weight.ndim != 2 or not same(weight.dims[1], x.dims[-1]):
        raise ValueError(f"te.nn.linear: weight {describe(weight)} has shape {weight.shape}; "
                         f"expected (out_features, {x.shape[-1]})")
    check_vector(bias, weight.shape[0], "linear", "bias")

    def body(*ax):
        k = api.reduce_axis(x.shape[-1], name="k")
        y = api.sum(x[tuple(ax[:-1]) + (k,)] * weight[ax[-1], k], axis=k)
        return y + bias[ax[-1]] if bias is not None else y

    return compute(tuple(x.shape[:-1]) + (weight.shape[0],), body, name=f"{x.name}_linear")

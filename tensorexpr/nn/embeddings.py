"""Embedding lookup: rows of a table at integer indices (``torch.nn.functional.embedding``).

>>> import tensorexpr as te
>>> i = te.placeholder((3,), dtype="int64", name="i")
>>> te.nn.embedding(i, te.placeholder((10, 4), name="E")).name
'E_embedding'
"""
from __future__ import annotations

from ..errors import describe
from ..ir import Tensor, is_int
from .arguments import check_float_tensor, check_tensor, compute


def embedding(idx: Tensor, table: Tensor) -> Tensor:
    """``table[idx]``: rows of ``table`` (``(num, dim)``) at integer ``idx`` of any shape.

    An index outside ``[0, num)`` raises ``IndexError`` when the program runs. The
    gradient w.r.t. ``table`` is a scatter-add over ``idx``.

    >>> import tensorexpr as te
    >>> i = te.placeholder((te.var("n"), 5), dtype="int64", name="tokens")
    >>> te.nn.embedding(i, te.placeholder((100, 16), name="E")).shape
    (n, 5, 16)
    """
    check_tensor(idx, "embedding")
    check_float_tensor(table, "embedding", "weight")
    if not is_int(idx.dtype):
        raise TypeError(f"te.nn.embedding: {describe(idx)} is {idx.dtype}; indices must be "
                        f"int32 or int64")
    if table.ndim != 2:
        raise ValueError(f"te.nn.embedding: {describe(table)} has shape {table.shape}; "
                         f"expected (num_embeddings, embedding_dim)")
    return compute(tuple(idx.shape) + (table.shape[1],),
                       lambda *ax: table[idx[tuple(ax[:-1])], ax[-1]],
                       name=f"{table.name}_embedding")

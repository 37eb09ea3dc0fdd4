"""Copies of operands made by the code generator: transposed and zero-padded tensors.

``codegen.layout`` decides which sums read such copies; the copies themselves are
ordinary computed tensors made here, and remembered (by uid, never reused) so that
``codegen.fuse`` keeps them out of row fusion (a sum reads a copy across its rows)
and the row-tiled sums (``codegen.rowsum_tiles``) know how wide a padded one is.

>>> import tensorexpr as te
>>> B = te.placeholder((3, 5), name="B")
>>> is_copy(transposed(B, 0)), is_copy(B)
(True, False)
"""
from __future__ import annotations

from typing import Dict, Optional

from tensorexpr.ir import (Axis, Binary, Compute, Const, Read, Select, Tensor, INDEX_DTYPE,
                           fresh_uid, is_float)

I64 = INDEX_DTYPE


#: uids of the copies made here (uids are never reused); ``fuse`` keeps them out of groups
_COPIES: set = set()


def is_copy(t: Tensor) -> bool:
    """Is ``t`` a copy made by this module (transposed or zero-padded)?"""
    return t.uid in _COPIES


def transposed(x: Tensor, p: int) -> Compute:
    """A copy of ``x`` with dimension ``p`` moved last: ``x_T[..., a_p] = x[..., a_p, ...]``.

    >>> import tensorexpr as te
    >>> B = te.placeholder((3, 5), name="B")
    >>> t = transposed(B, 0)
    >>> t.name, t.shape
    ('B_T', (5, 3))
    """
    dims = tuple(d for k, d in enumerate(x.dims) if k != p) + (x.dims[p],)
    axes = tuple(Axis(f"a{k}", Const(0, I64), d, fresh_uid()) for k, d in enumerate(dims))
    rest = list(axes[:-1])
    idx = tuple(axes[-1] if k == p else rest.pop(0) for k in range(x.ndim))
    out = Compute(f"{x.name}_T", dims, x.dtype, fresh_uid(), x.origin, axes=axes,
                  body=Read(x, idx, x.dtype))
    _COPIES.add(out.uid)
    return out


def moved_read(r: Read, p: int, copy: Tensor) -> Read:
    """``r`` (of ``x``) as the same element of ``copy = transposed(x, p)``."""
    idx = tuple(x for k, x in enumerate(r.indices) if k != p) + (r.indices[p],)
    return Read(copy, idx, r.dtype)


#: uids of the zero-padded copies made here, with their padded width
_PADDED: Dict[int, int] = {}


def padded_width(t: Tensor) -> Optional[int]:
    """The width of ``t``'s last dimension if ``t`` is a zero-padded copy made here."""
    return _PADDED.get(t.uid)


def padded(x: Tensor, n: int, width: int) -> Compute:
    """A copy of ``x`` (last dimension ``n``) with its last dimension widened to
    ``width`` by zeros: ``x_pad[..., a] = a < n ? x[..., a] : 0``.

    >>> import tensorexpr as te
    >>> W = te.placeholder((5, 10), name="W")
    >>> p = padded(W, 10, 16)
    >>> p.name, p.shape, padded_width(p)
    ('W_pad', (5, 16), 16)
    """
    dims = tuple(x.dims[:-1]) + (Const(width, I64),)
    axes = tuple(Axis(f"a{k}", Const(0, I64), d, fresh_uid()) for k, d in enumerate(dims))
    zero = Const(0.0 if is_float(x.dtype) else 0, x.dtype)
    body = Select(Binary("lt", axes[-1], Const(n, I64), "bool"), Read(x, axes, x.dtype), zero,
                  x.dtype)
    out = Compute(f"{x.name}_pad", dims, x.dtype, fresh_uid(), x.origin, axes=axes, body=body)
    _COPIES.add(out.uid)
    _PADDED[out.uid] = width
    return out

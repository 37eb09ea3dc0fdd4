"""Copies of operands made by the code generator: transposed, zero-padded and
residue-packed tensors.

``codegen.layout`` decides which sums read transposed and padded copies,
``codegen.residues`` residue-packed ones; the copies themselves are
ordinary computed tensors made here, and remembered (by uid, never reused) so that
``codegen.fuse`` keeps them out of row fusion (a sum reads a copy across its rows)
and the row-tiled sums (``codegen.rowsum_tiles``) know how wide a padded one is.

>>> import tensorexpr as te
>>> B = te.placeholder((3, 5), name="B")
>>> is_copy(transposed(B, 0)), is_copy(B)
(True, False)
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

from tensorexpr.ir import (Axis, Binary, Compute, Const, Read, Select, Tensor, INDEX_DTYPE,
                           fresh_uid, is_float)
from tensorexpr.transform import const_value

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


def packed(x: Tensor, dims: Tuple[int, ...], s: int) -> Compute:
    """A copy of ``x`` with each dimension of ``dims`` (static sizes ``n``) de-interleaved
    into ``s`` planes: element ``s*q + r`` of such a dimension is element ``q`` of plane
    ``r``. The planes' indices come just before the first packed dimension; each packed
    dimension keeps its place, ``ceil(n / s)`` long (zeros past ``n``). A read along a
    packed dimension with stride ``s`` is contiguous in the copy.

    >>> import tensorexpr as te
    >>> H = te.placeholder((2, 3, 8, 9), name="H")
    >>> c = packed(H, (2, 3), 2)
    >>> c.name, c.shape, is_copy(c)
    ('H_planes', (2, 3, 2, 2, 4, 5), True)
    >>> print(c.body)
    select(((2 * a5) + a3) < 9, H[a0, a1, (2 * a4) + a2, (2 * a5) + a3], 0.0)
    """
    first = min(dims)
    sizes = {d: const_value(x.dims[d]) for d in dims}
    out_dims = (tuple(x.dims[:first]) + (Const(s, I64),) * len(dims)
                + tuple(Const(-(-sizes[d] // s), I64) if d in sizes else x.dims[d]
                        for d in range(first, x.ndim)))
    axes = tuple(Axis(f"a{k}", Const(0, I64), d, fresh_uid()) for k, d in enumerate(out_dims))
    planes = dict(zip(sorted(dims), axes[first:first + len(dims)]))
    rest = axes[first + len(dims):]
    idx = list(axes[:first])
    ok = []
    for d in range(first, x.ndim):
        a = rest[d - first]
        if d in planes:
            at = Binary("add", Binary("mul", Const(s, I64), a, I64), planes[d], I64)
            if sizes[d] % s:
                ok.append(Binary("lt", at, Const(sizes[d], I64), "bool"))
            idx.append(at)
        else:
            idx.append(a)
    body = Read(x, tuple(idx), x.dtype)
    if ok:
        cond = ok[0]
        for c in ok[1:]:
            cond = Binary("and", cond, c, "bool")
        body = Select(cond, body, Const(0.0 if is_float(x.dtype) else 0, x.dtype), x.dtype)
    out = Compute(f"{x.name}_planes", out_dims, x.dtype, fresh_uid(), x.origin, axes=axes,
                  body=body)
    _COPIES.add(out.uid)
    return out


def packed_read(r: Read, copy: Tensor, dims: Tuple[int, ...], planes) -> Read:
    """``r`` (of ``x``) as the same element of ``copy = packed(x, dims, s)``; ``planes``
    gives each packed dimension's index as ``(plane, quotient)``
    (``residue_algebra.decompose``)."""
    first = min(dims)
    pairs = {d: planes[k] for k, d in enumerate(sorted(dims))}
    idx = (tuple(r.indices[:first]) + tuple(pairs[d][0] for d in sorted(dims))
           + tuple(pairs[d][1] if d in pairs else r.indices[d]
                   for d in range(first, len(r.indices))))
    return Read(copy, idx, r.dtype)

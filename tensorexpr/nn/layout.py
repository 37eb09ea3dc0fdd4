"""Shape and layout: ``reshape``, ``transpose``, ``permute``, ``pad`` and ``concat``.

Each reads ``x`` at an index computed from the output's: no data moves until a
backend materialises the result (or fuses the read into its consumer).

>>> import tensorexpr as te
>>> x = te.placeholder((2, 3), name="x")
>>> te.nn.transpose(x, 0, 1).shape, te.nn.reshape(x, (6,)).shape
((3, 2), (6,))
"""
from __future__ import annotations

import builtins
import math
from typing import Optional, Sequence

from .. import api
from ..errors import describe
from ..ir import Tensor, same
from .arguments import check_tensor, compute, dim_index, static_size


def reshape(x: Tensor, shape) -> Tensor:
    """``x`` with the same elements in row-major order and another shape (one dim may be -1).

    Every dim but the first must be static (the first may be symbolic; the new first
    dim is then -1 or inferred).

    >>> import tensorexpr as te
    >>> te.nn.reshape(te.placeholder((te.var("n"), 4, 3), name="x"), (-1, 6)).shape
    ((n * 2), 6)
    """
    fn = "reshape"
    check_tensor(x, fn)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    in_rest = [static_size(x, d, fn, "reshape") for d in range(1, x.ndim)]
    rest_prod = math.prod(in_rest)
    if shape.count(-1) > 1 or builtins.any(
            not isinstance(s, int) or isinstance(s, bool) or s < -1 for s in shape):
        raise ValueError(f"te.nn.reshape: shape {shape} must hold ints >= 0 and at most one -1")
    first = x.shape[0] if x.ndim else 1
    if isinstance(first, int):
        total = first * rest_prod
        known = math.prod(s for s in shape if s != -1)
        if -1 in shape:
            if known == 0 or total % known:
                raise ValueError(f"te.nn.reshape: {describe(x)} of shape {x.shape} cannot be "
                                 f"viewed as {shape}")
            shape = tuple(total // known if s == -1 else s for s in shape)
        if math.prod(shape) != total:
            raise ValueError(f"te.nn.reshape: {describe(x)} of shape {x.shape} ({total} "
                             f"elements) cannot be viewed as {shape}")
        out_shape = shape
    else:
        out_rest = math.prod(shape[1:]) if shape else 1
        if not shape or shape[0] != -1 or -1 in shape[1:] or out_rest == 0 or \
                rest_prod % out_rest:
            raise ValueError(f"te.nn.reshape: {describe(x)} has the symbolic first size "
                             f"{first}; shape {shape} must be (-1, ...) with trailing sizes "
                             f"whose product divides {rest_prod}")
        out_shape = (first * (rest_prod // out_rest) if rest_prod // out_rest > 1 else first,) \
            + shape[1:]
    in_strides = [math.prod(in_rest[d:]) for d in range(x.ndim)]
    out_static = [s if isinstance(s, int) else None for s in out_shape]
    out_strides = [math.prod(out_static[d + 1:]) for d in range(len(out_shape))]

    def body(*ax):
        flat = None
        for a, st in zip(ax, out_strides):
            term = a * st if st != 1 else a
            flat = term if flat is None else flat + term
        if flat is None:
            flat = api.const(0, "int64")
        idx = []
        for d in range(x.ndim):
            q = flat // in_strides[d] if in_strides[d] != 1 else flat
            idx.append(q if d == 0 else q % x.shape[d])
        return x[tuple(idx)]

    return compute(out_shape, body, name=f"{x.name}_reshape")


def transpose(x: Tensor, dim0: int, dim1: int) -> Tensor:
    """``x`` with dimensions ``dim0`` and ``dim1`` swapped.

    >>> import tensorexpr as te
    >>> te.nn.transpose(te.placeholder((2, 3, 4), name="x"), 0, -1).shape
    (4, 3, 2)
    """
    check_tensor(x, "transpose")
    a, b = dim_index(x, dim0, "transpose"), dim_index(x, dim1, "transpose")
    perm = list(range(x.ndim))
    perm[a], perm[b] = perm[b], perm[a]
    return permute(x, perm, name=f"{x.name}_transpose")


def permute(x: Tensor, dims: Sequence[int], name: Optional[str] = None) -> Tensor:
    """``x`` with its dimensions reordered: output dim ``k`` is input dim ``dims[k]``.

    >>> import tensorexpr as te
    >>> te.nn.permute(te.placeholder((2, 3, 4), name="x"), (2, 0, 1)).shape
    (4, 2, 3)
    """
    check_tensor(x, "permute")
    perm = [dim_index(x, d, "permute") for d in dims]
    if sorted(perm) != list(range(x.ndim)):
        raise ValueError(f"te.nn.permute: {tuple(dims)} is not a permutation of the "
                         f"{x.ndim} dims of {describe(x)}")
    inv = [perm.index(d) for d in range(x.ndim)]
    return compute(tuple(x.shape[d] for d in perm),
                       lambda *ax: x[tuple(ax[inv[d]] for d in range(x.ndim))],
                       name=name or f"{x.name}_permute")


def pad(x: Tensor, pad: Sequence[int], mode: str = "constant", value: float = 0.0) -> Tensor:
    """Pad (or crop, for negative amounts) ``x``; ``pad`` starts at the last dim.

    As torch: ``pad=(left, right, top, bottom)`` pads the last dim by ``left``/``right``
    and the one before by ``top``/``bottom``. ``mode`` as torch's:

    * ``"constant"``: ``value`` outside ``x`` (a select: nothing is read there);
    * ``"reflect"``: ``x`` mirrored about its edge elements (``x[1]`` left of ``x[0]``),
      pads smaller than the dim;
    * ``"replicate"``: the edge elements repeated (a clamped index);
    * ``"circular"``: ``x`` wrapped around (an index modulo the size), pads at most the
      dim.

    The other modes read ``x`` at an index folded back into it, so their gradients
    add the padding's head onto the elements it copies.

    >>> import tensorexpr as te
    >>> te.nn.pad(te.placeholder((2, 3), name="x"), (1, 2)).shape
    (2, 6)
    >>> te.nn.pad(te.placeholder((2, 3), name="x"), (2, 2), mode="reflect").shape
    (2, 7)
    """
    fn = "pad"
    check_tensor(x, fn)
    modes = ("constant", "reflect", "replicate", "circular")
    if mode not in modes:
        raise ValueError(f"te.nn.pad: mode {mode!r} is not one of {', '.join(map(repr, modes))}")
    pad = tuple(pad)
    if len(pad) % 2 or len(pad) // 2 > x.ndim or builtins.any(
            not isinstance(v, int) or isinstance(v, bool) for v in pad):
        raise ValueError(f"te.nn.pad: pad {pad} must hold pairs of ints, at most one pair per "
                         f"dimension of {describe(x)}")
    lo = [0] * x.ndim
    hi = [0] * x.ndim
    for j in range(len(pad) // 2):
        d = x.ndim - 1 - j
        lo[d], hi[d] = pad[2 * j], pad[2 * j + 1]
    shape = []
    for d in range(x.ndim):
        if lo[d] or hi[d]:
            n = static_size(x, d, fn, "padding")
            if n + lo[d] + hi[d] < 0:
                raise ValueError(f"te.nn.pad: {describe(x)} dim {d} of size {n} cannot be "
                                 f"cropped by {-(lo[d] + hi[d])}")
            shape.append(n + lo[d] + hi[d])
        else:
            shape.append(x.shape[d])

    if mode != "constant":
        return _fold_pad(x, lo, hi, shape, mode)

    def body(*ax):
        src = tuple(a - lo[d] if lo[d] else a for d, a in enumerate(ax))
        inside = None
        for d in range(x.ndim):
            conds = []
            if lo[d] > 0:
                conds.append(src[d] >= 0)
            if hi[d] > 0:
                conds.append(src[d] < x.shape[d])
            for c in conds:
                inside = c if inside is None else inside & c
        v = x[src]
        return v if inside is None else api.select(inside, v, api.as_expr(value, x.dtype))

    return compute(tuple(shape), body, name=f"{x.name}_pad")


def _fold_pad(x: Tensor, lo, hi, shape, mode: str) -> Tensor:
    """``pad``'s reflect, replicate and circular modes: ``x`` read at a folded index."""
    for d in range(x.ndim):
        if not (lo[d] or hi[d]):
            continue
        n = x.shape[d]
        widest = max(lo[d], hi[d])
        if min(lo[d], hi[d]) < 0:
            raise ValueError(f"te.nn.pad: mode {mode!r} cannot crop (dim {d} of "
                             f"{describe(x)} has a negative pad); crop with mode 'constant'")
        if mode == "reflect" and widest >= n:
            raise ValueError(f"te.nn.pad: reflect pads of dim {d} of {describe(x)} must be "
                             f"smaller than its size {n}, not {widest}")
        if mode == "circular" and widest > n:
            raise ValueError(f"te.nn.pad: circular pads of dim {d} of {describe(x)} must be "
                             f"at most its size {n}, not {widest}")

    def fold(a, d):
        if not (lo[d] or hi[d]):
            return a
        n, s = x.shape[d], a - lo[d]
        if mode == "replicate":
            return api.minimum(api.maximum(s, 0), n - 1)
        if mode == "circular":
            return s % n
        # reflect: -s left of the start, 2 (n - 1) - s right of the end; spelled as a
        # min of maxes of affine terms (no max under a minus), which codegen.piecewise
        # cuts into the three pieces where each is affine: the middle a plain copy
        return api.minimum(api.maximum(s, -s), api.minimum(2 * (n - 1) - s, 2 * (n - 1) + s))

    return compute(tuple(shape), lambda *ax: x[tuple(fold(a, d) for d, a in enumerate(ax))],
                       name=f"{x.name}_pad")


def concat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """``torch.cat``: the tensors one after another along ``dim``; other dims must agree.

    >>> import tensorexpr as te
    >>> a, b = te.placeholder((2, 3), name="a"), te.placeholder((2, 5), name="b")
    >>> te.nn.concat([a, b], dim=1).shape
    (2, 8)
    """
    tensors = list(tensors)
    if not tensors:
        raise ValueError("te.nn.concat: needs at least one tensor")
    first = check_tensor(tensors[0], "concat")
    d = dim_index(first, dim, "concat")
    for t in tensors[1:]:
        check_tensor(t, "concat")
        if t.ndim != first.ndim or t.dtype != first.dtype or not all(
                same(p, q) for k, (p, q) in enumerate(zip(t.dims, first.dims)) if k != d):
            raise ValueError(f"te.nn.concat: {describe(t)} {t.shape} {t.dtype} does not fit "
                             f"{first.name!r} {first.shape} {first.dtype} along dim {d}")
    offsets, total = [], 0  # ints while the sizes are static, else size expressions
    for t in tensors:
        offsets.append(total)
        total = t.shape[d] if isinstance(total, int) and total == 0 else total + t.shape[d]

    def body(*ax):
        out = None
        for t, off in reversed(list(zip(tensors, offsets))):
            idx = tuple(a - off if k == d and not (isinstance(off, int) and off == 0) else a
                        for k, a in enumerate(ax))
            v = t[idx]
            end = t.shape[d] if isinstance(off, int) and off == 0 else off + t.shape[d]
            out = v if out is None else api.select(ax[d] < end, v, out)
        return out

    shape = tuple(total if k == d else first.shape[k] for k in range(first.ndim))
    return compute(shape, body, name=f"{first.name}_concat")

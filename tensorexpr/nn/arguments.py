"""Checking and normalising the arguments of the ``te.nn`` layers, as torch spells them.

Every layer checks its tensors and turns torch's flexible spellings (negative
``dim``\\ s, an int or a tuple for ``stride``) into one form before it builds
anything, so a mistake is reported at the user's call with the layer's name
(``te.nn.conv2d: ...``), not deep inside a pass. Each helper takes ``fn``, the
layer's name, for those messages.

>>> import tensorexpr as te
>>> x = te.placeholder((2, 3, 4), name="x")
>>> dim_indices(x, (-1, 0), "sum"), int_tuple(3, 2, "stride", "conv2d")
((0, 2), (3, 3))
"""
from __future__ import annotations

import builtins
from typing import Optional, Sequence, Tuple, Union

from .. import api
from ..errors import describe, user_origin
from ..names import free_name
from ..ir import Expr, Tensor, is_float, same, tensor_inputs, topo_order

#: torch's spelling of a window argument: one int for every dimension, or one per dimension
IntOrTuple = Union[int, Sequence[int]]


def check_tensor(x, fn: str, what: str = "input") -> Tensor:
    """``x``, which must be a te tensor; ``what`` names it in the error.

    >>> import tensorexpr as te
    >>> check_tensor([1.0], "relu")
    Traceback (most recent call last):
    ...
    TypeError: te.nn.relu at ...: input must be a te tensor (te.placeholder or te.compute), not list
    """
    if not isinstance(x, Tensor):
        raise TypeError(f"te.nn.{fn} at {user_origin()}: {what} must be a te tensor "
                        f"(te.placeholder or te.compute), not {type(x).__name__}")
    return x


def check_float_tensor(x, fn: str, what: str = "input") -> Tensor:
    """``x``, which must be a float32 or float64 te tensor.

    >>> import tensorexpr as te
    >>> check_float_tensor(te.placeholder((2,), dtype="int64", name="i"), "relu")
    Traceback (most recent call last):
    ...
    TypeError: te.nn.relu: tensor 'i' ... is int64; input must be float32 or float64 ...
    """
    check_tensor(x, fn, what)
    if not is_float(x.dtype):
        raise TypeError(f"te.nn.{fn}: {describe(x)} is {x.dtype}; {what} must be float32 or "
                        f"float64 (cast it with te.compute(..., lambda *i: x[i].astype(...)))")
    return x


def check_ndim_at_least(x: Tensor, n: int, fn: str, layout: str) -> None:
    """``x`` must have at least ``n`` dimensions; ``layout`` names them (``"N, C, *"``).

    >>> import tensorexpr as te
    >>> check_ndim_at_least(te.placeholder((4,), name="x"), 2, "batch_norm", "N, C, *")
    Traceback (most recent call last):
    ...
    ValueError: te.nn.batch_norm: ... has shape (4,); expected at least 2 dimensions (N, C, *)
    """
    if x.ndim < n:
        raise ValueError(f"te.nn.{fn}: {describe(x)} has shape {x.shape}; expected at least "
                         f"{n} dimensions ({layout})")


def dim_index(x: Tensor, dim: int, fn: str) -> int:
    """``dim`` in ``[0, x.ndim)`` (negative counts from the end, as in torch).

    >>> import tensorexpr as te
    >>> dim_index(te.placeholder((2, 3, 4), name="x"), -1, "softmax")
    2
    """
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"te.nn.{fn}: dim must be an int, not {dim!r}")
    if not -builtins.max(x.ndim, 1) <= dim < builtins.max(x.ndim, 1):
        raise IndexError(f"te.nn.{fn}: dim {dim} is out of range for {describe(x)} with "
                         f"{x.ndim} dimensions")
    return dim % builtins.max(x.ndim, 1)


def dim_indices(x: Tensor, dim, fn: str) -> Tuple[int, ...]:
    """``dim`` (an int, a sequence of them or None: every dimension) normalised and sorted.

    >>> import tensorexpr as te
    >>> x = te.placeholder((2, 3, 4), name="x")
    >>> dim_indices(x, None, "sum"), dim_indices(x, 1, "sum"), dim_indices(x, (2, -3), "sum")
    ((0, 1, 2), (1,), (0, 2))
    """
    if dim is None:
        return tuple(range(x.ndim))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    out = tuple(sorted({dim_index(x, d, fn) for d in dims}))
    if len(out) != len(dims):
        raise ValueError(f"te.nn.{fn}: dim {dim!r} names a dimension twice")
    return out


def int_tuple(v, n: int, what: str, fn: str) -> Tuple[int, ...]:
    """An int or a length-``n`` sequence of ints as an ``n``-tuple (torch's ``_pair``).

    >>> int_tuple(2, 2, "stride", "conv2d"), int_tuple((1, 3), 2, "stride", "conv2d")
    ((2, 2), (1, 3))
    """
    vals = (v,) * n if isinstance(v, int) else tuple(v)
    if len(vals) != n or not all(isinstance(a, int) and not isinstance(a, bool) for a in vals):
        raise TypeError(f"te.nn.{fn}: {what} must be an int or a tuple of {n} ints, not {v!r}")
    return vals


def static_size(x: Tensor, d: int, fn: str, why: str) -> int:
    """The size of dimension ``d`` of ``x``, which must be an int; ``why`` says who needs it.

    >>> import tensorexpr as te
    >>> x = te.placeholder((te.var("n"), 3), name="x")
    >>> static_size(x, 1, "group_norm", "splitting channels into groups")
    3
    >>> static_size(x, 0, "reshape", "reshape")
    Traceback (most recent call last):
    ...
    ValueError: te.nn.reshape: dimension 0 of ... is the symbolic size n; reshape needs ...
    """
    s = x.shape[d]
    if not isinstance(s, int):
        raise ValueError(f"te.nn.{fn}: dimension {d} of {describe(x)} is the symbolic size "
                         f"{s}; {why} needs a static size there")
    return s


def size_expr(e) -> Expr:
    """A shape entry as an expression (ints become index constants), to compare with ``same``.

    >>> size_expr(4).dtype
    'int64'
    """
    return api.const(e, "int64") if isinstance(e, int) else e


def check_same_shape(a: Tensor, b: Tensor, fn: str) -> None:
    """``b`` must have ``a``'s shape (symbolic sizes compared as expressions).

    >>> import tensorexpr as te
    >>> n = te.var("n")
    >>> check_same_shape(te.placeholder((n, 2), name="a"), te.placeholder((n, 2), name="b"),
    ...                  "mse_loss")
    """
    if a.ndim != b.ndim or not all(same(p, q) for p, q in zip(a.dims, b.dims)):
        raise ValueError(f"te.nn.{fn}: {describe(b)} has shape {b.shape}; it must match "
                         f"{a.name!r}'s shape {a.shape}")


def check_vector(v: Optional[Tensor], n, fn: str, what: str) -> None:
    """``v`` (optional: None passes) must be a float tensor of shape ``(n,)``.

    >>> import tensorexpr as te
    >>> check_vector(te.placeholder((3,), name="b"), 4, "linear", "bias")
    Traceback (most recent call last):
    ...
    ValueError: te.nn.linear: bias tensor 'b' ... has shape (3,); expected (4,)
    """
    if v is None:
        return
    check_float_tensor(v, fn, what)
    if v.ndim != 1 or not same(v.dims[0], size_expr(n)):
        raise ValueError(f"te.nn.{fn}: {what} {describe(v)} has shape {v.shape}; expected "
                         f"({n},)")


def compute(shape, body, name: str) -> Tensor:
    """``te.compute(shape, body, name=name)``, its name apart from every tensor it reads.

    The layers name their results after their input (``x_logsumexp``, then
    ``x_logsumexp_sum`` for its inner sum); a layer applied to another's result could
    repeat a name already in the program (``te.nn.sum`` of a logsumexp), and two
    tensors printed alike make a schedule and its lookups ambiguous. Such a result
    takes the first free ``name_2``, ``name_3``...

    >>> import tensorexpr as te
    >>> x = te.placeholder((2, 3), name="x")
    >>> y = compute((2, 3), lambda i, j: x[i, j] * 2, name="x")
    >>> y.name
    'x_2'
    """
    t = api.compute(shape, body, name=name)
    free = free_name(name, {u.name for u in topo_order(list(tensor_inputs(t)))})
    return t if free == name else api.compute(shape, body, name=free)

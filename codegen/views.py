"""Outputs that are strided views of an input: returned without a copy.

An output whose body is nothing but a read of an input, at an element offset
that is affine in the output's axes (a reshape, a flatten, a transpose, a
slice, a broadcast), holds exactly the elements of that input at fixed
strides. The C backend returns it as a numpy view of the input, as numpy's own
``reshape`` and ``transpose`` and PyTorch's autograd do, instead of running a
copy kernel. isl decides affinity exactly, floor division and modulo included
(``polyhedral.affine_form``), so a flatten written with ``//`` and ``%`` is a
view. The view is read-only: writing through it would change the caller's
input; ``.copy()`` gives an array of one's own.

Only outputs whose shape and input shape are constants are considered (with
symbolic sizes the answer could differ from call to call); the numpy
reference backend always copies.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from tensorexpr.ir import Compute, Placeholder, Read, Tensor, walk
from tensorexpr.transform import const_value, flat_index



@dataclass(frozen=True)
class View:
    """Output elements ``out[x] = input.flat[offset + sum(strides[k] * x[k])]``."""

    input: int  # position among the program's inputs
    shape: Tuple[int, ...]
    dtype: str
    offset: int  # in elements
    strides: Tuple[int, ...]  # in elements

    def of(self, a: np.ndarray) -> np.ndarray:
        """The read-only view of ``a`` (C-contiguous, of the input's shape).

        >>> v = View(0, (2, 3), "float32", 0, (1, 2))      # a transpose of a (3, 2) array
        >>> x = np.arange(6, dtype=np.float32).reshape(3, 2)
        >>> bool(np.array_equal(v.of(x), x.T)), v.of(x).flags.writeable
        (True, False)
        """
        size = a.dtype.itemsize
        out = np.ndarray(self.shape, a.dtype, buffer=a, offset=self.offset * size,
                         strides=tuple(s * size for s in self.strides))
        out.flags.writeable = False
        return out


def find(outputs: Sequence[Tensor], inputs: Sequence[Tensor]) -> Dict[int, View]:
    """``{position in outputs: View}`` for the outputs that are views of inputs.

    >>> import tensorexpr as te
    >>> X = te.placeholder((2, 3, 4), name="X")
    >>> Y = te.compute((2, 12), lambda n, k: X[n, k // 4, k % 4], name="Y")
    >>> find([Y], [X])
    {0: View(input=0, shape=(2, 12), dtype='float32', offset=0, strides=(12, 1))}
    """
    position = {t.uid: k for k, t in enumerate(inputs)}
    out: Dict[int, View] = {}
    for k, t in enumerate(outputs):
        v = _view(t, position, inputs)
        if v is not None:
            out[k] = v
    return out


def _view(t: Tensor, position: Dict[int, int], inputs) -> Optional[View]:
    if not isinstance(t, Compute) or t.carry is not None or t.self_ref is not None:
        return None
    body = t.body
    if not (isinstance(body, Read) and isinstance(body.tensor, Placeholder)
            and body.tensor.uid in position and body.tensor.dtype == t.dtype):
        return None
    src = body.tensor
    shape = [const_value(d) for d in t.dims]
    dims = [const_value(d) for d in src.dims]
    if any(n is None or n < 1 for n in shape + dims):
        return None
    if any(isinstance(x, Read) for i in body.indices for x in walk(i, unique=True)):
        return None  # data-dependent: its range is checked at run time
    from tensorexpr import polyhedral  # isl: only for an output that reads an input
    form = polyhedral.affine_form(flat_index(body.indices, dims), t.axes)
    if form is None:
        return None
    c, coeffs = form
    lo = c + sum(min(0, a * (n - 1)) for a, n in zip(coeffs, shape))
    hi = c + sum(max(0, a * (n - 1)) for a, n in zip(coeffs, shape))
    if lo < 0 or hi >= math.prod(dims):
        return None  # never for a program that passed the bounds check; stay safe
    return View(position[src.uid], tuple(shape), t.dtype, c, tuple(coeffs))


class WithViews:
    """``impl(arrays, sizes)``: the outputs that are views taken from the inputs, the
    others computed by ``rest`` (None: no kernel at all)."""

    def __init__(self, n_outputs: int, views: Dict[int, View],
                 rest: Optional[Callable[..., List[np.ndarray]]]):
        self.views = views
        self.rest = rest
        self._plan = [views.get(k) for k in range(n_outputs)]

    def with_rest(self, rest: Callable[..., List[np.ndarray]]) -> "WithViews":
        """The same views, the other outputs computed by ``rest``."""
        return WithViews(len(self._plan), self.views, rest)

    @property
    def writes_into(self) -> bool:
        """Whether ``__call__`` takes ``into=`` (see ``KernelFunction.__call__``)."""
        return bool(getattr(self.rest, "writes_into", False))

    def __call__(self, arrays: Sequence[np.ndarray], sizes, into=None) -> List[np.ndarray]:
        if self.rest is None:
            computed = iter(())
        elif into is None:
            computed = iter(self.rest(arrays, sizes))
        else:  # the computed outputs' entries, in order
            computed = iter(self.rest(arrays, sizes,
                                      into=[d for d, v in zip(into, self._plan) if v is None]))
        return [next(computed) if v is None else v.of(arrays[v.input]) for v in self._plan]


def describe(outputs: Sequence[Tensor], inputs: Sequence[Tensor],
             views: Dict[int, View]) -> str:
    """A C comment naming the outputs returned as views (prefixed to ``f.source``)."""
    from .cemit import sanitize
    lines = [sanitize(f"{outputs[k].name} = a read-only view of {inputs[v.input].name} "
                      f"(offset {v.offset}, strides {v.strides} elements): no kernel", 200)
             for k, v in sorted(views.items())]
    return "/* " + "\n   ".join(lines) + " */\n"

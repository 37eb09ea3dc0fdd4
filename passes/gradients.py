"""What ``differentiate`` answers and to what: the :class:`Gradients` it returns and
the inputs a request differentiates with respect to.

Apart from :mod:`passes.differentiate` (which needs isl) so that the on-disk cache
of its results (``tensorexpr.differentiate_cache``) can make and key them without
importing the machinery that computes them.
"""
from __future__ import annotations

from typing import Dict, List, Sequence

from tensorexpr.errors import describe, user_origin
from tensorexpr.ir import Placeholder, Tensor, is_float, topo_order


class Gradients(tuple):
    """The gradients, in the order of ``inputs``; ``adjoints`` maps every tensor on a
    path from the inputs to the output to its adjoint tensor.

    >>> import tensorexpr as te
    >>> X = te.placeholder((2,), name="X")
    >>> g = Gradients([X], {X: X})
    >>> len(g), g.adjoints[X] is X
    (1, True)
    """

    adjoints: Dict[Tensor, Tensor]

    def __new__(cls, grads, adjoints):
        obj = super().__new__(cls, grads)
        obj.adjoints = adjoints
        return obj


def resolve_inputs(outputs: Sequence[Tensor], inputs) -> List[Tensor]:
    """The tensors ``differentiate(outputs, inputs)`` differentiates with respect to, as a
    list: ``inputs=None`` means every floating-point placeholder the outputs read, in
    creation order (an index or label array has no gradient, so it is not one of them).

    An integer or boolean tensor listed explicitly is a ``TypeError``: its gradient
    would be a silent zero, which hides a mistake (a float cast to int on the way).

    >>> import tensorexpr as te
    >>> A, B = te.placeholder((2,), name="A"), te.placeholder((2,), name="B")
    >>> idx = te.placeholder((2,), "int32", name="idx")
    >>> C = te.compute((2,), lambda i: B[i] * A[idx[i]], name="C")
    >>> [t.name for t in resolve_inputs([C], None)], [t.name for t in resolve_inputs([C], B)]
    (['A', 'B'], ['B'])
    >>> resolve_inputs([C], [A, idx])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    TypeError: differentiate at <doctest ...: input tensor 'idx' (defined at ...) is int32, which has no gradient; ...value
    """
    if inputs is None:
        return sorted((t for t in topo_order(list(outputs))
                       if isinstance(t, Placeholder) and is_float(t.dtype)),
                      key=lambda t: t.uid)
    got = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    for t in got:
        if not isinstance(t, Tensor):
            raise TypeError(
                f"differentiate at {user_origin()}: inputs= takes the tensors to differentiate "
                f"with respect to (te.placeholder, te.compute...), not a "
                f"{type(t).__name__}; pass arrays when calling the built gradient")
        if not is_float(t.dtype):
            raise TypeError(
                f"differentiate at {user_origin()}: input {describe(t)} is {t.dtype}, which "
                f"has no gradient; differentiate with respect to floating-point inputs only, "
                f"or cast it ({t.name}.astype(\"float32\")) where it is read if it is a value")
    return got


__all__ = ["Gradients", "resolve_inputs"]

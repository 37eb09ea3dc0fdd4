"""What ``differentiate`` answers and to what: the :class:`Gradients` it returns and
the inputs a request differentiates with respect to.

Apart from :mod:`passes.differentiate` (which needs isl) so that the on-disk cache
of its results (``tensorexpr.differentiate_cache``) can make and key them without
importing the machinery that computes them.
"""
from __future__ import annotations

from typing import Dict, List, Sequence

from tensorexpr.ir import Placeholder, Tensor, topo_order


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
    list: ``inputs=None`` means every placeholder the outputs read, in creation order.

    >>> import tensorexpr as te
    >>> A, B = te.placeholder((2,), name="A"), te.placeholder((2,), name="B")
    >>> C = te.compute((2,), lambda i: B[i] * A[i], name="C")
    >>> [t.name for t in resolve_inputs([C], None)], [t.name for t in resolve_inputs([C], B)]
    (['A', 'B'], ['B'])
    """
    if inputs is None:
        return sorted((t for t in topo_order(list(outputs)) if isinstance(t, Placeholder)),
                      key=lambda t: t.uid)
    if isinstance(inputs, Tensor):
        return [inputs]
    return list(inputs)


__all__ = ["Gradients", "resolve_inputs"]

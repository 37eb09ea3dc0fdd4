"""passes.contexts: where a tensor's body evaluates each node, kept on the tensor."""
from __future__ import annotations

from dataclasses import replace

import tensorexpr as te
from passes.contexts import contexts


def _tensor():
    X = te.placeholder((4,), name="X")
    return X, te.compute((4,), lambda i: te.select(i > 0, te.exp(X[i - 1]), X[i]), name="Y")


def test_contexts_are_kept_on_the_tensor_and_a_rebuilt_tensor_gets_its_own():
    X, Y = _tensor()
    first = contexts(Y)
    assert contexts(Y) is first  # asked again of the same tensor: not worked out again
    Z = replace(Y, body=Y.body.a)  # (a rebuilt tensor: another body)
    got = contexts(Z)
    assert got is not first and got[0][0] is Z.body
    assert [str(x) for x, _, _, _ in got] != [str(x) for x, _, _, _ in first]


def test_kept_contexts_are_what_a_fresh_walk_gives():
    from passes import contexts as module
    X, Y = _tensor()
    kept = contexts(Y)
    fresh = module._contexts(Y)
    assert [(id(x), b, g, c) for x, b, g, c in kept] == [(id(x), b, g, c) for x, b, g, c in fresh]

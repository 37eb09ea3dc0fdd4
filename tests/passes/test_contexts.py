"""passes.contexts: where a tensor's body evaluates each node, kept on the tensor."""
from __future__ import annotations

from dataclasses import replace

import tensorexpr as te
from passes.contexts import MAX_GUARD_SETS, contexts


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


def test_equal_guard_sets_are_one_tuple_and_a_deep_chain_reaches_each_node_once():
    X = te.placeholder((8,), "float64", "X")
    C = te.placeholder((8,), "float64", "C")

    def body(i):
        e = X[i]
        for d in range(300):
            e = te.select(C[d % 8] > 0.0, te.tanh(e) * 0.5, e * C[(d + 1) % 8])
        return e
    Y = te.compute((8,), body, name="Y")
    got = contexts(Y)
    by_set = {}
    for _, _, guards, _ in got:
        key = tuple((id(g), p) for g, p in guards)
        by_set.setdefault(key, set()).add(id(guards))
    assert all(len(ids) == 1 for ids in by_set.values())
    # (exact sets up to MAX_GUARD_SETS, then the outermost guard of either polarity)
    deepest = max(len(g) for _, _, g, _ in got)
    nodes = len({id(x) for x, _, _, _ in got})
    assert deepest == 300 and len(got) <= (MAX_GUARD_SETS + 2) * nodes, (deepest, len(got), nodes)

"""The expression lowering (``codegen.lower_expr``): what it keeps per node must follow
the analyses that change it."""
from __future__ import annotations

import numpy as np

import tensorexpr as te
from benchmarks.deep_programs import select_chain
from codegen.lower import Lowerer
from codegen.signature import Signature


def test_a_node_bound_by_a_later_analysis_is_staged_under_an_earlier_root():
    A = te.placeholder((4,), name="A")
    x = te.exp(A[0])
    first = x + 1.0        # x once: not computed into a local
    second = x * x         # x twice: now it is, and under `first` too
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    lw = Lowerer(Signature([B], [A]))
    lw._analyse(first)
    assert not lw._binds_below(first)
    lw._analyse(second)
    assert lw._binds_below(first) and lw._binds_below(second)


def test_a_value_shared_by_two_expressions_is_computed_once_in_c():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: te.exp(A[i]) + 1.0, name="B")
    C = te.compute((8,), lambda i: te.exp(A[i]) * te.exp(A[i]), name="C")
    f = te.build([B, C], inputs=[A])
    a = np.linspace(-1, 1, 8, dtype=np.float32)
    b, c = f(a)
    np.testing.assert_allclose(b, np.exp(a) + 1, rtol=1e-6)
    np.testing.assert_allclose(c, np.exp(a) ** 2, rtol=1e-6)


def test_a_chain_of_1000_nested_selects_lowers_to_c_linear_in_its_depth():
    # Lowerer.evaluated recursed once per nested select (RecursionError at ~1000) and
    # passes.contexts spelt out every guard set per node (quadratic: 26 s at 1000)
    from codegen.pipeline import source_text
    sizes = {}
    for depth in (500, 1000):
        Y, X, C = select_chain(depth)
        sizes[depth] = len(source_text(Signature([Y], [X, C])))
    assert sizes[1000] <= 2.1 * sizes[500], sizes


def test_a_chain_of_1000_nested_selects_agrees_with_numpy():
    Y, X, C = select_chain(1000)
    rng = np.random.default_rng(4)
    x, c = rng.uniform(-1, 1, 8), rng.uniform(-1, 1, 8)
    want = np.array(x)
    for d in range(1000):  # (the numpy backend recurses per level: not at this depth)
        want = np.where(np.roll(c, -d) > 0, np.tanh(want) * 0.5, want * np.roll(c, -d - 1))
    assert np.allclose(te.build(Y)(x, c), want, rtol=1e-12, atol=1e-14)

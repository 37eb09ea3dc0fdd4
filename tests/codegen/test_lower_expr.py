"""The expression lowering (``codegen.lower_expr``): what it keeps per node must follow
the analyses that change it."""
from __future__ import annotations

import numpy as np

import tensorexpr as te
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

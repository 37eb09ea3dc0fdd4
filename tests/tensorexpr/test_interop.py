"""tensorexpr.interop: what the adapters share (no framework needed)."""
from __future__ import annotations

import doctest

import numpy as np
import pytest

import tensorexpr as te
from tensorexpr import interop
from tensorexpr.interop import Program, eval_size


@pytest.mark.parametrize("module", ["tensorexpr.interop", "tensorexpr.torch", "tensorexpr.jax"])
def test_docstring_examples(module):
    if module != "tensorexpr.interop":
        pytest.importorskip(module.split(".")[1])
    import importlib
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


def test_eval_size_of_size_expressions():
    n, m = te.var("n"), te.var("m")
    for expr, want in [(n + 1, 8), (2 * n - m, 11), (n // 2, 3), (n % 4, 3),
                       (te.maximum(n - 9, 0), 0), (te.minimum(n, m), 3)]:
        dims = te.placeholder((expr,)).dims
        assert eval_size(dims[0], {"n": 7, "m": 3}) == want


def test_check_shapes_names_the_input_and_the_bound_sizes():
    n = te.var("n")
    A = te.placeholder((n, 3), name="A")
    B = te.placeholder((n + 1,), name="B")
    p = Program(te.compute((n,), lambda i: A[i, 0] + B[i + 1], name="Y"))
    assert p.check_shapes([(4, 3), (5,)]) == {"n": 4}
    assert p.result_shapes({"n": 4}) == [(4,)]
    with pytest.raises(ValueError, match=r"input 'B' has shape \(4,\), expected \(5,\).*n=4"):
        p.check_shapes([(4, 3), (4,)])
    with pytest.raises(ValueError, match="input 'A' must have 2 dimension"):
        p.check_shapes([(4,), (5,)])


def test_several_outputs_sum_their_gradients_and_saved_extras_have_a_gradient():
    X = te.placeholder((4,), "float64", "X")
    E = te.compute((4,), lambda i: te.exp(X[i]), name="E")
    k = te.reduce_axis(4, name="k")
    S = te.compute((), lambda: te.sum(E[k], axis=k), name="S")
    T = te.compute((4,), lambda i: E[i] * 3.0, name="T")
    p = Program([S, T])
    assert [t.name for t in p.saved] == ["E"] and [t.name for t in p.extras] == ["E"]
    x = np.linspace(-1, 1, 4)
    s, t, e = p.run([x])
    hs, ht = np.float64(2.0), np.arange(4.0)
    (g,) = p.grad().run([x, hs, ht, e])
    np.testing.assert_allclose(g, np.exp(x) * (hs + 3 * ht))
    (ge,) = p.extras_grad().run([x, np.ones(4)])  # d/dx sum(E) through the saved value
    np.testing.assert_allclose(ge, np.exp(x))


def test_a_float64_output_of_a_float32_input_gives_a_float32_gradient():
    X = te.placeholder((3,), name="X")
    Y = te.compute((3,), lambda i: X[i].astype("float64") * 2.0, name="Y")
    p = Program(Y)
    (g,) = p.grad().run([np.ones(3, np.float32), np.ones(3), *p.run([np.ones(3, np.float32)])
                         [len(p.outputs):]])
    assert g.dtype == np.float32 and g.tolist() == [2.0, 2.0, 2.0]


def test_op_names_are_identifiers():
    assert interop.op_name("9 lives") == "t_9_lives" and interop.op_name("--") == "op"

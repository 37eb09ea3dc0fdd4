"""Common factors out of an adjoint's terms (passes.common_factors): the rewrite on
small IR, and gradients of random elementwise programs that read one value several
times keep their values (float64 central differences; the C backend against numpy)."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

import tensorexpr as te
from passes.common_factors import MAX_TERMS, factored_sum, factors
from tensorexpr.ir import Binary, walk

from .gradcheck import check_grads, numeric_grad, rel_err


def _muls(e) -> int:
    return sum(1 for x in walk(e) if isinstance(x, Binary) and x.op == "mul")


def test_a_factor_of_every_term_is_taken_out_once():
    X = te.placeholder((4,), name="X")
    H = te.placeholder((4,), name="H")
    terms = [H[0] * X[1], H[0] * X[2] * X[3], X[3] * H[0]]
    got, = factored_sum(terms)
    # (what is left shares X[3] in turn)
    assert str(got) == "(H[0] * (X[1] + (X[3] * (X[2] + 1.0))))"
    assert _muls(got) == 2 < sum(_muls(t) for t in terms)


def test_terms_without_a_shared_factor_are_returned_as_they_are():
    X = te.placeholder((4,), name="X")
    terms = [X[0] * X[1], X[2] * 2.0, X[3]]
    assert all(a is b for a, b in zip(factored_sum(terms), terms))
    assert [str(f) for f in factors(X[0])] == ["X[0]"]


def test_equal_terms_and_repeated_factors_end():
    X = te.placeholder((4,), name="X")
    got = factored_sum([X[0], X[0], X[0] * X[0]])
    assert [str(t) for t in got] == ["(X[0] * ((1.0 + 1.0) + X[0]))"]


def test_many_terms_are_left_alone():
    X = te.placeholder((4,), name="X")
    terms = [X[0] * X[k % 4] for k in range(MAX_TERMS + 1)]
    assert factored_sum(terms) == terms


def _gelu(X):
    c = (2.0 / np.pi) ** 0.5

    def body(i, j):
        v = X[i, j]
        return 0.5 * v * (1.0 + te.tanh(c * (v + 0.044715 * v * v * v)))
    return te.compute(X.shape, body, name="Y")


def test_the_gelu_gradient_multiplies_by_the_head_and_the_tanh_chain_once():
    X = te.placeholder((3, 5), "float64", "X")
    H = te.placeholder((3, 5), "float64", "H")
    dX = te.differentiate(_gelu(X), [X], head=H)[0]
    reads_of_h = [x for x in walk(dX.body) if getattr(x, "tensor", None) is H]
    tanhs = {x for x in walk(dX.body) if getattr(x, "op", None) == "tanh"}
    assert len(reads_of_h) == 1, str(dX)
    assert len(tanhs) == 1, str(dX)
    rng = np.random.default_rng(0)
    x, h = rng.standard_normal((3, 5)), rng.standard_normal((3, 5))
    got = te.build(dX, inputs=[X, H], backend="numpy")(x, h)
    L = te.build(_gelu(X), inputs=[X], backend="numpy")
    want = numeric_grad(lambda a: float((L(a) * h).sum()), [x], 0)
    assert rel_err(got, want) < 1e-7


_OPS = ("mul", "add", "sub", "tanh", "exp_neg", "square")


def _program(ops, X):
    # a chain that reuses the input and every value made so far: many reads of each
    def body(i):
        vals = [X[i]]
        for k, op in enumerate(ops):
            a, b = vals[-1], vals[k // 2]
            vals.append({"mul": lambda: a * b, "add": lambda: a + b * 0.5, "sub": lambda: a - b,
                         "tanh": lambda: te.tanh(a) * b, "exp_neg": lambda: te.exp(-a * a) + b,
                         "square": lambda: a * a + X[i]}[op]())
        return vals[-1]
    return te.compute(X.shape, body, name="Y")


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(_OPS), min_size=1, max_size=6), st.integers(1, 9),
       st.integers(0, 2**31 - 1))
def test_random_programs_reading_values_several_times_keep_their_gradients(ops, n, seed):
    X = te.placeholder((n,), "float64", "X")
    Y = _program(ops, X)
    L = te.compute((), lambda: _total(Y, n), name="L")
    x = np.random.default_rng(seed).uniform(-1, 1, n)
    check_grads(L, [X], [x], tol=1e-6)
    check_grads(L, [X], [x], tol=1e-6, backend="c")


def _total(Y, n):
    r = te.reduce_axis(n, "r")
    return te.sum(Y[r], axis=r)

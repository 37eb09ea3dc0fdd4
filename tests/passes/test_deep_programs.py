"""Long chains of tensors and deep expressions (DAGs): they build, match and stay linear."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te

from .gradcheck import check_grads


def _deep(n, N=4):
    """``x = tanh(x) * 0.5 + x`` (or ``sin``) ``n`` times: x is shared by two parents."""
    X = te.placeholder((N,), name="X", dtype="float64")

    def body(i):
        x = X[i]
        for k in range(n):
            x = te.tanh(x) * 0.5 + x if k % 2 else te.sin(x) * 0.25 + x
        return x
    T = te.compute((N,), body, name="T")
    r = te.reduce_axis(N)
    L = te.compute((), lambda: te.sum(T[r] * T[r], axis=r), name="L")
    return X, T, L


def _chain(n, N=4):
    X = te.placeholder((N,), name="X", dtype="float64")
    # well conditioned: the gradient stays of order 1 along the chain
    ops = [lambda a: te.tanh(a) * 0.25 + a * 0.8, lambda a: te.sin(a) * 0.2 + a,
           lambda a: a * 0.9 + a * a * 0.05, lambda a: te.sigmoid(a) + a * 0.5]
    T = X
    for k in range(n):
        T = te.compute((N,), lambda i, T=T, k=k: ops[k % len(ops)](T[i]), name=f"T{k}")
    r = te.reduce_axis(N)
    L = te.compute((), lambda: te.sum(T[r] * T[r], axis=r), name="L")
    return X, T, L


@pytest.mark.parametrize("make", [_deep, _chain])
def test_gradient_of_a_deep_program_matches_central_differences(make):
    X, _, L = make(12)
    x = np.random.default_rng(0).uniform(-1, 1, 4)
    check_grads(L, [X], [x], tol=1e-6)


@pytest.mark.parametrize("make,n", [(_deep, 600), (_chain, 300)])
def test_deep_programs_build_on_both_backends_and_agree(make, n):
    X, T, L = make(n)
    x = np.random.default_rng(1).uniform(-1, 1, 4)
    (g,) = te.differentiate(L, [X])
    for out in (T, g):
        want = te.build(out, backend="numpy")(x)
        got = te.build(out)(x)
        assert np.allclose(got, want, rtol=1e-9, atol=1e-12)


def test_gradient_source_grows_linearly_with_depth():
    sizes = []
    for n in (100, 200):
        X, _, L = _deep(n)
        (g,) = te.differentiate(L, [X])
        sizes.append(len(te.build(g).source))
    assert sizes[1] <= 2.3 * sizes[0], sizes


def test_printing_a_dag_names_shared_subexpressions():
    _, T, _ = _deep(3000)
    text = str(T)
    assert "let $1 = " in text and len(text) < 400_000


def _largest_function(src):
    """Lines of the longest C function in ``src`` (a ``{`` at column 0 opens one)."""
    best, n = 0, None
    for line in src.splitlines():
        if line == "{":
            n = 0
        elif line == "}" and n is not None:
            best, n = max(best, n), None
        elif n is not None:
            n += 1
    return best


def test_a_chain_gradient_compiles_as_functions_of_bounded_size():
    # gcc's time grows faster than linearly with one function's size: the gradient
    # of a chain of 1,000 tensors (one function) took it minutes. The longest
    # function must not grow with the chain.
    from codegen.pipeline import source_text
    from codegen.signature import Signature
    largest = []
    for n in (150, 600):
        X, _, L = _chain(n)
        (g,) = te.differentiate(L, [X])
        largest.append(_largest_function(source_text(Signature([g], [X]))))
    assert largest[1] <= 1.2 * largest[0] + 50, largest

"""Long chains of tensors and deep expressions (DAGs): they build, match and stay linear."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te
from benchmarks.deep_programs import chain, deep

from .gradcheck import check_grads


@pytest.mark.parametrize("make", [deep, chain])
def test_gradient_of_a_deep_program_matches_central_differences(make):
    X, _, L = make(12)
    x = np.random.default_rng(0).uniform(-1, 1, 4)
    check_grads(L, [X], [x], tol=1e-6)


@pytest.mark.parametrize("make,n", [(deep, 600), (chain, 300)])
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
        X, _, L = deep(n)
        (g,) = te.differentiate(L, [X])
        sizes.append(len(te.build(g).source))
    assert sizes[1] <= 2.3 * sizes[0], sizes


def test_printing_a_dag_names_shared_subexpressions():
    _, T, _ = deep(3000)
    text = str(T)
    assert "let $1 = " in text and len(text) < 400_000


def test_a_chain_gradient_compiles_as_functions_of_bounded_size():
    # gcc's time grows faster than linearly with one function's size: the gradient
    # of a chain of 1,000 tensors (one function) took it minutes. The longest
    # function must not grow with the chain.
    from codegen.compiler import largest_function
    from codegen.pipeline import source_text
    from codegen.signature import Signature
    largest = []
    for n in (150, 600):
        X, _, L = chain(n)
        (g,) = te.differentiate(L, [X])
        largest.append(largest_function(source_text(Signature([g], [X]))))
    assert largest[1] <= 1.2 * largest[0] + 50, largest

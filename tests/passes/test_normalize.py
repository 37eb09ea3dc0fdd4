"""Reduction extraction (passes/normalize.py): an extracted reduction is evaluated only
where the original program evaluated it."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te
from passes.normalize import normalize
from tensorexpr.ir import Placeholder


def extracted(Y):
    """The tensors ``normalize`` adds for ``Y``'s inner reductions, by name."""
    return {t.name: t for t in normalize([Y]).values()
            if not isinstance(t, Placeholder) and t.uid != Y.uid}


def run_both(Y, X, x):
    """``Y``'s extracted reductions computed alone, on both backends (they read X[i - 1]:
    outside X wherever their guards are lost)."""
    new = list(extracted(Y).values())
    for backend in ("numpy", "c"):
        got = te.build(new, inputs=[X], backend=backend)(x)
        yield got if isinstance(got, tuple) else (got,)


def test_guards_come_before_the_reductions_own_where():
    X = te.placeholder((5, 4), name="X")
    r = te.reduce_axis(4, name="r")
    Y = te.compute((5,), lambda i: te.select(i >= 1, te.max(X[i - 1, r], axis=r,
                                                            where=X[i - 1, r] > 0), 0.0), name="Y")
    (S,) = extracted(Y).values()
    assert "if (i >= 1) & (X[i - 1, r] > 0.0)}" in str(S)
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    for (s,) in run_both(Y, X, x):
        np.testing.assert_array_equal(s[1:], np.where(x > 0, x, -np.inf)[:-1].max(1))


@pytest.mark.parametrize("guard, first", [
    (lambda i, k: k == i - 1, 1), (lambda i, k: (k >= 2) & (i >= k), 2),
    (lambda i, k: (k + 2 == i) | (k + 3 == i), 2)])
def test_guards_over_other_axes_are_projected_onto_the_reductions(guard, first):
    """Guarded by k == i - 1 under a sum over k in [0, 5): computed over i alone, the max
    is needed (and its read in range) only where some k satisfies the guard."""
    X = te.placeholder((5, 4), name="X")
    r, k = te.reduce_axis(4, name="r"), te.reduce_axis(5, name="k")
    Y = te.compute((5,), lambda i: te.sum(te.select(guard(i, k), te.max(X[i - 1, r], axis=r),
                                                    0.0), axis=k), name="Y")
    (S,) = extracted(Y).values()
    assert S.body.where is not None
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    for (s,) in run_both(Y, X, x):
        np.testing.assert_array_equal(s[first:], x[first - 1:-1].max(1))


def test_a_reduction_in_the_right_operand_of_and_keeps_the_left_as_guard():
    X = te.placeholder((5, 4), name="X")
    r = te.reduce_axis(4, name="r")
    Y = te.compute((5,), lambda i: te.select((i >= 1) & (te.sum(X[i - 1, r], axis=r) > 0),
                                             1.0, 0.0), name="Y")
    (S,) = extracted(Y).values()
    assert str(S.body.where) == "(i >= 1)"
    x = np.random.default_rng(2).standard_normal((5, 4)).astype(np.float32)
    for (s,) in run_both(Y, X, x):
        np.testing.assert_allclose(s[1:], x[:-1].sum(1), rtol=1e-6)

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


def test_the_reductions_of_one_body_and_of_the_program_are_named_apart():
    # an LSTM's gates: several sums in one body were all "s_sum", so saved_values,
    # printed gradients and schedules listed eight tensors of one name
    X = te.placeholder((3, 4), "float64", name="X")
    k1, k2, k3 = (te.reduce_axis(4, name=n) for n in ("k1", "k2", "k3"))
    taken = te.compute((3,), lambda i: X[i, 0] * 2.0, name="Y_sum")  # a user's name
    Y = te.compute((3,), lambda i: te.tanh(te.sum(X[i, k1], axis=k1)) * te.exp(te.sum(
        X[i, k2] * X[i, k2], axis=k2)) + te.max(X[i, k3], axis=k3) + taken[i], name="Y")
    names = sorted(t.name for t in normalize([Y]).values())
    assert names == ["X", "Y", "Y_max", "Y_sum", "Y_sum_2", "Y_sum_3"], names
    saved = te.saved_values(te.differentiate(te.compute((), lambda: Y[0], name="L"), [X]), Y)
    assert len({t.name for t in saved}) == len(saved)


def test_sums_over_a_recurrences_previous_step_are_named_apart_in_its_gradient():
    T, H = 4, 3
    x = te.placeholder((T, H), "float64", name="x")
    U = te.placeholder((2, H, H), "float64", name="U")
    k = te.reduce_axis(H, name="k")
    s = te.recurrence((T, H), lambda h, t, j: te.select(t == 0, x[0, j], x[t, j] + te.sigmoid(
        te.sum(h[t - 1, k] * U[0, k, j], axis=k)) * te.tanh(te.sum(h[t - 1, k] * U[1, k, j],
                                                                  axis=k))), name="s", dtype="float64")
    r = te.reduce_axis(H, name="r")
    (dU,) = te.differentiate(te.compute((), lambda: te.sum(s[T - 1, r] ** 2, axis=r), name="L"),
                             [U])
    from tensorexpr.ir import topo_order
    names = [t.name for t in topo_order([dU])]
    assert len(names) == len(set(names)), sorted(names)

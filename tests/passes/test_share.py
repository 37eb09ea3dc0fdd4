"""Shared costly expressions (passes.share): what is stored once, what must not be, and
that values do not change."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tensorexpr as te
from passes.share import form, share


def _both(outs, ins, arrays):
    """The C build with sharing and without, and the numpy backend: all agree; sharing
    stores the same expression in the same type, so it changes no bit."""
    f = te.build(outs, ins)
    plain = te.build(outs, ins, options=te.ScheduleOptions(share=False))
    ref = te.build(outs, ins, backend="numpy")
    got, base, want = ([np.asarray(x) for x in (g(*arrays) if len(outs) > 1 else [g(*arrays)])]
                       for g in (f, plain, ref))
    for a, b, c in zip(got, base, want):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, c, rtol=1e-10, atol=1e-12)
    return f


def _shared(f):
    return [line.split("[")[0] for line in f.schedule.hoisted if " shared by " in line]


def test_one_form_read_at_shifted_indices_is_stored_once():
    # tanh(X[t + 1]) and tanh(X[t]): one form, stored over the union of both ranges
    X = te.placeholder((16, 8), "float64", "X")
    A = te.compute((15, 8), lambda t, j: te.tanh(X[t + 1, j]) * 2.0, name="A", dtype="float64")
    B = te.compute((16, 8), lambda t, j: te.tanh(X[t, j]) + X[t, j], name="B", dtype="float64")
    done, made = share([A, B])
    ((g, users),) = made
    assert g.shape == (16, 8) and [t.name for t in users] == ["A", "B"]
    assert "tanh" not in str(done[A.uid].body) and "tanh" not in str(done[B.uid].body)
    f = _both([A, B], [X], [np.random.default_rng(0).standard_normal((16, 8))])
    assert _shared(f) == ["A_s0"]


def test_offsets_of_one_index_are_one_formal():
    X = te.placeholder((8,), name="X")
    i = te.reduce_axis((1, 7), name="i")
    f, at = form(te.exp(X[i + 1] - X[i - 1]))
    assert str(f) == "exp(X[p0] - X[p0 - 2])" and len(at) == 1


def test_a_guarded_occurrence_is_stored_only_within_range():
    # sigmoid(X[t + 1]) is read only where t < 7: the stored tensor covers t + 1 <= 7
    X = te.placeholder((8,), "float64", "X")
    A = te.compute((8,), lambda t: te.select(t < 7, te.sigmoid(X[t + 1]), 0.0), name="A",
                   dtype="float64")
    B = te.compute((8,), lambda t: te.sigmoid(X[t]) * X[t], name="B", dtype="float64")
    _, made = share([A, B])
    assert [g.shape for g, _ in made] == [(8,)]
    _both([A, B], [X], [np.linspace(-2, 2, 8)])


def test_no_form_with_an_integer_division_by_a_value():
    X = te.placeholder((8,), "float64", "X")
    N = te.placeholder((8,), "int64", "N")
    A = te.compute((8,), lambda t: te.select(
        N[t] != 0, te.exp(X[t] + (t // N[t]).astype("float64")), 0.0), name="A", dtype="float64")
    B = te.compute((8,), lambda t: te.select(
        N[t] > 0, te.exp(X[t] + (t // N[t]).astype("float64")), 1.0), name="B", dtype="float64")
    assert share([A, B])[1] == []


def test_a_recurrences_own_values_and_checkpointed_ones_stay():
    T = 6
    X = te.placeholder((T,), "float64", "X")
    h = te.recurrence((T,), lambda h, t: te.select(t == 0, X[0], te.tanh(h[t - 1]) + X[t]),
                      name="h", dtype="float64", checkpoints=2)
    A = te.compute((T,), lambda t: te.tanh(h[t]) * 2.0, name="A", dtype="float64")
    B = te.compute((T,), lambda t: te.tanh(h[t]) + 1.0, name="B", dtype="float64")
    assert share([A, B])[1] == []  # h is checkpointed: its steps are not stored whole
    h2 = te.recurrence((T,), lambda h, t: te.select(t == 0, X[0], te.tanh(h[t - 1]) + X[t]),
                       name="h2", dtype="float64")
    A2 = te.compute((T,), lambda t: te.tanh(h2[t]) * 2.0, name="A2", dtype="float64")
    _, made = share([A2, h2])
    # tanh(h2[t]) in A2 and tanh(h2[t - 1]) inside h2's own body: only A2's may move, and
    # one occurrence is not worth storing
    assert made == []


def test_an_lstm_gradient_stores_its_gates_once():
    from benchmarks import recurrence_cells as rc
    T, B, H, D = 6, 2, 4, 3
    ins, grads = rc.te_program("lstm", T, B, H, D, None)
    arrays = rc.arrays("lstm", T, B, H, D)
    f = te.build(grads, ins)
    plain = te.build(grads, ins, options=te.ScheduleOptions(share=False))
    ref = te.build(grads, ins, backend="numpy")
    # the four gates and tanh(c), read by the adjoint and by every gate's gradient
    assert len(_shared(f)) == 5
    for a, b, c in zip(f(*arrays), plain(*arrays), ref(*arrays)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(a, c, rtol=1e-4, atol=1e-5)


@settings(max_examples=15, deadline=None)
@given(n=st.integers(2, 9), shift=st.integers(0, 2), op=st.sampled_from(["exp", "tanh", "sigmoid"]))
def test_random_shifts_and_sizes_agree(n, shift, op):
    X = te.placeholder((n + shift,), "float64", "X")
    fn = getattr(te, op)
    A = te.compute((n,), lambda t: fn(X[t + shift]) * X[t], name="A", dtype="float64")
    B = te.compute((n,), lambda t: fn(X[t]) - fn(X[t + shift]), name="B", dtype="float64")
    _both([A, B], [X], [np.linspace(-1.5, 1.5, n + shift)])


@pytest.mark.parametrize("size", [1, 3])
def test_symbolic_sizes(size):
    n = te.var("n")
    X = te.placeholder((n,), "float64", "X")
    A = te.compute((n,), lambda t: te.exp(X[t]) * 2.0, name="A", dtype="float64")
    B = te.compute((n,), lambda t: te.exp(X[t]) + X[t], name="B", dtype="float64")
    _both([A, B], [X], [np.linspace(-1, 1, size)])

"""te.recurrence: evaluation order, results, and the errors for impossible orders."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te

from .util import BACKENDS, check, rand, run


def ewma(alpha, T, R):
    d = te.placeholder((R, T), name="d")
    e = te.recurrence((T, R), lambda e, t, r: te.select(
        t == 0, d[r, 0], alpha * d[r, t] + (1 - alpha) * e[t - 1, r]), name="ewma")
    return d, e


@pytest.mark.parametrize("backend", BACKENDS)
def test_ewma_against_a_python_loop(backend):
    T, R, alpha = 9, 3, 0.3
    d, e = ewma(alpha, T, R)
    assert e.carry.axis == 0 and e.carry.step == 1
    x = rand(R, T)
    want = np.zeros((T, R), np.float32)
    for t in range(T):
        want[t] = x[:, 0] if t == 0 else alpha * x[:, t] + (1 - alpha) * want[t - 1]
    check(run(backend, e, x), want)


def test_recurrence_can_be_used_many_times():
    # te.recurrence once turned into the module tensorexpr.recurrence after its first use
    for _ in range(3):
        assert callable(te.recurrence)
        ewma(0.5, 4, 2)
    import tensorexpr.recurrence  # noqa: F401 - importing the module must not shadow it
    assert callable(te.recurrence)


@pytest.mark.parametrize("backend", BACKENDS)
def test_reduction_over_earlier_points(backend):
    x = rand(6)
    X = te.placeholder((6,), name="X")
    q = te.reduce_axis(6, name="q")
    tot = te.recurrence((6,), lambda c, t: X[t] + te.sum(c[q], axis=q, where=q < t), name="tot")
    want = np.zeros(6, np.float32)
    for t in range(6):
        want[t] = x[t] + want[:t].sum()
    check(run(backend, tot, x), want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_recurrence_and_carry_along_a_later_axis(backend):
    P = te.recurrence((4, 6), lambda p, r, t: te.select(t == 0, r + 1, p[r, t - 1] * 2),
                      name="pow2", dtype="int64")
    assert P.carry.axis == 1 and P.dtype == "int64"
    want = np.array([[(r + 1) * 2 ** t for t in range(6)] for r in range(4)], np.int64)
    check(run(backend, P), want)


def test_reading_the_same_point_is_an_error():
    d = te.placeholder((3, 8), name="d")
    with pytest.raises(te.RecurrenceError, match=r"'bad'.*reads itself at bad\[t, r\]"):
        te.recurrence((8, 3), lambda e, t, r: d[r, t] + e[t, r], name="bad")
    # RecurrenceError is a ValueError and a TensorExprError
    assert issubclass(te.RecurrenceError, ValueError)
    assert issubclass(te.RecurrenceError, te.TensorExprError)


@pytest.mark.parametrize("body", [
    lambda e, t: te.select(t < 7, e[t + 1], 1.0),  # a later point: recurrences run forward
    lambda e, t: te.select((t > 0) & (t < 7), e[t - 1] + e[t + 1], 1.0),
    lambda e, t: te.select(t > 0, e[t - 1] + e[te.minimum(t + 1, 7)] * 0.0, 1.0),
])
def test_reading_a_later_point_is_an_error(body):
    with pytest.raises(te.RecurrenceError, match=r"'later' .*reads itself at later\[.*not strictly"):
        te.recurrence((8,), body, name="later")


def test_data_dependent_self_read_is_an_error():
    idx = te.placeholder((8,), dtype="int64", name="idx")
    with pytest.raises(te.RecurrenceError, match="data-dependent"):
        te.recurrence((8,), lambda e, t: te.select(t > 0, e[te.maximum(idx[t], 0) % 8], 0.0),
                      name="dd")


def test_self_read_out_of_range_is_a_bounds_error():
    with pytest.raises(te.BoundsError, match=r"'unguarded'.*t = 0"):
        te.recurrence((8,), lambda e, t: e[t - 1] + 1.0, name="unguarded")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("guard", [
    lambda X, t: (X[t] > 0.0) & (t >= 1),
    lambda X, t: (t >= 1) & (X[t] > 0.0),
    lambda X, t: ~((X[t] <= 0.0) | (t < 1)),
])
def test_order_is_proven_from_the_affine_part_of_a_data_dependent_guard(backend, guard):
    # c[0] is earlier than c[t] only where t >= 1; the guard's data-dependent conjunct
    # once made isl drop the whole guard, and the valid recurrence was refused
    x = rand(6)
    X = te.placeholder((6,), name="X")
    c = te.recurrence((6,), lambda c, t: X[t] + te.select(guard(X, t), c[0], 0.0), name="c")
    assert c.carry.axis == 0 and c.carry.step == 1
    want = x + np.where((x > 0) & (np.arange(6) >= 1), x[0], 0.0).astype(np.float32)
    check(run(backend, c, x), want)


def test_a_data_dependent_guard_does_not_hide_a_read_of_the_same_point():
    X = te.placeholder((6,), name="X")
    with pytest.raises(te.RecurrenceError, match=r"reads itself at c\[0\]"):
        te.recurrence((6,), lambda c, t: X[t] + te.select((X[t] > 0.0) | (t >= 1), c[0], 0.0),
                      name="c")


def test_recurrence_without_dtype_takes_the_bodys_wider_type():
    # A float64 cumulative sum defined without dtype was rounded to float32 at every
    # step (error ~1e-7 instead of ~1e-16): the default widens to the body's type.
    T = 50
    d = te.placeholder((T,), "float64", name="d")
    e = te.recurrence((T,), lambda e, t: te.select(t == 0, d[0], e[t - 1] + d[t]), name="e")
    assert e.dtype == "float64"
    x = np.random.default_rng(0).standard_normal(T) * 1e3 + 0.1
    for backend in ("c", "numpy"):
        got = te.build(e, [d], backend=backend)(x)
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, np.cumsum(x), rtol=1e-13)
    # Asked for, float32 is kept; integer bodies stay float32, the default.
    assert te.recurrence((T,), lambda e, t: te.select(t == 0, d[0], e[t - 1] + d[t]),
                         dtype="float32").dtype == "float32"
    i = te.placeholder((T,), "int64", name="i")
    assert te.recurrence((T,), lambda e, t: te.select(t == 0, i[0], e[t - 1] + i[t])).dtype \
        == "float32"

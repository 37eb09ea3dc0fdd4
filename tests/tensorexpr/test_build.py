"""Built functions: their signature and out= (the calling convention is in
tests/codegen/test_signature.py)."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import tensorexpr as te

BACKENDS = ["numpy", "c"]


def _program():
    n = te.var("n")
    A = te.placeholder((n, 3), name="A")
    B = te.placeholder((3,), name="B")
    C = te.compute((n, 3), lambda i, j: A[i, j] * B[j], name="C")
    D = te.compute((n,), lambda i: A[i, 0] + 1.0, name="D")
    T = te.compute((3, n), lambda j, i: A[i, j], name="T")  # a view of A on the C backend
    return A, B, C, D, T


def test_issue_signature_shows_the_inputs_by_name():
    A, B, C, D, _ = _program()
    for backend in BACKENDS:
        f = te.build([C, D], backend=backend)
        sig = inspect.signature(f)
        assert str(sig) == "(A, B, *, out=None)"
        bound = sig.bind(np.ones((2, 3)), B=np.ones(3))  # what inspect accepts, f accepts
        assert list(bound.arguments) == ["A", "B"]


def test_signature_of_names_that_cannot_be_keywords():
    X = te.placeholder((2,), name="x 1")
    Y = te.placeholder((2,), name="lambda")
    f = te.build(te.compute((2,), lambda i: X[i] + Y[i]), backend="numpy")
    assert str(inspect.signature(f)) == "(input0, input1, /, *, out=None)"
    Z = te.placeholder((2,), name="out")  # an input named out keeps the name
    g = te.build(te.compute((2,), lambda i: Z[i] * 2.0), backend="numpy")
    assert str(inspect.signature(g)) == "(out)"
    np.testing.assert_array_equal(g(out=np.ones(2, np.float32)), [2, 2])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [1, 4, 0])
def test_out_writes_into_the_given_arrays(backend, n):
    A, B, C, D, T = _program()
    f = te.build([C, D, T], backend=backend)
    a = np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32)
    b = np.arange(3, dtype=np.float32)
    c, d, t = np.empty((n, 3), np.float32), np.empty(n, np.float32), np.empty((3, n), np.float32)
    got = f(a, b, out=(c, d, t))
    assert got[0] is c and got[1] is d and got[2] is t
    np.testing.assert_allclose(c, a * b)
    np.testing.assert_allclose(d, a[:, 0] + 1)
    np.testing.assert_array_equal(t, a.T)
    d2 = np.empty(n, np.float32)
    c2, d3, t2 = f(a, b, out=(None, d2, None))  # None: a new array for that output
    assert d3 is d2 and c2 is not c
    np.testing.assert_allclose(c2, c)
    one = te.build(D, backend=backend)
    assert one(a, out=d2) is d2


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_may_be_an_input(backend):
    X = te.placeholder((5,), name="X")
    Y = te.compute((5,), lambda i: X[4 - i] * 2.0, name="Y")  # reads what it overwrites
    f = te.build(Y, backend=backend)
    x = np.arange(5, dtype=np.float32)
    f(x, out=x)
    np.testing.assert_array_equal(x, [8, 6, 4, 2, 0])


def test_out_is_written_by_the_kernel_itself_without_a_copy(monkeypatch):
    # out= exists to spare the allocation and the pass over memory: on the C backend the
    # kernel writes the given arrays, nothing is computed elsewhere and copied
    A, B, C, D, T = _program()
    f = te.build([C, D, T])
    a = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    b = np.arange(3, dtype=np.float32)
    want = f(a, b)

    def no_copy(*args, **kwargs):
        raise AssertionError("out= arrays were copied into")
    monkeypatch.setattr(np, "copyto", no_copy)
    c, d, t = np.empty((4, 3), np.float32), np.empty(4, np.float32), np.empty((3, 4), np.float32)
    got = f(a, b, out=(c, d, t))
    assert got[0] is c and got[1] is d and got[2] is t
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_overlapping_an_input_reads_the_old_values(backend):
    # an out= array that is part of an input's memory (not the input itself) is
    # computed first too: the kernel never reads what it has already overwritten
    X = te.placeholder((5,), name="X")
    Y = te.compute((5,), lambda i: X[4 - i] * 2.0, name="Y")
    f = te.build(Y, backend=backend)
    buf = np.arange(6, dtype=np.float32)
    f(buf[:5], out=buf[1:])
    np.testing.assert_array_equal(buf, [0, 8, 6, 4, 2, 0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_arrays_overlapping_each_other_get_the_values_computed_first(backend):
    # D reads C back; with C's and D's out= arrays overlapping, a kernel writing them
    # directly would read C where D had already written: both are computed first and
    # copied in output order, so the later output's array holds its values whole
    X = te.placeholder((4,), name="X")
    C = te.compute((4,), lambda i: X[i] + 1.0, name="C")
    D = te.compute((4,), lambda i: C[i] * C[3 - i], name="D")
    f = te.build([C, D], backend=backend)
    x = np.arange(4, dtype=np.float32)
    buf = np.zeros(6, np.float32)
    f(x, out=(buf[:4], buf[2:]))
    np.testing.assert_array_equal(buf, [1, 2, 4, 6, 6, 4])


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_for_outputs_sharing_a_buffer_or_returning_an_input(backend):
    X = te.placeholder((3,), name="X")
    C = te.compute((3,), lambda i: X[i] + 1.0, name="C")
    V = te.compute((3,), lambda i: X[2 - i], name="V")  # C backend: a view of X
    f = te.build([C, C, X, V], backend=backend)
    x = np.arange(3, dtype=np.float32)
    c1, c2, x2, v = (np.empty(3, np.float32) for _ in range(4))
    got = f(x, out=(c1, c2, x2, v))
    assert all(g is o for g, o in zip(got, (c1, c2, x2, v)))
    np.testing.assert_array_equal(c1, x + 1)
    np.testing.assert_array_equal(c2, x + 1)
    np.testing.assert_array_equal(x2, x)
    np.testing.assert_array_equal(v, x[::-1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_is_checked_before_running(backend):
    A, B, C, D, _ = _program()
    f = te.build([C, D], backend=backend)
    a, b = np.ones((2, 3), np.float32), np.ones(3, np.float32)
    c, d = np.empty((2, 3), np.float32), np.empty(2, np.float32)
    cases = [
        (c, TypeError, r"out= takes a tuple of 2 arrays \(one per output: C, D"),
        ((c,), TypeError, "a tuple of 2 arrays"),
        ((c, [0.0, 0.0]), TypeError, "out= for output 'D' must be a numpy array; got list"),
        ((c, d.astype(np.float64)), TypeError,
         "out= array for output 'D' is float64; the output is float32"),
        ((np.empty((3, 2), np.float32).T, d), ValueError,
         "output 'C' must be C-contiguous and writeable"),
        ((c, np.empty(3, np.float32)), ValueError,
         r"out= array for output 'D' has shape \(3,\); the output's shape is \(2,\)"),
        ((c, c), ValueError, "same array for two outputs"),
    ]
    ro = np.empty(2, np.float32)
    ro.flags.writeable = False
    cases.append(((c, ro), ValueError, "writeable"))
    for out, error, message in cases:
        with pytest.raises(error, match=message):
            f(a, b, out=out)

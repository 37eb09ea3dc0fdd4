"""The per-call path of compiled functions: reused pointer arrays and error records,
fresh outputs, and the fast validation of calls like earlier ones."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te


def _gather():
    E = te.placeholder((5, 2), name="E")
    idx = te.placeholder((3,), dtype="int64", name="idx")
    T = te.compute((3, 2), lambda i, d: E[idx[i], d] * 2.0, name="T")
    return te.build(te.compute((3, 2), lambda i, d: T[i, d] + 1.0, name="Y"))


def test_a_call_after_an_out_of_range_index_starts_clean():
    f = _gather()
    E = np.arange(10, dtype=np.float32).reshape(5, 2)
    for _ in range(2):  # the error record is reused: each failure is reported, then reset
        with pytest.raises(IndexError, match="index 7 in dimension 0"):
            f(E, np.array([0, 7, 1]))
        np.testing.assert_array_equal(f(E, np.array([4, 0, 1])), E[[4, 0, 1]] * 2 + 1)


def test_outputs_are_fresh_and_an_input_output_is_a_copy():
    A = te.placeholder((3,), name="A")
    B = te.compute((3,), lambda i: A[i] * 2.0, name="B")
    f = te.build([A, B], inputs=[A])
    a = np.arange(3, dtype=np.float32)
    a0, b0 = f(a)
    a1, b1 = f(a)
    assert not np.shares_memory(a0, a) and not np.shares_memory(b0, b1)
    b0[:] = -1  # the caller owns it: a later call neither sees nor overwrites it
    np.testing.assert_array_equal(f(a)[1], 2 * a)
    np.testing.assert_array_equal(b0, -1)


def test_many_sizes_then_the_first_again():
    n = te.var("n")
    X = te.placeholder((n,), "float64", "X")
    T = te.compute((n,), lambda i: X[i] * 3.0, name="T")
    k = te.reduce_axis(n, "k")
    f = te.build(te.compute((), lambda: te.sum(T[k] * T[k], axis=k), name="S"))
    for size in list(range(1, 13)) + [3, 1, 12]:  # more sizes than plans are kept
        x = np.linspace(-1, 1, size)
        assert f(x) == pytest.approx(9 * np.sum(x * x))


def test_read_only_and_strided_inputs():
    f = _gather()
    E = np.arange(20, dtype=np.float32).reshape(5, 4)[:, ::2]  # strided: copied
    idx = np.array([1, 2, 3])
    idx.flags.writeable = False
    np.testing.assert_array_equal(f(E, idx), E[[1, 2, 3]] * 2 + 1)
    E = np.ascontiguousarray(E)
    E.flags.writeable = False
    np.testing.assert_array_equal(f(E, idx), E[[1, 2, 3]] * 2 + 1)


def test_a_call_like_a_valid_one_is_still_checked():
    n = te.var("n")
    X = te.placeholder((n, 4), name="X")
    b = te.placeholder((4,), name="b")
    f = te.build(te.compute((n, 4), lambda i, j: X[i, j] + b[j], name="Y"))
    x, bb = np.ones((3, 4), np.float32), np.ones(4, np.float32)
    np.testing.assert_array_equal(f(x, bb), 2 * x)
    with pytest.raises(ValueError, match="input 'b' has shape"):
        f(x, np.ones(5, np.float32))  # same size n, another shape
    with pytest.raises(TypeError, match="must be float32"):
        f(x.astype(np.float64), bb)
    with pytest.raises(ValueError, match="must have 1 dimension"):
        f(x, np.ones((1, 4), np.float32))
    np.testing.assert_array_equal(f(np.ones((6, 4), np.float32), bb), np.full((6, 4), 2))
    np.testing.assert_array_equal(f(X=x, b=bb), 2 * x)


def _sum_of_squares():
    n = te.var("n")
    X = te.placeholder((n,), "float64", "X")
    T = te.compute((n,), lambda i: X[i] * 3.0, name="T")  # an intermediate: a reused buffer
    k = te.reduce_axis(n, "k")
    return te.build(te.compute((), lambda: te.sum(T[k] * T[k], axis=k), name="S"))


def test_more_than_1024_distinct_sizes_with_recent_ones_called_again():
    # The size arrays of old sizes are dropped from the cache; a call must never pass the
    # address of a dropped one. Small int64 arrays made between the calls take the freed
    # memory (numpy reuses small buffers) and would show up as wrong sizes or a crash.
    f = _sum_of_squares()
    keep = []
    for size in range(1, 1101):
        x = np.linspace(-1, 1, size)
        assert f(x) == pytest.approx(9 * np.sum(x * x))
        keep = [np.array([1 << 40], dtype=np.int64) for _ in range(20)]
        for back in (1, 3, 8):
            if size > back:
                x = np.linspace(-1, 1, size - back)
                assert f(x) == pytest.approx(9 * np.sum(x * x)), (size, back)
    del keep


def test_a_freed_function_unloads_its_library_and_a_shared_one_stays():
    import gc

    from codegen import compiler
    n = te.var("n")
    X = te.placeholder((n,), name="X")
    Y = te.compute((n,), lambda i: X[i] * 5.0 + 0.25, name="Y")  # a program of this test only
    before = {lib._name for lib in compiler.loaded()}
    f, g = te.build(Y), te.build(Y)  # two functions of one library
    (path,) = {lib._name for lib in compiler.loaded()} - before

    def mapped():
        with open("/proc/self/maps") as m:
            return path in m.read()

    x = np.arange(4, dtype=np.float32)
    assert mapped()
    del f
    gc.collect()
    assert mapped()  # g still needs it
    np.testing.assert_array_equal(g(x), x * 5 + 0.25)
    del g
    gc.collect()
    assert not mapped() and path not in [lib._name for lib in compiler.loaded()]
    # built again, it is loaded again
    np.testing.assert_array_equal(te.build(Y)(x), x * 5 + 0.25)

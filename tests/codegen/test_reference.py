"""The numpy reference backend: masks, identities, scatter-add, and its run-time checks."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te
from codegen import reference
from tensorexpr.ir import Axis, Const, ScatterAdd, fresh_uid

from .util import FLOOR_OPERANDS, python_floor_div_mod, same_bits

BACKENDS = ["numpy", "c"]


@pytest.mark.parametrize("dtype, op, value", [
    ("float32", "sum", 0.0), ("float64", "max", -np.inf), ("float32", "min", np.inf),
    ("int32", "max", -2**31), ("int32", "min", 2**31 - 1), ("int64", "max", -2**63),
    ("int64", "min", 2**63 - 1), ("int64", "sum", 0),
])
def test_identities_of_empty_reductions(dtype, op, value):
    got = reference.identity(op, dtype)
    assert got.dtype == np.dtype(dtype) and got == value


def test_reads_are_checked_only_where_evaluated():
    """A data-dependent read outside a where / untaken branch is neither checked nor done."""
    X = te.placeholder((4,), name="X")
    I = te.placeholder((4,), dtype="int64", name="I")
    k = te.reduce_axis(3, name="k")
    ok = te.compute((4,), lambda i: te.sum(X[I[i] + k], axis=k, where=I[i] + k < 4), name="ok")
    sel = te.compute((4,), lambda i: te.select(I[i] < 4, X[I[i]], 0.0), name="sel")
    f = te.build([ok, sel], backend="numpy")
    x = np.array([1, 2, 4, 8], np.float32)
    idx = np.array([0, 3, 7, 1])
    a, b = f(x, idx)
    np.testing.assert_array_equal(a, [7, 8, 0, 14])
    np.testing.assert_array_equal(b, [1, 8, 0, 2])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", ["sum", "max"])
def test_an_empty_reduction_reads_nothing(backend, op):
    """A reduction over [4, n) with n < 4 evaluates no body point: its constant-index read of
    a size-n tensor, out of range then, is neither made nor checked (second-order fuzz find)."""
    n = te.var("n")
    X = te.placeholder((n,), dtype="float64", name="X")
    k = te.reduce_axis((4, n), name="k")
    Y = te.compute((2,), lambda i: getattr(te, op)(X[2] * k, axis=k), name="Y", dtype="float64")
    got = te.build(Y, backend=backend)(np.arange(2.0))
    np.testing.assert_array_equal(got, [0.0 if op == "sum" else -np.inf] * 2)
    got = te.build(Y, backend=backend)(np.arange(6.0))
    np.testing.assert_array_equal(got, [18.0 if op == "sum" else 10.0] * 2)


def test_run_time_index_error_message():
    X = te.placeholder((4, 5), name="X")
    I = te.placeholder((3,), dtype="int32", name="I")
    Y = te.compute((3,), lambda i: X[1, I[i]], name="picked")
    f = te.build(Y, backend="numpy")
    with pytest.raises(IndexError) as info:
        f(np.zeros((4, 5), np.float32), np.array([0, 5, 1], np.int32))
    msg = str(info.value)
    assert "'picked'" in msg and "test_reference.py" in msg  # the tensor and its line
    assert "'X' at index 5 in dimension 1, outside its size 5" in msg


def test_nan_outside_the_domain_never_reaches_a_result():
    X = te.placeholder((5,), name="X")
    k = te.reduce_axis(5, name="k")
    L = te.compute((), lambda: te.sum(te.log(X[k]), axis=k, where=X[k] > 0), name="L")
    x = np.array([1.0, -1.0, np.e, 0.0, np.nan], np.float32)
    assert te.build(L, backend="numpy")(x) == pytest.approx(1.0)


def test_placeholder_outputs_are_copies():
    X = te.placeholder((3,), name="X")
    x = np.ones(3, np.float32)
    out = te.build(X, backend="numpy")(x)
    out[:] = 0
    np.testing.assert_array_equal(x, 1)


def scatter(n_src=6, n_out=4, where=None):
    idx = te.placeholder((n_src,), dtype="int64", name="idx")
    V = te.placeholder((n_src,), name="V")
    i = Axis("i", Const(0, "int64"), Const(n_src, "int64"), fresh_uid())
    cond = None if where is None else where(i, idx)
    S = ScatterAdd("S", (Const(n_out, "int64"),), "float32", fresh_uid(), "test_reference.py",
                   axes=(i,), where=cond, indices=(idx[i],), value=V[i] * 2.0)
    return idx, V, S


@pytest.mark.parametrize("backend", BACKENDS)
def test_scatter_add_accumulates_repeated_indices(backend):
    idx, V, S = scatter()
    ids = np.array([0, 2, 2, 3, 0, 2])
    v = np.arange(1, 7, dtype=np.float32)
    want = np.zeros(4, np.float32)
    np.add.at(want, ids, 2 * v)
    np.testing.assert_allclose(te.build(S, inputs=[idx, V], backend=backend)(ids, v), want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scatter_add_where_and_bad_target(backend):
    idx, V, S = scatter(where=lambda i, idx: idx[i] < 4)
    f = te.build(S, inputs=[idx, V], backend=backend)
    ids = np.array([0, 9, 2, 3, 9, 2])  # 9 is outside, but excluded by where
    v = np.ones(6, np.float32)
    np.testing.assert_allclose(f(ids, v), [2, 0, 4, 2])
    idx2, V2, S2 = scatter()
    g = te.build(S2, inputs=[idx2, V2], backend=backend)
    with pytest.raises(IndexError):
        g(np.array([0, 1, 2, 3, 4, 0]), v)
    with pytest.raises(IndexError):
        g(np.array([0, 1, -1, 3, 0, 0]), v)


def test_evaluate_one_tensor_given_its_producers():
    X = te.placeholder((2, 3), name="X")
    k = te.reduce_axis(3, name="k")
    S = te.compute((2,), lambda i: te.max(X[i, k], axis=k), name="S")
    x = np.array([[1, 5, 2], [-1, -3, -2]], np.float32)
    out = reference.evaluate(S, {X.uid: x}, {}, (2,))
    np.testing.assert_array_equal(out, [5, -1])
    assert out.dtype == np.float32


@pytest.mark.parametrize("backend", BACKENDS)
def test_and_or_evaluate_their_right_operand_only_where_it_decides(backend):
    """`a & b` evaluates b only where a holds, `a | b` only where a fails (ir.py): a
    data-dependent read in b is neither checked nor done elsewhere."""
    X = te.placeholder((4,), name="X")
    I = te.placeholder((5,), dtype="int64", name="I")
    inside = (I[0] >= 0) & (I[0] < 4)  # a 0-d guard over a 1-d body: masks broadcast
    both = te.compute((5,), lambda i: te.select((I[i] >= 0) & (I[i] < 4) & (X[I[i]] > 1.0),
                                                X[I[i]], -1.0), name="both")
    either = te.compute((5,), lambda i: te.select((I[i] < 0) | (I[i] >= 4) | (X[I[i]] > 1.0),
                                                  1.0, 0.0), name="either")
    first = te.compute((5,), lambda i: te.select(inside & (X[I[0]] > 1.0), 2.0, 0.0),
                       name="first")
    f = te.build([both, either, first], backend=backend)
    x = np.array([1, 2, 4, 8], np.float32)
    a, b, c = f(x, np.array([0, -1, 3, 7, 2]))
    np.testing.assert_array_equal(a, [-1, -1, 8, -1, 4])
    np.testing.assert_array_equal(b, [0, 1, 1, 1, 1])
    np.testing.assert_array_equal(c, [0] * 5)
    _, _, c = f(x, np.array([9, 0, 0, 0, 0]))
    np.testing.assert_array_equal(c, [0] * 5)
    _, _, c = f(x, np.array([1, 9, 9, 9, 9]))
    np.testing.assert_array_equal(c, [2] * 5)

@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_floor_division_and_modulo_are_pythons(dtype):
    # np.floor(a / b) rounded 1.0 / 0.1 up to 10 (Python: 1.0 // 0.1 == 9)
    pairs = [(x, y) for x in FLOOR_OPERANDS for y in FLOOR_OPERANDS]
    with np.errstate(over="ignore"):
        a = np.array([p[0] for p in pairs]).astype(dtype)
        b = np.array([p[1] for p in pairs]).astype(dtype)
    A = te.placeholder(a.shape, dtype, "A")
    B = te.placeholder(a.shape, dtype, "B")
    Q = te.compute(a.shape, lambda i: A[i] // B[i], name="Q")
    R = te.compute(a.shape, lambda i: A[i] % B[i], name="R")
    q, r = te.build([Q, R], backend="numpy")(a, b)
    want_q, want_r = python_floor_div_mod(a, b)
    assert same_bits(q, want_q).all() and same_bits(r, want_r).all()
    if dtype == "float64":
        assert q[pairs.index((1.0, 0.1))] == 9.0 and r[pairs.index((3.0, np.inf))] == 3.0



@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pow_by_a_half_is_pow_not_sqrt(dtype):
    # numpy computes x ** 0.5 with a constant exponent as sqrt: (-inf) ** 0.5 was NaN and
    # (-0) ** 0.5 was -0 on the numpy backend, +inf and +0 in C (C's pow, Python's **)
    x = np.array([-np.inf, -0.0, 0.0, -4.0, 4.0, np.inf, np.nan], dtype)
    X = te.placeholder(x.shape, dtype, "X")
    E = te.placeholder(x.shape, dtype, "E")
    const = te.compute(x.shape, lambda i: X[i] ** 0.5, name="const")
    tensor = te.compute(x.shape, lambda i: X[i] ** E[i], name="tensor")
    want = np.array([np.inf, 0.0, 0.0, np.nan, 2.0, np.inf, np.nan], dtype)
    halves = np.full(x.shape, 0.5, dtype)
    for backend in BACKENDS:
        got = te.build([const, tensor], backend=backend)(x, halves)
        for g in got:
            assert g.dtype == np.dtype(dtype) and same_bits(g, want).all(), (backend, g)

def test_a_long_body_in_a_large_reduction_keeps_few_arrays_alive():
    # every node's values over the reduction's whole domain were kept until the tensor
    # was done: a fuzzed second-order gradient (thousands of nodes over 33**4 points)
    # ran out of memory. Live arrays are now the body's width, not its length (here
    # 24 MB before, 2.7 MB after).
    import tracemalloc
    X = te.placeholder((24, 24), dtype="float64", name="X")
    k = [te.reduce_axis(24, name=f"k{j}") for j in range(3)]

    def body(e, tanh):
        for j in range(40):
            e = tanh(e) * 0.5 + e * float(j % 3) * 0.25
        return e
    S = te.compute((24,), lambda i: te.sum(body(X[k[0], k[1]] * X[k[1], k[2]], te.tanh)
                                           * X[i, k[2]], axis=k), name="S")
    x = np.random.default_rng(0).uniform(-1, 1, (24, 24))
    f = te.build(S, [X], backend="numpy")
    tracemalloc.start()
    try:
        got = f(x)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    one = 24 ** 4 * 8  # one float64 array over the output and the domain: 2.6 MB
    assert peak < 4 * one, (peak, one)
    e = body(x[:, :, None] * x[None, :, :], np.tanh)  # over (k0, k1, k2)
    want = np.einsum("abc,ic->i", e, x)
    assert np.allclose(got, want, rtol=1e-12, atol=1e-12)

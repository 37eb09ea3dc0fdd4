"""The calling convention of built functions: binding, validation, outputs."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te
from codegen.signature import Signature

BACKENDS = ["numpy", "c"]


def matmul_program():
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, 3), name="A")
    B = te.placeholder((3, m), name="B")
    k = te.reduce_axis(3, name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((n,), lambda i: A[i, 0] * 2.0, name="D")
    return A, B, C, D


@pytest.fixture(params=BACKENDS)
def program(request):
    A, B, C, D = matmul_program()
    return te.build([C, D], backend=request.param), A, B


def arrays(n=2, m=4, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, 3)).astype(np.float32),
            rng.standard_normal((3, m)).astype(np.float32))


def test_positional_keyword_and_mixed_calls(program):
    f, A, B = program
    a, b = arrays()
    for c, d in (f(a, b), f(A=a, B=b), f(a, B=b), f(B=b, A=a)):
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(d, a[:, 0] * 2)
    assert [t.name for t in f.inputs] == ["A", "B"]


def test_one_output_gives_an_array_several_a_tuple():
    A, B, C, D = matmul_program()
    a, b = arrays()
    for backend in BACKENDS:
        one = te.build(C, backend=backend)(a, b)
        assert isinstance(one, np.ndarray) and one.shape == (2, 4)
        listed = te.build([C], backend=backend)(a, b)  # a list of one is still one array
        assert isinstance(listed, np.ndarray)
        both = te.build([C, D], backend=backend)(a, b)
        assert isinstance(both, tuple) and len(both) == 2
        twice = te.build([D, D], backend=backend)(a)  # two arrays, not one aliased
        twice[0][:] = 0
        np.testing.assert_allclose(twice[1], a[:, 0] * 2)


@pytest.mark.parametrize("call, error, message", [
    (lambda f, a, b: f(a), TypeError, r"missing input\(s\): B"),
    (lambda f, a, b: f(), TypeError, r"missing input\(s\): A, B"),
    (lambda f, a, b: f(a, b, b), TypeError, r"takes 2 input\(s\) \(A, B\); got 3"),
    (lambda f, a, b: f(a, b, Z=b), TypeError, "unexpected input 'Z'; the inputs are A, B"),
    (lambda f, a, b: f(a, b, A=a), TypeError, "input 'A' given twice"),
    (lambda f, a, b: f(a.astype(np.float64), b), TypeError,
     r"input 'A' must be float32; got float64 \(convert with .astype\(np.float32\)\)"),
    (lambda f, a, b: f(a, b.astype(np.int32)), TypeError, "input 'B' must be float32"),
    (lambda f, a, b: f(a[0], b), ValueError, r"input 'A' must have 2 dimension\(s\)"),
    (lambda f, a, b: f(a, b[None]), ValueError, r"input 'B' must have 2 dimension\(s\)"),
    (lambda f, a, b: f(np.ones((2, 5), np.float32), b), ValueError,
     r"input 'A' has shape \(2, 5\), expected \(2, 3\) \(declared \(n, 3\)"),
    (lambda f, a, b: f(a, np.ones((2, 4), np.float32)), ValueError,
     r"input 'B' has shape \(2, 4\), expected \(3, 4\)"),
    (lambda f, a, b: f([[1, 2], [3]], b), TypeError, "input 'A': cannot convert list"),
    (lambda f, a, b: f("abc", b), TypeError, "input 'A'"),
    (lambda f, a, b: f(np.ones((0, 3), np.float32), b), ValueError,
     "size 'n' is 0; symbolic sizes must be at least 1"),
])
def test_call_validation_names_the_input(program, call, error, message):
    f, A, B = program
    a, b = arrays()
    with pytest.raises(error, match=message):
        call(f, a, b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_inconsistent_symbolic_sizes(backend):
    n = te.var("n")
    X = te.placeholder((n,), name="X")
    Y = te.placeholder((n, n), name="Y")
    Z = te.compute((n,), lambda i: X[i] + Y[i, i], name="Z")
    f = te.build(Z, backend=backend)
    with pytest.raises(ValueError, match=r"input 'Y' has shape \(3, 3\), expected \(2, 2\)"):
        f(np.ones(2, np.float32), np.ones((3, 3), np.float32))
    with pytest.raises(ValueError, match=r"input 'Y' has shape \(2, 3\), expected \(2, 2\)"):
        f(np.ones(2, np.float32), np.ones((2, 3), np.float32))
    W = te.placeholder((2 * n,), name="W")
    V = te.compute((n,), lambda i: X[i] * W[2 * i + 1], name="V")
    g = te.build(V, backend=backend)
    np.testing.assert_allclose(g(np.ones(2, np.float32), np.arange(4, dtype=np.float32)), [1, 3])
    with pytest.raises(ValueError, match=r"input 'W' has shape \(5,\), expected \(4,\)"):
        g(np.ones(2, np.float32), np.ones(5, np.float32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_build_runs_at_several_sizes(backend):
    A, B, C, D = matmul_program()
    f = te.build(C, backend=backend)
    for n, m in [(1, 1), (5, 2), (2, 7), (1, 1)]:
        a, b = arrays(n, m, seed=n * 10 + m)
        c = f(a, b)
        assert c.shape == (n, m)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_contiguous_inputs_are_copied(backend):
    A, B, C, D = matmul_program()
    f = te.build(C, backend=backend)
    a_t = np.asfortranarray(np.arange(12, dtype=np.float32).reshape(4, 3))
    b_big = np.arange(40, dtype=np.float32).reshape(5, 8)
    b = b_big[1:4, ::2]  # strided view
    assert not b.flags.c_contiguous and not a_t.flags.c_contiguous
    np.testing.assert_allclose(f(a_t, b), a_t @ b, rtol=1e-6)
    rev = np.arange(12, dtype=np.float32).reshape(4, 3)[::-1]  # negative strides
    np.testing.assert_allclose(f(rev, b), rev @ b, rtol=1e-6)
    np.testing.assert_array_equal(b_big, np.arange(40, dtype=np.float32).reshape(5, 8))


@pytest.mark.parametrize("backend", BACKENDS)
def test_inputs_are_not_modified_and_outputs_are_fresh(backend):
    X = te.placeholder((4,), name="X")
    Y = te.compute((4,), lambda i: X[i] + 1.0, name="Y")
    f = te.build([Y, X], backend=backend)  # a placeholder as an output is a copy
    x = np.zeros(4, np.float32)
    y1, x1 = f(x)
    y1[:] = 7
    x1[:] = 7
    y2, _ = f(x)
    np.testing.assert_array_equal(x, 0)
    np.testing.assert_array_equal(y2, 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_lists_and_scalars_are_converted_safely(backend):
    I = te.placeholder((3,), dtype="int32", name="I")
    F = te.placeholder((3,), dtype="float64", name="F")
    S = te.placeholder((), dtype="float32", name="S")
    Y = te.compute((3,), lambda i: (I[i] + F[i]) * S[()], name="Y")
    f = te.build(Y, backend=backend)
    np.testing.assert_allclose(f([1, 2, 3], [0.5, 0.5, 0.5], 2), [3, 5, 7])
    np.testing.assert_allclose(f(I=(1, 2, 3), F=[1, 1, 1], S=np.float32(1)), [2, 3, 4])
    with pytest.raises(TypeError, match=r"input 'I': cannot convert list to a int32 array"):
        f([1.5, 2, 3], [0, 0, 0], 1.0)  # would silently truncate


def test_inputs_none_takes_placeholders_in_creation_order():
    second_created_first = te.placeholder((2,), name="P")
    first_used = te.placeholder((2,), name="Q")
    Y = te.compute((2,), lambda i: first_used[i] - second_created_first[i], name="Y")
    for backend in BACKENDS:
        f = te.build(Y, backend=backend)
        assert [t.name for t in f.inputs] == ["P", "Q"]
        np.testing.assert_allclose(f(np.ones(2, np.float32), np.zeros(2, np.float32)), [-1, -1])
        g = te.build(Y, inputs=[first_used, second_created_first], backend=backend)
        np.testing.assert_allclose(g(np.ones(2, np.float32), np.zeros(2, np.float32)), [1, 1])


def test_unused_inputs_are_accepted_and_validated():
    X = te.placeholder((2,), name="X")
    U = te.placeholder((3,), name="U")
    Y = te.compute((2,), lambda i: X[i] * 3.0, name="Y")
    for backend in BACKENDS:
        f = te.build(Y, inputs=[X, U], backend=backend)
        np.testing.assert_allclose(f(np.ones(2, np.float32), np.ones(3, np.float32)), [3, 3])
        with pytest.raises(ValueError, match="input 'U'"):
            f(np.ones(2, np.float32), np.ones(4, np.float32))


def test_signature_reports_sizes_and_shapes():
    A, B, C, D = matmul_program()
    sig = Signature([C, D], [A, B])
    assert sig.size_names == ["m", "n"]
    assert sig.size_source == {"n": (0, 0), "m": (1, 1)}
    arrays_, sizes = sig.bind(arrays(3, 5), {})
    assert sizes == {"n": 3, "m": 5}
    assert sig.shape(C, sizes) == (3, 5) and sig.shape(D, sizes) == (3,)


def test_calls_after_a_valid_one_are_still_fully_validated(program):
    # bind remembers validated size bindings; a later call must not slip through on them
    f, A, B = program
    a, b = arrays(2, 4)
    c, d = f(a, b)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    with pytest.raises(ValueError, match="input 'B' has shape"):
        f(a, np.ones((4, 4), np.float32))  # same sizes n, m; B's fixed dimension is wrong
    with pytest.raises(TypeError, match="must be float32"):
        f(a.astype(np.float64), b)
    with pytest.raises(ValueError, match="must have 2 dimension"):
        f(a[0], b)
    strided = np.ones((3, 8), np.float32)[:, ::2]  # not C-contiguous: copied
    np.testing.assert_allclose(f(a, strided)[0], a @ strided, rtol=1e-5)
    frozen = b.copy()
    frozen.flags.writeable = False  # read-only inputs are read, never written
    np.testing.assert_allclose(f(a, frozen)[0], c, rtol=1e-5)
    np.testing.assert_allclose(f(A=a, B=b)[0], c, rtol=1e-5)
    c2, _ = f(*arrays(3, 4, seed=1))
    assert c2.shape == (3, 4)
    assert f(a, b)[0] is not f(a, b)[0]  # fresh outputs every call


def _unaligned(values: np.ndarray, offset: int) -> np.ndarray:
    """``values`` copied into a buffer at byte ``offset``: C-contiguous, not aligned."""
    buf = np.zeros(values.nbytes + 16, np.uint8)
    a = buf[offset:offset + values.nbytes].view(values.dtype).reshape(values.shape)
    a[...] = values
    return a


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("offset", [1, 2, 4])
def test_unaligned_inputs_are_copied(dtype, offset):
    # C may load an element of a C-contiguous array with aligned (vector) instructions
    vals = (np.arange(2 * 37) % 11).astype(dtype).reshape(2, 37)
    a = _unaligned(vals, offset)
    if a.flags.aligned:
        pytest.skip("this offset is aligned for the type")
    X = te.placeholder((2, 37), dtype, "X")
    k = te.reduce_axis(37, name="k")
    Y = te.compute((2,), lambda i: te.sum(X[i, k] * X[i, 36 - k], axis=k), name="Y")
    Z = te.compute((2, 37), lambda i, j: X[i, j] + X[1 - i, j], name="Z")
    sig = Signature([Y, Z], [X])
    for call in ((a,), ()):  # positional (the fast path once seen) and by name
        got, _ = sig.bind(call, {} if call else {"X": a})
        assert got[0].flags.aligned and got[0].flags.c_contiguous
        np.testing.assert_array_equal(got[0], vals)
    for backend in BACKENDS:
        f = te.build([Y, Z], backend=backend)
        for _ in range(2):
            y, z = f(a)
            np.testing.assert_array_equal(y, (vals * vals[:, ::-1]).sum(1).astype(dtype))
            np.testing.assert_array_equal(z, vals + vals[::-1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_bool_bytes_other_than_0_and_1_are_normalised(backend):
    # numpy calls any nonzero byte True; C's bool holds only 0 or 1 (2 & 2 gave 2 and
    # B.astype(int32) gave 255)
    B = te.placeholder((6,), "bool", "B")
    C = te.placeholder((6,), "bool", "C")
    W = te.compute((6,), lambda i: (B[i] & C[i]).astype("int32") * 10 + B[i].astype("int32"),
                   name="W")
    Z = te.compute((6,), lambda i: te.select(~B[i] | C[i], 1.0, 0.0), name="Z")
    f = te.build([W, Z], backend=backend)
    raw = np.array([0, 1, 2, 255, 128, 3], np.uint8).view(np.bool_)
    c = np.array([1, 1, 0, 4, 0, 1], np.uint8).view(np.bool_)
    clean_b, clean_c = raw.view(np.uint8) != 0, c.view(np.uint8) != 0
    want = f(clean_b, clean_c)
    for _ in range(2):  # the second call takes the fast path of a known shape
        got = f(raw, c)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(want[0], [0, 11, 1, 11, 1, 11])
    assert raw.view(np.uint8)[2] == 2  # the caller's array is left alone
    zero_d = te.placeholder((), "bool", "b0")
    V = te.compute((), lambda: zero_d[()].astype("int32"), name="V")
    assert int(te.build(V, backend=backend)(np.array([7], np.uint8).view(np.bool_)[0:1]
                                            .reshape(()))) == 1

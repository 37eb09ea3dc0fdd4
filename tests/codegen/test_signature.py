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
])
def test_call_validation_names_the_input(program, call, error, message):
    f, A, B = program
    a, b = arrays()
    with pytest.raises(error, match=message):
        call(f, a, b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_keyword_naming_two_inputs_is_refused(backend):
    # two placeholders named X: X= was bound to the first and the second reported
    # "missing input(s): X", although X had been passed
    X1 = te.placeholder((3,), "float64", name="X")
    X2 = te.placeholder((3,), "float64", name="X")
    f = te.build(te.compute((3,), lambda i: X1[i] + 10.0 * X2[i], name="Y"), backend=backend)
    x = np.arange(3.0)
    with pytest.raises(TypeError, match="2 inputs are named 'X', so X= cannot say which; "
                                        "pass them positionally"):
        f(X=x)
    np.testing.assert_array_equal(f(x, x + 1), x + 10 * (x + 1))


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

# {{{ symbolic sizes of 0 (empty batches)


def _zero_programs():
    """``(name, outputs, inputs, shapes(n))``: programs over a batch of symbolic size n."""
    n = te.var("n")
    out = []
    A = te.placeholder((n, 8), name="A")
    W = te.placeholder((8, 4), name="W")
    k = te.reduce_axis(8, name="k")
    Y = te.compute((n, 4), lambda i, j: te.tanh(te.sum(A[i, k] * W[k, j], axis=k)), name="Y")
    i2, j2 = te.reduce_axis((0, n)), te.reduce_axis(4)
    L = te.compute((), lambda: te.sum(Y[i2, j2] * Y[i2, j2], axis=[i2, j2]), name="L")
    M = te.compute((4,), lambda j: te.max(Y[i2, j], axis=i2), name="M")
    out.append(("mlp", [Y, L, M, *te.differentiate(L, [A, W])], [A, W],
                lambda n: [(n, 8), (8, 4)]))
    X = te.placeholder((n, 2, 6, 6), name="X")
    K = te.placeholder((3, 2, 3, 3), name="K")
    c, kh, kw = te.reduce_axis(2, "c"), te.reduce_axis(3, "kh"), te.reduce_axis(3, "kw")
    conv = te.compute((n, 3, 4, 4), lambda b, o, h, w: te.sum(
        X[b, c, h + kh, w + kw] * K[o, c, kh, kw], axis=[c, kh, kw]), name="conv")
    ph, pw = te.reduce_axis(2, "ph"), te.reduce_axis(2, "pw")
    pool = te.compute((n, 3, 2, 2), lambda b, o, h, w: te.max(
        conv[b, o, 2 * h + ph, 2 * w + pw], axis=[ph, pw]), name="pool")
    H = te.placeholder((n, 3, 2, 2), name="H")
    out.append(("cnn", [pool, *te.differentiate(pool, [X, K], head=H)], [X, K, H],
                lambda n: [(n, 2, 6, 6), (3, 2, 3, 3), (n, 3, 2, 2)]))
    E = te.placeholder((5, 3), name="E")
    idx = te.placeholder((n,), dtype="int32", name="idx")
    emb = te.compute((n, 3), lambda i, d: E[idx[i], d] * 2.0, name="emb")
    He = te.placeholder((n, 3), name="He")
    out.append(("embedding", [emb, *te.differentiate(emb, [E], head=He)], [E, idx, He],
                lambda n: [(5, 3), (n,), (n, 3)]))
    T = te.var("T")
    d = te.placeholder((3, T), name="d")
    ewma = te.recurrence((T, 3), lambda e, t, r: te.select(
        t == 0, d[r, 0], 0.5 * d[r, t] + 0.5 * e[t - 1, r]), name="ewma")
    t2, r2 = te.reduce_axis((0, T)), te.reduce_axis(3)
    Le = te.compute((), lambda: te.sum(ewma[t2, r2] * ewma[t2, r2], axis=[t2, r2]), name="Le")
    out.append(("recurrence", [ewma, Le, *te.differentiate(Le, [d])], [d],
                lambda n: [(3, n)]))
    return out


@pytest.mark.parametrize("case", range(4), ids=["mlp", "cnn", "embedding", "recurrence"])
def test_issue_symbolic_size_zero_is_an_empty_batch(case):
    name, outs, inputs, shapes = _zero_programs()[case]
    fs = {b: te.build(outs, inputs=inputs, backend=b) for b in BACKENDS}
    rng = np.random.default_rng(case)
    for n in (0, 2, 0, 1):  # 0 again after other sizes: nothing cached is reused wrongly
        arrays = [rng.integers(0, 5, s).astype(x.dtype) if x.dtype == "int32"
                  else rng.standard_normal(s).astype(x.dtype)
                  for x, s in zip(inputs, shapes(n))]
        want = fs["numpy"](*arrays)
        got = fs["c"](*arrays)
        for w, g, t in zip(want, got, outs):
            assert g.shape == w.shape == fs["c"].signature.shape(
                t, {v: n for v in fs["c"].signature.size_names}), (name, t.name)
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"{name} {t.name}")
        if n == 0:  # empty sums are 0, empty maxima -inf, gradients of fixed inputs 0
            for w, t in zip(want, outs):
                if w.size and t.name.startswith("d"):
                    assert not np.any(w), t.name


@pytest.mark.parametrize("backend", BACKENDS)
def test_size_zero_that_reads_outside_is_refused(backend):
    n = te.var("n")
    X = te.placeholder((n,), name="X")
    last = te.compute((), lambda: X[n - 1] * 2.0, name="last")
    f = te.build(last, backend=backend)
    assert f(np.ones(3, np.float32)) == 2.0
    with pytest.raises(ValueError, match=r"size 'n' is 0 \(an empty input\), but tensor "
                       r"'last' \(defined at .*test_signature.py:\d+.*reads X\[n - 1\] "
                       r"outside 'X'.*te.select\(n > 0"):
        f(np.ones(0, np.float32))
    guarded = te.compute((), lambda: te.select(n > 0, X[n - 1], 0.0), name="guarded")
    g = te.build(guarded, backend=backend)
    assert g(np.ones(0, np.float32)) == 0.0 and g(np.full(2, 3, np.float32)) == 3.0


# }}}


@pytest.mark.parametrize("backend", BACKENDS)
def test_issue_gradient_that_does_not_read_its_input_hints_the_remedy(backend):
    # dL/dX of a linear L does not read X: inputs=None builds a function of 0 inputs
    X = te.placeholder((3,), name="X")
    i = te.reduce_axis(3)
    L = te.compute((), lambda: te.sum(X[i] * 2.0, axis=i), name="L")
    (dX,) = te.differentiate(L, [X])
    f = te.build(dX, backend=backend)
    x = np.ones(3, np.float32)
    for call in (lambda: f(x), lambda: f(X=x)):
        with pytest.raises(TypeError, match=r"takes only the placeholders the outputs read.*"
                           r"te.build\(grads, inputs=\[...\]\)"):
            call()
    kept = te.build(dX, inputs=[X], backend=backend)  # the remedy: the input stays
    np.testing.assert_array_equal(kept(x), [2, 2, 2])
    np.testing.assert_array_equal(kept(X=x), [2, 2, 2])
    with pytest.raises(TypeError) as err:  # inputs listed: no hint, it would not apply
        kept(x, x)
    assert "inputs=None" not in str(err.value)


def test_issue_shape_errors_mention_only_the_sizes_the_input_uses():
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, 3), name="A")
    B = te.placeholder((4, 3), name="B")
    C = te.placeholder((m, n), name="C")
    f = te.build(te.compute((n,), lambda i: A[i, 0] + B[0, 0] + C[0, i], name="Y"),
                 backend="numpy")
    a, c = np.ones((2, 3), np.float32), np.ones((1, 2), np.float32)
    with pytest.raises(ValueError) as err:
        f(a, np.ones((5, 3), np.float32), c)
    assert str(err.value) == "input 'B' has shape (5, 3), expected (4, 3) (declared (4, 3))"
    with pytest.raises(ValueError) as err:
        f(a, np.ones((4, 3), np.float32), np.ones((1, 3), np.float32))
    assert str(err.value) == ("input 'C' has shape (1, 3), expected (1, 2) (declared (m, n) "
                              "with m=1 from 'C', n=2 from 'A')")


def test_size_variables_are_kept_on_a_tensor_and_inlinable_tensors_on_a_signature():
    import tensorexpr as te
    from codegen import signature
    from codegen.patterns import inlinable
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((n,), lambda i: B[i] + 1.0, name="C")
    assert signature._tensor_size_vars(B) is signature._tensor_size_vars(B) == {"n"}
    sig = Signature([C], [A])
    got = inlinable(sig)
    assert got == {B.uid}
    got.add(12345)  # the caller's set: the signature's answer is not changed
    assert inlinable(sig) == {B.uid}
    assert inlinable(Signature([B, C], [A])) == set()  # another signature: its own answer

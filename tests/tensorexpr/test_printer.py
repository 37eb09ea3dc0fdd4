"""str(tensor), shape, dtype and name: what a user sees when inspecting a program."""
from __future__ import annotations

import tensorexpr as te
from tensorexpr.ir import SizeVar


def test_str_of_a_matmul_shows_the_sum_with_its_range():
    n = te.var("n")
    A = te.placeholder((n, 64), name="A")
    B = te.placeholder((64, 32), name="B")
    k = te.reduce_axis((0, 64), name="k")
    C = te.compute((n, 32), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    text = str(C)
    assert text.startswith("C[i, j] = sum_{k in [0, 64)} (A[i, k] * B[k, j])")
    assert "for i in [0, n), j in [0, 32)" in text and text.endswith("float32")
    assert str(A) == "A[n, 64]    float32 input"
    assert repr(C) == "<Compute C[n, 32] float32>"


def test_shape_dtype_name():
    n = te.var("n")
    A = te.placeholder((n, 3), dtype="int32", name="A")
    assert A.shape == (n, 3) and isinstance(A.shape, tuple)
    assert isinstance(A.shape[0], SizeVar) and A.shape[0].name == "n"
    assert A.shape[1] == 3 and type(A.shape[1]) is int
    assert A.dtype == "int32" and A.name == "A" and A.ndim == 2
    B = te.compute((n + 1,), lambda i: te.select(i < n, A[te.minimum(i, n - 1), 0], 0),
                   name="B")
    assert str(B.shape[0]) == "(n + 1)" and B.dtype == "int32"
    S = te.compute((), lambda: te.const(1.5), name="S")
    assert S.shape == () and S.dtype == "float32" and str(S) == "S[] = 1.5    float32"
    D = te.compute((n,), lambda i: A[i, 0] * 1.5)  # unnamed: a generated name
    assert D.name.startswith("compute") and D.dtype == "float32"


def test_str_is_unambiguous_about_reductions_and_negation():
    X = te.placeholder((3, 9), name="X")
    k = te.reduce_axis(9, name="k")
    M = te.compute((3,), lambda i: -te.sum(X[i, k], axis=k) / 9.0, name="M")
    # the division is outside the sum, and the negation applies to the sum
    assert "(-(sum_{k in [0, 9)} X[i, k])) / 9.0" in str(M)
    P = te.compute((3,), lambda i: (-X[i, 0]) ** 2, name="P")
    assert "(-X[i, 0]) ** 2.0" in str(P)
    W = te.compute((3,), lambda i: te.max(X[i, k], axis=k, where=(k % 2 == 0) & (k > i)), name="W")
    assert "max_{k in [0, 9) if ((k % 2) == 0) & (k > i)} X[i, k]" in str(W)


def test_str_of_every_kind_of_expression():
    X = te.placeholder((4,), name="X")
    I = te.placeholder((4,), dtype="int64", name="I")
    Y = te.compute((4,), lambda i: te.select(~(X[i] > 0), te.exp(X[i]), X[I[i] % 4])
                   + X[te.maximum(i - 1, 0)].astype("float64") * 0.1, name="Y")
    text = str(Y)
    for fragment in ("float64(select(~(X[i] > 0.0), exp(X[i]), X[I[i] % 4]))",
                     "float64(X[max(i - 1, 0)]) * 0.1d", "float64"):
        assert fragment in text, (fragment, text)


def test_recurrence_says_which_axis_runs_sequentially():
    d = te.placeholder((3, 8), name="d")
    e = te.recurrence((8, 3), lambda e, t, r: te.select(t == 0, d[r, 0], 0.5 * e[t - 1, r]),
                      name="e")
    assert "(recurrence: t runs ascending)" in str(e)
    assert "e[t - 1, r]" in str(e)


def test_numpy_backend_source_is_the_program_text():
    X = te.placeholder((4,), name="X")
    Y = te.compute((4,), lambda i: X[i] * 2.0, name="Y")
    Z = te.compute((4,), lambda i: Y[i] + X[i], name="Z")
    src = te.build(Z, backend="numpy").source
    assert src.splitlines() == [str(X), str(Y), str(Z)]


def test_distinct_axes_of_one_name_are_printed_apart():
    # An adjoint's sum runs over the forward's axis j inside a tensor whose own axes
    # carry the forward's names: printed alike, U[j, j] would read as U's diagonal.
    T, B, H = 5, 2, 3
    x = te.placeholder((T, B, H), name="x")
    U = te.placeholder((H, H), name="U")
    k = te.reduce_axis(H, "k")
    h = te.recurrence((T, B, H), lambda h, t, b, j: te.tanh(
        x[t, b, j] + te.select(t > 0, te.sum(h[t - 1, b, k] * U[k, j], axis=k), 0.0)), name="h")
    r1, r2 = te.reduce_axis(B), te.reduce_axis(H)
    L = te.compute((), lambda: te.sum(h[T - 1, r1, r2] * h[T - 1, r1, r2], axis=[r1, r2]),
                   name="L")
    dx, = te.differentiate(L, [x])
    dh = next(r.tensor for r in te.ir.postorder(dx.body) if isinstance(r, te.ir.Read) and r.tensor.name == "dh")
    text = str(dh)
    assert "U[j, j_2]" in text and "sum_{j_2 in [0, 3)" in text, text
    # Nested sums over two axes named i, and a name the renaming must not take.
    X = te.placeholder((4, 4), name="X")
    a, b = te.reduce_axis(4, "i"), te.reduce_axis(4, "i")
    S = te.compute((4,), lambda i_2: te.sum(te.sum(X[a, b] * i_2, axis=b), axis=a), name="S")
    assert str(S) == ("S[i_2] = sum_{i in [0, 4)} (sum_{i_3 in [0, 4)} (X[i, i_3] * float32(i_2)))"
                      "    for i_2 in [0, 4)    float32"), str(S)

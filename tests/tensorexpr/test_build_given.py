"""``te.build`` with computed tensors among its inputs (given values) and ``te.saved_values``."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te
from codegen.fingerprint import fingerprint
from codegen.signature import Signature
from tensorexpr.build import cut
from tests.tensorexpr.util import BACKENDS, rand


def _softmax(B=3, D=5):
    X = te.placeholder((B, D), name="X")
    k1, k2 = te.reduce_axis(D, name="k1"), te.reduce_axis(D, name="k2")
    m = te.compute((B,), lambda i: te.max(X[i, k1], axis=k1), name="rowmax")
    e = te.compute((B, D), lambda i, j: te.exp(X[i, j] - m[i]), name="e")
    s = te.compute((B,), lambda i: te.sum(e[i, k2], axis=k2), name="rowsum")
    Y = te.compute((B, D), lambda i, j: e[i, j] / s[i], name="Y")
    return [X], Y


def _layernorm(B=3, D=6, eps=1e-5):
    X = te.placeholder((B, D), name="X")
    gamma, beta = te.placeholder((D,), name="gamma"), te.placeholder((D,), name="beta")
    k1, k2 = te.reduce_axis(D, name="k1"), te.reduce_axis(D, name="k2")
    mean = te.compute((B,), lambda i: te.sum(X[i, k1], axis=k1) / D, name="mean")
    var = te.compute((B,), lambda i: te.sum((X[i, k2] - mean[i]) * (X[i, k2] - mean[i]),
                                            axis=k2) / D, name="var")
    Y = te.compute((B, D), lambda i, j: (X[i, j] - mean[i]) / te.sqrt(var[i] + eps)
                   * gamma[j] + beta[j], name="Y")
    return [X, gamma, beta], Y


def _mlp(B=3, I=4, Hd=5, O=2):
    X, W1 = te.placeholder((B, I), name="X"), te.placeholder((I, Hd), name="W1")
    b1, W2 = te.placeholder((Hd,), name="b1"), te.placeholder((Hd, O), name="W2")
    b2 = te.placeholder((O,), name="b2")
    k1, k2 = te.reduce_axis(I, name="k1"), te.reduce_axis(Hd, name="k2")
    h = te.compute((B, Hd), lambda i, j: te.tanh(te.sum(X[i, k1] * W1[k1, j], axis=k1) + b1[j]),
                   name="h")
    Y = te.compute((B, O), lambda i, o: te.sum(h[i, k2] * W2[k2, o], axis=k2) + b2[o], name="Y")
    return [X, W1, b1, W2, b2], Y


def _tup(x):
    return x if isinstance(x, tuple) else (x,)


# {{{ given values


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_program_reads_the_given_array_instead_of_computing_it(backend):
    (X,), Y = _softmax()
    e_t, s_t = Y.body.a.tensor, Y.body.b.tensor
    f = te.build(Y, inputs=[e_t, s_t], backend=backend)
    assert f.inputs == [e_t, s_t]  # X is not needed any more: nothing left reads it
    # deliberately not exp/sum of anything: the output follows the arrays passed
    e, s = rand(3, 5, seed=1), rand(3, seed=2, low=1.0, high=2.0)
    np.testing.assert_allclose(f(e, s), e / s[:, None], rtol=1e-6)
    np.testing.assert_allclose(f(rowsum=s, e=e), e / s[:, None], rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_given_values_equal_the_recomputed_program(backend):
    (X,), Y = _softmax()
    x = rand(3, 5)
    m = x.max(axis=1)
    e = np.exp(x - m[:, None]).astype(np.float32)
    want = te.build(Y, backend=backend)(x)
    # a listed placeholder that nothing reads after the cut is allowed, as before
    got = te.build(Y, inputs=[X, Y.body.a.tensor], backend=backend)(x, e)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_the_cut_removes_the_given_tensors_computation():
    (X,), Y = _softmax()
    e_t = Y.body.a.tensor
    c_src = te.build(Y, inputs=[e_t], backend="c").source
    np_src = te.build(Y, inputs=[e_t], backend="numpy").source
    # neither e's exp nor the rowmax it reads is computed any more
    assert "expf(" not in c_src and "rowmax" not in c_src
    assert "exp(" not in np_src and "rowmax" not in np_src
    assert "expf(" in te.build(Y, backend="c").source
    assert "exp(" in te.build(Y, backend="numpy").source


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_given_tensor_that_is_an_output_is_a_copy_of_its_array(backend):
    (X,), Y = _softmax()
    e_t = Y.body.a.tensor
    f = te.build([e_t, Y], inputs=[X, e_t], backend=backend)
    x, e = rand(3, 5), rand(3, 5, seed=4, low=0.5, high=1.0)
    got_e, got_y = f(x, e)
    np.testing.assert_array_equal(got_e, e)
    assert not np.shares_memory(got_e, e)
    np.testing.assert_allclose(got_y, e / e.sum(axis=1, keepdims=True), rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_size_binds_from_a_given_tensor(backend):
    n = te.var("n")
    X = te.placeholder((n, 4), name="X")
    k = te.reduce_axis(4, name="k")
    S = te.compute((n,), lambda i: te.sum(X[i, k], axis=k), name="S")
    Y = te.compute((n,), lambda i: S[i] * 3.0, name="Y")
    f = te.build(Y, inputs=[S], backend=backend)
    s = rand(7)
    np.testing.assert_allclose(f(s), s * 3.0, rtol=1e-6)
    with pytest.raises(ValueError, match="input 'S' must have 1 dimension"):
        f(rand(7, 4))
    with pytest.raises(TypeError, match="input 'S' must be float32"):
        f(rand(7, dtype="float64"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_given_recurrence_and_scatter_add(backend):
    d = te.placeholder((3, 6), name="d")
    e = te.recurrence((6, 3), lambda e, t, r: te.select(
        t == 0, d[r, 0], 0.5 * d[r, t] + 0.5 * e[t - 1, r]), name="e")
    Y = te.compute((3,), lambda r: e[5, r] + 1.0, name="Y")
    f = te.build(Y, inputs=[e], backend=backend)
    ev = rand(6, 3, seed=5)
    np.testing.assert_allclose(f(ev), ev[5] + 1.0, rtol=1e-6)

    E = te.placeholder((5, 2), name="E")
    idx = te.placeholder((4,), dtype="int32", name="idx")
    G, Hd = te.placeholder((4, 2), name="G"), te.placeholder((4, 2), name="Hd")
    Z = te.compute((4, 2), lambda i, j: E[idx[i], j] * G[i, j], name="Z")
    (dE,) = te.differentiate(Z, [E], head=Hd)
    assert type(dE).__name__ == "ScatterAdd"
    W = te.compute((5, 2), lambda i, j: dE[i, j] * 2.0, name="W")
    f = te.build(W, inputs=[dE], backend=backend)
    assert [t.name for t in f.inputs] == [dE.name]  # idx, G and Hd are not needed
    given = rand(5, 2, seed=6)
    np.testing.assert_allclose(f(given), given * 2.0, rtol=1e-6)
    g, hd, ix = rand(4, 2, seed=7), rand(4, 2, seed=8), np.array([0, 3, 3, 1], np.int32)
    want = np.zeros((5, 2), np.float32)
    np.add.at(want, ix, g * hd)
    np.testing.assert_allclose(te.build(W, inputs=[idx, G, Hd], backend=backend)(ix, g, hd),
                               want * 2.0, rtol=1e-5)


def _reached(t):
    from tensorexpr.ir import topo_order
    return topo_order([t])


def test_errors_name_the_tensor():
    (X,), Y = _softmax()
    e_t, s_t = Y.body.a.tensor, Y.body.b.tensor
    with pytest.raises(ValueError, match="listed twice"):
        te.build(Y, inputs=[e_t, s_t, e_t], backend="numpy")
    # after the cut at e only, rowsum still reads e and nothing reads X
    f = te.build(Y, inputs=[e_t], backend="numpy")
    with pytest.raises(TypeError, match=r"missing input\(s\): e"):
        f()
    with pytest.raises(ValueError, match=r"input 'e' has shape \(2, 5\), expected \(3, 5\)"):
        f(rand(2, 5))
    # cutting at rowsum alone leaves e, hence X, to compute: X must be listed
    with pytest.raises(te.TensorExprError, match=r"'X'.*not among inputs= \(rowsum\)"):
        te.build(Y, inputs=[s_t], backend="numpy")
    captured = []
    te.recurrence((3,), lambda r, t: captured.append(r) or te.select(t == 0, 1.0, r[t - 1]),
                  name="R")
    with pytest.raises(TypeError, match="self-reference of a recurrence"):
        te.build(Y, inputs=[X, captured[0]], backend="numpy")


def test_inputs_none_is_unchanged_and_lists_placeholders_only():
    (X,), Y = _softmax()
    f = te.build(Y, backend="numpy")
    assert f.inputs == [X]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_given_tensor_nothing_reads_is_an_unused_input_like_a_placeholder(backend):
    (X,), Y = _softmax()
    Z = te.compute((2,), lambda i: te.exp(X[0, i]), name="Z")
    f = te.build(Y, inputs=[X, Z], backend=backend)
    assert [t.name for t in f.inputs] == ["X", "Z"] and "Z" in repr(f)
    x = rand(3, 5)
    np.testing.assert_allclose(f(x, np.zeros(2, np.float32)), te.build(Y, backend=backend)(x),
                               rtol=1e-6)
    with pytest.raises(TypeError, match=r"missing input\(s\): Z"):
        f(x)


def test_builds_differing_in_what_is_given_never_share_a_kernel():
    X = te.placeholder((4,), name="X")
    A = te.compute((4,), lambda i: te.exp(X[i]), name="A")
    B = te.compute((4,), lambda i: te.sin(X[i]), name="B")
    Y = te.compute((4,), lambda i: A[i] + B[i], name="Y")
    prints = {fingerprint(Signature(*cut([Y], ins))) for ins in ([X], [X, A], [X, B], [A, B])}
    assert len(prints) == 4
    x, v = rand(4, seed=7), rand(4, seed=8)
    fa, fb = te.build(Y, inputs=[X, A]), te.build(Y, inputs=[X, B])
    np.testing.assert_allclose(fa(x, v), v + np.sin(x), rtol=1e-5)
    np.testing.assert_allclose(fb(x, v), np.exp(x) + v, rtol=1e-5)
    # the same cut of a fresh copy of the graph is the same program (same cache key)
    X2 = te.placeholder((4,), name="X")
    A2 = te.compute((4,), lambda i: te.exp(X2[i]), name="A")
    B2 = te.compute((4,), lambda i: te.sin(X2[i]), name="B")
    Y2 = te.compute((4,), lambda i: A2[i] + B2[i], name="Y")
    assert fingerprint(Signature(*cut([Y2], [X2, A2]))) == fingerprint(Signature(*cut([Y], [X, A])))


# }}}

# {{{ gradients given the forward's saved values


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("model, names", [(_softmax, ["rowmax", "e", "rowsum"]),
                                          (_layernorm, ["mean", "var"]),
                                          (_mlp, ["h"])])
def test_gradients_given_saved_values_equal_recomputed(backend, model, names):
    ph, Y = model()
    H = te.placeholder(Y.shape, name="H")
    grads = list(te.differentiate(Y, inputs=ph, head=H))
    saved = te.saved_values(grads, Y)
    assert [t.name for t in saved] == names
    forward_graph = {t.uid: t for t in _reached(Y)}
    assert all(forward_graph[t.uid] is t for t in saved)  # the user's own tensors
    args = [rand(*t.shape, seed=10 + k) for k, t in enumerate(ph)]
    h = rand(*Y.shape, seed=99)
    outs = _tup(te.build([Y] + saved, inputs=ph, backend=backend)(*args))
    # the forward with saved values gives exactly those tensors' values
    for t, v in zip(saved, outs[1:]):
        np.testing.assert_allclose(v, te.build(t, inputs=ph, backend="numpy")(*args),
                                   rtol=1e-5, atol=1e-6)
    recomputed = _tup(te.build(grads, inputs=ph + [H], backend=backend)(*args, h))
    given_fn = te.build(grads, inputs=ph + [H] + saved, backend=backend)
    given = _tup(given_fn(*args, h, *outs[1:]))
    for a, b in zip(given, recomputed):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    # the backward really reads them: other values give other gradients
    other = _tup(given_fn(*args, h, *[v * 1.5 + 0.25 for v in outs[1:]]))
    assert any(not np.allclose(a, b) for a, b in zip(other, recomputed))


def test_saved_values_skips_cheap_tensors_and_looks_through_them():
    X = te.placeholder((3, 4), name="X")
    k = te.reduce_axis(4, name="k")
    S = te.compute((3,), lambda i: te.sum(X[i, k], axis=k), name="S")
    C = te.compute((3, 4), lambda i, j: X[i, j] - S[i], name="C")  # cheap: recomputed
    Y = te.compute((3, 4), lambda i, j: C[i, j] * C[i, j], name="Y")
    H = te.placeholder((3, 4), name="H")
    (dX,) = te.differentiate(Y, [X], head=H)
    assert te.saved_values(dX, Y) == [S]
    assert te.saved_values([dX], [Y]) == [S]
    # a gradient that reads no forward value needs nothing saved
    k2 = te.reduce_axis(4, name="k2")
    L = te.compute((3,), lambda i: te.sum(X[i, k2] * 2.0, axis=k2), name="L")
    (dXL,) = te.differentiate(L, [X], head=te.placeholder((3,), name="HL"))
    assert te.saved_values(dXL, L) == []
    with pytest.raises(TypeError, match="saved_values takes tensors"):
        te.saved_values(dX, "Y")


# }}}


@pytest.mark.parametrize("backend", BACKENDS)
def test_reductions_extracted_from_a_body_are_saved_when_the_gradient_reads_them(backend):
    X = te.placeholder((3, 4), name="X")
    k1, k2 = te.reduce_axis(4, name="k1"), te.reduce_axis(4, name="k2")
    # differentiate moves both sums into tensors of their own (T_sum) and reads them
    T = te.compute((3,), lambda i: te.sqrt(te.sum(X[i, k1] * X[i, k1], axis=k1))
                   * te.sum(te.exp(X[i, k2]), axis=k2), name="T")
    H = te.placeholder((3,), name="H")
    (dX,) = te.differentiate(T, [X], head=H)
    saved = te.saved_values(dX, T)
    assert [t.name for t in saved] == ["T_sum", "T_sum_2"]  # named apart: one name, one tensor
    x, h = rand(3, 4, seed=3), rand(3, seed=4)
    t, *vals = te.build([T] + saved, inputs=[X], backend=backend)(x)
    sums = {round(float(v[0]), 4) for v in vals}
    assert sums == {round(float((x[0] ** 2).sum()), 4), round(float(np.exp(x[0]).sum()), 4)}
    given = te.build(dX, inputs=[X, H] + saved, backend=backend)
    np.testing.assert_allclose(given(x, h, *vals), te.build(dX, backend=backend)(x, h),
                               rtol=1e-5, atol=1e-6)

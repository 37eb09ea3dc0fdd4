"""Transposed copies for dot-product-shaped sums (codegen.layout): ``H B^T`` is computed by
rows on a copy ``B_T``. Checked against the numpy backend with ragged and symbolic sizes,
through gradients (matmul, a two-layer perceptron), with copies shared between sums,
copies of intermediates and of fused chains, and where no copy must be made."""
from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tensorexpr as te
from codegen import fuse, layout
from codegen.patterns import row_reduce

from .util import agree, rand


def _copies(f) -> int:
    """How many transposed copies the C program computes (its schedule's copies)."""
    return sum(c.endswith("_T") for c in f.schedule.copies)


def _by_rows(f, name: str) -> bool:
    """Is ``name`` computed by rows (an accumulator array over a tile of its last axis)
    rather than by the jam schedule (dot products in vector lanes)?"""
    return f.schedule[name].strategy == "rows"


@pytest.mark.parametrize("m,n,k", [(8, 8, 8), (13, 37, 21), (33, 19, 70)])
def test_matmul_input_gradient_runs_by_rows_on_a_copy(m, n, k):
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    H = te.placeholder((m, n), name="H")
    dA, dB = te.differentiate(C, [A, B], head=H)
    f, _ = agree([dA, dB], [A, B, H], rand((m, k)), rand((k, n), seed=1),
                 rand((m, n), seed=2))
    assert _copies(f) == 1 and "B_T" in f.schedule.copies
    assert _by_rows(f, "dA") and _by_rows(f, "dB")


def test_symbolic_sizes_agree_at_every_size():
    m, n = te.var("m"), te.var("n")
    H = te.placeholder((m, 33), name="H")
    B = te.placeholder((n, 33), name="B")
    k = te.reduce_axis((0, 33), name="k")
    D = te.compute((m, n), lambda i, j: te.sum(H[i, k] * B[j, k], axis=k) * 0.5 + 1.0,
                   name="D")
    fc, fn = te.build(D), te.build(D, backend="numpy")
    assert _copies(fc) == 1 and _by_rows(fc, "D")
    for rows, cols in ((1, 1), (7, 9), (9, 40), (17, 3)):
        h, b = rand((rows, 33), seed=rows), rand((cols, 33), seed=cols + 1)
        np.testing.assert_allclose(fc(h, b), fn(h, b), rtol=1e-5, atol=1e-5)


def test_batched_scores_copy_the_keys_per_batch():
    # attention scores S[b, i, j] = sum_d Q[b, i, d] K[b, j, d]: K_T[b, d, j] per batch
    n = te.var("n")
    Q = te.placeholder((3, n, 12), name="Q")
    K = te.placeholder((3, 20, 12), name="K")
    d = te.reduce_axis((0, 12), name="d")
    S = te.compute((3, n, 20), lambda b, i, j: te.sum(Q[b, i, d] * K[b, j, d], axis=d),
                   name="S")
    fc, fn = te.build(S), te.build(S, backend="numpy")
    assert "/* K_T[a0, a1, a2] = K[a0, a2, a1]" in fc.source and _by_rows(fc, "S")
    for rows in (1, 9, 30):
        q, k = rand((3, rows, 12), seed=rows), rand((3, 20, 12), seed=1)
        np.testing.assert_allclose(fc(q, k), fn(q, k), rtol=1e-5, atol=1e-5)
    # many batches but few rows in each: every element of a copy would be read by
    # only four rows
    Q4 = te.placeholder((64, 4, 12), name="Q4")
    K4 = te.placeholder((64, 20, 12), name="K4")
    d4 = te.reduce_axis((0, 12), name="d4")
    S4 = te.compute((64, 4, 20), lambda b, i, j: te.sum(Q4[b, i, d4] * K4[b, j, d4], axis=d4),
                    name="S4")
    assert [t.name for t in layout.plan([S4], set())] == ["S4"]


def test_each_element_sums_in_order():
    # rows add each element's products one after another, as the definition does, each
    # with one rounding (a fused multiply-add, ir.py): the result is the float32
    # sequential sum of fused steps, bit for bit (emulated in extended precision, where
    # the product of two float32 is exact)
    H = te.placeholder((9, 50), name="H")
    B = te.placeholder((12, 50), name="B")
    k = te.reduce_axis((0, 50), name="k")
    D = te.compute((9, 12), lambda i, j: te.sum(H[i, k] * B[j, k], axis=k), name="D")
    h, b = rand((9, 50)), rand((12, 50), seed=1)
    got = te.build(D)(h, b)
    want = np.zeros((9, 12), dtype=np.float32)
    wide = np.longdouble
    for kk in range(50):
        step = want.astype(wide) + h[:, kk:kk + 1].astype(wide) * b[:, kk][None, :].astype(wide)
        want = step.astype(np.float32)
    np.testing.assert_array_equal(got, want)


def test_mlp_gradients_agree_and_stay_fused():
    Bn, I, Hd, O = 19, 24, 20, 10
    X = te.placeholder((Bn, I), name="X")
    W1 = te.placeholder((I, Hd), name="W1")
    b1 = te.placeholder((Hd,), name="b1")
    W2 = te.placeholder((Hd, O), name="W2")
    b2 = te.placeholder((O,), name="b2")
    k1, k2 = te.reduce_axis((0, I), name="k1"), te.reduce_axis((0, Hd), name="k2")
    h = te.compute((Bn, Hd), lambda i, j: te.tanh(te.sum(X[i, k1] * W1[k1, j], axis=k1)
                                                  + b1[j]), name="h")
    Y = te.compute((Bn, O), lambda i, o: te.sum(h[i, k2] * W2[k2, o], axis=k2) + b2[o],
                   name="Y")
    H = te.placeholder((Bn, O), name="H")
    grads = te.differentiate(Y, [X, W1, b1, W2, b2], head=H)
    f, _ = agree(list(grads), [X, W1, b1, W2, b2, H], rand((Bn, I)), rand((I, Hd), seed=1),
                 rand((Hd,), seed=2), rand((Hd, O), seed=3), rand((O,), seed=4),
                 rand((Bn, O), seed=5))
    assert "W1_T" in f.schedule.copies and "W2_T" in f.schedule.copies
    assert _by_rows(f, "dX") and _by_rows(f, "dh")
    assert len(f.schedule.groups) >= 1


def test_one_copy_serves_every_sum_reading_it():
    H1 = te.placeholder((10, 16), name="H1")
    H2 = te.placeholder((12, 16), name="H2")
    B = te.placeholder((20, 16), name="B")
    k1, k2 = te.reduce_axis((0, 16), name="k1"), te.reduce_axis((0, 16), name="k2")
    D1 = te.compute((10, 20), lambda i, j: te.sum(H1[i, k1] * B[j, k1], axis=k1), name="D1")
    D2 = te.compute((12, 20), lambda i, j: te.sum(H2[i, k2] * B[j, k2], axis=k2), name="D2")
    f, _ = agree([D1, D2], [H1, H2, B], rand((10, 16)), rand((12, 16), seed=1),
                 rand((20, 16), seed=2))
    assert _copies(f) == 1 and _by_rows(f, "D1") and _by_rows(f, "D2")


def test_copies_of_computed_and_inlined_intermediates():
    H = te.placeholder((11, 18), name="H")
    B = te.placeholder((14, 18), name="B")
    E = te.compute((14, 18), lambda a, b: te.exp(B[a, b] * 0.1), name="E")  # stored
    S = te.compute((14, 18), lambda a, b: B[a, b] * 2.0 - 1.0, name="S")  # inlined
    k1, k2 = te.reduce_axis((0, 18), name="k1"), te.reduce_axis((0, 18), name="k2")
    D1 = te.compute((11, 14), lambda i, j: te.sum(H[i, k1] * E[j, k1], axis=k1), name="D1")
    D2 = te.compute((11, 14), lambda i, j: te.sum(H[i, k2] * S[j, k2], axis=k2), name="D2")
    f, _ = agree([D1, D2], [H, B], rand((11, 18)), rand((14, 18), seed=1))
    assert "E_T" in f.schedule.copies and "S_T" in f.schedule.copies
    assert _by_rows(f, "D1") and _by_rows(f, "D2")
    assert f.source.index("/* E[a, b] =") < f.source.index("/* E_T[a0, a1] =")


def test_a_copy_of_a_fused_chain_keeps_the_chain_fused():
    # softmax rows P (one fused slab loop), then G = H P^T: the copy of P comes after
    # the chain, which stays one loop
    X = te.placeholder((24, 40), name="X")
    H = te.placeholder((16, 40), name="H")
    k1, k2 = te.reduce_axis((0, 40), name="k1"), te.reduce_axis((0, 40), name="k2")
    m = te.compute((24,), lambda i: te.max(X[i, k1], axis=k1), name="m")
    e = te.compute((24, 40), lambda i, j: te.exp(X[i, j] - m[i]), name="e")
    s = te.compute((24,), lambda i: te.sum(e[i, k2], axis=k2), name="s")
    P = te.compute((24, 40), lambda i, j: e[i, j] / s[i], name="P")
    d = te.reduce_axis((0, 40), name="d")
    G = te.compute((16, 24), lambda i, j: te.sum(H[i, d] * P[j, d], axis=d), name="G")
    f, _ = agree([G], [X, H], rand((24, 40)), rand((16, 40), seed=1))
    assert "P_T" in f.schedule.copies and _by_rows(f, "G")
    assert len(f.schedule.groups) == 1


def test_groups_are_kept_when_the_copy_has_the_rows_of_a_fused_chain():
    # every tensor has 32 rows, the copy too: it may join a fused group, but the
    # groups of the other tensors stay as they were
    X = te.placeholder((32, 32), name="X")
    B = te.placeholder((32, 32), name="B")
    H = te.placeholder((32, 32), name="H")
    k1, k2 = te.reduce_axis((0, 32), name="k1"), te.reduce_axis((0, 32), name="k2")
    m = te.compute((32,), lambda i: te.max(X[i, k1], axis=k1), name="m")
    Y = te.compute((32, 32), lambda i, j: te.exp(X[i, j] - m[i]), name="Y")
    D = te.compute((32, 32), lambda i, j: te.sum(H[i, k2] * B[j, k2], axis=k2), name="D")
    computed = [m, Y, D]
    before = [[t.uid for t in g] for g in fuse.plan(computed, set())]
    order = layout.plan(computed, set())
    after = [[t.uid for t in g if not t.name.endswith("_T")]
             for g in fuse.plan(order, set())]
    assert [g for g in after if g] == before
    assert [t.name for t in order].count("B_T") == 1
    moved = [t for t in order if t.uid == D.uid][0]
    assert row_reduce(moved) is not None
    agree([Y, D], [X, B, H], rand((32, 32)), rand((32, 32), seed=1), rand((32, 32), seed=2))


def test_no_copy_for_few_rows_or_guarded_reads():
    # four rows: a copy would cost as much as the sum
    H = te.placeholder((4, 30), name="H")
    B = te.placeholder((40, 30), name="B")
    k = te.reduce_axis((0, 30), name="k")
    D = te.compute((4, 40), lambda i, j: te.sum(H[i, k] * B[j, k], axis=k), name="D")
    f, _ = agree([D], [H, B], rand((4, 30)), rand((40, 30), seed=1))
    assert _copies(f) == 0 and not _by_rows(f, "D")
    # the sum reads 12 of B's 4000 rows: a copy of all of B would cost more than the sum
    Bbig = te.placeholder((4000, 30), name="Bbig")
    kb = te.reduce_axis((0, 30), name="kb")
    Hb = te.placeholder((16, 30), name="Hb")
    P = te.compute((16, 12), lambda i, j: te.sum(Hb[i, kb] * Bbig[j, kb], axis=kb), name="P")
    assert [t.name for t in layout.plan([P], set())] == ["P"]
    # a data-dependent row of B: its run-time check names B, so the read stays
    H2 = te.placeholder((16, 30), name="H2")
    idx = te.placeholder((40,), dtype="int64", name="idx")
    k2 = te.reduce_axis((0, 30), name="k2")
    G = te.compute((16, 40), lambda i, j: te.sum(H2[i, k2] * B[idx[j], k2], axis=k2),
                   name="G")
    order = layout.plan([G], set())
    assert [t.name for t in order] == ["G"]
    fc = te.build(G, inputs=[H2, B, idx])
    bad = np.zeros(40, dtype=np.int64)
    bad[7] = 40
    with pytest.raises(IndexError, match="B"):
        fc(rand((16, 30)), rand((40, 30), seed=1), bad)


def test_recurrence_programs_are_left_alone():
    X = te.placeholder((16, 12), name="X")
    W = te.placeholder((12, 12), name="W")
    k = te.reduce_axis((0, 12), name="k")
    R = te.recurrence((16, 12), lambda self, t, j: te.select(
        t > 0, self[t - 1, j] * 0.5 + X[t, j], X[t, j]), name="R")
    D = te.compute((16, 12), lambda i, j: te.sum(R[i, k] * W[j, k], axis=k), name="D")
    assert [t.name for t in layout.plan([R, D], set())] == ["R", "D"]
    agree([D], [X, W], rand((16, 12)), rand((12, 12), seed=1))


def test_a_checked_read_beside_a_moved_one_reports_its_own_tensor():
    H = te.placeholder((20, 30), name="H")
    B = te.placeholder((40, 30), name="B")
    idx = te.placeholder((16,), dtype="int64", name="idx")
    k = te.reduce_axis((0, 30), name="k")
    D = te.compute((16, 40), lambda i, j: te.sum(H[idx[i], k] * B[j, k], axis=k), name="D")
    ix = np.arange(16, dtype=np.int64)[::-1].copy()
    f, _ = agree([D], [H, B, idx], rand((20, 30)), rand((40, 30), seed=1), ix)
    assert "B_T" in f.schedule.copies and _by_rows(f, "D")
    ix[5] = 25
    with pytest.raises(IndexError, match=r"reads 'H' at index 25 .*H\[idx\[i\], k\]"):
        f(rand((20, 30)), rand((40, 30), seed=1), ix)


def test_docstring_examples_hold():
    import doctest
    result = doctest.testmod(layout)
    assert result.attempted > 0 and result.failed == 0



def _rnn_gradient(T, B, D, k=None, dtype="float32", last=False):
    """A tanh RNN's gradient (of ``sum(H * h)``, or with ``last`` of the last step's
    squares): its adjoint's step sums ``sum_j dZ[b, j] * W[k, j]`` read ``W`` down its
    rows (dot-product shaped)."""
    x = te.placeholder((T, B, D), dtype, "x")
    W = te.placeholder((D, D), dtype, "W")
    kk = te.reduce_axis(D, "kk")
    h = te.recurrence((T, B, D), lambda h, t, b, j: te.tanh(x[t, b, j] + te.select(
        t == 0, 0.0, te.sum(h[t - 1, b, kk] * W[kk, j], axis=kk))), name="h", dtype=dtype,
        checkpoints=k)
    if last:
        r1, r2 = te.reduce_axis(B), te.reduce_axis(D)
        L = te.compute((), lambda: te.sum(h[T - 1, r1, r2] ** 2, axis=[r1, r2]), name="L")
        return list(te.differentiate(L, [x, W])), [x, W]
    H = te.placeholder(h.shape, dtype, "H")
    grads = te.differentiate(h, [x, W], head=H)
    return list(grads), [x, W, H], grads.adjoints[h]


@settings(max_examples=4, deadline=None)
@given(st.integers(2, 9), st.integers(8, 20), st.integers(3, 40))
def test_the_step_sums_of_an_rnn_gradient_read_a_transposed_copy(T, B, D):
    grads, ins, dh = _rnn_gradient(T, B, D)
    arrays = [rand((T, B, D)), rand((D, D), seed=1) * (0.5 / D ** 0.5), rand((T, B, D), seed=2)]
    f, _ = agree(grads, ins, *arrays, rtol=1e-4, atol=1e-4)
    # step sums that would run as dot products (jam) read W_T by rows instead
    plain = te.build(grads, ins, options=te.ScheduleOptions(copies=False))
    jam = plain.schedule[f"{dh.name}_step0"].strategy == "jam"
    assert (f.schedule.copies == ("W_T",)) == jam
    if jam:
        assert f.schedule[f"{dh.name}_step0"].strategy == "rows"
    assert jam or D < 8


def test_a_checkpointed_rnn_gradient_reads_the_same_copy_bit_for_bit():
    T, B, D = 9, 8, 12
    grads, ins = _rnn_gradient(T, B, D, k=3, dtype="float64", last=True)
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal((T, B, D)), 0.3 * rng.standard_normal((D, D))]
    f = te.build(grads, ins)
    assert "checkpointed gradient" in f.source and f.schedule.copies == ("W_T",)
    full = te.build(grads, ins, options=te.ScheduleOptions(checkpoint=False))
    assert full.schedule.copies == ("W_T",)
    ref = te.build(grads, ins, backend="numpy")(*arrays)
    for g, w, r in zip(f(*arrays), full(*arrays), ref):
        assert np.array_equal(g, w)
        np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-10)

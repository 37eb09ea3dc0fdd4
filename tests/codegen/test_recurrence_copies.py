"""Transposed copies of the inputs a recurrence reads across its lanes
(codegen.recurrence_copies): which reads move, and the values (forward, gradients,
checkpointed builds) agree with the numpy backend and the full tape."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

import tensorexpr as te
from codegen import recurrence_copies

from .util import agree, rand


def _running_max(R, T, dtype="float32", checkpoints=None):
    X = te.placeholder((R, T), dtype, "X")
    Y = te.recurrence((T, R), lambda h, t, r: te.select(
        t > 0, te.maximum(h[t - 1, r], X[r, t]), X[r, t]), name="Y", dtype=dtype,
        checkpoints=checkpoints)
    return X, Y


@settings(max_examples=10, deadline=None)
@given(st.sampled_from([(64, 300), (128, 130), (100, 257), (256, 64)]),
       st.sampled_from(["float32", "float64"]))
def test_a_transposed_read_moves_to_a_copy_and_agrees(shape, dtype):
    R, T = shape
    X, Y = _running_max(R, T, dtype)
    H = te.placeholder((T, R), dtype, "H")
    (dX,) = te.differentiate(Y, [X], head=H)
    x, h = rand((R, T), dtype), rand((T, R), dtype, seed=1)
    f, _ = agree([Y, dX], [X, H], x, h)
    assert "X_T" in f.schedule.copies, str(f.schedule)
    # the forward and the adjoint (which reads X[r, t + 1]) share the one copy
    assert f.source.count("/* X_T[") == 1


def test_a_program_asking_for_checkpoints_makes_no_copy():
    # its scratch memory is to be bounded by its checkpoints; a copy is input-sized
    X, Y = _running_max(128, 200, "float64", checkpoints=6)
    r = te.reduce_axis(128)
    L = te.compute((), lambda: te.sum(Y[199, r] * Y[199, r], axis=r), name="L", dtype="float64")
    (dX,) = te.differentiate(L, [X])
    x = rand((128, 200), "float64")
    ck = te.build(dX, [X])
    full = te.build(dX, [X], options=te.ScheduleOptions(checkpoint=False))
    assert not ck.schedule.copies and not full.schedule.copies
    assert ck.schedule.checkpoint, str(ck.schedule)
    np.testing.assert_array_equal(ck(x), full(x))
    np.testing.assert_allclose(ck(x), te.build(dX, [X], backend="numpy")(x), rtol=1e-12)


def test_reads_that_stay():
    # small inputs stay cached: no copy
    X, Y = _running_max(16, 64)
    assert not te.build(Y, [X]).schedule.copies
    # a read along the lanes' own rows is contiguous already
    Z = te.placeholder((512, 256), name="Z")
    W = te.recurrence((512, 256), lambda h, t, r: te.select(t > 0, h[t - 1, r] + Z[t, r],
                                                           Z[t, r]), name="W")
    assert not te.build(W, [Z]).schedule.copies
    # carried along the last axis: its lanes are not the last axis
    V = te.recurrence((256, 512), lambda h, r, t: te.select(t > 0, h[r, t - 1] + Z[t, r],
                                                           Z[t, r]), name="V")
    read = next(r for r in te.ir.reads(V.body) if r.tensor is Z)
    assert recurrence_copies.moved_dim(V, read) is None
    # a data-dependent index keeps the read (its run-time check names the user's tensor)
    idx = te.placeholder((512,), "int64", "idx")
    U = te.recurrence((512, 256), lambda h, t, r: te.select(t > 0, h[t - 1, r], 0.0)
                      + Z[r, idx[t]], name="U")
    read = next(r for r in te.ir.reads(U.body) if r.tensor is Z)
    assert recurrence_copies.moved_dim(U, read) is None


def test_turned_off_with_the_other_copies():
    X, Y = _running_max(128, 130)
    f = te.build(Y, [X], options=te.ScheduleOptions(copies=False))
    assert not f.schedule.copies
    np.testing.assert_array_equal(f(x := rand((128, 130))), te.build(Y, [X])(x))

"""Regression corpus of the fuzzer: each failure it found, minimized, as a test.

A comment above each test names the bug class it caught (all fixed). The
minimal ones were reduced by hand from the fuzzer's shrunk output; the long ones
are the fuzzer's shrunk output as printed.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te

from .harness import check


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).uniform(-1.5, 1.5, shape)


# fixed: a read under a false guard is evaluated (the arg-extremum tie test conjoins the guard with
# &, so X is read outside its box)
def test_min_over_an_unflattened_read():
    # dX[i0, i1] = select((1 >= i1) & (1 >= i0) & (X[i0 % 2, (i0 + 2*i1) // 2] == Y), ...):
    # the tie test's read leaves X at i1 = 3
    X = te.placeholder((4, 4), dtype="float64", name="X")
    k = te.reduce_axis((0, 4), name="k")
    Y = te.compute((), lambda: te.min(X[k % 2, k // 2], axis=k), name="Y", dtype="float64")
    check(Y, [X], [_rand(4, 4)])


# fixed: a read under a false guard is evaluated (the arg-extremum tie test conjoins the guard with
# &, so X is read outside its box)
@pytest.mark.parametrize("op", ["min", "max"])
def test_extremum_over_an_unflattened_computed_tensor(op):
    X = te.placeholder((3,), dtype="float64", name="X")
    T0 = te.compute((4, 4), lambda i, j: X[(i + j) % 3] * te.const(2.0, "float64"), name="T0",
                    dtype="float64")
    k = te.reduce_axis((0, 4), name="k")
    Y = te.compute((), lambda: getattr(te, op)(T0[k % 2, k // 2], axis=k,
                                               where=(X[0] > 0.0) | (k == 0)),
                   name="Y", dtype="float64")
    check(Y, [X], [np.array([0.4, -0.3, 1.2])])


# fixed: nested reductions whose outer axis does not start at 0 (the extracted inner reduction is
# indexed by the raw axis)
def test_max_of_a_sum_whose_outer_axis_starts_at_1():
    # Y_ties reads Y_sum at index 3 (k1 - 1 expected)
    X = te.placeholder((3, 4), dtype="float64", name="X")
    k1 = te.reduce_axis((1, 4), name="k1")
    k2 = te.reduce_axis((0, 4), name="k2")
    Y = te.compute((), lambda: te.max(te.sum(X[k1 - 1, k2], axis=k2), axis=k1), name="Y",
                   dtype="float64")
    check(Y, [X], [_rand(3, 4)])


# fixed: 't1 undeclared' C compile errors
def test_data_dependent_read_through_a_constant_floordiv():
    # forward only: i // 3 is 0 on [0, 3); the kernel stores an undeclared t1
    X0 = te.placeholder((4,), dtype="float64", name="X0")
    I0 = te.placeholder((3,), dtype="int32", name="I0")
    T0 = te.compute((3,), lambda i: X0[I0[i // 3]], name="T0", dtype="float64")
    check(T0, [X0, I0], [np.array([0.9, -0.6, -1.1, -1.2]), np.array([1, 3, 0], np.int32)])


# fixed: 't1 undeclared' C compile errors
def test_select_of_a_diagonal_and_unflattened_composite():
    X0 = te.placeholder((4, 2), dtype="float64", name="X0")
    T0 = te.compute((2,), lambda i0: te.sqrt(1.0 + (-(X0[i0 // 2, i0 % 2] + X0[i0, i0])) * (
        -(X0[i0 // 2, i0 % 2] + X0[i0, i0]))), name="T0", dtype="float64")
    T1 = te.compute((), lambda: te.sqrt(1.0 + (te.select(X0[0, 0] > 0.0, T0[0], X0[0, 0])) * (
        te.select(X0[0, 0] > 0.0, T0[0], X0[0, 0]))), name="T1", dtype="float64")
    check(T1, [X0], [_rand(4, 2)])


# fixed: data-dependent index expressions fail to build
def test_data_dependent_read_indexed_by_a_floordiv_in_rank_3():
    # ValueError: not a closed integer expression: I0[(0 + 2) // 3] (C build, forward)
    X0 = te.placeholder((4,), dtype="float64", name="X0")
    I0 = te.placeholder((3,), dtype="int32", name="I0")
    T0 = te.compute((1, 3, 2), lambda i, j, k: X0[I0[(j + 2) // 3]], name="T0", dtype="float64")
    check(T0, [X0, I0], [np.array([0.9, -0.6, -1.1, -1.2]), np.zeros(3, np.int32)])


# fixed: max/min of exp in C: the arg-extremum tie test recomputes exp differently
def test_min_of_a_gaussian_gradient_in_c():
    X = te.placeholder((4,), dtype="float64", name="X")
    k = te.reduce_axis((1, 5), name="k")
    Y = te.compute((), lambda: te.min(te.exp(-X[k - 1] * X[k - 1]), axis=k), name="Y",
                   dtype="float64")
    check(Y, [X], [np.array([0.9, 0.5, 0.7, -0.3])])


# gradient dX0 reads X0 at index -2 at run time: a clamped/guarded read's adjoint is evaluated
# outside its guard (likely the false-guard class); not minimized
def test_fuzz_sum_of_clamped_reads_under_a_false_select():
    n = te.var("n")
    X0 = te.placeholder((2, 3, 2, n), dtype="float64", name="X0")
    k0 = te.reduce_axis((0, n), name="k0")
    k1 = te.reduce_axis((0, 4), name="k1")
    T0 = te.compute((3,), lambda i0: te.select(~(i0 >= i0), te.sum(X0[te.minimum(k0, 1), (3 * k0 + 2) % 3, (3 - (k1)) % 2, te.minimum(te.maximum(k1 + -2, 0), n - (1))] + te.select((i0 <= 1) & (k0 + 3 * i0 <= n - (1)), X0[i0, i0, te.minimum(n - (1) - (k0), 1), k0 + 3 * i0], 0.0), axis=[k0, k1], where=(k1 % 2 == 1) | (te.select(((k1 + 1) // 2 <= 1) & (i0 <= n - (1)), X0[te.minimum(k0 + 1, 1), (i0 + 1) % 3, (k1 + 1) // 2, i0], 0.0) > 0.5)), te.select(~(te.select(i0 // 2 <= n - (1), X0[te.minimum(i0 + 2, 1), (i0 + -2) % 3, (2 * i0 + i0) % 2, i0 // 2], 0.0) < 0.5), te.select(X0[te.minimum(2 - (i0), 1), 0, 1, te.minimum(2 - (i0), n - (1))] < -0.5, te.const(0.0, 'float64'), te.select(2 - (i0) <= n - (1), X0[te.minimum(i0 + 2 * i0, 1), (i0 + 2) % 2, te.minimum((i0 + 1) % 3, 1), 2 - (i0)], 0.0)), te.select((i0 + 2 <= 1) & (i0 <= n - (1)), X0[(i0 + 2) % 2, i0 // 2, i0 + 2, i0], 0.0))), name="T0", dtype="float64")
    check(T0, [X0], [
        np.array([[[[0.2311904891719272, -1.2308515071857085, 0.5508191589573963], [-0.9481944272574804, -0.5268335750540796, -0.4177192503323619]], [[-0.5703666681795334, 0.43958738687109644, 0.8321170168721617], [1.4052849337549884, -0.9562163308072471, -0.21581693554957893]], [[1.1650108329269502, 1.1476715401042856, -0.7962466070822711], [0.7494847801012026, 0.7912052607295292, -0.9089416780061171]]], [[[0.832067643626921, 0.2654865558540176, -0.8258532591937172], [-1.3632832715483199, -1.2389570429455063, -0.6761280717944481]], [[1.197394494494013, 0.9874250677039975, 0.8339875980521425], [1.1349001232621854, 0.893318515650293, 0.02013090385556371]], [[1.4196236493120402, 0.8820838662071031, 0.5062179299833502], [-0.6851451398158863, 0.05505382735581721, 0.7446442616325464]]]], dtype='float64')],
          second_order=False, seed=1200)


# gradient dX0 reads T1[1, 2] at run time with n = 1, where the read is guarded by 1 <= n - 1
# (likely the false-guard class); not minimized
def test_fuzz_recurrence_read_under_a_symbolic_guard():
    n = te.var("n")
    X0 = te.placeholder((4, n), dtype="float64", name="X0")
    X1 = te.placeholder((n,), dtype="float64", name="X1")
    X2 = te.placeholder((2, 4), dtype="float64", name="X2")
    T0 = te.compute((), lambda : te.select(2 <= n - (1), X1[2], 0.0), name="T0", dtype="float64")
    T1 = te.recurrence((n, 4), lambda S, i0, i1: 0.5 * (te.select((i1 % 2 == 0) | (i0 % 2 == 0), te.select(3 * i1 + 0 <= 1, X2[3 * i1 + 0, te.minimum(i0, 3)], 0.0), te.select(te.select(i1 >= 1, S[i0, i1 - (1)], 0.0) < 0.0, X0[2, te.minimum(i1, n - (1))], X0[te.minimum(n - (1) - (i0), 3), i0])) + (te.const(0.5, 'float64')) * (te.select(i1 >= 1, S[te.minimum(i1, n - (1)), i1 - (1)], 0.0))), name="T1", dtype="float64")
    T2 = te.compute((), lambda : te.select(te.select(1 <= n - (1), T1[1, 2], 0.0) > 0.0, te.const(0.5, 'float64'), te.maximum(X1[te.minimum(4, n - (1))], te.const(1.0, 'float64'))), name="T2", dtype="float64")
    check(T2, [X0, X1, X2], [
        np.array([[0.4108850619643629], [-0.6906398587083891], [-1.3770794281914158], [-1.4504170934144127]], dtype='float64'),
        np.array([0.9398107176008175], dtype='float64'),
        np.array([[1.238266731833165, 0.3199073273015396, 0.6884896829519951, 0.1308749743962685], [1.3052172713633046, 0.9475606623645962, -1.4917844994895557, 1.0722128297627078]], dtype='float64')],
          second_order=True, seed=0)


# gradient of a recurrence (carry on dimension 1) with a sum over the previous step under sin and a
# clamped symbolic read: ddT0 reads dX0_sum[i1] (size n = 1) at i1 = 2, an axis captured from the
# wrong scope (likely the known variable-capture class); not minimized
def test_fuzz_recurrence_sum_over_previous_step_under_sin():
    n = te.var("n")
    X0 = te.placeholder((n,), dtype="float64", name="X0")
    X1 = te.placeholder((), dtype="float64", name="X1")
    X2 = te.placeholder((), dtype="float64", name="X2")
    I0 = te.placeholder((1,), dtype="int32", name="I0")
    k0 = te.reduce_axis((0, 1), name="k0")
    T0 = te.recurrence((1, 3, 1), lambda S, i0, i1, i2: te.sin(te.const(1.0, 'float64') + X0[te.minimum(i1 + 1, n - (1))] + -(te.select(i1 >= 2, S[0, i1 - (2), i2], 0.0)) + (te.const(0.5, 'float64')) * (0.5 * (te.sum(te.select(i1 >= 1, S[k0, i1 - (1), i2], 0.0), axis=k0))) + (te.const(0.5, 'float64')) * (te.tanh(te.select(i1 >= 2, S[(i0 + 1) // 3, i1 - (2), te.maximum(i1 + -2, 0)], 0.0))) + (te.const(0.5, 'float64')) * (te.tanh(te.select(i1 >= 3, S[i0, i1 - (3), i2], 0.0)))), name="T0", dtype="float64")
    check(T0, [X0, X1, X2, I0], [
        np.array([-0.26003952073584813, 1.430376301525059, 0.016961501286208547], dtype='float64'),
        np.array(0.4628917731194564, dtype='float64'),
        np.array(0.6233354472753683, dtype='float64'),
        np.array([0], dtype='int32')],
          second_order=True, seed=143)


# gradient of a min whose where= reads X1 through clamps: dX2 reads X1 at index -2 (likely the
# known false-guard class); not minimized
def test_fuzz_min_with_a_data_where_over_clamped_reads():
    X0 = te.placeholder((2, 1), dtype="float64", name="X0")
    X1 = te.placeholder((2, 1, 3), dtype="float64", name="X1")
    X2 = te.placeholder((3,), dtype="float64", name="X2")
    T0 = te.compute((), lambda : te.select((X1[0, 0, 0] > 0.0) & (X1[0, 0, 0] > 0.0), te.const(1.0, 'float64'), X2[0]), name="T0", dtype="float64")
    k0 = te.reduce_axis((0, 4), name="k0")
    T1 = te.compute((3,), lambda i0: te.min(-(te.select(i0 % 2 == 1, T0[()], X2[(i0 + 1) % 3])), axis=k0, where=(X1[te.minimum(i0, 1), te.minimum(i0, 0), i0] > 0.0) | (k0 == 0)), name="T1", dtype="float64")
    check(T1, [X0, X1, X2], [
        np.array([[0.4108850619643629], [-0.6906398587083891]], dtype='float64'),
        np.array([[[-1.3770794281914158, -1.4504170934144127, 0.9398107176008175]], [[1.238266731833165, 0.3199073273015396, 0.6884896829519951]]], dtype='float64'),
        np.array([0.1308749743962685, 1.3052172713633046, 0.9475606623645962], dtype='float64')],
          second_order=True, seed=0)


# wrong VJP (C and numpy vs central differences): a recurrence carried along its last dimension
# reads tanh(sum_k S[k, i1, i2 - 2]) (likely the known variable capture in partials of a
# nonlinearity of a reduction over earlier steps); not minimized
def test_fuzz_recurrence_tanh_of_a_sum_over_two_steps_back():
    X0 = te.placeholder((4, 4), dtype="float64", name="X0")
    X1 = te.placeholder((1, 3, 2), dtype="float64", name="X1")
    X2 = te.placeholder((), dtype="float64", name="X2")
    k0 = te.reduce_axis((1, 2), name="k0")
    k1 = te.reduce_axis((0, 3), name="k1")
    T0 = te.compute((3, 2), lambda i0, i1: te.select((i1 % 2 == 1) | (X1[(2 + 3 * i1) % 1, 0, i1] < 0.0), te.select((X0[(i1 + 2) % 3, i1] < 0.5) & (i0 + 0 == i1), te.max(te.cast(i1, 'float64') * 0.5, axis=[k0, k1], where=(X0[2 - (k0), 3] > -0.5) | ((k0 == 1) & (k1 == 0))), (te.cast(i0, 'float64') * 0.5) / (1.0 + (te.cast(i0, 'float64') * 0.5) * (te.cast(i0, 'float64') * 0.5))), te.minimum(te.sin(te.cast(i0, 'float64') * 0.5), te.select(~(i1 + -1 > i0), X0[i0 + 1, 1 - (i1)], te.cast(i1, 'float64') * 0.5))), name="T0", dtype="float64")
    k2 = te.reduce_axis((2, 4), name="k2")
    k3 = te.reduce_axis((0, 2), name="k3")
    T1 = te.recurrence((2, 3, 3), lambda S, i0, i1, i2: te.tanh((te.sum(X0[(i0 + 2) // 3, te.minimum(1 + 3 * i2, 3)], axis=k2)) * (te.select(i2 <= 0, te.select(2 - (i1) <= 1, X1[((i0 + 1) % 3) % 1, te.minimum(i0 + 2, 2), 2 - (i1)], 0.0), te.cast(i2, 'float64') * 0.5)) + (te.const(0.5, 'float64')) * (te.tanh(te.select(i2 >= 1, S[i0, (i1 + 1) % 3, i2 - (1)], 0.0))) + (te.const(0.5, 'float64')) * (te.tanh(te.sum(te.select(i2 >= 2, S[k3, i1, i2 - (2)], 0.0), axis=k3)))), name="T1", dtype="float64")
    check(T1, [X0, X1, X2], [
        np.array([[0.4776415872432529, -1.2123277068786855, 1.3583226448731738, 1.322199737289369], [0.6792590045496962, 1.0098276669637443, 1.4449124254689352, -0.4902336679262689], [0.6606005360490212, 0.34978717931842507, -0.6195667088869218, -0.41055209080666133], [-1.3307155321517166, 1.0414672017858768, 1.3503350058253107, 0.40524385071703994]], dtype='float64'),
        np.array([[[0.66899176426503, 1.4866204037735664], [-0.9905979575251073, 0.7240859009012146], [-1.0233183056719475, -0.9901926589050483]]], dtype='float64'),
        np.array(-0.2787726196628353, dtype='float64')],
          second_order=False, seed=515)

def test_recurrence_self_read_at_a_floordiv_under_a_data_dependent_select():
    # fuzz seed 565, reduced: the adjoint reads dT[i0, i1, 2] under the condition
    # (i2 == 0) & ... & (X[...] > 0); the data-dependent conjunct made the ordering
    # check drop the whole condition (RecurrenceError: "not strictly later")
    X = te.placeholder((2, 2, 3), dtype="float64", name="X")
    T = te.recurrence((2, 2, 3), lambda S, i0, i1, i2: te.sin(te.select(
        (X[i0, 0, 1] > 0.5) & (i0 % 2 == 0), X[i0, i1, i2],
        te.select(i2 >= 2, S[i2 // 2, 1, i2 - 2], 0.0)) + 0.5 * te.select(
        i2 >= 1, S[i0, i1, i2 - 1], 0.0)), name="T", dtype="float64")
    check(T, [X], [_rand(2, 2, 3, seed=565)], second_order=True)


# fixed: the numpy reference checked a constant-index read inside a reduction over an empty domain
# (second order: d2X0 reads ddX0_sum[3, 2] under sum_{i1 in [4, n)}, with n = 2)
@pytest.mark.parametrize("n_value", [1, 2, 3])
def test_second_order_with_an_empty_clamped_tail(n_value):
    n = te.var("n")
    X0 = te.placeholder((n, 4), dtype="float64", name="X0")
    k0 = te.reduce_axis((0, 1), name="k0")

    def body(i0, i1):
        r = X0[te.minimum(i0 + 2, n - 1), te.minimum(i1, 3)]
        return te.sum(X0[i0 // 4, i0 % 4] / (1.0 + r * r), axis=k0, where=i0 < 1)

    T0 = te.compute((2, n), body, name="T0", dtype="float64")
    check(T0, [X0], [_rand(n_value, 4)], second_order=True)


# fixed: an extracted tensor over an axis [0, e) with e a symbolic expression that may be
# negative (here 3 - n) got the size e itself: numpy refused -1 at n = 4 (fuzz seed 1134)
def test_an_extracted_range_from_zero_to_a_negative_expression_is_empty():
    # (the fuzzer's shrunk program, as printed)
    n = te.var("n")
    X0 = te.placeholder((n,), dtype="float64", name="X0")
    T0 = te.recurrence((3,), lambda S, i0: te.tanh(X0[te.minimum(i0 + 1, n - (1))] + te.const(
        1.0, 'float64') + -(X0[te.minimum(2 - (i0), n - (1))]) + (te.const(0.5, 'float64')) * (
        te.select(i0 >= 1, S[i0 - (1)], 0.0))), name="T0", dtype="float64")
    check(T0, [X0], [np.array([0.4108850619643629, -0.6906398587083891, -1.3770794281914158,
                               -1.4504170934144127], dtype='float64')], second_order=True, seed=0)


# NOT FIXED (fuzz seed 1405, 2026-11-28; also on d934dec, and without checkpoints=): the
# gradient dT0_h2 reads T0[i0, |i0 + 1|] at i0 = 2 (column 3 of 3), where the reading row
# i0 + 2 does not exist: the gather's guard is lost. A smaller program (T0 alone, its sum as
# the loss) passes; T2's read of the early row T0[1, i1] is needed. Remove the xfail when fixed.
@pytest.mark.xfail(raises=IndexError, strict=True, reason="open: a lost guard of a gather, see the comment")
def test_lockstep_recurrences_with_an_abs_index_and_an_early_row_read():
    X0 = te.placeholder((1,), dtype="float64", name="X0")
    Xl = te.placeholder((4, 3), dtype="float64", name="Xl")
    T0 = te.recurrence((4, 3), lambda S, i0, i1: te.tanh(X0[te.minimum(i0, 0)] + ((_d1_0 := te.minimum(te.select(i0 >= 1, S[i0 - (1), 0], 0.0), te.select(i0 >= 2, S[i0 - (2), te.abs(i0 + -1)], 0.0))), (_d1_1 := te.tanh(_d1_0)))[-1] + (te.const(0.5, 'float64')) * (te.select(i0 >= 1, S[i0 - (1), i1], 0.0))), name="T0", dtype="float64", checkpoints=2)
    T1 = te.recurrence((4, 3), lambda S, i0, i1: te.tanh(te.select(i0 >= 1, T0[i0 - (1), i1], 0.0) + Xl[i0, i1] + (te.const(0.7, 'float64')) * (te.select(i0 >= 1, S[i0 - (1), i1], 0.0))), name="T1", dtype="float64", checkpoints=2)
    T2 = te.compute((4, 3), lambda i0, i1: 0.5 * (T1[i0, i1]) + te.exp(te.tanh(T0[1, i1])), name="T2", dtype="float64")
    check(T2, [X0, Xl], [
        np.array([0.4108850619643629], dtype='float64'),
        np.array([[-0.6906398587083891, -1.3770794281914158, -1.4504170934144127], [0.9398107176008175, 1.238266731833165, 0.3199073273015396], [0.6884896829519951, 0.1308749743962685, 1.3052172713633046], [0.9475606623645962, -1.4917844994895557, 1.0722128297627078]], dtype='float64')],
          second_order=False, seed=0)

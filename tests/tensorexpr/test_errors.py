"""Misuse of the language: each mistake is an exception with a message that helps."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te

from .util import BACKENDS, check, run

X = te.placeholder((3, 4), name="X")
V = te.placeholder((4,), name="V")


def test_reduce_axis_used_outside_a_reduction():
    k = te.reduce_axis(4, name="k")
    with pytest.raises(te.TensorExprError, match=r"'Bad'.*axis 'k' outside its scope"):
        te.compute((3,), lambda i: X[i, k], name="Bad")
    with pytest.raises(te.TensorExprError, match="axis 'k'"):
        te.compute((3,), lambda i: te.sum(X[i, k], axis=k) + X[i, k], name="Bad")


def test_axis_of_another_compute_is_out_of_scope():
    leaked = []
    te.compute((3,), lambda i: leaked.append(i) or X[i, 0], name="First")
    with pytest.raises(te.TensorExprError, match="outside its scope"):
        te.compute((3,), lambda j: X[leaked[0], 0], name="Second")


@pytest.mark.parametrize("expr", [
    lambda i: X + 1, lambda i: 1 + X, lambda i: X * X[i, 0], lambda i: X[i, 0] * X,
    lambda i: X ** 2, lambda i: X > 0, lambda i: -X, lambda i: te.exp(X),
    lambda i: te.select(X[i, 0] > 0, X, 0.0), lambda i: X,
    lambda i: te.select(X == 0, 1.0, 0.0),  # would silently be False without an error
])
def test_tensor_used_as_a_scalar(expr):
    with pytest.raises(TypeError, match=r"tensor 'X'.*(index it|used as a scalar)"):
        te.compute((3,), expr, name="Bad")


def test_tensor_is_not_iterable():
    with pytest.raises(TypeError, match="not iterable"):
        list(V)  # would otherwise read V[0], V[1], ... forever
    with pytest.raises(TypeError, match="not iterable"):
        for _ in X:
            pass


def test_wrong_number_of_indices():
    with pytest.raises(IndexError, match=r"'X'.*2 dimensions; indexed with 1"):
        te.compute((3,), lambda i: X[i], name="Bad")
    with pytest.raises(IndexError, match=r"'V'.*1 dimensions; indexed with 2"):
        te.compute((3,), lambda i: V[i, 0], name="Bad")


def test_wrong_number_of_function_arguments():
    with pytest.raises(TypeError, match=r"'Bad'.*2 dimension\(s\).*take 2 index"):
        te.compute((3, 4), lambda i: X[i, 0], name="Bad")
    with pytest.raises(TypeError, match=r"'Bad'.*the tensor itself and 1 index"):
        te.recurrence((3,), lambda t: V[t], name="Bad")
    with pytest.raises(TypeError, match="must be a function"):
        te.compute((3,), 1.0, name="Bad")


def test_non_integer_indices():
    with pytest.raises(TypeError, match=r"'X'.*index 1 is float32, not an integer"):
        te.compute((3,), lambda i: X[i, 0.5], name="Bad")
    with pytest.raises(TypeError, match="not an integer"):
        te.compute((3,), lambda i: X[i, X[i, 0]], name="Bad")
    with pytest.raises(TypeError, match="index 0 is bool"):
        te.compute((3,), lambda i: V[i > 1], name="Bad")
    with pytest.raises(TypeError, match="slices are not supported"):
        te.compute((3,), lambda i: X[i, 1:3], name="Bad")
    # an explicit conversion is accepted
    te.compute((3,), lambda i: V[(X[i, 0] * 0).astype("int64")], name="Ok")


def test_if_on_an_expression():
    with pytest.raises(TypeError, match=r"no truth value.*te\.select"):
        te.compute((3,), lambda i: X[i, 0] if X[i, 0] > 0 else 0.0, name="Bad")
    with pytest.raises(TypeError, match="no truth value"):
        te.compute((3,), lambda i: (X[i, 0] > 0) and (X[i, 1] > 0), name="Bad")
    with pytest.raises(TypeError, match="no truth value"):
        te.compute((3,), lambda i: max(X[i, 0], 0.0), name="Bad")  # Python's max, not te's


def test_logic_operators_need_booleans():
    with pytest.raises(TypeError, match="'&' takes booleans"):
        te.compute((3,), lambda i: X[i, 0] & X[i, 1], name="Bad")
    with pytest.raises(TypeError, match=r"'\|' takes booleans"):
        te.compute((3,), lambda i: (X[i, 0] > 0) | X[i, 1], name="Bad")
    with pytest.raises(TypeError, match="'~' takes a boolean"):
        te.compute((3,), lambda i: ~X[i, 0], name="Bad")
    with pytest.raises(TypeError, match="cannot negate a boolean"):
        te.compute((3,), lambda i: -(X[i, 0] > 0), name="Bad")
    with pytest.raises(TypeError, match="boolean condition"):
        te.compute((3,), lambda i: te.select(X[i, 0], 1.0, 0.0), name="Bad")
    k = te.reduce_axis(4)
    with pytest.raises(TypeError, match="where= must be a boolean"):
        te.sum(X[0, k], axis=k, where=X[0, k])


@pytest.mark.parametrize("make", [
    lambda: te.placeholder((3,), dtype="float16"),
    lambda: te.placeholder((3,), dtype="int8"),
    lambda: te.const(1, "uint8"),
    lambda: te.compute((3,), lambda i: V[i].astype("complex64")),
    lambda: te.compute((3,), lambda i: V[i], dtype="double"),
])
def test_unknown_dtype(make):
    with pytest.raises(TypeError, match="unknown dtype .*use one of bool, int32, int64"):
        make()


def test_unknown_backend():
    Y = te.compute((4,), lambda i: V[i], name="Y")
    with pytest.raises(ValueError, match="unknown backend 'cuda'; choose one of c, numpy"):
        te.build(Y, backend="cuda")


def test_bad_constants():
    with pytest.raises(ValueError, match=r"does not fit in int32.*te\.const\(4294967296, 'int64'\)"):
        te.const(2**32, "int32")
    with pytest.raises(ValueError, match="does not fit in int64"):
        te.const(2**63, "int64")
    I = te.placeholder((3,), dtype="int32", name="I")
    with pytest.raises(ValueError, match="does not fit in int32"):
        te.compute((3,), lambda i: I[i] + 2**40, name="Bad")  # weakly typed: int32
    with pytest.raises(TypeError, match="not an integer"):
        te.const(1.5, "int64")
    with pytest.raises(TypeError, match="te.const takes a bool, int or float"):
        te.const("1")
    assert te.const(np.int64(3)).dtype == "int64"
    assert te.const(np.float64(0.1), "float32").value == float(np.float32(0.1))


def test_bad_sizes_and_reductions():
    with pytest.raises(ValueError, match="negative size"):
        te.placeholder((3, -1), name="P")
    with pytest.raises(TypeError, match="a size must be an int"):
        te.placeholder((2.0,), name="P")
    # a window around 0: the message says how to shift it, with the width computed
    with pytest.raises(ValueError, match=r"lower bound -2 is negative.*reduce_axis\(\(0, 5\)\)"):
        te.reduce_axis((-2, 3))
    with pytest.raises(TypeError, match="te.var sizes and constants only"):
        te.compute((3,), lambda i: te.sum(V[i], axis=te.reduce_axis((i, 4))))  # use where=
    n = te.var("n")
    for size in (n * n, n ** 2, n // 0):
        with pytest.raises(TypeError, match="not affine in the te.var sizes"):
            te.placeholder((size,), name="P")
        with pytest.raises(TypeError, match="not affine in the te.var sizes"):
            te.reduce_axis((0, size))
    # piecewise affine: fine (an integer abs is max(a, -a))
    te.placeholder((2 * n + 1, n // 2, te.maximum(n - 3, 0), te.abs(n - 3)), name="P")
    for name in ("0n", " 5", "-1", "a12"):  # isl refuses numbers; a<digits> name its axes
        with pytest.raises(ValueError, match="must not start like a number"):
            te.var(name)
    with pytest.raises(TypeError, match="te.var needs a non-empty name"):
        te.var("")
    k = te.reduce_axis(4, name="k")
    with pytest.raises(ValueError, match="appears twice"):
        te.sum(X[0, k], axis=[k, k])
    with pytest.raises(ValueError, match=r"te.sum at .*test_errors.py:\d+: .*"
                                         r"reduce axis 'k' is bound twice"):
        te.sum(te.sum(V[k], axis=k) + V[k], axis=k)
    with pytest.raises(te.TensorExprError, match="'Own'.*reduces over its own axis 'i'"):
        te.compute((4,), lambda i: te.sum(V[i], axis=i), name="Own")
    # one axis in two sibling reductions is fine
    te.compute((3,), lambda i: te.sum(X[i, k], axis=k) - te.max(X[i, k], axis=k), name="Ok")
    with pytest.raises(TypeError, match="axis= takes a te.reduce_axis"):
        te.sum(X[0, 1], axis=1)
    with pytest.raises(TypeError, match="axis= takes a te.reduce_axis"):
        te.sum(X[0, 1], axis=[])
    # te.max(x, 0.0) meant the elementwise maximum: the message names it
    for op, meant in (("max", "maximum"), ("min", "minimum")):
        with pytest.raises(TypeError, match=rf"te.{op} at .*test_errors.py:\d+: .*axis= takes .*"
                                            rf"not float; .*te.{meant}\(a, b\)"):
            getattr(te, op)(X[0, 1], 0.0)


def test_recurrence_handle_outside_its_recurrence():
    leaked = []
    te.recurrence((4,), lambda c, t: leaked.append(c) or te.select(t > 0, c[t - 1], V[t]),
                  name="R")
    with pytest.raises(te.TensorExprError, match="recurrence handle"):
        te.compute((4,), lambda i: leaked[0][i], name="Bad")


def test_build_arguments():
    Y = te.compute((4,), lambda i: V[i] * 2.0, name="Y")
    with pytest.raises(TypeError, match="te.build takes a tensor or a list of tensors"):
        te.build([], backend="numpy")
    with pytest.raises(TypeError, match="te.build takes a tensor"):
        te.build("Y", backend="numpy")
    # te.build([grads]) with grads = te.differentiate(Y, [V]): the message says to unpack
    grads = te.differentiate(Y, [V])
    with pytest.raises(TypeError, match=r"got a tuple among them; .*unpack it.*dx, = "):
        te.build([grads], backend="numpy")
    # te.build takes a computed input as a given value (tests/tensorexpr/test_build_given.py);
    # the calling convention underneath takes placeholders only
    from codegen.signature import Signature
    with pytest.raises(TypeError, match="inputs must be placeholders; tensor 'Y'"):
        Signature([Y], [Y])
    with pytest.raises(TypeError, match="inputs= takes the tensors of the program"):
        te.build(Y, inputs=[np.ones(4)], backend="numpy")
    with pytest.raises(ValueError, match="listed twice"):
        te.build(Y, inputs=[V, V], backend="numpy")
    with pytest.raises(te.TensorExprError, match=r"'V'.*not among inputs= \(X\)"):
        te.build(Y, inputs=[X], backend="numpy")
    n = te.var("n")
    P = te.placeholder((n + 1,), name="P")
    Q = te.compute((n,), lambda i: P[i + 1], name="Q")
    with pytest.raises(te.TensorExprError, match="size 'n' cannot be bound"):
        te.build(Q, backend="numpy")


@pytest.mark.parametrize("backend", BACKENDS)
def test_negative_shape_at_call_time(backend):
    n = te.var("n")
    P = te.placeholder((n,), name="P")
    Q = te.compute((n - 3,), lambda i: P[i + 3], name="tail3")
    f = te.build(Q, backend=backend)
    check(f(np.arange(5, dtype=np.float32)), np.array([3.0, 4.0], np.float32))
    check(f(np.arange(3, dtype=np.float32)), np.zeros(0, np.float32))
    with pytest.raises(ValueError, match=r"'tail3'.*negative shape \(-1,\) with n=2"):
        f(np.arange(2, dtype=np.float32))
    # the fix names the shape that went negative, not an example of another
    R = te.compute((n // 2 - 2,), lambda i: P[i + 2], name="mid")
    with pytest.raises(ValueError, match=r"'mid'.*clamp the shape \(te.maximum\(\(\(n // 2\) - 2\), 0\)\)"):
        te.build(R, backend=backend)(np.arange(2, dtype=np.float32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_constant_folding_matches_run_time_semantics(backend):
    """Casts of literals give what the same cast gives at run time."""
    I = te.placeholder((2,), dtype="int64", name="I")
    F = te.placeholder((2,), dtype="float64", name="F")
    wrap = te.compute((2,), lambda i: I[i].astype("int32") + te.const(2**31 + 5).astype("int32"),
                      name="wrap")
    big = te.compute((2,), lambda i: F[i].astype("float32") + te.const(1e300, "float64")
                     .astype("float32"), name="big")
    trunc = te.compute((2,), lambda i: I[i] + te.const(-2.7).astype("int64"), name="trunc")
    i, f = np.array([1, 2], np.int64), np.array([0.5, 1.0])
    w, b, t = run(backend, [wrap, big, trunc], i, f)
    check(w, i.astype(np.int32) + np.int64(2**31 + 5).astype(np.int32))
    check(b, np.full(2, np.inf, np.float32))
    check(t, i - 2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_power_with_negative_exponent(backend):
    """x ** -k on integers is the integer part of 1 / x**k (no trap on 0 ** -1)."""
    B = te.placeholder((6,), dtype="int32", name="B")
    E = te.placeholder((6,), dtype="int32", name="E")
    P = te.compute((6,), lambda i: B[i] ** E[i], name="P")
    b = np.array([2, -1, -1, 1, 0, -2], np.int32)
    e = np.array([-1, -1, -2, -5, -1, 3], np.int32)
    check(run(backend, P, b, e), np.array([0, -1, 1, 1, 0, -8], np.int32))


def test_origin_is_the_users_line():
    import os
    here = te.placeholder((2,), name="here")
    assert "test_errors.py:" in here.origin
    assert here.origin.endswith(': here = te.placeholder((2,), name="here")')
    # a user directory whose name merely starts like the package's is the user's code
    fake = os.path.join(os.path.dirname(te.__file__) + "_demo", "model.py")
    ns = {"te": te}
    exec(compile("X = te.placeholder((3,), name='X')", fake, "exec"), ns)
    assert ns["X"].origin.endswith(os.path.join("tensorexpr_demo", "model.py") + ":1")

"""Every scalar operation of the language against numpy written out in the test."""
from __future__ import annotations

import math

import numpy as np
import pytest

import tensorexpr as te

from .util import BACKENDS, NP, check, rand, run

N = 24
NUMERIC = ["float32", "float64", "int32", "int64"]


def floordiv(a, b):
    """Python's floor division, with integer ``x // 0 == 0``."""
    if np.issubdtype(a.dtype, np.integer):
        return np.where(b == 0, 0, np.floor_divide(a, np.where(b == 0, 1, b)))
    return np.floor_divide(a, b)


def mod(a, b):
    """Python's floor modulo (sign of the divisor), with integer ``x % 0 == 0``."""
    if np.issubdtype(a.dtype, np.integer):
        return np.where(b == 0, 0, np.mod(a, np.where(b == 0, 1, b)))
    return np.mod(a, b)


def data(dtype):
    """(a, b, positive p, small exponent e) of ``dtype``; b has zeros only for integers."""
    if dtype.startswith("int"):
        a = rand(N, dtype=dtype, low=-9, high=9)
        b = rand(N, dtype=dtype, seed=1, low=-4, high=4)
        b[:3] = [0, -3, 3]
        a[:6] = [-7, 7, -7, 7, 0, -1]  # against b = 0, -3, 3: the sign cases of // and %
        b[3:6] = [2, -2, 2]
        p = rand(N, dtype=dtype, seed=2, low=1, high=5)
        e = rand(N, dtype=dtype, seed=3, low=0, high=3)
    else:
        a = rand(N, dtype=dtype, low=-3, high=3)
        b = rand(N, dtype=dtype, seed=1, low=-3, high=3)
        b = np.where(np.abs(b) < 0.25, np.asarray(0.75, dtype), b)
        p = rand(N, dtype=dtype, seed=2, low=0.1, high=3)
        e = rand(N, dtype=dtype, seed=3, low=-2, high=2)
    return a, b, p, e


def program(dtype):
    """Placeholders A, B, P, E and a list of (name, tensor, expected-from-arrays)."""
    A, B, P, E = (te.placeholder((N,), dtype=dtype, name=nm) for nm in "ABPE")
    f32 = np.float32

    def fl(x):  # math functions take integers to float32 first
        return x if x.dtype.kind == "f" else x.astype(f32)

    cases = [
        ("add", lambda i: A[i] + B[i], lambda a, b, p, e: a + b),
        ("sub", lambda i: A[i] - B[i], lambda a, b, p, e: a - b),
        ("mul", lambda i: A[i] * B[i], lambda a, b, p, e: a * b),
        ("div", lambda i: A[i] / B[i],
         lambda a, b, p, e: fl(a) / fl(b) if a.dtype.kind == "f" else
         np.divide(a.astype(f32), b.astype(f32))),
        ("floordiv", lambda i: A[i] // B[i], lambda a, b, p, e: floordiv(a, b)),
        ("mod", lambda i: A[i] % B[i], lambda a, b, p, e: mod(a, b)),
        ("neg", lambda i: -A[i], lambda a, b, p, e: -a),
        ("pow", lambda i: P[i] ** E[i], lambda a, b, p, e: np.power(p, e)),
        ("lt", lambda i: A[i] < B[i], lambda a, b, p, e: a < b),
        ("le", lambda i: A[i] <= B[i], lambda a, b, p, e: a <= b),
        ("gt", lambda i: A[i] > B[i], lambda a, b, p, e: a > b),
        ("ge", lambda i: A[i] >= B[i], lambda a, b, p, e: a >= b),
        ("eq", lambda i: A[i] == B[i] // 2, lambda a, b, p, e: a == floordiv(b, 2)),
        ("ne", lambda i: A[i] != B[i] // 2, lambda a, b, p, e: a != floordiv(b, 2)),
        ("and", lambda i: (A[i] > 0) & (B[i] > 0), lambda a, b, p, e: (a > 0) & (b > 0)),
        ("or", lambda i: (A[i] > 0) | (B[i] > 0), lambda a, b, p, e: (a > 0) | (b > 0)),
        ("not", lambda i: ~(A[i] > 0), lambda a, b, p, e: ~(a > 0)),
        ("select", lambda i: te.select(A[i] > B[i], A[i], B[i] * 2),
         lambda a, b, p, e: np.where(a > b, a, b * 2)),
        ("maximum", lambda i: te.maximum(A[i], B[i]), lambda a, b, p, e: np.maximum(a, b)),
        ("minimum", lambda i: te.minimum(A[i], B[i]), lambda a, b, p, e: np.minimum(a, b)),
        ("abs", lambda i: te.abs(A[i]), lambda a, b, p, e: np.abs(a)),
        ("python abs", lambda i: abs(A[i]), lambda a, b, p, e: np.abs(a)),
        ("exp", lambda i: te.exp(B[i]), lambda a, b, p, e: np.exp(fl(b))),
        ("log", lambda i: te.log(P[i]), lambda a, b, p, e: np.log(fl(p))),
        ("sqrt", lambda i: te.sqrt(P[i]), lambda a, b, p, e: np.sqrt(fl(p))),
        ("tanh", lambda i: te.tanh(A[i]), lambda a, b, p, e: np.tanh(fl(a))),
        ("sigmoid", lambda i: te.sigmoid(A[i]), lambda a, b, p, e: 1 / (1 + np.exp(-fl(a)))),
        ("sin", lambda i: te.sin(A[i]), lambda a, b, p, e: np.sin(fl(a))),
        ("cos", lambda i: te.cos(A[i]), lambda a, b, p, e: np.cos(fl(a))),
        ("erf", lambda i: te.erf(A[i]),
         lambda a, b, p, e: np.frompyfunc(math.erf, 1, 1)(fl(a)).astype(fl(a).dtype)),
        # integers are their own floor and ceiling (and keep their type)
        ("floor", lambda i: te.floor(A[i]), lambda a, b, p, e: a if a.dtype.kind == "i" else
         np.floor(a)),
        ("ceil", lambda i: te.ceil(A[i]), lambda a, b, p, e: a if a.dtype.kind == "i" else
         np.ceil(a)),
    ]
    outs = [(nm, te.compute((N,), fn, name=nm), want) for nm, fn, want in cases]
    return [A, B, P, E], outs


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", NUMERIC)
def test_every_operation(dtype, backend):
    inputs, outs = program(dtype)
    arrays = data(dtype)
    got = run(backend, [t for _, t, _ in outs], *arrays, inputs=inputs)
    for (name, t, want_fn), g in zip(outs, got):
        with np.errstate(all="ignore"):
            want = np.asarray(want_fn(*arrays))
        assert t.dtype == want.dtype.name, (name, t.dtype, want.dtype)
        try:
            check(g, want)
        except AssertionError as exc:
            raise AssertionError(f"operation {name} on {dtype}: {exc}") from None


RESULT_TYPES = [
    # (operand types, operation, expected result type)
    (("int32", "int32"), "div", "float32"),
    (("int64", "int64"), "div", "float32"),
    (("float64", "float64"), "div", "float64"),
    (("int32", "int64"), "add", "int64"),
    (("int64", "float32"), "mul", "float32"),
    (("int32", "float64"), "sub", "float64"),
    (("float32", "float64"), "add", "float64"),
    (("bool", "bool"), "add", "int64"),  # arithmetic on booleans counts them
    (("bool", "int32"), "mul", "int32"),
    (("bool", "bool"), "and", "bool"),
    (("int32", "float32"), "lt", "bool"),
]

OPS = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
       "div": lambda x, y: x / y, "and": lambda x, y: x & y, "lt": lambda x, y: x < y}


@pytest.mark.parametrize("backend", BACKENDS)
def test_promotion_of_mixed_types(backend):
    """Mixed operand types promote along bool < int32 < int64 < float32 < float64."""
    outs, args, wants = [], [], []
    for k, ((ta, tb), op, result) in enumerate(RESULT_TYPES):
        X = te.placeholder((N,), dtype=ta, name=f"X{k}")
        Y = te.placeholder((N,), dtype=tb, name=f"Y{k}")
        T = te.compute((N,), lambda i: OPS[op](X[i], Y[i]), name=f"T{k}")
        assert T.dtype == result, (ta, tb, op, T.dtype)
        x = rand(N, dtype=ta, seed=k, low=-5, high=5)
        y = rand(N, dtype=tb, seed=k + 50, low=1, high=5)
        common = np.promote_types(NP[ta], NP[tb]) if op != "and" else np.bool_
        if result == "int64" and ta == tb == "bool":
            common = np.int64
        want = OPS[op](x.astype(common), y.astype(common))
        if op == "div" and ta.startswith("int") and tb.startswith("int"):
            want = x.astype(np.float32) / y.astype(np.float32)
        outs.append(T)
        args += [x, y]
        wants.append(want.astype(result))
    got = run(backend, outs, *args)
    for g, w, case in zip(got, wants, RESULT_TYPES):
        try:
            check(g, w)
        except AssertionError as exc:
            raise AssertionError(f"{case}: {exc}") from None


WEAK = [
    # (placeholder type, expression of X[i], numpy expression of x, result type)
    ("int32", lambda x: x * 2, lambda x: x * np.int32(2), "int32"),
    ("int32", lambda x: 3 - x, lambda x: np.int32(3) - x, "int32"),
    ("int32", lambda x: x * 2.5, lambda x: x.astype(np.float32) * np.float32(2.5), "float32"),
    ("int64", lambda x: x + 0.5, lambda x: x.astype(np.float32) + np.float32(0.5), "float32"),
    ("int32", lambda x: 7 // x, lambda x: floordiv(np.full_like(x, 7), x), "int32"),
    ("int32", lambda x: x % 3, lambda x: np.mod(x, np.int32(3)), "int32"),
    ("int32", lambda x: x / 2, lambda x: x.astype(np.float32) / np.float32(2), "float32"),
    ("int32", lambda x: x ** 2, lambda x: x * x, "int32"),
    ("int32", lambda x: x < 1.5, lambda x: x.astype(np.float32) < 1.5, "bool"),
    ("float64", lambda x: x + 1, lambda x: x + 1.0, "float64"),
    ("float64", lambda x: 2.0 ** x, lambda x: np.power(2.0, x), "float64"),
    ("float32", lambda x: 1 - x, lambda x: np.float32(1) - x, "float32"),
    ("float32", lambda x: x / 3, lambda x: x / np.float32(3), "float32"),
    ("bool", lambda x: x + 1, lambda x: x.astype(np.int64) + 1, "int64"),
    ("bool", lambda x: x & True, lambda x: x & True, "bool"),
    ("bool", lambda x: x | False, lambda x: x.copy(), "bool"),
    ("bool", lambda x: x * 1.5, lambda x: x.astype(np.float32) * np.float32(1.5), "float32"),
    ("bool", lambda x: x == False, lambda x: ~x, "bool"),  # noqa: E712 - builds a comparison
]


@pytest.mark.parametrize("backend", BACKENDS)
def test_python_scalars_are_weakly_typed(backend):
    """A Python scalar takes the type of the other operand (a float meeting an int: float32)."""
    outs, args, wants = [], [], []
    for k, (dt, expr, want, result) in enumerate(WEAK):
        X = te.placeholder((N,), dtype=dt, name=f"X{k}")
        T = te.compute((N,), lambda i: expr(X[i]), name=f"T{k}")
        assert T.dtype == result, (k, T.dtype, result)
        x = rand(N, dtype=dt, seed=k, low=-4, high=4)
        outs.append(T)
        args.append(x)
        with np.errstate(all="ignore"):
            wants.append(np.asarray(want(x)).astype(result))
    got = run(backend, outs, *args)
    for k, (g, w) in enumerate(zip(got, wants)):
        try:
            check(g, w)
        except AssertionError as exc:
            raise AssertionError(f"case {k}: {exc}") from None


@pytest.mark.parametrize("backend", BACKENDS)
def test_constants_and_casts(backend):
    X = te.placeholder((N,), name="X")
    I = te.placeholder((N,), dtype="int32", name="I")
    cases = [
        (te.compute((N,), lambda i: X[i] * te.const(2, "float64"), name="c64"),
         lambda x, n: x.astype(np.float64) * 2.0),
        (te.compute((N,), lambda i: I[i] + te.const(3, "int32"), name="ci32"),
         lambda x, n: n + np.int32(3)),
        (te.compute((N,), lambda i: I[i] + te.const(3), name="ci64"),
         lambda x, n: n.astype(np.int64) + 3),
        (te.compute((N,), lambda i: te.select(X[i] > 0, te.const(True), te.const(False)),
                    name="cb"), lambda x, n: x > 0),
        (te.compute((N,), lambda i: te.const(1.5), name="c"), lambda x, n: np.full(N, 1.5, np.float32)),
        # float to int truncates toward zero, like C and like numpy's astype
        (te.compute((N,), lambda i: (X[i] * 3).astype("int32"), name="f2i"),
         lambda x, n: (x * np.float32(3)).astype(np.int32)),
        (te.compute((N,), lambda i: X[i].astype("int64"), name="f2l"), lambda x, n: x.astype(np.int64)),
        (te.compute((N,), lambda i: X[i].astype("float64"), name="f2d"), lambda x, n: x.astype(np.float64)),
        (te.compute((N,), lambda i: X[i].astype("bool"), name="f2b"), lambda x, n: x != 0),
        (te.compute((N,), lambda i: I[i].astype("bool"), name="i2b"), lambda x, n: n != 0),
        (te.compute((N,), lambda i: I[i].astype("float32") / 4, name="i2f"),
         lambda x, n: n.astype(np.float32) / np.float32(4)),
        (te.compute((N,), lambda i: (X[i] > 0).astype("float32"), name="b2f"),
         lambda x, n: (x > 0).astype(np.float32)),
        (te.compute((N,), lambda i: I[i].astype("int64") * 3000000000, name="i2l"),
         lambda x, n: n.astype(np.int64) * 3000000000),
        (te.compute((N,), lambda i: te.cast(I[i], "float64"), name="cast"),
         lambda x, n: n.astype(np.float64)),
    ]
    x = rand(N, low=-3, high=3)
    x[:3] = [0.0, -2.7, 2.7]
    n = rand(N, dtype="int32", seed=4, low=-5, high=5)
    n[0] = 0
    got = run(backend, [t for t, _ in cases], x, n, inputs=[X, I])
    for (t, want), g in zip(cases, got):
        try:
            check(g, want(x, n), t.dtype)
        except AssertionError as exc:
            raise AssertionError(f"{t.name}: {exc}") from None


@pytest.mark.parametrize("backend", BACKENDS)
def test_bool_inputs_and_outputs(backend):
    P = te.placeholder((N,), dtype="bool", name="P")
    Q = te.placeholder((N,), dtype="bool", name="Q")
    X = te.compute((N,), lambda i: (P[i] & ~Q[i]) | (~P[i] & Q[i]), name="xor")
    C = te.compute((N,), lambda i: P[i] + Q[i], name="count")
    S = te.compute((N,), lambda i: te.select(P[i], 1.0, -1.0), name="sign")
    G = te.compute((N,), lambda i: P[i] > Q[i], name="gt")
    E = te.compute((N,), lambda i: P[i] == Q[i], name="eq")
    M = te.compute((N,), lambda i: te.maximum(P[i], Q[i]), name="max")
    W = te.compute((N,), lambda i: te.minimum(P[i], Q[i]), name="min")
    p, q = rand(N, dtype="bool"), rand(N, dtype="bool", seed=1)
    assert (G.dtype, M.dtype, C.dtype) == ("bool", "bool", "int64")
    x, c, s, g, e, m, w = run(backend, [X, C, S, G, E, M, W], p, q)
    check(x, p ^ q)
    check(c, p.astype(np.int64) + q)
    check(s, np.where(p, 1.0, -1.0).astype(np.float32))
    check(g, p > q)
    check(e, p == q)
    check(m, p | q)
    check(w, p & q)


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_division_by_zero_is_zero(backend):
    """``x // 0 == 0`` and ``x % 0 == 0`` for integers: no backend may trap."""
    A = te.placeholder((4,), dtype="int64", name="A")
    Z = te.placeholder((4,), dtype="int64", name="Z")
    D = te.compute((4,), lambda i: A[i] // Z[i], name="D")
    M = te.compute((4,), lambda i: A[i] % Z[i], name="M")
    d, m = run(backend, [D, M], np.array([5, -5, 0, 7]), np.zeros(4, np.int64))
    check(d, np.zeros(4, np.int64))
    check(m, np.zeros(4, np.int64))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_stop_gradient_is_the_identity_in_value(backend, dtype):
    a = rand(N, dtype=dtype)
    X = te.placeholder((N,), dtype=dtype, name="X")
    Y = te.compute((N,), lambda i: te.stop_gradient(X[i] * 2.0) + te.exp(te.stop_gradient(X[i])),
                   name="Y")
    assert "stop_gradient(" in str(Y)
    check(run(backend, Y, a), a * 2 + np.exp(a))


def test_stop_gradient_of_integers_and_constants_is_the_value_itself():
    I = te.placeholder((3,), dtype="int32", name="I")
    i = te.compute((3,), lambda i: i, name="idx")
    e = I[i.axes[0]]
    assert te.stop_gradient(e) is e
    c = te.const(1.5)
    assert te.stop_gradient(c) is c
    assert te.stop_gradient(2.0).dtype == "float32"

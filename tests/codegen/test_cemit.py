"""The C emitter on hand-made loop-AST: literals, widening, helpers, sanitizing."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tensorexpr as te
from codegen import compiler
from codegen.cemit import ENTRY, emit, sanitize
from codegen.loopast import Buffer, Decl, Kernel, Lit, Op, Store, Var

from .util import FLOOR_OPERANDS, python_floor_div_mod, same_bits


def _kernel(*values, dtype="int64"):
    """A kernel storing each value into out[k]."""
    body = tuple(Store("b0", Lit(k, "int64"), v) for k, v in enumerate(values))
    return Kernel("test", (), (Buffer("b0", dtype, False, "out"),), body)


def _run(kernel, n, dtype):
    lib = compiler.load(compiler.compile_shared(emit(kernel)))
    fn = getattr(lib, ENTRY)
    fn.argtypes = (ctypes.c_void_p,) * 3
    out = np.zeros(n, dtype)
    err = np.zeros(5, np.int64)
    ptrs = (ctypes.c_void_p * 1)(out.ctypes.data)
    assert fn(ptrs, None, err.ctypes.data) == 0
    return out


def test_sanitize_removes_comment_delimiters_and_control_characters():
    s = sanitize("x */ y /* z\n\tw\x00\x1b[31m é")
    assert "*/" not in s and "/*" not in s
    assert all(32 <= ord(c) < 127 for c in s)
    assert sanitize("*/*/").count("*/") == 0
    assert len(sanitize("a" * 1000)) == 400


def test_literals_round_trip_exactly():
    vals = [0.1, -2.5e-8, 3.4e38, 1e-45, float("inf"), -float("inf")]
    k = _kernel(*(Lit(v, "float32") for v in vals), dtype="float32")
    np.testing.assert_array_equal(_run(k, len(vals), np.float32), np.array(vals, np.float32))
    ints = [-(1 << 63), (1 << 63) - 1, -(1 << 31), 1 << 40, -7]
    np.testing.assert_array_equal(_run(_kernel(*(Lit(v, "int64") for v in ints)), 5, np.int64),
                                  np.array(ints, np.int64))
    nan = _run(_kernel(Lit(float("nan"), "float64"), dtype="float64"), 1, np.float64)
    assert np.isnan(nan[0])


def test_int64_arithmetic_of_small_literals_is_not_done_in_int():
    # 100000 * 100000 overflows a 32-bit int; the emitter must widen first
    big = Op("mul", (Lit(100000, "int64"), Lit(100000, "int64")), "int64")
    pick = Op("select", (Lit(True, "bool"), Lit(-5, "int64"), Lit(2, "int64")), "int64")
    neg = Op("neg", (pick,), "int64")
    src = emit(_kernel(big, neg))
    assert "(int64_t)100000 * 100000" in src
    np.testing.assert_array_equal(_run(_kernel(big, neg), 2, np.int64), [10**10, 5])


def test_negating_a_negative_literal_is_not_a_decrement():
    k = _kernel(Op("neg", (Lit(-0.5, "float32"),), "float32"), dtype="float32")
    assert "--" not in emit(k)
    assert _run(k, 1, np.float32)[0] == 0.5


def test_only_used_helpers_are_printed():
    x = Var("n0", "int64")
    plain = emit(_kernel(Op("add", (x, Lit(1, "int64")), "int64")))
    assert "te_floordiv" not in plain and "te_fail" not in plain
    div = emit(_kernel(Op("floordiv", (x, Lit(2, "int64")), "int64")))
    assert div.count("static inline int64_t te_floordiv_i64") == 1


def test_float32_literal_beyond_range_rounds_to_inf():
    # built directly from the IR (te.const rounds already): C must get INFINITY, not "inff"
    import numpy as np
    import tensorexpr as te
    from tensorexpr.ir import Const
    X = te.placeholder((2,), name="X")
    Y = te.compute((2,), lambda i: X[i] * Const(1e39, "float32"), name="Y")
    out = te.build(Y)(np.array([1.0, -1.0], np.float32))
    assert np.isposinf(out[0]) and np.isneginf(out[1])


def test_a_sum_adds_a_product_with_one_rounding():
    # 1 + 2^-12 squared is 1 + 2^-11 + 2^-24; minus (1 + 2^-11) leaves 2^-24 only if the
    # product is not rounded to float32 before the addition (a fused multiply-add)
    from codegen.loopast import Accumulate, Decl, Load, Local
    x = Lit(1.0 + 2.0 ** -12, "float32")
    acc = Var("t0", "float32")
    body = (Decl(acc, Lit(-(1.0 + 2.0 ** -11), "float32")),
            Accumulate(acc, "sum", Op("mul", (x, x), "float32")),
            Local("a0", "float32", 1),
            Store("a0", Lit(0, "int64"), Lit(-(1.0 + 2.0 ** -11), "float32")),
            Store("a0", Lit(0, "int64"), Op("mul", (x, x), "float32"), add=True),
            Store("b0", Lit(0, "int64"), acc),
            Store("b0", Lit(1, "int64"), Load("a0", Lit(0, "int64"), "float32")))
    kernel = Kernel("fma", (), (Buffer("b0", "float32", False, "out"),), body)
    assert emit(kernel).count("fmaf(") == 2
    assert list(_run(kernel, 2, np.float32)) == [2.0 ** -24, 2.0 ** -24]


def test_a_choice_between_constants_is_made_by_bits_not_a_branch():
    # te_blend: the chosen constant's exact bits (-0.0, infinities, NaN), no '?:' branch
    for dt in ("float32", "float64"):
        consts = [(1.0, 0.0), (-0.0, 2.5), (float("inf"), float("nan")), (-1e-30, -float("inf"))]
        values = []
        for a, b in consts:
            for c in (True, False):
                values.append(Op("select", (Lit(c, "bool"), Lit(a, dt), Lit(b, dt)), dt))
        k = _kernel(*values, dtype=dt)
        src = emit(k)
        assert f"te_blend_{'f32' if dt == 'float32' else 'f64'}(" in src and " ? " not in src
        got = _run(k, len(values), dt)
        want = np.array([a if c else b for a, b in consts for c in (True, False)], dt)
        assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_float_floor_division_and_modulo_are_pythons(dtype, data):
    # floor(a / b) rounded 1.0 / 0.1 up to 10 (Python: 1.0 // 0.1 == 9) and
    # a - b * floor(a / b) gave 3 % inf == nan (Python: 3)
    width = 32 if dtype == "float32" else 64
    pairs = data.draw(st.lists(st.tuples(*[st.one_of(st.sampled_from(FLOOR_OPERANDS),
                                                     st.floats(width=width))] * 2),
                               min_size=1, max_size=40))
    pairs += [(x, y) for x in FLOOR_OPERANDS for y in FLOOR_OPERANDS]
    with np.errstate(over="ignore"):
        a = np.array([p[0] for p in pairs]).astype(dtype)
        b = np.array([p[1] for p in pairs]).astype(dtype)
    A = te.placeholder(a.shape, dtype, "A")
    B = te.placeholder(a.shape, dtype, "B")
    Q = te.compute(a.shape, lambda i: A[i] // B[i], name="Q")
    R = te.compute(a.shape, lambda i: A[i] % B[i], name="R")
    q, r = te.build([Q, R])(a, b)
    want_q, want_r = python_floor_div_mod(a, b)
    for got, want in ((q, want_q), (r, want_r)):
        bad = ~same_bits(got, want)
        assert not bad.any(), (a[bad], b[bad], got[bad], want[bad])


def _functions(src):
    """Line counts of the C functions in ``src`` (a ``{`` at column 0 opens one)."""
    sizes, n = [], None
    for line in src.splitlines():
        if line == "{":
            n = 0
        elif line == "}" and n is not None:
            sizes.append(n)
            n = None
        elif n is not None:
            n += 1
    return sizes


@pytest.mark.parametrize("n", [250, 450])
def test_a_long_program_is_emitted_as_bounded_functions(n):
    # The C compiler's time grows faster than linearly with one function's size: a
    # chain of 1,000 tensors (forward + gradient) spent minutes in gcc. Top-level
    # scalars (0-d sums, declared at the kernel's scope) must stay with their uses.
    from codegen.cemit import PART_LINES, SPLIT_LINES
    X = te.placeholder((5,), name="X", dtype="float64")
    T, outs = X, []
    for k in range(n):
        r = te.reduce_axis(5, name="r")
        s = te.compute((), lambda T=T, r=r: te.sum(T[r], axis=r) * 0.01, name=f"s{k}")
        T = te.compute((5,), lambda i, T=T, s=s: te.sin(T[i]) * 0.5 + T[i] + s[()],
                       name=f"T{k}")
    f = te.build(T)
    sizes = _functions(f.source)
    assert sum(sizes) > SPLIT_LINES and "te_part1(bufs, sizes, err);" in f.source
    assert max(sizes) < 4 * PART_LINES, max(sizes)
    x = np.random.default_rng(1).uniform(-1, 1, 5)
    np.testing.assert_allclose(f(x), te.build(T, backend="numpy")(x), rtol=1e-12)


def test_equal_literals_of_other_types_or_signs_keep_their_own_text():
    # the emitter keeps each literal's text once per kernel: by type, value's type and
    # value, never 0.0 (equal to -0.0) nor NaN
    vals = [Lit(0.1, "float64"), Op("cast", (Lit(0.1, "float32"),), "float64"),
            Lit(-0.0, "float64"), Lit(0.0, "float64"), Op("cast", (Lit(1, "int64"),), "float64"),
            Lit(1.0, "float64"), Op("cast", (Lit(True, "bool"),), "float64"),
            Lit(float("nan"), "float64"), Lit(-0.0, "float64")]
    out = _run(_kernel(*vals, dtype="float64"), len(vals), np.float64)
    assert out[0] == 0.1 and out[1] == float(np.float32(0.1)) and out[0] != out[1]
    assert np.signbit(out[2]) and not np.signbit(out[3]) and np.signbit(out[8])
    assert list(out[4:7]) == [1.0, 1.0, 1.0] and np.isnan(out[7])


def test_a_long_chain_of_additions_is_emitted_without_recursion():
    # found by the fuzzer's big profile: the gradient of a weight read by each of 200
    # chained layers adds 200 terms, one left-deep expression; its emission recursed
    # twice per term and overflowed Python's stack (RecursionError) in a build
    n = 3000
    x = Var("x", "int64")
    total = x
    for k in range(1, n):
        total = Op("sub" if k % 2 else "add", (total, Op("mul", (Lit(k, "int64"), x), "int64")),
                   "int64")
    k = Kernel("test", (), (Buffer("b0", "int64", False, "out"),),
               (Decl(x, Lit(2, "int64")), Store("b0", Lit(0, "int64"), total)))
    src = emit(k)
    assert "x - 1 * x + 2 * x - 3 * x" in src   # left to right, no parentheses
    want = 2 * (1 + sum(-j if j % 2 else j for j in range(1, n)))
    assert _run(k, 1, np.int64)[0] == want

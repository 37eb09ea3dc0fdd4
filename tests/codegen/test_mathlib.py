"""codegen.mathlib: math functions give the same bits in every loop context, and are accurate.

The gradient of a max or min compares a recomputed body with the forward's stored value,
so a vectorized loop, a scalar loop, a remainder lane and another program must agree to
the bit (libmvec's vector expf and glibc's scalar expf did not for half of all inputs).
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tensorexpr as te
from codegen import mathlib

FUNCTIONS = ("exp", "log", "sqrt", "tanh", "sigmoid", "sin", "cos", "erf", "abs", "floor", "ceil")
N = 37  # 4 vectors of 8 floats and a remainder of 5


def _contexts(fn: str, dtype: str, backend: str):
    """Programs computing ``fn`` of the same N values in different loop shapes (array
    layouts on the numpy backend): each maps the input vector to the N results in input
    order."""
    op = getattr(te, fn)
    build = functools.partial(te.build, backend=backend)
    X = te.placeholder((N,), dtype=dtype, name="X")
    flat = build(te.compute((N,), lambda i: op(X[i]), name="Y"))  # whole vectors + tail
    # a max over a short reduction axis: per point, scalar code (the reported bug's shape)
    X2 = te.placeholder((1, N), dtype=dtype, name="X2")
    k = te.reduce_axis(1, name="k")
    pointwise = build(te.compute((N,), lambda i: te.max(op(X2[k, i]), axis=k), name="M"))
    # a strided read: every value at an odd position
    X3 = te.placeholder((2 * N,), dtype=dtype, name="X3")
    strided = build(te.compute((N,), lambda i: op(X3[2 * i + 1]), name="S"))
    # a symbolic size: the vector loop's remainder is decided at run time
    n = te.var("n")
    X4 = te.placeholder((n,), dtype=dtype, name="X4")
    sized = build(te.compute((n,), lambda i: op(X4[i]), name="Z"))
    # one value at a time: a 0-d program
    X5 = te.placeholder((1,), dtype=dtype, name="X5")
    single = build(te.compute((), lambda: op(X5[0]), name="V"))

    def spread(x):
        y = np.zeros(2 * N, dtype)
        y[1::2] = x
        return y

    return {
        "flat": flat,
        "pointwise": lambda x: pointwise(x[None, :]),
        "strided": lambda x: strided(spread(x)),
        "sized": sized,
        "sized+3": lambda x: sized(np.concatenate([x, x[:3]]))[:N],
        "single": lambda x: np.array([single(x[j:j + 1]) for j in range(N)], dtype),
    }


_built = {}

SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.625, -0.625, 88.7, 89.5, -87.5,
           -103.9, 709.0, -745.0, 1e-30, -1e-30, 1e-40, 5e-324, 1e30, 3.4e38]


@pytest.mark.parametrize("backend", ["c", "numpy"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("fn", FUNCTIONS)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_every_context_gives_the_same_bits(fn, dtype, backend, data):
    key = (fn, dtype, backend)
    if key not in _built:
        _built[key] = _contexts(fn, dtype, backend)
    width = 32 if dtype == "float32" else 64
    values = data.draw(st.lists(st.one_of(st.floats(width=width), st.sampled_from(SPECIAL),
                                          st.floats(-30, 30, width=width)),
                                min_size=N, max_size=N))
    with np.errstate(over="ignore"):
        x = np.array(values, dtype=np.float64).astype(dtype)
    results = {name: run(x) for name, run in _built[key].items()}
    ref = results["flat"].view(f"u{x.itemsize}")
    for name, y in results.items():
        bits = y.view(f"u{x.itemsize}")
        # NaNs: any NaN is the same value (the IR says nothing about their payload)
        nan = np.isnan(y) & np.isnan(results["flat"])
        bad = np.nonzero((bits != ref) & ~nan)[0]
        assert bad.size == 0, (fn, dtype, name, x[bad], y[bad], results["flat"][bad])


@pytest.fixture(params=["fma", "no fma"])
def fma(request, monkeypatch, tmp_path):
    """Both forms of the polynomial steps (``TE_FMAF``): fused where the target has an
    FMA (this machine's default), ``a * b + c`` where it has none (compiled here with
    ``-mno-fma``, in a cache of its own)."""
    if request.param == "no fma":
        _without_fma(monkeypatch, tmp_path)
    return request.param


def _without_fma(monkeypatch, tmp_path) -> None:
    """Compile with the system compiler and ``-mno-fma``, in a cache of its own."""
    import shutil
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    monkeypatch.setenv("CC", f"{cc} -mno-fma")
    monkeypatch.setenv("TENSOREXPR_CACHE_DIR", str(tmp_path))


@pytest.mark.parametrize("dtype,tol_ulp", [("float32", 1.0), ("float64", 1.0)])
@pytest.mark.parametrize("fn", ["exp", "log", "tanh"])
def test_accurate_to_about_one_ulp(fn, dtype, tol_ulp, fma):
    rng = np.random.default_rng(7)
    n = 20000
    big = 700.0 if dtype == "float64" else 87.0
    if fn == "log":
        x = np.exp(rng.uniform(-big, big, n))
        x[:4] = [5e-324 if dtype == "float64" else 1e-45, 1e-310 if dtype == "float64" else 1e-40,
                 1.0, np.nextafter(1.0, 0)]
    else:
        x = np.concatenate([rng.uniform(-big, big, n // 2), rng.standard_normal(n - n // 2)])
    x = x.astype(dtype)
    X = te.placeholder((n,), dtype=dtype, name="X")
    got = te.build(te.compute((n,), lambda i: getattr(te, fn)(X[i]), name="Y"))(x)
    want = getattr(np, fn)(x.astype(np.longdouble))
    ok = np.isfinite(want)
    ulp = np.spacing(np.abs(want.astype(dtype))).astype(np.longdouble)
    err = np.abs(got.astype(np.longdouble) - want)[ok] / ulp[ok]
    # tanh's larger errors are where exp(2|x|) meets its subtraction, as in Cephes
    assert float(err.max()) <= tol_ulp + (0.5 if fn == "tanh" else 0.0), (fn, dtype, err.max())


def _ulps_from_float64(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in float32 ulps of ``want`` (float64 values), where ``want`` is finite."""
    ulp = np.spacing(np.abs(want.astype(np.float32))).astype(np.float64)
    return np.abs(got.astype(np.float64) - want) / ulp


def test_tanhf_over_the_whole_float32_range():
    # every 509th bit pattern (all exponents, both signs, NaNs and infinities), every float
    # around the switch from the polynomial to exp (0.625) and up to the clamp (10), and
    # around where tanh rounds to 1: at most 1.5 ulp from float64 (as for random inputs
    # above), NaN exactly where numpy's, tanh(+-inf) = +-1, zeros keep their sign
    def around(lo, hi):
        a, b = np.array([lo, hi], np.float32).view(np.uint32)
        return np.arange(a, b, dtype=np.uint32)
    bits = np.concatenate([np.arange(0, 1 << 32, 509, dtype=np.uint64).astype(np.uint32),
                           around(0.6, 0.65), around(8.5, 10.5),
                           np.array([0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001,
                                     0x7F800001, 0x80000000, 0x00000001], np.uint32)])
    x = np.concatenate([bits, bits | np.uint32(0x80000000)]).view(np.float32)
    X = te.placeholder(x.shape, name="X")
    got = te.build(te.compute(x.shape, lambda i: te.tanh(X[i]), name="Y"))(x)
    with np.errstate(invalid="ignore"):  # signalling NaNs among the patterns
        want = np.tanh(x.astype(np.float64))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(x))
    ok = ~np.isnan(x)
    assert float(_ulps_from_float64(got[ok], want[ok]).max()) <= 1.5
    np.testing.assert_array_equal(got[np.isinf(x)], np.sign(x[np.isinf(x)]))
    zero = x == 0
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(x[zero]))


def test_tanh_float64_near_its_switch_and_clamp():
    # the double tanh's exp is scaled by 2^k in one product for k in [0, 64]: dense
    # samples up to its clamp (22) and beyond, against a long-double reference
    rng = np.random.default_rng(11)
    x = np.concatenate([rng.uniform(0.6, 23.0, 200000), rng.uniform(-23.0, -0.6, 50000),
                        [0.625, 22.0, np.nextafter(22.0, 0), 1e300, np.inf, -np.inf, np.nan]])
    X = te.placeholder(x.shape, dtype="float64", name="X")
    got = te.build(te.compute(x.shape, lambda i: te.tanh(X[i]), name="Y"))(x)
    want = np.tanh(x.astype(np.longdouble))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(x))
    ok = ~np.isnan(x)
    ulp = np.spacing(np.abs(want[ok].astype(np.float64))).astype(np.longdouble)
    assert float((np.abs(got[ok].astype(np.longdouble) - want[ok]) / ulp).max()) <= 1.5


def test_the_no_fma_form_is_the_one_tested(monkeypatch, tmp_path):
    # the fixture above must reach the other form: its results differ in some last bits
    x = np.random.default_rng(3).uniform(-5, 5, 4096).astype(np.float32)
    X = te.placeholder((4096,), name="X")

    def run():
        return te.build(te.compute((4096,), lambda i: te.tanh(X[i]), name="Y"))(x)
    from codegen import compiler
    fused, has_fma = run(), "__FMA__" in _predefined(compiler.find_compiler())
    _without_fma(monkeypatch, tmp_path)
    plain = run()
    assert "__FMA__" not in _predefined(compiler.find_compiler())
    if has_fma:
        assert np.any(fused != plain)
    else:
        np.testing.assert_array_equal(fused, plain)


def _predefined(comp) -> str:
    import subprocess
    return subprocess.run(list(comp.argv) + ["-march=native", "-dM", "-E", "-"], input="",
                          capture_output=True, text=True).stdout


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("fn", ["exp", "log", "tanh", "sigmoid"])
def test_special_values_as_numpy(fn, dtype):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, 1e-40, 5e-324, 1e-30, -1e-30,
                  1000.0, -1000.0, 88.8, -104.5, 710.0, -746.0], dtype=np.float64)
    with np.errstate(over="ignore"):
        x = x.astype(dtype)
    X = te.placeholder(x.shape, dtype=dtype, name="X")
    Y = te.compute(x.shape, lambda i: getattr(te, fn)(X[i]), name="Y")
    got = te.build(Y)(x)
    want = te.build(Y, backend="numpy")(x)
    exact = ~np.isfinite(want) | (want == 0) | (np.abs(want) == 1)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[exact], want[exact])
    # signed zeros keep their sign (tanh(-0.0) is -0.0)
    zero = exact & (want == 0)
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]))
    np.testing.assert_allclose(got[~exact], want[~exact], rtol=4 * np.finfo(dtype).eps)


def test_the_c_names_keep_the_math_names():
    # "expf(" in a program's source still says that it computes an exponential
    assert all(name.endswith(op + ("f" if dt == "float32" else ""))
               for (op, dt), name in mathlib.NAMES.items())
    for deps in mathlib.DEPENDS.values():
        assert set(deps) <= mathlib.FUNCTIONS


def test_docstring_examples():
    import doctest
    result = doctest.testmod(mathlib)
    assert result.failed == 0 and result.attempted > 0

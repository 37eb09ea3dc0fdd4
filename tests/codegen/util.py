"""Helpers of the C backend tests: run a program on both backends and compare."""
from __future__ import annotations

import re

import numpy as np

import tensorexpr as te

NP = {"bool": np.bool_, "int32": np.int32, "int64": np.int64,
      "float32": np.float32, "float64": np.float64}


def assert_same(got, want, rtol=None, atol=None):
    """Same dtype and shape; equal values (floats: close, NaN where NaN, same infinities).

    Sums may be added in any order, so float tolerances scale with the largest value.
    """
    assert isinstance(got, np.ndarray), type(got)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if got.dtype.kind == "f":
        finite = np.abs(want[np.isfinite(want)])
        scale = max(1.0, float(finite.max())) if finite.size else 1.0
        eps = 1e-5 if got.dtype == np.float32 else 1e-12
        rtol = eps if rtol is None else rtol
        atol = eps * scale if atol is None else atol
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)


def agree(outputs, inputs, *arrays, rtol=None, atol=None):
    """Build ``outputs`` on the C and numpy backends, call both, compare; return (f_c, results)."""
    fc = te.build(outputs, inputs=inputs)
    fn = te.build(outputs, inputs=inputs, backend="numpy")
    got, want = fc(*arrays), fn(*arrays)
    if not isinstance(got, tuple):
        got, want = (got,), (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_same(g, w, rtol, atol)
    return fc, got


def without_comments(source: str) -> str:
    """C source with its /* ... */ comments removed."""
    return re.sub(r"/\*.*?\*/", "", source, flags=re.S)


def rand(shape, dtype="float32", seed=0, low=-3, high=3):
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype in ("int32", "int64"):
        return rng.integers(low, high + 1, shape).astype(NP[dtype])
    return rng.uniform(low, high, shape).astype(NP[dtype])


#: operands where float // and % are easy to get wrong (rounding, signs, zeros, inf, nan)
FLOOR_OPERANDS = [1.0, 0.1, -1.0, -0.1, 3.0, -3.0, 0.0, -0.0, np.inf, -np.inf, np.nan, 7.5,
                  -7.5, 2.0, 1e-30, 5e-324, 1e308, 0.3, -0.7, 1e-45, 3.4e38]


def python_floor_div_mod(a: np.ndarray, b: np.ndarray):
    """Python's float ``a // b`` and ``a % b`` elementwise (float64: Python itself;
    float32: numpy's, the same algorithm in float32); ``x // 0`` is ``x / 0`` and
    ``x % 0`` NaN (Python raises)."""
    if a.dtype != np.float64:
        with np.errstate(all="ignore"):
            return np.floor_divide(a, b), np.remainder(a, b)
    q, r = np.empty_like(a), np.empty_like(a)
    for j, (x, y) in enumerate(zip(a.tolist(), b.tolist())):
        if y == 0:
            with np.errstate(all="ignore"):
                q[j], r[j] = np.float64(x) / np.float64(y), np.nan
        else:
            q[j], r[j] = x // y, x % y
    return q, r


def same_bits(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Where ``got`` and ``want`` are the same value: equal with the same sign, or both NaN."""
    same_sign = np.signbit(got) == np.signbit(want)
    return (np.isnan(got) & np.isnan(want)) | ((got == want) & same_sign)


def both_ways(sig, options, monkeypatch, module):
    """``[(C source, schedule text)]`` of ``sig`` generated with ``module.ENABLED`` on, then
    off (a sharing of lowerings, ``codegen.replay`` or ``codegen.alike``, against lowering
    each again)."""
    from codegen.pipeline import generate
    out = []
    for on in (True, False):
        monkeypatch.setattr(module, "ENABLED", on)
        _, source, schedule = generate(sig, options, name="g")
        out.append((source, str(schedule)))
    return out

"""Helpers shared by the core-language tests: backends, random arrays, running programs."""
from __future__ import annotations

import numpy as np

import tensorexpr as te

# Every program is run on both backends; the numpy one is the oracle of the C one, and
# both are checked against numpy written out by hand in the tests.
BACKENDS = ["numpy", "c"]

NP = {"bool": np.bool_, "int32": np.int32, "int64": np.int64,
      "float32": np.float32, "float64": np.float64}


def rand(*shape, dtype="float32", seed=0, low=-2.0, high=2.0):
    """Reproducible test data of the given type (integers in [low, high])."""
    rng = np.random.default_rng(seed + 31 * len(shape) + int(np.prod(shape)))
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype in ("int32", "int64"):
        return rng.integers(int(low), int(high) + 1, shape).astype(NP[dtype])
    return rng.uniform(low, high, shape).astype(NP[dtype])


def run(backend, outputs, *arrays, inputs=None, **named):
    """Build ``outputs`` on ``backend`` and call the result once."""
    return te.build(outputs, inputs=inputs, backend=backend)(*arrays, **named)


def tol(dtype):
    """Comparison tolerances: C math libraries may differ from numpy in the last ulps."""
    return dict(rtol=1e-5, atol=1e-5) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)


def check(got, want, dtype=None):
    """``got`` equals ``want`` in value, shape and element type."""
    want = np.asarray(want)
    dtype = dtype or want.dtype.name
    assert isinstance(got, np.ndarray), type(got)
    assert got.dtype == np.dtype(dtype), (got.dtype, dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if dtype.startswith("float"):
        np.testing.assert_allclose(got, want.astype(dtype), **tol(dtype))
    else:
        np.testing.assert_array_equal(got, want.astype(dtype))

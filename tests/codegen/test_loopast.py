"""codegen.loopast: the loop AST's rewrites, run through the C backend."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te
from codegen.loopast import CASCADE


@pytest.mark.parametrize("symbolic", [False, True])
def test_long_float32_sums_cascade(symbolic):
    # 16 lanes each adding 2^18 terms one by one were ~1e-5 off (2e-4 at 3e7 terms);
    # blocks of CASCADE vectors added into fresh lanes keep it near numpy's pairwise sum
    n = (1 << 22) + 37
    size = te.var("n") if symbolic else n
    x = te.placeholder((size,), "float32", "x")
    k = te.reduce_axis(size, "k")
    m = te.compute((), lambda: te.sum(x[k] * x[k], axis=k), name="m")
    s = te.compute((), lambda: te.sum(x[k], axis=k), name="s")
    f = te.build([m, s], [x])
    assert f"in blocks of {16 * CASCADE}" in f.source
    a = (np.random.default_rng(0).random(n) + 1.0).astype(np.float32)
    got = f(a)
    a64 = a.astype(np.float64)
    for g, want in zip(got, [(a64 * a64).sum(), a64.sum()]):
        assert abs(float(g) - want) / want < 1e-6


def test_short_sums_keep_one_loop():
    # a sum of at most one block has nothing to cascade: the C stays as it was
    x = te.placeholder((16 * CASCADE,), "float32", "x")
    k = te.reduce_axis(16 * CASCADE, "k")
    f = te.build(te.compute((), lambda: te.sum(x[k], axis=k), name="s"), [x])
    assert "in blocks of" not in f.source
    a = np.random.default_rng(1).random(16 * CASCADE).astype(np.float32)
    np.testing.assert_allclose(f(a), a.astype(np.float64).sum(), rtol=1e-6)

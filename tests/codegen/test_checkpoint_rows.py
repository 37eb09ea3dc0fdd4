"""Which tensors run where around a checkpointed reversal (``codegen.checkpoint_rows``)."""
from __future__ import annotations

import numpy as np
import pytest

import tensorexpr as te


@pytest.mark.parametrize("mode", ["revolve", "segments"])
@pytest.mark.parametrize("T", [6, 8, 13])
def test_a_tensor_an_adjoint_reads_after_the_first_adjoint_runs_before_the_turns(T, mode):
    # dh reads exp(h[1]) (stored once, passes.hoist: dh_h0), which the program has after
    # dg, the first adjoint, where the reversal of h and g runs: it was computed after
    # the reversal, and the turns read it unwritten (dx[0:2] garbage, silently)
    x = te.placeholder((T, 2), "float64", name="x")
    h = te.recurrence((T, 2), lambda h, t, j: te.tanh(x[t, j] + te.select(
        t == 0, 0.0, 0.7 * h[t - 1, j])), name="h", checkpoints=2)
    g = te.recurrence((T, 2), lambda g, t, j: te.tanh(te.select(t == 0, 0.0, h[t - 1, j])
                                                      + x[t, j] + te.select(
        t == 0, 0.0, 0.7 * g[t - 1, j])), name="g", checkpoints=2)
    L = te.compute((), lambda: te.exp(h[1, 0]) + g[0, 1], name="L")
    (dx,) = te.differentiate(L, [x])
    xv = np.random.default_rng(T).standard_normal((T, 2))
    opts = te.ScheduleOptions(checkpoint=True if mode == "revolve" else "segments")
    ck = te.build(dx, options=opts)
    assert any(c.startswith("h, g: in lockstep") for c in ck.schedule.checkpoint), ck.schedule
    full = te.build(dx, options=te.ScheduleOptions(checkpoint=False))(xv)
    assert np.array_equal(ck(xv), full)
    np.testing.assert_allclose(full, te.build(dx, backend="numpy")(xv), rtol=1e-14, atol=1e-15)

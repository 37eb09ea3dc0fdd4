"""tensorexpr's VJP in the benchmark is given the forward's saved values (``te_sys``)."""
from __future__ import annotations

import pytest

from benchmarks import runner
from benchmarks.cases import by_id
from benchmarks.reference import TOLERANCE, reference, rel_err
from benchmarks.systems import te_sys


@pytest.mark.parametrize("case_id, saved", [(8, ["e", "rowsum"]), (12, ["h"]),
                                            (1, [])])
def test_the_vjp_is_given_the_saved_values_and_the_recompute_one_agrees(case_id, saved):
    case = by_id(case_id)
    p = case.params(quick=True)
    inputs = case.inputs(p)
    _, H, grads = reference(case, p, inputs)
    g, save, _ = te_sys.build_vjp(case, p, "numpy")
    assert [t.name for t in g.inputs] == [a.name for a in case.args] + ["H"] + saved
    assert (save is None) == (not saved)
    prep = te_sys.prepare(case, p, inputs, H, backend="numpy")
    assert prep.vjp_status == "ok" and rel_err(prep.gradients(), grads) < TOLERANCE
    recompute = getattr(prep, "vjp_recompute", None)
    if not saved:
        assert recompute is None  # the same program: nothing to compare
        return
    out = recompute()
    assert rel_err(list(out) if isinstance(out, tuple) else [out], grads) < TOLERANCE
    row = {}
    runner._time_te_recompute(prep, row, runner.Options(quick=True))
    assert row["vjp_recompute_ms"] > 0

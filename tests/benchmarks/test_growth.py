"""The growth check's verdict and the grown sizes of the cases."""
from __future__ import annotations

import numpy as np
import pytest

from benchmarks import growth, runner
from benchmarks.cases import CASES
from benchmarks.systems import Prepared


def test_a_quadratic_gradient_is_flagged():
    g = growth.judge((1.0, 4.1), (2.0, 33.0), 4.0)  # linear forward, quadratic VJP
    assert growth.flagged(g) and g["status"].startswith("grows faster (VJP exponent 2.02")
    assert g["vjp_fwd"] == pytest.approx((2.0, 33.0 / 4.1))


@pytest.mark.parametrize("fwd, vjp", [
    ((1.0, 4.0), (3.0, 13.0)),   # both grow as the work, with a little noise
    ((1.0, 1.6), (1.0, 4.0)),    # a forward dominated by the call's fixed cost: VJP linear
    ((1.0, 9.0), (1.0, 12.0)),   # both superlinear (a cache level crossed), VJP close
    ((1.0, 3.9), (1.0, 6.4)),    # softmax at D x 4: the VJP's larger data leaves the cache
])
def test_growth_like_the_work_is_ok(fwd, vjp):
    g = growth.judge(fwd, vjp, 4.0)
    assert g["status"] == "ok" and not growth.flagged(g)


def test_a_steep_gradient_at_the_memory_roof_is_not_a_cliff():
    # case 31's VJP (64 MiB read, 64 MiB written at L x 4) left the cache its base size
    # fit: exponent 1.97 against the forward's 1.35, while moving its bytes as fast as a copy
    fwd, vjp = (0.17, 1.1), (0.41, 6.28)
    assert growth.flagged(growth.judge(fwd, vjp, 4.0))
    g = growth.judge(fwd, vjp, 4.0, vjp_roof=0.85)
    assert not growth.flagged(g) and g["status"].startswith("ok (at the memory roof")
    assert g["vjp_roof"] == 0.85
    # far below the roof it stays a cliff
    assert growth.flagged(growth.judge(fwd, vjp, 4.0, vjp_roof=growth.ROOF / 2))


def test_equal_sizes_are_not_judged():
    assert growth.judge((1.0, 1.0), (1.0, 1.0), 1.0)["status"].startswith("not measurable")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.title)
def test_every_case_grows_its_work_about_4x(case):
    for quick in (False, True):
        p, big = case.params(quick), case.params(quick, grown=True)
        assert case.grow and all(big[k] == p[k] * f for k, f in case.grow.items())
        assert {k: v for k, v in big.items() if k not in case.grow} == \
            {k: v for k, v in p.items() if k not in case.grow}
        if not quick:  # the work, from shapes only: no need to make the (large) inputs
            continue
        small_w = case.work(p, case.inputs(p), 4).fwd
        big_w = case.work(big, case.inputs(big), 4).fwd
        assert 3.5 <= big_w / small_w <= 5.5


def test_no_growth_check_without_a_working_base():
    case = CASES[6]
    got = runner.measure_growth(case, Prepared(fwd=None, vjp=None), 1, runner.Options(quick=True))
    assert got["status"].startswith("not measured") and "fwd_ms" not in got


def test_grown_programs_are_checked_and_timed():
    case = CASES[13]  # the clamped blur: small programs, quick sizes
    opts = runner.Options(quick=True, te_backend="numpy")
    p = case.params(quick=True)
    inputs = case.inputs(p)
    Y, H, grads = runner.reference(case, p, inputs)
    small, row = runner._prepare_and_check("te", case, p, inputs, H, Y, grads, opts)
    assert row["status"] == "ok"
    got = runner.measure_growth(case, small, case.work(p, inputs, Y.size * 4).fwd, opts)
    assert got["params"] == {"n": 4 * p["n"]} and got["err"] < 1e-3
    assert got["size_ratio"] == pytest.approx(4.0)
    assert got["status"] in ("ok",) or growth.flagged(got)
    assert all(np.isfinite(x) and x > 0 for x in got["fwd_min_ms"] + got["vjp_min_ms"])


def test_a_quadratic_gradient_is_flagged_by_the_run(monkeypatch):
    # A stand-in system whose forward costs n and whose VJP costs n^2 (right values).
    import time
    from benchmarks.systems import te_sys

    def prepare(case, p, inputs, H, backend="c"):
        Y, _, grads = runner.reference(case, p, inputs)
        n = p["n"] / 10000
        return Prepared(fwd=lambda: (time.sleep(1e-3 * n), Y)[1],
                        vjp=lambda: (time.sleep(1e-3 * n * n), grads)[1])
    monkeypatch.setattr(te_sys, "prepare", prepare)
    case = CASES[13]
    p = case.params(quick=True)
    inputs = case.inputs(p)
    Y, H, grads = runner.reference(case, p, inputs)
    small, row = runner._prepare_and_check("te", case, p, inputs, H, Y, grads, runner.Options())
    got = runner.measure_growth(case, small, case.work(p, inputs, Y.size * 4).fwd,
                                runner.Options(quick=True))
    assert growth.flagged(got), got
    assert got["vjp_exp"] > 1.7 and got["fwd_exp"] < 1.2

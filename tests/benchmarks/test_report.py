"""The report per tier: tables, geometric means of tensorexpr / fastest peer, charts."""
from __future__ import annotations

import math

import pytest

from benchmarks import report

META = {"threads": 2, "quick": True, "te_backend": "c", "te_cache": "fresh", "idle_threads": {},
        "fwd_includes": "f", "vjp_includes": {"te": "t"}, "build": "b", "timing": "t",
        "err": "e", "work": "w", "skipped": {},
        "peak": {"gflops": 1.0, "gbps": 1.0, "how": "h"}}


def _row(ms, status="ok"):
    return {"fwd_status": status, "status": status, "fwd_ms": ms, "vjp_ms": 2 * ms}


def _case(id, tier, te_ms, torch_ms, jax_ms, ratio_torch, ratio_jax, te_status="ok"):
    return {"id": id, "tier": tier, "title": f"c{id}", "params": {}, "work": {"unit": "byte"},
            "systems": {"te": _row(te_ms, te_status), "torch": _row(torch_ms),
                        "jax": _row(jax_ms)},
            "ratios": {"te/torch": {"fwd": ratio_torch, "vjp": ratio_torch},
                       "te/jax": {"fwd": ratio_jax, "vjp": ratio_jax}}}


CASES = [_case(1, 1, 1.0, 0.5, 2.0, 2.0, 0.5),      # torch fastest: 2.0
         _case(15, 2, 1.0, 4.0, 2.0, 0.25, 0.5),    # jax fastest: 0.5
         _case(16, 2, 1.0, 0.5, 8.0, 3.0, 0.1),     # torch fastest: 3.0 (paired ratio)
         _case(17, 2, 1.0, 0.5, 8.0, 9.0, 9.0, te_status="wrong (max rel err 1)")]


def test_geometric_mean_uses_the_fastest_peer_per_case_and_skips_failures():
    s = report.tier_summary(CASES)
    assert s["1"] == {"cases": 1, "fwd_cases": 1, "fwd_geomean": pytest.approx(2.0),
                      "vjp_cases": 1, "vjp_geomean": pytest.approx(2.0)}
    assert s["2"]["cases"] == 3 and s["2"]["vjp_cases"] == 2
    assert s["2"]["vjp_geomean"] == pytest.approx(math.sqrt(0.5 * 3.0))


def test_table_has_a_section_and_a_mean_per_tier():
    text = report.table({"meta": META, "cases": CASES})
    lines = text.splitlines()
    assert lines[0] == "tier 1" and "tier 2" in lines
    assert lines.index("tier 2") > next(i for i, l in enumerate(lines) if l.startswith("1. c1"))
    means = [l for l in lines if l.startswith("tier 2: geometric mean")]
    assert means == [report.summary_line("2", report.tier_summary(CASES)["2"])]
    assert "VJP 1.22 (2 of 3 cases)" in means[0]


def test_one_chart_per_tier(tmp_path):
    pytest.importorskip("matplotlib")
    results = {"meta": {**META, "date": "d"}, "cases": CASES}
    paths = report.chart_paths(results, str(tmp_path / "r.png"))
    assert paths == {1: str(tmp_path / "r.png"), 2: str(tmp_path / "r-tier2.png")}
    for tier, path in paths.items():
        assert report.write_png(results, path, tier=tier) is None
        assert (tmp_path / path).stat().st_size > 0

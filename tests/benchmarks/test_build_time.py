"""benchmarks/build_time.py: every step of a cold build measured, cached builds beside."""
from __future__ import annotations

import os

from benchmarks import build_time


def test_a_tiny_case_is_measured_cold_then_cached(monkeypatch, tmp_path):
    monkeypatch.setenv("TENSOREXPR_CACHE_DIR", str(tmp_path))
    result = build_time.measure([8], quick=True)
    assert os.environ["TENSOREXPR_CACHE_DIR"] == str(tmp_path)  # restored
    (row,) = result["cases"]
    # a fresh cache: softmax's forward, saving forward and VJP were generated and compiled
    assert row["programs"] == 3 and row["c_kb"] > 1
    assert row["cc_s"] > 0 and row["lower_s"] > 0 and row["diff_s"] > 0
    # the VJP's compiles overlap the lowering (wait=False), the forward's does not
    assert row["fwd_build_s"] + row["vjp_build_s"] > row["lower_s"] + row["emit_s"]
    assert row["fwd_build_s"] + row["vjp_build_s"] > row["cc_s"] / 2
    assert row["fwd_cached_s"] > 0 and row["vjp_cached_s"] > 0
    assert result["new_process"]["case"] == 8 and result["new_process"]["build_s"] > 0
    text = build_time.report(result)
    assert "  8 softmax" in text and "cached build in a new process" in text


def test_the_report_marks_missed_goals():
    row = {"id": 3, "title": "slow", "diff_s": 0.4, "lower_s": 0.2, "emit_s": 0.0,
           "cc_s": 1.0, "cc_cpu_s": 0.5, "c_kb": 10.0, "rest_s": 0.1, "fwd_build_s": 0.5,
           "vjp_build_s": 1.7, "fwd_cached_s": 0.01, "vjp_cached_s": 0.06}
    text = build_time.report({"cases": [row]})
    assert "200!" in text and "1700!" in text and "60!" in text and "10 " in text
    assert "over 0.5 s: 1 of 1 [3]" in text and "over 50 ms: 1 of 1 [3]" in text

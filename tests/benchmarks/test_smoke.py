"""The benchmark command end to end, on one small case: it runs, and its JSON is sane."""
from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STATUS = re.compile(r"^(ok|unsupported \(.+\)|wrong \(max rel err .+\))$")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    cmd = [sys.executable, "-m", "benchmarks", "--case", "1", "--systems", "te,numpy",
           "--quick", "--json", str(out / "r.json"), "--png", str(out / "r.png")]
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with open(out / "r.json") as fh:
        return proc.stdout, json.load(fh), out


def test_json_describes_the_run(run):
    _, res, _ = run
    meta = res["meta"]
    assert meta["quick"] is True and meta["threads"] == 2
    assert meta["systems"] == ["te", "numpy"]
    assert set(meta["vjp_includes"]) == {"te", "numpy"}
    assert "max|g - ref|" in meta["err"]
    assert meta["peak"]["gflops"] > 0 and meta["peak"]["gbps"] > 0
    assert "cold compile" in meta["te_cache"]
    assert [c["id"] for c in res["cases"]] == [1]


def test_case_figures_are_sane(run):
    _, res, _ = run
    case = res["cases"][0]
    assert case["params"] == {"M": 64, "K": 128, "N": 64}
    assert case["work"] == {"unit": "flop", "fwd": 2 * 64 * 64 * 128, "vjp": 4 * 64 * 64 * 128}
    te, npy = case["systems"]["te"], case["systems"]["numpy"]
    # the forward of tensorexpr matches numpy's (float64) forward
    assert te["fwd_status"] == "ok" and te["fwd_err"] < 1e-5
    assert npy["status"] == "ok" and npy["err"] < 1e-5
    for row in (te, npy):
        assert STATUS.match(row["status"]), row["status"]
        assert row["fwd_ms"] > 0 and row["fwd_rounds"] >= 3 and 0 < row["fwd_peak_pct"]
    assert te["fwd_build_s"] > 0 and te["fwd_build_cached_s"] > 0
    if te["status"] == "ok":
        assert te["err"] < 1e-3 and te["build_s"] > 0 and te["build_cached_s"] > 0
        assert te["vjp_fwd"] == pytest.approx(te["vjp_ms"] / te["fwd_ms"])
        assert case["ratios"]["te/numpy"]["vjp"] > 0
    else:  # an unsupported gradient has no made-up figures
        assert "vjp_ms" not in te and "err" not in te
    assert case["ratios"]["te/numpy"]["fwd"] > 0


def test_growth_check(run):
    stdout, res, _ = run
    g = res["cases"][0]["growth"]
    assert g["grow"] == {"M": 4} and g["params"] == {"M": 256}
    assert g["size_ratio"] == pytest.approx(4.0)  # M x 4 is 4x the matmul's FLOPs
    assert g["err"] < 1e-3 and g["build_s"] > 0  # the grown gradient is checked, not just timed
    assert 0 < g["seconds"] < 60
    assert g["status"] == "ok" or g["status"].startswith("grows faster")
    (f0, f1), (v0, v1) = g["fwd_min_ms"], g["vjp_min_ms"]
    assert 0 < f0 < f1 and 0 < v0 < v1  # 4x the work takes longer
    assert g["vjp_fwd"] == pytest.approx([v0 / f0, v1 / f1])
    assert g["fwd_exp"] == pytest.approx(math.log(f1 / f0) / math.log(4.0))
    assert all(m >= fastest for m, fastest in zip(g["fwd_ms"] + g["vjp_ms"], [f0, f1, v0, v1]))
    assert "VJP's exponent exceeds the forward's" in res["meta"]["growth"]
    line = re.search(r"^1\. matmul +Mx4 +4 +(.*)$", stdout.split("growth check")[1], re.M)
    assert line and g["status"] in line.group(1), stdout[-3000:]  # a noisy run adds a note
    assert re.search(r"^flagged: ", stdout, re.M)


def test_table_and_chart(run):
    stdout, res, out = run
    assert "1. matmul" in stdout and re.search(r"^te\s", stdout, re.M)
    assert "vjp_ms: the gradient of sum(H * Y)" in stdout
    if importlib.util.find_spec("matplotlib"):
        assert (out / "r.png").stat().st_size > 0
    else:
        assert "matplotlib not installed" in stdout

"""The recurrence memory benchmark end to end at its quick size."""
from __future__ import annotations

import doctest
import json
import os
import subprocess
import sys

import benchmarks.recurrence_memory as bench
from codegen import recurrence_copies

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_quick_run_reports_identical_gradients_and_less_memory(tmp_path):
    path = tmp_path / "rows.json"
    cmd = [sys.executable, "-m", "benchmarks.recurrence_memory", "--quick", "--cells", "ewma,alpha",
           "--json", str(path)]
    proc = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "max |diff|" in proc.stdout and "k=16" in proc.stdout
    rows = json.loads(path.read_text())
    R, T, ks = bench.QUICK
    assert [(r["case"], r["mode"]) for r in rows] == [
        (c, m) for c in bench.CASES for m in ["tape", "rolling"] + [str(k) for k in ks]]
    for case in bench.CASES:
        mine = {r["mode"]: r for r in rows if r["case"] == case}
        assert all(r["bit_identical"] and r["max_diff"] == 0.0 for r in mine.values())
        assert all(r["time"] > 0 and r["peak_rss_growth"] >= 0 for r in mine.values())
        tape = mine["tape"]["scratch"]
        # e and its adjoint, float32, and the 0-d dL; and the full tape's transposed copy of
        # d, which its recurrences read across their lanes (codegen.recurrence_copies;
        # a checkpointed build makes none)
        copy = R * T * 4 if R * T * 4 >= recurrence_copies.MIN_BYTES else 0
        assert tape == 2 * R * T * 4 + 4 + copy
        for k in ks:
            ck = mine[str(k)]
            assert ck["checkpointed"]
            if case == "alpha":
                # revolve: rings of e and de (a step and one row each), k checkpoint rows
                assert ck["scratch"] == (2 * 2 + k) * R * 4 + 4  # + the 0-d dL
            else:  # the EWMA's adjoint needs no e but its end: e and de in 2 rows each
                assert ck["scratch"] == (2 + 2) * R * 4 + 4
        assert max(mine[str(k)]["scratch"] for k in ks) < tape


def test_docstring_examples():
    result = doctest.testmod(bench)
    assert result.failed == 0 and result.attempted > 0

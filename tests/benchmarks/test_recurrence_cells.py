"""The recurrent cells of the recurrence memory benchmark (tanh RNN, GRU, LSTM) at
tiny sizes: tensorexpr's modes bit for bit, the peers (if installed) to rounding."""
from __future__ import annotations

import doctest
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import benchmarks.recurrence_cells as cells
import benchmarks.recurrence_memory as bench

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_quick_cells_run_for_te_alone(tmp_path):
    path = tmp_path / "rows.json"
    cmd = [sys.executable, "-m", "benchmarks.recurrence_memory", "--quick", "--cells", "rnn",
           "--systems", "te", "--json", str(path), "--png", str(tmp_path / "p.png")]
    proc = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "rel diff" in proc.stdout and ("plot written" in proc.stdout
                                          or "matplotlib not installed" in proc.stdout)
    rows = json.loads(path.read_text())
    T, B, H, D, ks = bench.CELL_QUICK
    assert [(r["cell"], r["system"], r["mode"]) for r in rows] == [
        ("rnn", s, m) for s, m in bench.cell_modes(ks, ["te"])]
    assert all(r["bit_identical"] and r["max_diff"] == 0.0 for r in rows)
    assert all(r["time"] > 0 and r["peak_rss_growth"] >= 0 for r in rows)
    tape = rows[0]["buffers"]
    for r in rows[1:]:  # the tanh RNN is checkpointed: less than its full tape
        assert r["checkpointed"] and r["buffers"] < tape and "checkpoints" in r["note"]


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_te_modes_agree_bit_for_bit_and_say_when_they_keep_the_tape(cell, tmp_path):
    rows = [bench.measure_cell(cell, 5, 1, 3, 2, "te", mode, str(tmp_path / f"{i}.npz"),
                               ks=[2], repeats=1)
            for i, mode in enumerate(["tape", "revolve:2"])]
    a, b = (np.load(tmp_path / f"{i}.npz") for i in range(2))
    assert all(np.array_equal(a[n], b[n]) for n in a.files)
    ck = rows[1]
    assert ck["checkpointed"] or ck["note"] == "NOT checkpointed: full tape"


@pytest.mark.parametrize("cell", cells.CELLS)
def test_peers_compute_the_same_gradients(cell):
    import tensorexpr as te
    T, B, H, D = 4, 2, 3, 2
    data = cells.arrays(cell, T, B, H, D)
    ins, grads = cells.te_program(cell, T, B, H, D, None)
    ref = te.build(grads, inputs=ins)(*data)
    assert [g.shape for g in ref] == [a.shape for a in data]
    checked = 0
    if bench.available(["jax"]):
        for mode in ("scan", "remat", "remat0"):
            got = cells.jax_grad(cell, T, B, H, mode)(*data)
            assert cells.compare(got, ref)[1] < 1e-5, mode
        checked += 1
    if bench.available(["torch"]):
        for blocks in (None, 2):
            assert cells.compare(cells.torch_grad(cell, T, B, H, blocks)(*data), ref)[1] < 1e-5
        checked += 1
    if not checked:
        pytest.skip("neither JAX nor PyTorch installed")


def test_docstring_examples():
    result = doctest.testmod(cells)
    assert result.failed == 0 and result.attempted > 0

"""The scripts of examples/ run, and show what they say they show."""
from __future__ import annotations

import os
import runpy
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")


def _main(name):
    return runpy.run_path(os.path.join(EXAMPLES, name), run_name="example")["main"]


def test_torch_cnn_loss_curve_matches_torch_layers():
    pytest.importorskip("torch")
    ours, ref = _main("torch_cnn.py")(steps=12)
    assert max(abs(a - b) for a, b in zip(ours, ref)) < 1e-8
    assert ours[-1] < 0.5 * ours[0]  # it learns


def test_jax_cnn_loss_curve_matches_lax():
    pytest.importorskip("jax")
    ours, ref = _main("jax_cnn.py")(steps=12)
    assert max(abs(a - b) for a, b in zip(ours, ref)) < 1e-8
    assert ours[-1] < 0.5 * ours[0]


def test_torch_ewma_module_learns_the_rates():
    torch = pytest.importorskip("torch")
    ours, ref, rates = _main("torch_ewma.py")(steps=40)
    assert max(abs(a - b) for a, b in zip(ours, ref)) < 1e-8
    assert ours[-1] < 0.05 * ours[0]
    assert torch.allclose(rates, torch.tensor([0.2, 0.5, 0.8], dtype=torch.float64), atol=0.05)


def test_an_example_runs_as_a_script():
    pytest.importorskip("torch")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, os.path.join(EXAMPLES, "torch_ewma.py")], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert "largest difference of the loss curves" in out and "learned rates" in out

"""The eight programs a new user wrote from the README (examples/): each runs and
shows what its docstring says it shows."""
from __future__ import annotations

import os
import runpy
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
PROGRAMS = ["mlp_classifier.py", "cnn_layer.py", "heat_equation.py", "straight_through.py",
            "hvp.py", "image_pipeline.py", "symbolic_sizes.py", "mistakes.py"]


def _main(name):
    return runpy.run_path(os.path.join(EXAMPLES, name), run_name="example")["main"]


def test_mlp_classifier_learns_the_blobs():
    losses, accuracy = _main("mlp_classifier.py")(steps=40)
    assert losses[-1] < 0.2 * losses[0] and accuracy > 0.95


def test_cnn_layer_matches_numpy_and_central_differences():
    err_f, err_g = _main("cnn_layer.py")()
    assert err_f < 1e-12 and err_g < 1e-6


def test_heat_equation_fits_its_initial_condition():
    first, last = _main("heat_equation.py")(iterations=100)
    assert last < 0.05 * first


def test_straight_through_estimators_learn_where_the_exact_gradient_cannot():
    final = _main("straight_through.py")()
    assert final["identity"] < 1e-3 and final["clipped"] < 1e-3
    assert final["exact"] > 100 * final["identity"] + 0.1   # the exact gradient is 0


def test_hvp_and_jacobian_match_the_closed_forms():
    err_hv, err_j = _main("hvp.py")()
    assert err_hv < 1e-12 and err_j == 0.0


def test_image_pipeline_gradients():
    err_c, err_n = _main("image_pipeline.py")()
    assert err_c < 1e-5 and err_n < 1e-6


def test_symbolic_sizes_one_build_every_batch():
    batches, sig = _main("symbolic_sizes.py")()
    assert 0 in batches and sig == "(X, W, H, *, out=None)"


def test_mistakes_are_explained():
    said = _main("mistakes.py")()
    assert len(said) == 9
    for what, (kind, message) in said.items():
        assert "Error" in kind, what
        assert "gcc" not in message and "Traceback" not in message, what
    assert said["a forgotten head (a 32 GiB Jacobian)"][0] == "JacobianError"
    assert "mistakes.py:" in said["a read past the end"][1]
    assert "inputs=[...]" in said["an input the gradient does not read"][1]
    assert "te.select(n > 0" in said["an empty input read at its end"][1]


@pytest.mark.parametrize("name", ["hvp.py", "symbolic_sizes.py"])
def test_scripts_run_from_the_command_line(name):
    env = dict(os.environ, PYTHONPATH=ROOT)
    run = subprocess.run([sys.executable, os.path.join(EXAMPLES, name)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip()


def test_every_program_is_listed_and_says_how_to_run_it():
    mine = {n for n in os.listdir(EXAMPLES) if n in PROGRAMS}
    assert len(PROGRAMS) == 8 and mine == set(PROGRAMS)
    for name in PROGRAMS:
        text = open(os.path.join(EXAMPLES, name), encoding="utf-8").read()
        assert text.startswith('"""') and f"python examples/{name}" in text, name

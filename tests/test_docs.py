"""docs/: the guide's Python blocks run as written and print what they say they
print, and the Sphinx site (the guide and the API reference generated from the
docstrings) builds without a warning."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.test_readme import python_blocks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
GUIDE = os.path.join(DOCS, "guide.md")


def expected_output(code: str) -> list:
    """The comment lines right after a top-level ``print(...)``: what it prints."""
    out, after_print = [], False
    for line in code.splitlines():
        if line.startswith("print("):
            after_print = True
        elif after_print and line.startswith("# "):
            out.append(line[2:])
        else:
            after_print = False
    return out


def test_guide_covers_the_topics():
    text = open(GUIDE, encoding="utf-8").read()
    assert text.startswith("# Differentiable programming with tensorexpr")
    for topic in ("VJP", "head", "Several outputs", "ScatterAdd", "Ties", "NaN", "select",
                  "Recurrences", "saved_values", "checkpoints=", "Straight-through",
                  "clipping", "Stop-gradient", "Hessian-vector", "Jacobian", "central "
                  "differences", "Performance", "Limits and rules", "Interop"):
        assert topic.lower() in text.lower(), topic


def test_guide_python_blocks_run_and_print_what_they_say(capsys):
    blocks = python_blocks(GUIDE)
    assert len(blocks) >= 15
    namespace = {"__name__": "guide"}
    for line, code in blocks:
        # Padding keeps the guide's line numbers in tracebacks and tensor origins.
        exec(compile("\n" * (line - 1) + code, GUIDE, "exec"), namespace)
        printed = capsys.readouterr().out
        for want in expected_output(code):
            assert want in printed, (line, want, printed)


def test_expected_output_reads_the_comments_after_a_print():
    code = "x = 1\nprint(x)\n# 1\n# 2\ny = 2\n# not output\n"
    assert expected_output(code) == ["1", "2"]


def test_sphinx_builds_without_warnings(tmp_path):
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_parser")
    # A process of its own: autodoc imports the package, Sphinx keeps global state.
    run = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b",
                          "html", DOCS, str(tmp_path / "html")], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    api = (tmp_path / "html" / "api.html").read_text(encoding="utf-8")
    for name in ("tensorexpr.differentiate", "tensorexpr.build", "tensorexpr.compute",
                 "tensorexpr.saved_values", "JACOBIAN_LIMIT", "JacobianError"):
        assert name in api, name
    assert (tmp_path / "html" / "guide.html").exists()

"""The README's Python code blocks run as written (so the README stays true)."""
from __future__ import annotations

import os
import re

import tensorexpr as te

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def python_blocks(path: str = README):
    """``(first line number, code)`` of every ```python block of a Markdown file
    (the README unless ``path`` is given)."""
    text = open(path, encoding="utf-8").read()
    out = []
    for m in re.finditer(r"^```python\n(.*?)^```", text, flags=re.S | re.M):
        out.append((text.count("\n", 0, m.start(1)) + 1, m.group(1)))
    return out


def test_readme_has_the_set_up_commands():
    text = open(README, encoding="utf-8").read()
    assert "pip install -e '.[bench]' && python -m benchmarks" in text
    assert "pip install -e '.[test]' && python -m pytest -n 2" in text
    assert "## Gradients" in text and "## Semantics" in text


def test_readme_python_blocks_run(capsys):
    blocks = python_blocks()
    assert len(blocks) >= 5
    assert "te.build([C, s], inputs=[A, B])" in blocks[0][1]  # the quickstart, on C
    namespace = {"__name__": "readme"}
    for line, code in blocks:
        # Padding keeps the README's line numbers, so errors and tensor origins point at it.
        exec(compile("\n" * (line - 1) + code, README, "exec"), namespace)
    printed = capsys.readouterr().out
    assert "C[i, j] = sum_{k in [0, 64)} (A[i, k] * B[k, j])" in printed
    # the BoundsError example printed its message: tensor, README line, bad point
    assert "'bad_diff'" in printed and "README.md:" in printed and "i = 5" in printed
    assert isinstance(namespace["f"], te.Function) and namespace["f"].backend == "c"

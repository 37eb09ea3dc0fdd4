"""The examples in the docstrings of the core language run and say what they show."""
from __future__ import annotations

import doctest
import importlib
import os

import pytest

MODULES = ["tensorexpr", "tensorexpr.api", "tensorexpr.printer", "tensorexpr.bounds",
           "tensorexpr.errors", "tensorexpr.transform", "tensorexpr.build"]
#: every module of codegen/ (found on disk: a new module's examples run too)
MODULES += sorted(f"codegen.{name[:-3]}" for name in os.listdir(
    os.path.join(os.path.dirname(__file__), "..", "..", "codegen"))
    if name.endswith(".py") and name != "__init__.py")


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed"
    assert result.attempted > 0, f"{name} has no docstring examples"

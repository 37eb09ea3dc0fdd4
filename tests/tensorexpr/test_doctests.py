"""The examples in the docstrings of the core language run and say what they show."""
from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["tensorexpr", "tensorexpr.api", "tensorexpr.printer", "tensorexpr.bounds",
           "tensorexpr.errors", "tensorexpr.transform", "tensorexpr.build",
           "codegen.reference", "codegen.signature"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed"
    assert result.attempted > 0, f"{name} has no docstring examples"

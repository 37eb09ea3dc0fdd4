"""The examples in the docstrings of the core language run and say what they show."""
from __future__ import annotations

import doctest
import importlib
import os
import pkgutil

import pytest

# Every module of the language and of its passes, subpackages (tensorexpr.ir, ...) and their
# modules included, found on disk so a new module is covered.
LANGUAGE = [name for package in ("tensorexpr", "passes")
            for name in [package] + [m.name for m in pkgutil.walk_packages(
                importlib.import_module(package).__path__, prefix=f"{package}.")]]
# The adapters need their framework; without it their examples are skipped, not failed.
FRAMEWORK = {"tensorexpr.torch": "torch", "tensorexpr.jax": "jax", "tensorexpr.dask": "dask"}
#: every module of codegen/ (found on disk: a new module's examples run too)
MODULES = LANGUAGE + sorted(f"codegen.{name[:-3]}" for name in os.listdir(
    os.path.join(os.path.dirname(__file__), "..", "..", "codegen"))
    if name.endswith(".py") and name != "__init__.py")


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    if name in FRAMEWORK:
        pytest.importorskip(FRAMEWORK[name])
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed"
    assert result.attempted > 0, f"{name} has no docstring examples"

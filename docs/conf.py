"""Sphinx configuration: the guide (Markdown, through MyST) and the API reference
generated from the docstrings (autodoc). Built with warnings as errors by
tests/test_docs.py."""
import os
import sys

sys.path.insert(0, os.path.abspath(".."))

project = "tensorexpr"
author = "the tensorexpr developers"
extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
autodoc_member_order = "bysource"
autodoc_typehints = "none"
html_theme = "alabaster"
# The guide links to files of the repository (the README, ir.py), not to pages.
suppress_warnings = ["myst.xref_missing"]

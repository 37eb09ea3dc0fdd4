"""The language and its passes import in layers: no circle, no other module's private names.

Function-level imports count: importing inside a function to dodge a circle is
still a circle. The layers (a module imports only modules of lower layers):
errors, collector <- ir (dtypes <- nodes <- traversal <- the package) <- transform, printer
<- polyhedral (recent <- renamed <- spaces <- affine <- fibers, loops <- queries <- the package) <- bounds
<- recurrence <- api <- extract, gradients <- simplify, normalize, hoist <- partials, factor_sums
<- nn (arguments <- reductions, activations, products, convolution, embeddings,
resampling, layout <- softmax_family, normalization, pooling <- losses)
<- differentiate, the nn package <- differentiate_cache <- build <- interop, blocks <- adapters.
"""
from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
LAYERS = [["tensorexpr.errors", "tensorexpr.collector"], ["tensorexpr.ir.dtypes"], ["tensorexpr.ir.nodes"],
          ["tensorexpr.ir.traversal"], ["tensorexpr.ir"],
          ["tensorexpr.transform", "tensorexpr.printer"],
          ["tensorexpr.names"],
          ["tensorexpr.polyhedral.recent"], ["tensorexpr.polyhedral.renamed"],
          ["tensorexpr.polyhedral.spaces"],
          ["tensorexpr.polyhedral.affine"],
          ["tensorexpr.polyhedral.fibers", "tensorexpr.polyhedral.loops"],
          ["tensorexpr.polyhedral.queries"], ["tensorexpr.polyhedral"], ["tensorexpr.bounds"],
          ["tensorexpr.recurrence"], ["tensorexpr.api"], ["passes.extract", "passes.gradients"],
          ["passes.contexts"],
          ["passes.simplify", "passes.normalize", "passes.hoist", "passes.squeeze",
           "passes.share"], ["passes.partials", "passes.factor_sums", "passes.common_factors"],
          ["tensorexpr.nn.arguments"],
          ["tensorexpr.nn.reductions", "tensorexpr.nn.activations", "tensorexpr.nn.products",
           "tensorexpr.nn.convolution", "tensorexpr.nn.embeddings", "tensorexpr.nn.resampling",
           "tensorexpr.nn.layout"],
          ["tensorexpr.nn.softmax_family", "tensorexpr.nn.normalization",
           "tensorexpr.nn.pooling"],
          ["tensorexpr.nn.losses"],
          ["passes.differentiate", "tensorexpr.nn"], ["tensorexpr.differentiate_cache"],
          ["tensorexpr.build"],
          ["tensorexpr.interop", "tensorexpr.blocks"],
          ["tensorexpr.torch", "tensorexpr.jax", "tensorexpr.dask"]]
RANK = {m: k for k, layer in enumerate(LAYERS) for m in layer}


def _module_of(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_imports(path: pathlib.Path):
    """``(module, name)`` for each import in ``path`` of a project module, anywhere in it.

    >>> sorted(project_imports(ROOT / "tensorexpr" / "printer.py"))[0]
    ('tensorexpr.ir', 'Axis')
    """
    package = _module_of(path) if path.name == "__init__.py" else _module_of(path.parent)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if (ROOT / (sub.replace(".", "/") + ".py")).exists():
                    yield sub, ""
                elif base.split(".")[0] in ("tensorexpr", "passes", "codegen"):
                    yield base, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in ("tensorexpr", "passes", "codegen"):
                    yield alias.name, ""


def _sources():
    # subpackages too (tensorexpr/ir/, ...): a package is a module of its own layer
    return [p for pkg in ("tensorexpr", "passes") for p in sorted((ROOT / pkg).rglob("*.py"))]


def test_every_module_has_a_layer():
    modules = {_module_of(p) for p in _sources()} - {"tensorexpr", "passes"}
    assert modules == set(RANK), "give a new module its layer in LAYERS (tests/test_layering.py)"


def test_modules_import_only_lower_layers():
    upward = []
    for path in _sources():
        me = _module_of(path)
        for target, _ in project_imports(path):
            if me in RANK and target in RANK and RANK[target] >= RANK[me]:
                upward.append(f"{me} imports {target}")
    assert not upward, upward


def test_no_module_imports_private_names_of_another():
    private = [f"{_module_of(p)} imports {target}.{name}" for p in _sources()
               for target, name in project_imports(p)
               if name.startswith("_") and not name.startswith("__")]
    assert not private, private

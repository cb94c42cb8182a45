"""The import contracts can fail: the executor-side allowlist (scripts/import_contracts.py, run by ``lint-imports``
with the contracts in pyproject.toml) finds every executor-side module, follows imports inside functions and the
packages above a module, and names the chain to what is not allowed."""

from __future__ import annotations

import tomllib
from pathlib import Path

import grimp
import pytest

from scripts.import_contracts import offending

REPO = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
(EXECUTOR,) = [c for c in CONFIG["contracts"] if c["type"] == "allowed_imports"]


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("workers", include_external_packages=True, exclude_type_checking_imports=True,
                             cache_dir=None)  # fmt: skip


def _sources(graph: grimp.ImportGraph) -> set[str]:
    found: set[str] = set()
    for expression in EXECUTOR["source_modules"]:
        for module in graph.find_matching_modules(expression) if "*" in expression else {expression}:
            found |= {module, *graph.find_descendants(module)}
    return found


def test_the_contract_covers_every_remote_module_the_codecs_and_the_metric_states(graph: grimp.ImportGraph) -> None:
    sources = _sources(graph)
    remotes = {m for m in graph.modules if m.split(".")[0] == "workers" and m.endswith(".remote")}
    states = {m for m in graph.modules if m.startswith("workers.evaluation.") and not m.endswith(".driver")}
    codecs = {m for m in graph.modules if m.startswith("workers.codecs.")}
    assert remotes | states | codecs <= sources, sorted(remotes | states | codecs - sources)
    assert "workers.evaluation.driver" not in sources


def test_the_executor_side_is_clean(graph: grimp.ImportGraph) -> None:
    assert offending(graph, _sources(graph), EXECUTOR["allowed_external"]) == []


def test_imports_inside_functions_are_followed(graph: grimp.ImportGraph) -> None:
    """The torch driver and the sequence frame functions import pyspark only inside their functions: caught."""
    allowed = EXECUTOR["allowed_external"]
    assert "workers.training.torch.driver -> pyspark" in offending(graph, ["workers.training.torch.driver"], allowed)
    assert "workers.data.sequences.frame -> pyspark" in offending(graph, ["workers.data.sequences.frame"], allowed)


def test_the_packages_above_a_module_count_and_the_chain_is_named() -> None:
    """Importing ``pkg.sub.leaf`` runs ``pkg/sub/__init__.py`` first, and whatever that imports."""
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.sub", "pkg.sub.leaf", "pkg.other"):
        graph.add_module(module)
    for external in ("pyspark", "numpy"):
        graph.add_module(external, is_squashed=True)
    graph.add_import(importer="pkg.sub.leaf", imported="numpy")
    graph.add_import(importer="pkg.sub.leaf", imported="pkg.other")
    graph.add_import(importer="pkg.sub", imported="pyspark")
    assert offending(graph, ["pkg.sub.leaf"], ["numpy"]) == ["pkg.sub.leaf -> pkg.sub -> pyspark"]
    assert offending(graph, ["pkg.other"], ["numpy"]) == []

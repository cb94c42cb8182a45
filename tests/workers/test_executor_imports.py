"""Executor-side code imports only the standard library, numpy, pyarrow, pandas, torch, xgboost, safetensors and
its own package (DESIGN.md §2): never pyspark (the function Spark ships reads ``BarrierTaskContext`` and passes
plain values in), nor app, sqlalchemy, fastapi or celery.

Executor-side modules are every ``remote`` module under workers/, ``workers.codecs`` and the evaluation metric
states (all of ``workers.evaluation`` but its driver). From each, every import statement counts, at module level or
inside a function (only ``if TYPE_CHECKING:`` blocks do not run), followed through the workers modules it reaches,
and so do the packages above each reached module, which Python runs first.
"""

from __future__ import annotations

import sys
from collections import deque

import grimp
import pytest

ALLOWED = frozenset(sys.stdlib_module_names) | {"numpy", "pyarrow", "pandas", "torch", "xgboost", "safetensors"}


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("workers", include_external_packages=True, exclude_type_checking_imports=True,
                             cache_dir=None)  # fmt: skip


def _executor_side(graph: grimp.ImportGraph) -> list[str]:
    internal = sorted(m for m in graph.modules if m.split(".")[0] == "workers")
    return [
        m
        for m in internal
        if m.rsplit(".", 1)[-1] == "remote"
        or m == "workers.codecs"
        or m.startswith("workers.codecs.")
        or (m.startswith("workers.evaluation.") and m != "workers.evaluation.driver")
    ]


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def offending(graph: grimp.ImportGraph, root: str) -> list[str]:
    """Every import chain from ``root``, through workers modules, to an external package outside ``ALLOWED``."""
    came_from: dict[str, tuple[str, str] | None] = {root: None}  # module -> (importer, how)
    queue = deque([root])
    found = []
    while queue:
        module = queue.popleft()
        steps = [(m, f"line {d['line_number']}") for m in graph.find_modules_directly_imported_by(module)
                 for d in graph.get_import_details(importer=module, imported=m)[:1]]  # fmt: skip
        steps += [(p, "package") for p in _parents(module)]
        for target, how in sorted(steps):
            if target.split(".")[0] != "workers":
                if target.split(".")[0] not in ALLOWED:
                    found.append(_chain(came_from, module) + f" -> {target} ({how})")
            elif target not in came_from:
                came_from[target] = (module, how)
                queue.append(target)
    return found


def _chain(came_from: dict[str, tuple[str, str] | None], module: str) -> str:
    links = []
    step = came_from[module]
    while step is not None:
        links.append(f" -> {module} ({step[1]} of {step[0]})")
        module = step[0]
        step = came_from[module]
    return module + "".join(reversed(links))


def test_executor_side_modules_import_only_the_allowed_packages(graph: grimp.ImportGraph) -> None:
    roots = _executor_side(graph)
    bad = [chain for root in roots for chain in offending(graph, root)]
    others = ", ".join(sorted(ALLOWED - frozenset(sys.stdlib_module_names)))
    assert not bad, f"executor-side imports outside the standard library and {others}:\n" + "\n".join(bad)


def test_the_executor_side_modules_are_found(graph: grimp.ImportGraph) -> None:
    roots = _executor_side(graph)
    assert {
        "workers.training.torch.remote",
        "workers.training.xgboost.remote",
        "workers.environment.remote",
        "workers.evaluation.remote",
        "workers.inference.remote",
        "workers.codecs.threshold",
        "workers.evaluation.classification",
        "workers.evaluation.roc",
    } <= set(roots), roots
    assert "workers.evaluation.driver" not in roots


def test_the_check_sees_imports_inside_functions(graph: grimp.ImportGraph) -> None:
    """The driver imports pyspark only inside its functions (and in the function it ships), and is caught."""
    chains = offending(graph, "workers.training.torch.driver")
    assert any(chain.startswith("workers.training.torch.driver -> pyspark") for chain in chains), chains

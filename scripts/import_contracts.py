"""An import-linter contract type the built-in ones lack: an allowlist of external packages.

``allowed_imports``: the source modules, and every module of the project they reach (through imports, and through
the packages above each module, which Python runs first), import only the standard library and the listed
external packages. Imports inside functions count; ``if TYPE_CHECKING:`` blocks do not (``exclude_type_checking_
imports`` in the configuration). This is the rule for code that runs on Spark executors (``workers/**/remote.py``,
the codecs, the metric states): what they import is what an executor must have, and it never includes the web,
database or queue layers, nor pyspark itself (the function Spark ships reads ``BarrierTaskContext`` and passes
plain values in, so the trainer also runs without Spark). Registered in pyproject.toml (``[tool.importlinter]
contract_types``); ``lint-imports`` runs it.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Iterable

from grimp import ImportGraph
from importlinter import Contract, ContractCheck, fields, output
from importlinter.domain.helpers import module_expressions_to_modules


def offending(graph: ImportGraph, sources: Iterable[str], allowed: Iterable[str]) -> list[str]:
    """Every chain from a source module, through modules of the project, to an external package outside
    ``allowed`` (and the standard library), e.g. ``workers.inference.remote -> workers.data.sequences -> pyspark``."""
    permitted = set(allowed) | set(sys.stdlib_module_names)
    starts = sorted(sources)
    roots = {name.split(".")[0] for name in starts}
    came_from: dict[str, str | None] = dict.fromkeys(starts)
    queue = deque(starts)
    found: list[str] = []
    while queue:
        module = queue.popleft()
        parts = module.split(".")
        parents = {".".join(parts[:i]) for i in range(1, len(parts))}
        for target in sorted(set(graph.find_modules_directly_imported_by(module)) | parents):
            if target.split(".")[0] not in roots:
                if target.split(".")[0] not in permitted:
                    found.append(" -> ".join([*_chain(came_from, module), target]))
            elif target not in came_from:
                came_from[target] = module
                queue.append(target)
    return found


def _chain(came_from: dict[str, str | None], module: str) -> list[str]:
    chain = [module]
    while (step := came_from[chain[-1]]) is not None:
        chain.append(step)
    return list(reversed(chain))


class AllowedImportsContract(Contract):
    source_modules = fields.ListField(subfield=fields.ModuleExpressionField())
    allowed_external = fields.ListField(subfield=fields.StringField())

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        sources: set[str] = set()
        for module in module_expressions_to_modules(graph, self.source_modules):  # type: ignore[arg-type]
            sources |= {module.name, *graph.find_descendants(module.name)}  # a package: all of it
        broken = offending(graph, sources, self.allowed_external)  # type: ignore[arg-type]
        return ContractCheck(kept=not broken, metadata={"broken": broken})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for chain in check.metadata["broken"]:
            output.print_error(chain, bold=False)
            output.new_line()

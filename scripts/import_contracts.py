"""An import-linter contract type the built-in ones lack: an allowlist of external packages.

``allowed_imports``: the source modules, and every module of the project they import (transitively), import only
the standard library and the listed external packages. This is the rule for code that runs on Spark executors
(``workers/**/remote.py``, the codecs, the metric states): what they import is what an executor must have, and it
must never include the web, database or queue layers, nor pyspark itself (the trainer runs without Spark, rank and
peers passed in). Registered in pyproject.toml (``[tool.importlinter] contract_types``); ``lint-imports`` runs it.
"""

from __future__ import annotations

import sys
from collections import deque
from typing import Any

from grimp import ImportGraph
from importlinter import Contract, ContractCheck, fields, output
from importlinter.domain.helpers import module_expressions_to_modules


class AllowedImportsContract(Contract):
    source_modules = fields.ListField(subfield=fields.ModuleExpressionField())
    allowed_external = fields.ListField(subfield=fields.StringField())

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        allowed = set(self.allowed_external) | set(sys.stdlib_module_names) | {"__future__"}  # type: ignore[arg-type]
        sources: set[str] = set()
        for module in module_expressions_to_modules(graph, self.source_modules):  # type: ignore[arg-type]
            sources |= {module.name, *graph.find_descendants(module.name)}  # a package: all of it
        roots = {name.split(".")[0] for name in sources}
        parent: dict[str, str | None] = dict.fromkeys(sources)
        queue = deque(sorted(sources))
        broken: list[dict[str, Any]] = []
        while queue:
            module = queue.popleft()
            for imported in sorted(graph.find_modules_directly_imported_by(module)):
                top = imported.split(".")[0]
                if top in roots:
                    if imported not in parent:
                        parent[imported] = module
                        queue.append(imported)
                elif top not in allowed:
                    chain = [imported, module]
                    while parent[chain[-1]] is not None:
                        chain.append(parent[chain[-1]] or "")
                    broken.append({"package": top, "chain": list(reversed(chain))})
        return ContractCheck(kept=not broken, metadata={"broken": broken})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for item in check.metadata["broken"]:
            output.print_error(f"{item['package']} is not allowed: {' -> '.join(item['chain'])}", bold=False)
            output.new_line()

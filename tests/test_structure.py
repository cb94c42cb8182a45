"""The layout's rules that import-linter does not check (its contracts are in pyproject.toml, run by
``lint-imports`` in ``make test``): modules stay small, and the API process never loads torch or xgboost just by
importing its code (they load when a job or a model needs them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MAX_LINES = 450
SINGLE_FILES = {"workers/inference/standalone.py": 600}
"""Modules that must stay one file, with their own limit: the model archive's loader ships alone
(``sparktrain_model.py``), importing nothing of sparktrain."""


def test_every_module_of_the_service_is_small() -> None:
    long = {
        name: n
        for package in ("app", "workers")
        for path in sorted((REPO / package).rglob("*.py"))
        if (n := len(path.read_text().splitlines())) >= SINGLE_FILES.get(name := str(path.relative_to(REPO)), MAX_LINES)
    }
    assert long == {}, f"split these along their reasons to change (at most {MAX_LINES - 1} lines): {long}"


@pytest.mark.parametrize("package", ["app"])
def test_importing_the_driver_process_loads_neither_torch_nor_xgboost(package: str) -> None:
    code = (
        "import importlib, pkgutil, sys\n"
        f"import {package}\n"
        f"for m in pkgutil.walk_packages({package}.__path__, '{package}.'):\n"
        "    if '.migrations' not in m.name:\n"
        "        importlib.import_module(m.name)\n"
        "loaded = sorted({n.split('.')[0] for n in sys.modules} & {'torch', 'xgboost'})\n"
        "assert not loaded, loaded\n"
        "print(len([n for n in sys.modules if n.startswith('app')]))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], check=False, cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert int(run.stdout.split()[-1]) > 50  # it did import the modules

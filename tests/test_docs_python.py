"""docs/python.md runs as written: its Python blocks, in order, as one notebook would run them, in a fresh Python
against the real service (a Spark ML training job, predictions, the registry, downloads, a two-trial tune, a
refusal); and, without a service, they parse and read only names they define, and every ``api.`` method they call
is one the client has."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparktrain.client import Client
from tests.helpers import Service, running_service
from tests.test_docs import blocks, undefined_names

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs/python.md"


def _program() -> str:
    return "\n".join(blocks(PAGE, "python"))


def test_the_page_defines_what_it_uses_and_calls_only_what_the_client_has() -> None:
    source = _program()
    assert len(blocks(PAGE, "python")) >= 8 and not undefined_names(source), undefined_names(source)
    assert undefined_names(source + "\nprint(exc_)") == {"exc_"}
    called = {
        node.attr
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "api"
    }
    assert called and called <= set(dir(Client)), called - set(dir(Client))
    prose = PAGE.read_text()  # the methods the prose names as api.NAME( exist too
    named = {part.split("(")[0] for part in prose.split("api.")[1:] if "(" in part.split()[0]}
    assert named <= set(dir(Client)), named - set(dir(Client))


@pytest.fixture(scope="module")
def svc(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with running_service(spark, tmp_path_factory.mktemp("python-page")) as service:
        yield service


@pytest.mark.slow
def test_the_pages_blocks_run_in_order_against_the_service(svc: Service, tmp_path: Path) -> None:
    """In a folder of its own (its downloads go there) that has the repository's datasets, as a notebook next to
    a checkout has."""
    (tmp_path / "datasets").symlink_to(REPO / "datasets")
    env = {**os.environ, "SPARKTRAIN_URL": svc.url, "PYTHONPATH": str(REPO)}
    env.pop("SPARKTRAIN_API_KEY", None)
    run = subprocess.run([sys.executable, "-c", _program()], cwd=tmp_path, env=env, capture_output=True, text=True,
                         check=False, timeout=1500)  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    said = run.stdout
    assert "SUCCEEDED 100% done" in said and "validation_rmse" in said and "'champion': 1" in said, said[-4000:]
    assert said.count("COMPLETE") == 2 and "  dataset.features: " in said and "holds a DataFrame" in said, said
    assert "'key': 'validation_rmse'" in said.rstrip().splitlines()[-1], said[-2000:]  # the escape hatch's
    assert (tmp_path / "downloads/nb-fares-v1.tar.gz").is_file(), sorted(p.name for p in tmp_path.rglob("*"))

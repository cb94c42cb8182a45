"""``make run`` installs the service alone: a newcomer's first command does not wait for the test, benchmark and
lint tools of ``.[dev]`` (locust, schemathesis, moto, selenium, onnxruntime, ...); it installed them all before.
Where everything is installed already (``make install``, ``make test``), ``make run`` installs nothing."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make")


def _dry_run(target: str, venv: Path) -> str:
    done = subprocess.run(["make", "-n", "--no-print-directory", "-C", str(REPO), f"VENV={venv}", target],
                          capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    return done.stdout


def _sum() -> str:
    return subprocess.run("cksum < pyproject.toml | cut -d' ' -f1", shell=True, cwd=REPO, capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip


def test_make_run_installs_the_service_without_the_dev_tools(tmp_path: Path) -> None:
    plan = _dry_run("run", tmp_path / "venv")
    assert "pip install -q -e ." in plan
    assert "[dev]" not in plan
    assert plan.rstrip().endswith("-m app")


def test_make_run_installs_nothing_more_where_everything_is_installed(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / f".installed-{_sum()}").touch()
    # the service's install step itself, for real: with everything installed it makes no venv and runs no pip
    subprocess.run(["make", "--no-print-directory", "-C", str(REPO), f"VENV={venv}", f"{venv}/.service-{_sum()}"],
                   capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    assert (venv / f".service-{_sum()}").exists()
    assert not (venv / "bin").exists()


def test_make_install_still_installs_everything(tmp_path: Path) -> None:
    assert "pip install -q -e '.[dev]'" in _dry_run("install", tmp_path / "venv")

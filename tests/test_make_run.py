"""``make run`` makes the default data root, ``var/data/``, before it starts the service: the README tells a newcomer
to copy their own files there, and after ``make run`` it did not exist (only ``var/artifacts`` and the databases).
The service itself is replaced by a stand-in ``python`` (``BIN=``): what is checked is the Makefile's step."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _make_run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python").write_text('#!/bin/sh\necho "started: $*"\n')
    (fake / "python").chmod(0o755)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SPARKTRAIN_")} | env
    return subprocess.run(
        ["make", "--no-print-directory", "-o", "install", "run", f"BIN={fake}"],
        cwd=REPO, env=environment, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip


def test_make_run_makes_the_default_data_root(tmp_path: Path) -> None:
    var = tmp_path / "var"
    run = _make_run(tmp_path, SPARKTRAIN_VAR_DIR=str(var))
    assert run.returncode == 0, run.stderr
    assert "started: -m app" in run.stdout
    assert (var / "data").is_dir()


def test_other_data_roots_are_left_to_the_operator(tmp_path: Path) -> None:
    var = tmp_path / "var"
    run = _make_run(tmp_path, SPARKTRAIN_VAR_DIR=str(var), SPARKTRAIN_DATA_ROOTS=str(tmp_path / "mine"))
    assert run.returncode == 0, run.stderr
    assert not (var / "data").exists() and not (tmp_path / "mine").exists()

"""The CUDA images install the project's own pins, with CUDA torch and plain xgboost substituted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_cuda_requirements_follow_the_pins() -> None:
    out = subprocess.run(
        [sys.executable, str(REPO / "docker" / "cuda-requirements.py"), "--torch-local", "cu126",
         str(REPO / "pyproject.toml")],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert "torch==2.13.0+cu126" in out
    assert "xgboost==3.2.0" in out
    assert not [line for line in out if line.startswith("xgboost-cpu")]
    assert any(line.startswith("pyspark==4.3.0") for line in out)

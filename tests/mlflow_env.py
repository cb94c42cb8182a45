"""A virtual environment with MLflow and a model's requirements but without sparktrain, for the tests that load
exported models the way an MLflow user would (``.bench/mlflow-test-venv-<pins>``, git-ignored, made once and
reused; the pattern of ``bench.predict.ensure_mlflow``).

It pins what it installs: MLflow, and the versions of this environment's torch, numpy, pandas, safetensors,
xgboost and pyspark, which are the versions an exported model's ``requirements.txt`` names (torch comes from the
local wheel, as for the project itself). ``python -m tests.mlflow_env`` makes it ahead of the tests.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MLFLOW = "mlflow==3.17.2"


def _public(v: str) -> str:
    return v.split("+", 1)[0]


def pins() -> list[str]:
    """What the test environment installs: MLflow and the model requirements of this environment's versions."""
    return [
        MLFLOW,
        f"torch=={_public(version('torch'))}",
        f"numpy=={version('numpy')}",
        f"pandas=={version('pandas')}",
        f"safetensors=={version('safetensors')}",
        f"xgboost-cpu=={version('xgboost-cpu')}",  # the xgboost module without the CUDA libraries
        f"pyspark=={version('pyspark')}",
    ]


def venv_dir() -> Path:
    digest = hashlib.sha256("\n".join(pins()).encode()).hexdigest()[:10]
    return REPO / ".bench" / f"mlflow-test-venv-{digest}"


def ensure() -> Path:
    """The environment's directory (``bin/python``, ``bin/mlflow``), made on first use (a few minutes)."""
    target = venv_dir()
    python = target / "bin" / "python"
    if (target / ".complete").exists():
        return target
    print(f"creating {target.relative_to(REPO)} (MLflow and a model's requirements, once)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(target)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    subprocess.run([str(python), "-m", "pip", "install", "-q", *pins()], check=True, env=env)
    (target / ".complete").write_text("\n".join(pins()) + "\n")
    return target


def clean_env(venv: Path) -> dict[str, str]:
    """The environment variables for running the venv's programs: its bin first, nothing of sparktrain's."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    env["MLFLOW_TRACKING_URI"] = f"file://{venv / 'mlruns'}"
    return env


if __name__ == "__main__":
    print(ensure())

"""Every registered model directory is also an MLflow model directory: the ``MLmodel`` file and its companions,
written here without MLflow (sparktrain does not depend on it) in the format MLflow's own ``save_model`` writes.

* torch: the ``python_function`` flavor through ``loader_module: sparktrain_model`` (the standalone loader, in
  ``code/sparktrain_model.py``) over ``data: weights.safetensors`` (``spec.json`` lies next to it);
* xgboost: MLflow's own ``xgboost`` flavor over the JSON booster (``model.json``), and ``python_function`` through
  ``mlflow.xgboost``;
* spark_ml: MLflow's ``spark`` flavor over the saved pipeline (the directory itself), and ``python_function``
  through ``mlflow.spark``.

Each also gets ``signature`` (:mod:`workers.inference.signature`), ``input_example.json`` and
``serving_input_example.json`` (rows of the training data), and ``requirements.txt``, ``python_env.yaml`` and
``conda.yaml`` pinning the versions the model was trained with. Nothing is pickled.

Executor-side safe (stdlib only): rank 0 of a torch job writes these files next to the weights.
"""

from __future__ import annotations

import json
import os
import pkgutil
import platform
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from workers.inference.signature import signature_of

MLMODEL = "MLmodel"
INPUT_EXAMPLE = "input_example.json"
SERVING_EXAMPLE = "serving_input_example.json"
LOADER = "sparktrain_model"
FILES = (MLMODEL, "requirements.txt", "python_env.yaml", "conda.yaml", INPUT_EXAMPLE, SERVING_EXAMPLE)
_REQUIREMENTS = {
    "torch": ("torch", "numpy", "pandas", "safetensors"),
    "xgboost": ("xgboost", "numpy", "pandas", "scipy"),
    "spark_ml": ("pyspark", "numpy", "pandas"),
}
MLFLOW_VERSION = "3.17.2"
"""The MLflow release whose ``save_model`` format these files follow (``MLmodel``'s ``mlflow_version``, which MLflow
writes and tools read): the release the tests load them with (tests/mlflow_env.py pins it; a test holds the two
equal)."""
_DISTRIBUTIONS = {"xgboost": ("xgboost", "xgboost-cpu")}
"""A module whose distribution has other names (the CPU-only xgboost wheel installs the same module)."""


def _version(package: str) -> str | None:
    for dist in _DISTRIBUTIONS.get(package, (package,)):
        try:
            return version(dist).split("+", 1)[0]  # a local label (2.13.0+cpu) is the wheel's build, not the release
        except PackageNotFoundError:
            continue
    return None


def requirements(framework: str) -> list[str]:
    """``package==version`` for what loading and serving the model needs, as installed here (the training run's)."""
    pinned = [f"{p}=={v}" for p in _REQUIREMENTS[framework] if (v := _version(p))]
    return ["mlflow", *pinned]


def _yaml(value: Any, indent: int = 0) -> str:
    """Block-style YAML for nested dicts, lists and scalars (strings quoted as JSON, which YAML reads)."""
    pad = " " * indent
    if isinstance(value, Mapping):
        if not value:
            return "{}\n"
        lines = []
        for key, item in value.items():
            if isinstance(item, Mapping | list) and item:
                lines.append(f"{pad}{key}:\n{_yaml(item, indent + 2)}")
            else:
                lines.append(f"{pad}{key}: {_scalar(item)}\n")
        return "".join(lines)
    if isinstance(value, list):
        lines = []
        for item in value:
            if isinstance(item, Mapping | list) and item:
                text = _yaml(item, indent + 2)
                lines.append(f"{pad}- {text.lstrip()}")
            else:
                lines.append(f"{pad}- {_scalar(item)}\n")
        return "".join(lines)
    return f"{pad}{_scalar(value)}\n"


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    if isinstance(value, Mapping | list):
        return json.dumps(value)
    return json.dumps(str(value))


def _example(card: Mapping[str, Any], rows: list[Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(input_example.json, serving_input_example.json, MLmodel's saved_input_example_info) for example rows:
    dicts by column for column signatures, nested lists (sequences of steps) for a tensor signature."""
    if card.get("sequence"):
        example = {"inputs": rows}
        info = {"artifact_path": INPUT_EXAMPLE, "serving_input_path": SERVING_EXAMPLE, "type": "ndarray",
                "format": "tf-serving"}  # fmt: skip
        return example, {"inputs": rows}, info
    features = [str(f) for f in card.get("features") or []]
    if card.get("categorical"):  # MLflow's flavors take the one-hot columns: the example rows encoded
        from workers.data.categories import Categories

        x, _problems = Categories.from_dict(card["categorical"]).encode(rows)
        rows = [dict(zip(features, map(float, values), strict=True)) for values in x]
    split = {"columns": features, "data": [[row.get(f) for f in features] for row in rows]}
    info = {"artifact_path": INPUT_EXAMPLE, "serving_input_path": SERVING_EXAMPLE, "type": "dataframe",
            "pandas_orient": "split"}  # fmt: skip
    return split, {"dataframe_split": split}, info


def flavors(framework: str, card: Mapping[str, Any], python: str) -> dict[str, Any]:
    env = {"conda": "conda.yaml", "virtualenv": "python_env.yaml"}
    if framework == "torch":
        pyfunc = {"loader_module": LOADER, "code": "code", "data": "weights.safetensors", "env": env,
                  "python_version": python}  # fmt: skip
        return {"python_function": pyfunc}
    if framework == "xgboost":
        xgb = {"code": None, "data": "model.json", "model_class": "xgboost.core.Booster", "model_format": "json",
               "xgb_version": _version("xgboost")}  # fmt: skip
        pyfunc = {"loader_module": "mlflow.xgboost", "data": "model.json", "env": env, "python_version": python}
        return {"python_function": pyfunc, "xgboost": xgb}
    if framework == "spark_ml":
        spark = {"code": None, "model_data": ".", "pyspark_version": _version("pyspark")}
        pyfunc = {"loader_module": "mlflow.spark", "data": ".", "env": env, "python_version": python}
        return {"python_function": pyfunc, "spark": spark}
    raise ValueError(f"no MLflow flavor for {framework!r} models")


def mlflow_files(
    framework: str, card: Mapping[str, Any], examples: list[Any] | None = None, *, recorded_requirements: bool = True
) -> dict[str, bytes]:
    """The MLflow files of a model directory (relative path -> content), ``code/`` included for torch. The
    example rows are the card's (``card["input_example"]``) unless given. The requirements are this process's
    versions: the training run's when written at training time, else ``recorded_requirements=False`` says so in
    ``MLmodel``."""
    python = platform.python_version()
    signature = signature_of(card, framework)
    rows = examples if examples is not None else list(card.get("input_example") or [])
    mlmodel: dict[str, Any] = {
        "artifact_path": None,
        "flavors": flavors(framework, card, python),
        "mlflow_version": MLFLOW_VERSION,
        "model_uuid": uuid.uuid4().hex,
        "utc_time_created": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f"),
        "signature": {
            "inputs": json.dumps(signature["inputs"]),
            "outputs": json.dumps(signature["outputs"]),
            "params": None,
        },
        "metadata": {
            "sparktrain": {
                "framework": framework,
                "signature_recorded": bool(signature.get("recorded")),
                "requirements_recorded": recorded_requirements,
            }
        },
    }
    files: dict[str, bytes] = {}
    if rows:
        example, serving, info = _example(card, rows)
        mlmodel["saved_input_example_info"] = info
        files[INPUT_EXAMPLE] = json.dumps(example).encode()
        files[SERVING_EXAMPLE] = json.dumps(serving, indent=2).encode()
    pins = requirements(framework)
    files[MLMODEL] = _yaml(mlmodel).encode()
    files["requirements.txt"] = ("\n".join(pins) + "\n").encode()
    build = ["pip", "setuptools", "wheel"]
    files["python_env.yaml"] = _yaml(
        {"python": python, "build_dependencies": build, "dependencies": ["-r requirements.txt"]}
    ).encode()
    files["conda.yaml"] = _yaml(
        {"channels": ["conda-forge"], "dependencies": [f"python={python}", "pip", {"pip": pins}], "name": "mlflow-env"}
    ).encode()
    if framework == "torch":
        source = pkgutil.get_data("workers.inference", "standalone.py")
        assert source is not None
        files[f"code/{LOADER}.py"] = source
    return files


def write_mlflow_files(directory: Path, framework: str, card: Mapping[str, Any],
                       examples: list[Any] | None = None) -> None:  # fmt: skip
    """Write the MLflow files into a model directory (each under a temporary name, then renamed)."""
    for name, content in mlflow_files(framework, card, examples).items():
        target = directory / name
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_bytes(content)
        os.replace(tmp, target)

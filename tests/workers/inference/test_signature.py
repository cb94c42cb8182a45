"""Signatures (``workers.inference.signature``) and the MLflow files written without MLflow
(``workers.inference.mlflow_format``): what they record, what they refuse, and that the YAML reads back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from workers.errors import SpecError
from workers.inference import mlflow_format, signature

CARD: dict[str, Any] = {
    "features": ["passengers", "distance", "flag"],
    "labels": ["fare"],
    "task": "regression",
    "array_column": False,
}
TYPES = {"passengers": "int", "distance": "float", "flag": "boolean"}


def test_a_recorded_signature_widens_numbers_as_mlflow_needs() -> None:
    sig = signature.build_signature(CARD, TYPES)
    assert sig["recorded"] is True
    assert [(c["name"], c["type"]) for c in sig["inputs"]] == [("passengers", "long"), ("distance", "double"),
                                                                ("flag", "boolean")]  # fmt: skip
    assert sig["outputs"] == [{"name": "prediction", "type": "double", "required": True}]
    assert signature.integer_columns(sig) == [0]
    derived = signature.signature_of(CARD)
    assert derived["recorded"] is False and {c["type"] for c in derived["inputs"]} == {"double"}
    assert signature.signature_of({**CARD, "signature": sig}) == sig


def test_arrays_sequences_and_outputs_per_family() -> None:
    cnn = {"features": ["pixels"], "array_column": True, "task": "classification", "class_labels": None}
    sig = signature.build_signature(cnn, {"pixels": "array<float>"})
    assert sig["inputs"] == [{"name": "pixels", "type": "array", "items": {"type": "double"}, "required": True}]
    assert [o["name"] for o in sig["outputs"]] == ["prediction", "class_index", "probabilities"]
    assert sig["outputs"][0]["type"] == "long"
    named = signature.build_signature({**cnn, "class_labels": ["cat", "dog"]}, {"pixels": "array<float>"})
    assert named["outputs"][0]["type"] == "string"
    seq = {"features": ["a", "b"], "input_shape": [7, 2], "task": "regression", "labels": ["y"],
           "sequence": {"labels": "per_step"}}  # fmt: skip
    tensor = signature.build_signature(seq, {"a": "double", "b": "double"})
    assert tensor["inputs"] == [{"type": "tensor", "tensor-spec": {"dtype": "float32", "shape": [-1, -1, 2]}}]
    assert tensor["outputs"][0]["type"] == "array"  # one value per step
    assert signature.build_signature({**cnn, "num_classes": 3}, None, "xgboost")["outputs"][0]["type"] == "tensor"
    assert signature.build_signature(CARD, TYPES, "spark_ml")["outputs"] == [{"type": "double", "required": True}]


def test_checks_name_the_column_and_what_the_model_expects() -> None:
    sig = signature.build_signature(CARD, TYPES)
    with pytest.raises(SpecError, match=r"'distance' takes numbers: \"far\" is not a number; .* distance: double"):
        signature.check_values([1, "far", True], signature.columns(sig), "rows[2]")
    with pytest.raises(SpecError, match=r"'passengers' takes whole numbers: 1\.5 is not a whole number"):
        signature.check_values([1.5, 2.0, False], signature.columns(sig), "rows[0]")
    signature.check_values([2.0, 3, None], signature.columns(sig), "rows[0]")  # a null is a bad value, not a type
    assert signature.dataset_problem({"passengers": "bigint", "distance": "double", "flag": "boolean"}, sig) is None
    assert signature.dataset_problem({"passengers": "int", "distance": "string", "flag": "boolean"}, sig) == (
        "distance",
        "column 'distance' is string; the model expects distance: double",
    )
    assert "no column 'flag'" in str(signature.dataset_problem({"passengers": "int", "distance": "float"}, sig))


@pytest.mark.parametrize("framework", ["torch", "xgboost", "spark_ml"])
def test_mlflow_files_read_back_as_mlflow_writes_them(framework: str, tmp_path: Path) -> None:
    card = {**CARD, "signature": signature.build_signature(CARD, TYPES, framework),
            "input_example": [{"passengers": 1, "distance": 2.5, "flag": True}]}  # fmt: skip
    mlflow_format.write_mlflow_files(tmp_path, framework, card)
    mlmodel = yaml.safe_load((tmp_path / "MLmodel").read_text())
    pyfunc = mlmodel["flavors"]["python_function"]
    assert pyfunc["env"] == {"conda": "conda.yaml", "virtualenv": "python_env.yaml"}
    assert json.loads(mlmodel["signature"]["inputs"]) == [
        {k: v for k, v in c.items()} for c in card["signature"]["inputs"]
    ]
    assert mlmodel["saved_input_example_info"]["type"] == "dataframe"
    assert json.loads((tmp_path / "input_example.json").read_text()) == {
        "columns": CARD["features"], "data": [[1, 2.5, True]]}  # fmt: skip
    assert json.loads((tmp_path / "serving_input_example.json").read_text())["dataframe_split"]["data"] == [
        [1, 2.5, True]
    ]
    requirements = (tmp_path / "requirements.txt").read_text().split()
    conda = yaml.safe_load((tmp_path / "conda.yaml").read_text())
    assert conda["dependencies"][-1] == {"pip": requirements}
    assert yaml.safe_load((tmp_path / "python_env.yaml").read_text())["dependencies"] == ["-r requirements.txt"]
    if framework == "torch":
        assert pyfunc["loader_module"] == "sparktrain_model" and pyfunc["data"] == "weights.safetensors"
        assert (
            (tmp_path / "code" / "sparktrain_model.py").read_text().startswith('"""Run a model trained by sparktrain')
        )
        assert "torch==2.13.0" in requirements
    elif framework == "xgboost":
        assert mlmodel["flavors"]["xgboost"]["data"] == "model.json"
        assert mlmodel["flavors"]["xgboost"]["model_format"] == "json"
        assert any(r.startswith("xgboost==") for r in requirements)
    else:
        assert mlmodel["flavors"]["spark"]["model_data"] == "." and "pyspark==4.3.0" in requirements
    assert not list(tmp_path.rglob("*.tmp")) and not list(tmp_path.rglob("*.pkl"))

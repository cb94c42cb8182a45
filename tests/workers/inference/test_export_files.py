"""What an exported model directory carries besides the model (workers/inference/examples.py and mlflow_format.py):
the input example of a model with a boolean feature, read on a real SparkSession, and ``MLmodel``'s
``mlflow_version``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from tests import mlflow_env
from workers.data.spec import ResolvedDataset
from workers.inference import mlflow_format, signature
from workers.inference.examples import example_rows


def test_a_model_with_a_boolean_feature_ships_its_input_example(spark: Any, tmp_path: Path) -> None:
    """A boolean is not a finite number to ``is_finite_number``: every row was dropped, and the MLflow download had
    no input_example.json, so the documented ``pd.read_json(... input_example.json ...)`` failed."""
    frame = pd.DataFrame({"trip_distance": [2.1, None, 9.5, 3.0], "weekend": [True, False, False, True],
                          "fare_amount": [9.0, 5.0, 30.0, 11.0]})  # fmt: skip
    frame.to_parquet(tmp_path / "taxi.parquet")
    ds = ResolvedDataset(path=str(tmp_path / "taxi.parquet"), format="parquet", features=("trip_distance", "weekend"),
                         label="fare_amount", task="regression")  # fmt: skip
    rows = example_rows(spark, ds)
    assert rows == [{"trip_distance": 2.1, "weekend": True}, {"trip_distance": 9.5, "weekend": False}]  # no null
    card = {"features": list(ds.features), "labels": ["fare_amount"], "task": "regression"}
    card["signature"] = signature.build_signature(card, {"trip_distance": "double", "weekend": "boolean"})
    files = mlflow_format.mlflow_files("torch", card, rows)
    assert json.loads(files[mlflow_format.INPUT_EXAMPLE]) == {"columns": ["trip_distance", "weekend"],
                                                              "data": [[2.1, True], [9.5, False]]}  # fmt: skip
    serving = json.loads(files[mlflow_format.SERVING_EXAMPLE])
    assert serving["dataframe_split"]["data"] == [[2.1, True], [9.5, False]]


def test_mlmodel_names_the_mlflow_release_its_format_follows() -> None:
    """MLflow writes ``mlflow_version`` into every MLmodel, and tools read it; the files here had none. It is the
    release the tests load the files with, so the two cannot drift apart."""
    card = {"features": ["x"], "labels": ["y"], "task": "regression"}
    for framework in ("torch", "xgboost", "spark_ml"):
        mlmodel = yaml.safe_load(mlflow_format.mlflow_files(framework, card)[mlflow_format.MLMODEL])
        assert mlmodel["mlflow_version"] == mlflow_format.MLFLOW_VERSION, framework
    assert f"mlflow=={mlflow_format.MLFLOW_VERSION}" == mlflow_env.MLFLOW

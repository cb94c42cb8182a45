"""A Spark ML model's evaluation on the executors (workers/evaluation/remote.py ``spark_ml_states``), without Spark:
the Arrow batches a task sees after the pipeline's transform, in, the metric states and counts, out."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from workers.evaluation.metrics import merge_states, results
from workers.evaluation.remote import spark_ml_states
from workers.inference.spec import ModelRef

CARD = {"features": ["x"], "labels": ["size"], "task": "classification", "num_classes": 2,
        "class_labels": ["cheap", "expensive"]}  # fmt: skip
OPTIONS = {"groups": ["classification"], "task": "classification", "num_classes": 2, "label_columns": ["size"],
           "roc_steps": 0, "exact_auc": False, "top_k": []}  # fmt: skip


def _evaluated(labels: list[str], probabilities: list[list[float]]) -> tuple[dict[str, Any], int, int]:
    batch = pa.RecordBatch.from_pydict({"size": labels, "_probability": probabilities,
                                        "prediction": [float(p[1] > 0.5) for p in probabilities]})  # fmt: skip
    model = ModelRef(framework="spark_ml", uri="file:///unused", card=CARD)
    (row,) = list(spark_ml_states(model, OPTIONS)(iter([batch])))
    states = json.loads(row.column("states")[0].as_py())
    return dict(results(merge_states([states]))), row.column("rows")[0].as_py(), row.column("bad")[0].as_py()


def test_a_class_the_model_does_not_know_is_a_bad_row_not_class_0() -> None:
    labels = ["cheap", "expensive", "luxury", "luxury", "expensive"]
    probabilities = [[0.9, 0.1], [0.2, 0.8], [0.9, 0.1], [0.9, 0.1], [0.3, 0.7]]
    result, rows, bad = _evaluated(labels, probabilities)
    assert (rows, bad) == (5, 2)
    scored = result["classification"]
    assert (scored["count"], scored["accuracy"]) == (3, 1.0), scored  # "luxury" scored as cheap made 5 and 1.0
    known, _, _ = _evaluated([labels[i] for i in (0, 1, 4)], [probabilities[i] for i in (0, 1, 4)])
    assert known == result


def test_the_class_is_the_models_prediction_not_the_largest_probability() -> None:
    """A binary logistic regression trained with threshold 0.3 predicts class 1 from P(1) > 0.3: /evaluate scored
    the argmax of the probabilities instead, unlike /predict and the training result (walkthrough)."""
    labels = ["cheap", "expensive", "expensive", "expensive"]
    probabilities = [[0.9, 0.1], [0.6, 0.4], [0.2, 0.8], [0.65, 0.35]]
    batch = pa.RecordBatch.from_pydict({"size": labels, "_probability": probabilities,
                                        "prediction": [float(p[1] > 0.3) for p in probabilities]})  # fmt: skip
    model = ModelRef(framework="spark_ml", uri="file:///unused", card=CARD)
    options = {**OPTIONS, "groups": ["classification", "roc"], "roc_steps": 100, "exact_auc": True}
    (row,) = list(spark_ml_states(model, options)(iter([batch])))
    result = dict(results(merge_states([json.loads(row.column("states")[0].as_py())])))
    scored = result["classification"]
    assert scored["accuracy"] == 1.0, scored  # the argmax of the probabilities: 0.5
    assert scored["confusion_matrix"] == [[1, 0], [0, 3]], scored
    assert result["roc"]["auc"] == 1.0, "ROC still ranks by the probabilities"

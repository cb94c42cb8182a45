"""What a Spark ML walkthrough found, through the real service: /evaluate scores a logistic regression's own
decision (its threshold), a request's problems come in one 422, and what Spark would ignore is said."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.helpers import TAXI_FEATURES, Service, problem, running_service, taxi_request

REPO = Path(__file__).resolve().parents[2]
FEATURES = [f for f in TAXI_FEATURES if f not in ("rate_code", "trip_distance", "h_distance")]


@pytest.fixture(scope="module")
def svc(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    data = tmp_path_factory.mktemp("data")
    for part in ("train", "eval"):
        taxi = pd.read_parquet(REPO / "datasets" / "taxi" / f"{part}.parquet")
        taxi = taxi.assign(long_trip=(taxi["trip_distance"] > 3).astype("int32"),
                           rate=(taxi["rate_code"].map({1: 0, 2: 1, 3: 2, 5: 2})).astype("int32"))  # fmt: skip
        taxi.to_parquet(data / f"taxi-{part}.parquet")
    with running_service(spark, tmp_path_factory.mktemp("svc"), data_roots=[data, REPO / "datasets"]) as service:
        yield service


def _classifier(name: str, label: str, params: dict[str, Any], **dataset: Any) -> dict[str, Any]:
    body = taxi_request(name, **params)
    body["dataset"] = {**body["dataset"], "uri": "taxi-train.parquet", "features": FEATURES, "label": label,
                       "task": "classification", **dataset}  # fmt: skip
    body["validation"] = {"uri": "taxi-eval.parquet"}
    return body


def test_evaluate_scores_a_logistic_regressions_threshold(svc: Service) -> None:
    """Trained with threshold 0.3, /evaluate scored the argmax of the probabilities (0.944) while the training
    result and /predict used the model's prediction (0.97)."""
    params = {"algorithm": "logistic_regression", "threshold": 0.2}
    job = svc.done("/train", _classifier("lr-threshold", "long_trip", params))
    name = job["model"]["name"]
    evaluated = svc.done("/evaluate", {"model": {"name": name}, "dataset": {"uri": "taxi-eval.parquet"},
                                       "metrics": ["classification", "roc"]})  # fmt: skip
    scored = evaluated["result"]["classification"]
    assert scored["accuracy"] == pytest.approx(job["result"]["validation"]["accuracy"], abs=1e-9), (scored, job)
    rows = pd.read_parquet(Path(svc.runtime.settings.data_roots[0]) / "taxi-eval.parquet")
    online = svc.client.post("/predict", json={"model": {"name": name},
                                               "dataframe_records": rows[FEATURES].to_dict("records")})  # fmt: skip
    assert online.status_code == 200, online.text
    predicted = [float(p) for p in online.json()["predictions"]]
    assert scored["accuracy"] == pytest.approx(float((pd.Series(predicted) == rows["long_trip"]).mean()), abs=1e-9)


def test_every_problem_of_a_request_is_in_one_422(svc: Service) -> None:
    params = {"algorithm": "random_forest", "numTrees": 0, "maxDepth": 31, "maxBins": 1, "foo": 1,
              "subsamplingRate": 0}  # fmt: skip
    body = problem(svc.client.post("/train", json=taxi_request("all-at-once", **params)), 422)
    assert [e["loc"] for e in body["errors"]] == ["params.numTrees", "params.maxDepth", "params.maxBins",
                                                  "params.foo", "params.subsamplingRate"], body  # fmt: skip


def test_what_spark_would_ignore_is_said_or_refused(svc: Service) -> None:
    multiclass = _classifier("lr-3", "rate", {"algorithm": "logistic_regression", "threshold": 0.3,
                                              "validation_fraction": 0.3})  # fmt: skip
    queued = svc.client.post("/train", json=multiclass)
    assert queued.status_code == 202, queued.text
    warnings = queued.json()["warnings"]
    assert any(w.startswith("params.threshold 0.3 is not used: threshold applies to a binary") for w in warnings)
    assert "params.validation_fraction is not used: validation names the validation data" in warnings, warnings
    svc.wait(queued.json()["id"], {"SUCCEEDED", "FAILED"})

    counted = _classifier("rf-5", "rate", {"algorithm": "random_forest"}, num_classes=5)
    refused = problem(svc.client.post("/train", json=counted), 422)
    assert refused["errors"][0]["loc"] == "dataset.num_classes" and "3 classes, not 5" in refused["detail"], refused

    fares = _classifier("rf-fares", "fare_amount", {"algorithm": "random_forest"})
    refused = problem(svc.client.post("/train", json=fares), 422)
    assert refused["errors"][0]["loc"] == "dataset.label" and "holds fractions" in refused["detail"], refused

    resumed = {**taxi_request("resumed"), "training": {"resume_from": "0" * 32}}
    refused = problem(svc.client.post("/train", json=resumed), 422)
    assert refused["errors"][0]["loc"] == "training.resume_from", refused
    assert "a new spark_ml job cannot continue from a checkpoint" in refused["detail"], refused

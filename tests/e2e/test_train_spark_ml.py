"""Training through the real service: HTTP, Celery, the database and a real SparkSession, on the embedded
set-up (SQLite + SQLite broker) and the production one (PostgreSQL + Redis)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
import pandas as pd
import pytest

from tests.helpers import TAXI_FEATURES, Service, problem, taxi_request

REPO = Path(__file__).resolve().parents[2]
RATE_NAMES = {1: "standard", 2: "jfk", 3: "newark", 5: "negotiated"}


@pytest.fixture
def service(make_service: Callable[..., Any]) -> Iterator[Service]:
    """One service per test here: tests below also start their own, and a process runs one job consumer."""
    with make_service() as svc:
        yield svc


SMALL_GRID = {"algorithm": "random_forest", "numTrees": 10, "grid": {"maxDepth": [4, 8]}, "num_folds": 2}


@pytest.fixture(params=["embedded", "production"])
def svc(request: pytest.FixtureRequest, make_service: Callable[..., Any]) -> Iterator[Service]:
    overrides: dict[str, Any] = {}
    if request.param == "production":
        overrides = {
            "database_url": request.getfixturevalue("pg_url"),
            "broker_url": request.getfixturevalue("redis_url"),
        }
    with make_service(**overrides) as service:
        yield service


def test_random_forest_end_to_end(svc: Service) -> None:
    job = svc.train(taxi_request("taxi-rf", **SMALL_GRID))
    assert job["status"] == "QUEUED"
    seen_progress: set[float] = set()
    deadline = time.monotonic() + 240
    while job["status"] not in ("SUCCEEDED", "FAILED"):
        assert time.monotonic() < deadline, job
        time.sleep(0.2)
        job = svc.client.get(f"/jobs/{job['id']}").json()
        seen_progress.add(job["progress"])
    assert job["status"] == "SUCCEEDED", job["error"]
    assert any(0 < p < 1 for p in seen_progress), "progress is written while the job runs"
    result = job["result"]
    assert result["validation"]["rmse"] < 4.0  # the fares' own spread is ~15
    assert set(result["validation"]) >= {"rmse", "mae", "r2"}
    assert result["best_params"]["maxDepth"] in (4, 8)
    assert len(result["cross_validation"]["grid"]) == 2
    assert job["model"] == {"name": "taxi-rf", "version": 1}
    assert job["started_at"] and job["finished_at"] and job["worker_id"]

    metrics = svc.client.get(f"/jobs/{job['id']}/metrics").json()["metrics"]
    assert [m["step"] for m in metrics if m["key"] == "cv_rmse"] == [1, 2, 3, 4]
    assert any(m["key"] == "validation_rmse" for m in metrics)
    # after the 2 x 2 cross-validation fits (not mid-curve at step 2): the model fitted on all rows is the fifth
    assert {m["step"] for m in metrics if m["key"].startswith("validation_")} == {5}
    assert (
        svc.client.get(f"/jobs/{job['id']}/metrics", params={"key": "cv_rmse", "since_step": 2}).json()["metrics"][0][
            "step"
        ]
        == 3
    )
    logs = svc.client.get(f"/jobs/{job['id']}/logs").json()["lines"]
    assert any("cross-validating 2 parameter combinations" in line["message"] for line in logs)

    version = svc.client.get("/models/taxi-rf/versions/1").json()
    assert version["framework"] == "spark_ml" and version["job_id"] == job["id"]
    assert version["metrics"]["rmse"] == result["validation"]["rmse"]
    assert Path(urlparse(version["artifact_uri"]).path, "metadata").exists()

    # A second job runs on the same long-lived Spark application.
    second = svc.wait(svc.train(taxi_request("taxi-rf"))["id"], {"SUCCEEDED", "FAILED"})
    assert second["status"] == "SUCCEEDED", second["error"]
    assert second["model"] == {"name": "taxi-rf", "version": 2}
    app_id = svc.client.get("/cluster").json()["app_id"]
    assert job["spark_app_id"] == second["spark_app_id"] == app_id
    listed = svc.client.get("/models").json()["items"]
    assert [(m["name"], m["latest_version"]) for m in listed] == [("taxi-rf", 2)]


def test_duplicate_delivery_runs_once(svc: Service) -> None:
    job = svc.train(taxi_request("dup", **SMALL_GRID))
    svc.runtime.enqueue("train.spark_ml", job["id"])  # the broker delivers the same job a second time
    done = svc.wait(job["id"], {"SUCCEEDED", "FAILED"})
    assert done["status"] == "SUCCEEDED", done["error"]
    deadline = time.monotonic() + 60
    while True:
        lines = svc.client.get(f"/jobs/{job['id']}/logs").json()["lines"]
        if any("ignored" in line["message"] for line in lines):
            break
        assert time.monotonic() < deadline, "the second delivery was never seen"
        time.sleep(0.2)
    assert sum("attempt 1 started" in line["message"] for line in lines) == 1
    metrics = svc.client.get(f"/jobs/{job['id']}/metrics", params={"key": "cv_rmse"}).json()["metrics"]
    assert len(metrics) == 4
    versions = svc.client.get("/models").json()["items"][0]["versions"]
    assert [v["job_id"] for v in versions] == [job["id"]]


def test_cancel_running_job(service: Service) -> None:
    body = taxi_request(
        "slow", algorithm="random_forest", grid={"numTrees": [150, 200], "maxDepth": [12, 14]}, num_folds=3
    )
    job = service.train(body)
    sc = service.runtime.spark.sparkContext
    deadline = time.monotonic() + 120
    while True:  # cancel in the middle of the cross-validation, while a Spark job of this job runs
        assert time.monotonic() < deadline, "the cross-validation never started"
        logs = service.client.get(f"/jobs/{job['id']}/logs").json()["lines"]
        active = set(sc.statusTracker().getActiveJobsIds()) & set(sc.statusTracker().getJobIdsForGroup(job["id"]))
        if active and any("cross-validating" in line["message"] for line in logs):
            break
        time.sleep(0.1)
    response = service.client.post(f"/jobs/{job['id']}/cancel")
    assert response.status_code == 202
    assert response.json()["status"] in ("CANCELLING", "CANCELLED")
    t0 = time.monotonic()
    done = service.wait(job["id"], {"CANCELLED", "SUCCEEDED", "FAILED"}, timeout=60)
    assert done["status"] == "CANCELLED", done
    assert time.monotonic() - t0 < 30
    assert done["error"]["reason"] == "CANCELLED"
    tracker = sc.statusTracker()
    spark_jobs = [tracker.getJobInfo(j) for j in tracker.getJobIdsForGroup(job["id"])]
    assert spark_jobs and all(info is None or info.status != "RUNNING" for info in spark_jobs)
    assert any(info is not None and info.status == "FAILED" for info in spark_jobs), "a Spark job was cancelled"
    assert service.client.post(f"/jobs/{job['id']}/cancel").status_code == 202  # repeat is harmless
    assert service.runtime.jobs.running.ids() == []


def test_cancel_finished_job_is_409(service: Service) -> None:
    job = service.wait(service.train(taxi_request("quick"))["id"], {"SUCCEEDED"})
    response = service.client.post(f"/jobs/{job['id']}/cancel")
    assert response.status_code == 409
    assert response.headers["content-type"].startswith("application/problem+json")


def test_cancel_queued_job(make_service: Callable[..., Any]) -> None:
    with make_service(in_process_consumer=False) as svc:
        job = svc.train(taxi_request("never"))
        assert svc.client.get("/readyz").json()["checks"].get("consumer") is None
        cancelled = svc.client.post(f"/jobs/{job['id']}/cancel").json()
        assert cancelled["status"] == "CANCELLED"
        assert cancelled["error"]["reason"] == "CANCELLED"


def test_idempotency_key(service: Service) -> None:
    body = taxi_request("idem")
    first = service.train(body, headers={"Idempotency-Key": "abc"})
    again = service.train(body, headers={"Idempotency-Key": "abc"})
    assert again["id"] == first["id"]
    other = service.client.post("/train", json=taxi_request("idem-2"), headers={"Idempotency-Key": "abc"})
    assert other.status_code == 409
    service.wait(first["id"], {"SUCCEEDED"})


def test_string_class_labels_are_sorted_as_every_familys(make_service: Callable[..., Any], tmp_path: Path) -> None:
    """Spark ML indexes string labels in sorted order, as xgboost does for the same data (its e2e test): by frequency
    (StringIndexer's default) "standard", the most common rate, was class 0. The classes are read from every row of
    the training data, so a held-out share does not lose a rare one either."""
    data = tmp_path / "data"
    data.mkdir()
    taxi = pd.read_parquet(REPO / "datasets" / "taxi" / "train.parquet")
    taxi.assign(rate_name=taxi["rate_code"].map(RATE_NAMES)).to_parquet(data / "rates.parquet")
    features = [f for f in TAXI_FEATURES if f != "rate_code"]
    body = {"name": "rate-rf", "framework": "spark_ml",
            "dataset": {"uri": "rates.parquet", "features": features, "label": "rate_name", "task": "classification"},
            "params": {"algorithm": "random_forest", "numTrees": 20, "maxDepth": 8}}  # fmt: skip
    with make_service(data_roots=[data]) as svc:
        job = svc.done("/train", body)
        assert job["result"]["validation"]["accuracy"] > 0.95
        version = svc.client.get("/models/rate-rf/versions/1").json()
        assert version["params"]["class_labels"] == ["jfk", "negotiated", "newark", "standard"]
        # the rare rates: none is "standard", and a name off the index's order would get few of them right (the
        # forest gets about 70%)
        rows = taxi[taxi["rate_code"] != 1].head(40)
        answer = svc.client.post("/predict", json={"model": {"name": "rate-rf"},
                                                   "dataframe_records": rows[features].to_dict("records")})  # fmt: skip
        assert answer.status_code == 200, answer.text
        named = [RATE_NAMES[c] for c in rows["rate_code"]]
        assert np.mean([a == b for a, b in zip(answer.json()["predictions"], named, strict=True)]) > 0.5
        # num_classes given with text labels: the job checked the labels as numbers 0..3 and failed casting 'jfk'
        # (SPARK_ERROR CAST_INVALID_INPUT; MLflow walkthrough)
        counted = {**body, "name": "rate-rf-4", "params": {"algorithm": "random_forest", "numTrees": 5},
                   "dataset": {**body["dataset"], "num_classes": 4}}  # fmt: skip
        assert svc.done("/train", counted)["status"] == "SUCCEEDED"
        # a binomial logistic regression of these 4 classes: a 422 at once (planning counts the classes for it)
        binomial = {**body, "name": "rate-lr", "params": {"algorithm": "logistic_regression", "family": "binomial"}}
        refused = problem(svc.client.post("/train", json=binomial), 422)
        assert refused["errors"][0]["loc"] == "params.family" and "4" in refused["detail"], refused


def test_values_spark_would_fail_on_are_422s(service: Service) -> None:
    """Each passed validation and then failed the job inside Spark (IllegalArgumentException)."""
    before = service.client.get("/jobs").json()["items"]
    for params, where in [
        ({"algorithm": "random_forest", "featureSubsetStrategy": "0"}, "params.featureSubsetStrategy"),
        ({"algorithm": "random_forest", "featureSubsetStrategy": "nan"}, "params.featureSubsetStrategy"),
        ({"algorithm": "random_forest", "grid": {"featureSubsetStrategy": ["sqrt", "2.5"]}},
         "params.grid.featureSubsetStrategy"),
        ({"algorithm": "linear_regression", "loss": "huber", "elasticNetParam": 0.5}, "params.elasticNetParam"),
    ]:  # fmt: skip
        body = problem(service.client.post("/train", json=taxi_request("refused", **params)), 422)
        assert body["errors"][0]["loc"] == where, body
    assert service.client.get("/jobs").json()["items"] == before


def test_num_folds_without_a_grid_warns(service: Service) -> None:
    job = service.done("/train", taxi_request("one-point", algorithm="linear_regression", num_folds=2))
    assert "num_folds without a grid: cross-validates the one configuration (2 fits) and trains it once more on all " \
        "rows" in job["warnings"]  # fmt: skip
    assert job["result"]["cross_validation"]["grid"][0]["params"] == {}


def _bad_taxi(path: Path) -> Path:
    frame = pd.read_parquet(Path("datasets/taxi/train.parquet")).head(2000)
    frame.loc[[3, 17, 400], "trip_distance"] = np.nan
    path.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(path / "bad.parquet")
    return path / "bad.parquet"


def test_bad_rows_fail_or_skip(make_service: Callable[..., Any], tmp_path: Path) -> None:
    data = tmp_path / "data"
    _bad_taxi(data)
    with make_service(data_roots=[data]) as svc:
        body = taxi_request("bad")
        body["dataset"]["uri"] = "bad.parquet"
        del body["validation"]
        failed = svc.wait(svc.train(body)["id"], {"SUCCEEDED", "FAILED"})
        assert failed["status"] == "FAILED"
        assert failed["error"]["reason"] == "BAD_ROWS"
        assert failed["error"]["message"].startswith("3 rows of")
        assert "bad_rows" in failed["error"]["message"]

        body["dataset"]["bad_rows"] = "skip"
        done = svc.wait(svc.train(body)["id"], {"SUCCEEDED", "FAILED"})
        assert done["status"] == "SUCCEEDED", done["error"]
        assert done["result"]["bad_rows"] == 3
        assert done["result"]["rows"]["train"] < 2000
        assert any("dropped 3 rows" in w for w in done["warnings"])


@pytest.mark.slow
def test_seed_article_grid(service: Service) -> None:
    """The article's grid: maxBins {100, 200} x maxDepth {2, 7, 10} x numTrees {5, 20}, 3 folds (36 fits)."""
    grid = {"maxBins": [100, 200], "maxDepth": [2, 7, 10], "numTrees": [5, 20]}
    job = service.wait(
        service.train(taxi_request("article-rf", algorithm="random_forest", grid=grid, num_folds=3))["id"],
        {"SUCCEEDED", "FAILED"},
        timeout=900,
    )
    assert job["status"] == "SUCCEEDED", job["error"]
    table = job["result"]["cross_validation"]["grid"]
    assert len(table) == 12
    best = min(table, key=lambda row: row["rmse"])
    assert job["result"]["best_params"] == best["params"]
    assert best["params"]["maxDepth"] == 10  # deeper trees win on this data, as the article's would with enough rows
    metrics = service.client.get(f"/jobs/{job['id']}/metrics", params={"key": "cv_rmse"}).json()["metrics"]
    assert len(metrics) == 36


def test_a_classifier_of_integer_labels_knows_its_classes_and_is_evaluated(service: Service) -> None:
    """A Spark ML classifier of whole-number labels stored no class count, and its evaluation failed with the
    executor's traceback ("the classification metric group needs num_classes"); a fractional label was accepted
    and failed inside Spark ("Labels MUST be Integers"); an evaluation's `dataset.label` was ignored (data
    walkthrough)."""
    features = [f for f in TAXI_FEATURES if f != "rate_code"]
    body = {**taxi_request("rate-code-lr", algorithm="logistic_regression", maxIter=20),
            "dataset": {"uri": "datasets/taxi/train.parquet", "features": features, "label": "rate_code",
                        "task": "classification"}}  # fmt: skip
    job = service.done("/train", body)
    version = service.client.get("/models/rate-code-lr/versions/1").json()
    assert version["params"]["num_classes"] == 6, version["params"]  # 0..5: the largest label + 1, as xgboost's
    evaluation = {"model": {"name": "rate-code-lr"}, "dataset": {"uri": "datasets/taxi/eval.parquet"},
                  "metrics": ["classification"]}  # fmt: skip
    scored = service.done("/evaluate", evaluation)
    assert scored["result"]["classification"]["accuracy"] > 0.9, scored["result"]
    assert job["result"]["validation"]["accuracy"] == pytest.approx(scored["result"]["classification"]["accuracy"])
    other = {**evaluation, "dataset": {**evaluation["dataset"], "label": "hour"}}
    refused = problem(service.client.post("/evaluate", json=other), 422)
    assert refused["errors"][0]["loc"] == "dataset.label" and "the model predicts 'rate_code'" in refused["detail"]
    # a double label: whole numbers (0.0, 1.0: pandas, StringIndexer) are classes; fractions (local data) are a 422
    # at once, where Spark failed the fit ("Labels MUST be Integers") and then the job failed BAD_ROWS
    fractional = {**body, "name": "fare-class", "dataset": {**body["dataset"], "label": "fare_amount",
                  "features": TAXI_FEATURES}}  # fmt: skip
    refused = problem(service.client.post("/train", json=fractional), 422)
    assert refused["errors"][0]["loc"] == "dataset.label" and "holds fractions" in refused["detail"], refused


def test_a_single_text_class_is_a_422_for_spark_ml_too(make_service: Callable[..., Any], tmp_path: Path) -> None:
    """xgboost refused it; Spark ML trained a one-class "classifier" with accuracy 1.0, whose evaluation then failed
    (data walkthrough)."""
    data = tmp_path / "data"
    data.mkdir()
    pd.DataFrame({"x1": np.arange(40.0), "x2": np.arange(40.0) % 7, "species": ["setosa"] * 40}).to_csv(
        data / "one.csv", index=False
    )
    dataset = {"uri": "one.csv", "features": ["x1", "x2"], "label": "species", "task": "classification"}
    body = {"name": "one-class", "framework": "spark_ml", "params": {"algorithm": "logistic_regression"},
            "dataset": dataset}  # fmt: skip
    with make_service(data_roots=[data]) as svc:
        refused = problem(svc.client.post("/train", json=body), 422)
    assert refused["errors"][0]["loc"] == "dataset.label", refused
    assert "'species' has 1 distinct value: classification needs at least 2 classes" in refused["detail"], refused

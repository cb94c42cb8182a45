"""Every kind of job survives a driver killed with SIGKILL in the middle of it, not only torch training:

- an xgboost training job continues from its newest checkpoint of boosting rounds (the saved booster as
  ``xgb_model``) and trains exactly the rounds it asked for, registering one model version;
- a batch prediction starts again from scratch: its output is written to a private directory and renamed into
  place, so the output holds exactly one row per key, nothing of the dead attempt is left, and a reader never saw
  half of it;
- a Spark ML fit of a cross-validated grid continues after the (fold, parameter map) fits it checkpointed, and
  registers exactly one model version, from one grid with every fit's metric once;
- an evaluation starts again from scratch (nothing it writes is visible before it succeeds) and stores one result
  that counts every row once.

Every attempt that ended with its driver says so (``DRIVER_LOST``), and the job's log says how the next one ran.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from bench.processes import Driver, driver_env
from tests.e2e.chaos_support import log_lines, wait_final
from tests.helpers import TAXI_FEATURES

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def _data(data: Path) -> tuple[str, str, int]:
    """Taxi fares repeated until a job takes long enough to be killed in the middle: training rows, and keyed
    rows to predict."""
    data.mkdir()
    train = pd.read_parquet(REPO / "datasets/taxi/train.parquet")
    pd.concat([train] * 40, ignore_index=True).to_parquet(data / "taxi-big.parquet")
    taxi = pd.read_parquet(REPO / "datasets/taxi/eval.parquet")
    keyed = pd.concat([taxi] * 300, ignore_index=True)
    keyed.assign(trip_id=np.arange(len(keyed))).to_parquet(data / "taxi-keyed.parquet")
    return str(data / "taxi-big.parquet"), str(data / "taxi-keyed.parquet"), len(keyed)


def _small_data(data: Path) -> tuple[str, str, int]:
    """Taxi fares repeated: enough rows for a Spark ML grid and an evaluation to take seconds, not minutes."""
    data.mkdir()
    train = pd.read_parquet(REPO / "datasets/taxi/train.parquet")
    pd.concat([train] * 8, ignore_index=True).to_parquet(data / "taxi-fit.parquet")
    taxi = pd.read_parquet(REPO / "datasets/taxi/eval.parquet")
    pd.concat([taxi] * 100, ignore_index=True).to_parquet(data / "taxi-eval.parquet")
    return str(data / "taxi-fit.parquet"), str(data / "taxi-eval.parquet"), 100 * len(taxi)


def _xgboost(name: str, uri: str, **params: Any) -> dict[str, Any]:
    dataset = {"uri": uri, "features": TAXI_FEATURES, "label": "fare_amount", "task": "regression"}
    return {"name": name, "framework": "xgboost", "params": {"max_depth": 6, "num_workers": 1, **params},
            "dataset": dataset}  # fmt: skip


def _drivers(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[Callable[[str], Driver], Driver]:
    """``start(name)`` for drivers that take over from each other quickly (stopped at the test's end), and the first
    one, started, with a model it trained (the warm-up every later job finds)."""
    env = driver_env(tmp_path, heartbeat_stale_s="3", reconcile_interval_s="1",
                     data_roots=f"{REPO / 'datasets'},{tmp_path / 'data'}")  # fmt: skip
    started: list[Driver] = []
    request.addfinalizer(lambda: [d.stop() for d in started])

    def start(name: str) -> Driver:
        started.append(Driver(env, tmp_path / f"{name}.log").start())
        return started[-1]

    first = start("first")
    seed = first.wait_job(first.client.post("/train", json=_xgboost("seed", "datasets/taxi/train.parquet",
                                                                     num_round=10)).json()["id"])  # fmt: skip
    assert seed["status"] == "SUCCEEDED", seed["error"]
    return start, first


def test_a_killed_xgboost_job_continues_from_its_checkpoint_and_a_batch_prediction_starts_again(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    big, keyed, keys = _data(tmp_path / "data")
    out = tmp_path / "data" / "predicted.parquet"
    start, first = _drivers(tmp_path, request)
    xgb = first.client.post("/train", json=_xgboost("killed", big, num_round=400, checkpoint_rounds=40)).json()["id"]
    deadline = time.monotonic() + 600
    while not (rounds := [c["epoch"] for c in first.client.get(f"/jobs/{xgb}/checkpoints").json()["checkpoints"]]):
        assert first.client.get(f"/jobs/{xgb}").json()["status"] in ("QUEUED", "STARTING", "RUNNING")
        assert time.monotonic() < deadline
        time.sleep(0.1)
    predict = {"model": {"name": "seed"}, "dataset": {"uri": keyed, "key": "trip_id"}, "output_uri": str(out)}
    pred = first.client.post("/predict", json=predict).json()["id"]
    while (job := first.client.get(f"/jobs/{pred}").json())["status"] != "RUNNING":
        assert job["status"] in ("QUEUED", "STARTING"), job
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert first.client.get(f"/jobs/{xgb}").json()["status"] == "RUNNING", "xgboost finished before the kill"
    first.kill()
    kept = max(rounds)

    second = start("second")
    job = wait_final(second.client, xgb)
    assert job["status"] == "SUCCEEDED", job["error"]
    assert job["attempt"] == 2 and job["attempts"][0]["error_reason"] == "DRIVER_LOST"
    resumed = job["result"]["rounds"]
    assert resumed["resumed_from"] >= kept and resumed["trained"] == 400, resumed
    assert any(line.startswith("continuing from checkpoint") for line in log_lines(second.client, xgb))
    versions = [v for m in second.client.get("/models").json()["items"] for v in m["versions"] if v["job_id"] == xgb]
    assert len(versions) == 1
    rounds = [c["epoch"] for c in second.client.get(f"/jobs/{xgb}/checkpoints").json()["checkpoints"]]
    assert rounds == list(range(40, 401, 40)), rounds
    # each round stored once: the rounds the dead attempt wrote past its checkpoint were trained again
    points = second.client.get(f"/jobs/{xgb}/metrics", params={"key": "validation_rmse"}).json()["metrics"]
    assert [m["step"] for m in points] == list(range(1, 401)), [m["step"] for m in points]

    job = wait_final(second.client, pred)
    assert job["status"] == "SUCCEEDED", job["error"]
    assert job["attempt"] == 2 and job["attempts"][0]["error_reason"] == "DRIVER_LOST"
    table = pq.read_table(out, columns=["trip_id"])
    assert table.num_rows == keys and len(set(table.column("trip_id").to_pylist())) == keys
    assert (out / "_SPARKTRAIN_JOB").read_text() == pred
    assert not [p.name for p in out.parent.iterdir() if ".partial" in p.name], "nothing of the dead attempt is left"


def test_a_killed_spark_ml_grid_continues_after_its_fits_and_a_killed_evaluation_starts_again(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    fit_uri, eval_uri, rows = _small_data(tmp_path / "data")
    start, first = _drivers(tmp_path, request)
    grid = {"algorithm": "random_forest", "num_folds": 2, "grid": {"maxDepth": [4, 6], "numTrees": [8]}}
    fit_body = {
        "name": "forest",
        "framework": "spark_ml",
        "params": grid,
        "dataset": {"uri": fit_uri, "features": TAXI_FEATURES, "label": "fare_amount", "task": "regression"},
    }
    fit = first.client.post("/train", json=fit_body).json()["id"]
    deadline = time.monotonic() + 600
    while not ((job := first.client.get(f"/jobs/{fit}").json())["progress_message"] or "").startswith(
        "cross-validation fit "
    ):  # at least one of the four fits is done: the kill lands in the middle of the grid
        assert job["status"] in ("QUEUED", "STARTING", "RUNNING"), job
        assert time.monotonic() < deadline
        time.sleep(0.1)
    evaluate = {"model": {"name": "seed"}, "dataset": {"uri": eval_uri}, "metrics": ["regression"]}
    ev = first.client.post("/evaluate", json=evaluate).json()["id"]
    while (job := first.client.get(f"/jobs/{ev}").json())["progress_message"] != "evaluating":
        assert job["status"] in ("QUEUED", "STARTING", "RUNNING"), job
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert first.client.get(f"/jobs/{fit}").json()["status"] == "RUNNING", "the fit finished before the kill"
    assert first.client.get(f"/jobs/{ev}").json()["status"] == "RUNNING", "the evaluation finished before the kill"
    first.kill()

    second = start("second")
    for job_id in (fit, ev):
        job = wait_final(second.client, job_id)
        assert job["status"] == "SUCCEEDED", job["error"]
        assert job["attempt"] == 2, job["attempts"]
        ended = [(a["attempt"], a.get("status"), a.get("error_reason")) for a in job["attempts"]]
        assert ended[0] == (1, "FAILED", "DRIVER_LOST"), job["attempts"]
        assert ended[1] == (2, "SUCCEEDED", None), job["attempts"]
        assert [a["attempt"] for a in job["attempts"]] == [1, 2], job["attempts"]
        assert job["attempts"][1]["worker_id"] == job["worker_id"] != job["attempts"][0]["worker_id"]
        lines = log_lines(second.client, job_id)
        assert sum(line.startswith("attempt 2 started on ") for line in lines) == 1, lines
    assert "attempt 2 queued: starts from scratch" in log_lines(second.client, ev)
    lines = log_lines(second.client, fit)
    queued = next(line for line in lines if line.startswith("attempt 2 queued: "))
    assert queued.startswith("attempt 2 queued: resumes from checkpoint ") and " (fit " in queued, lines
    done = int(queued.split(" (fit ")[1].split(")")[0])
    assert 1 <= done < 4, queued
    assert any(f"{done} done before, continuing from checkpoint" in line for line in lines), lines

    job = second.client.get(f"/jobs/{fit}").json()
    assert len(job["result"]["cross_validation"]["grid"]) == 2, job["result"]  # one grid, not two attempts' mixed
    cv = second.client.get(f"/jobs/{fit}/metrics", params={"key": "cv_rmse"}).json()["metrics"]
    assert [m["step"] for m in cv] == [1, 2, 3, 4], cv  # each fit once
    versions = [v for m in second.client.get("/models").json()["items"] for v in m["versions"] if v["job_id"] == fit]
    assert len(versions) == 1, versions
    assert job["model"] == {"name": "forest", "version": versions[0]["version"]}
    predicted = second.client.post(
        "/predict", json={"model": {"name": "forest"}, "dataframe_records": [dict.fromkeys(TAXI_FEATURES, 1.0)]}
    )
    assert predicted.status_code == 200, predicted.text

    result = second.client.get(f"/jobs/{ev}").json()["result"]
    assert result["rows"] == rows and result["bad_rows"] == 0, result  # every row counted once
    assert set(result["regression"]) >= {"rmse", "mae", "r2"}, result

"""Every kind of job survives a driver killed with SIGKILL in the middle of it, not only torch training:

- an xgboost training job continues from its newest checkpoint of boosting rounds (the saved booster as
  ``xgb_model``) and trains exactly the rounds it asked for, registering one model version;
- a batch prediction starts again from scratch: its output is written to a private directory and renamed into
  place, so the output holds exactly one row per key, nothing of the dead attempt is left, and a reader never saw
  half of it;
- a Spark ML fit started again from scratch (the same rule: nothing it writes is visible before it succeeds) is
  covered by tests/app/services/test_reconcile.py and ``bench.chaos``, which kills drivers under every family.
"""

from __future__ import annotations

import time
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


def _xgboost(name: str, uri: str, **params: Any) -> dict[str, Any]:
    dataset = {"uri": uri, "features": TAXI_FEATURES, "label": "fare_amount", "task": "regression"}
    return {"name": name, "framework": "xgboost", "params": {"max_depth": 6, "num_workers": 1, **params},
            "dataset": dataset}  # fmt: skip


def test_a_killed_xgboost_job_continues_from_its_checkpoint_and_a_batch_prediction_starts_again(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    big, keyed, keys = _data(tmp_path / "data")
    out = tmp_path / "data" / "predicted.parquet"
    env = driver_env(tmp_path, heartbeat_stale_s="3", reconcile_interval_s="1",
                     data_roots=f"{REPO / 'datasets'},{tmp_path / 'data'}")  # fmt: skip
    started: list[Driver] = []
    request.addfinalizer(lambda: [d.stop() for d in started])
    first = Driver(env, tmp_path / "first.log")
    started.append(first.start())
    seed = first.wait_job(first.client.post("/train", json=_xgboost("seed", "datasets/taxi/train.parquet",
                                                                     num_round=10)).json()["id"])  # fmt: skip
    assert seed["status"] == "SUCCEEDED", seed["error"]
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

    second = Driver(env, tmp_path / "second.log")
    started.append(second.start())
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

    job = wait_final(second.client, pred)
    assert job["status"] == "SUCCEEDED", job["error"]
    assert job["attempt"] == 2 and job["attempts"][0]["error_reason"] == "DRIVER_LOST"
    table = pq.read_table(out, columns=["trip_id"])
    assert table.num_rows == keys and len(set(table.column("trip_id").to_pylist())) == keys
    assert (out / "_SPARKTRAIN_JOB").read_text() == pred
    assert not [p.name for p in out.parent.iterdir() if ".partial" in p.name], "nothing of the dead attempt is left"

"""No Spark job in the request: while a barrier stage holds every task slot of the session (as a training job
does), ``POST /train`` on a CSV, a JSON-lines and a partitioned parquet dataset still answers 202, and no Spark
job ran while it was answered (what it must know came from the files on the driver). How long the request takes
in that situation is measured by ``bench.data``.

Data the driver does not read itself (CSV with a reader option the sample reader does not know, date partition
values) is accepted too, its checks left to the job: the job then refuses what the request would have refused,
with the request's reason (app/services/datasets/deferred.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from bench.data import hold_every_slot
from tests.helpers import Service, running_service

pytestmark = pytest.mark.slow


def all_jobs(spark: Any) -> set[int]:
    """Every Spark job the session has seen (running, finished, waiting for slots), from its status store."""
    store = spark.sparkContext._jsc.sc().statusStore().jobsList(None)
    return {int(store.apply(i).jobId()) for i in range(store.size())}


@pytest.fixture(scope="module")
def svc(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    data = tmp_path_factory.mktemp("data")
    rows = [(i % 7 * 0.5, (i * 3) % 11, "cat" if i % 3 else "dog", i % 3, i % 2) for i in range(400)]
    frame = pd.DataFrame(rows, columns=["a", "b", "animal", "klass", "part"])
    frame.drop(columns=["part", "klass"]).to_csv(data / "animals.csv", index=False)
    with (data / "rows.json").open("w") as f:
        for a, b, _animal, klass, _part in rows:
            f.write(json.dumps({"a": a, "b": b, "klass": klass}) + "\n")
    frame.drop(columns=["animal"]).to_parquet(data / "parts", partition_cols=["part"])
    dated = frame.drop(columns=["animal"]).assign(day=[f"2024-01-0{1 + p}" for p in frame["part"]])
    dated.drop(columns=["part"]).to_parquet(data / "dated", partition_cols=["day"])  # dates: Spark types them
    with running_service(spark, tmp_path_factory.mktemp("svc"), data_roots=[data], in_process_consumer=False) as s:
        yield s


def torch_request(uri: str, label: str, task: str, units: int, **dataset: Any) -> dict[str, Any]:
    loss = "cross_entropy" if task == "classification" else "mse"
    activation = "softmax" if task == "classification" else "identity"
    return {
        "name": f"no-spark-{label}",
        "framework": "torch",
        "dataset": {"uri": uri, "features": ["a", "b"], "label": label, "task": task, **dataset},
        "network": {"layers": [{"type": "output", "units": units, "activation": activation, "loss": loss}]},
        "training": {"num_workers": 2, "epochs": 1, "batch_size_per_worker": 8},
    }


def test_train_requests_answer_while_every_slot_is_held(spark: Any, svc: Service, tmp_path: Path) -> None:
    requests = [
        torch_request("animals.csv", "animal", "classification", 2),  # string classes, from the CSV
        torch_request("rows.json", "klass", "classification", 3),  # integer classes: the largest label
        torch_request("parts", "klass", "regression", 1),  # partitioned parquet: the partition column's type
        # left to the job: an option the sample reader does not know; partition values that are dates
        torch_request("animals.csv", "animal", "classification", 2, options={"lineSep": "\n"}),
        torch_request("dated", "klass", "regression", 1),
    ]
    release = tmp_path / "release"
    holder = hold_every_slot(spark, release)
    try:
        for body in requests:
            before = all_jobs(spark)
            answer = svc.client.post("/train", json=body)
            assert answer.status_code == 202, answer.text
            assert all_jobs(spark) == before, f"a Spark job ran during POST /train of {body['dataset']['uri']}"
    finally:
        release.touch()
        holder.join(timeout=60)
    assert not holder.is_alive()


def linear_request(features: list[str], **dataset: Any) -> dict[str, Any]:
    return {
        "name": "deferred-checks",
        "framework": "spark_ml",
        "dataset": {"uri": "animals.csv", "features": features, "label": "b", "task": "regression", **dataset},
        "params": {"algorithm": "linear_regression"},
    }


def test_the_job_makes_the_checks_the_request_left_to_it(spark: Any, svc: Service, tmp_path: Path) -> None:
    """With an option the sample reader does not know, the request cannot read the schema without Spark: it is
    accepted, and the job refuses a column that is not there with the words the request uses for the same file
    read on the driver; the same request naming columns that are there trains."""
    refused = svc.client.post("/train", json=linear_request(["a", "zz"]))
    assert refused.status_code == 422, refused.text
    reason = refused.json()["detail"]
    assert "no column 'zz'" in reason
    with running_service(spark, tmp_path, data_roots=svc.runtime.settings.data_roots) as consuming:
        before = all_jobs(spark)
        failing = consuming.train(linear_request(["a", "zz"], options={"lineSep": "\n"}))
        assert all_jobs(spark) == before, "a Spark job ran during POST /train"
        failed = consuming.wait(failing["id"], {"SUCCEEDED", "FAILED"})
        assert failed["status"] == "FAILED"
        assert failed["error"] == {**failed["error"], "reason": "INVALID_REQUEST", "message": reason}
        trained = consuming.wait(consuming.train(linear_request(["a"], options={"lineSep": "\n"}))["id"],
                                 {"SUCCEEDED", "FAILED"})  # fmt: skip
        assert trained["status"] == "SUCCEEDED", trained["error"]

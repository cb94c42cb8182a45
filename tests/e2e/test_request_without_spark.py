"""No Spark job in the request: while a barrier stage holds every task slot of the session (as a training job
does), ``POST /train``, ``POST /evaluate``, batch ``POST /predict`` and ``POST /datasets`` on a CSV, a JSON-lines
and a partitioned parquet dataset still answer, and no Spark job ran while they were answered (what they must
know came from the files on the driver). How long the request takes in that situation is measured by
``bench.data``.

Data the driver does not read itself (CSV with a reader option the sample reader does not know, date partition
values) is accepted too, its checks left to the job: the job then refuses what the request would have refused,
with the request's reason (app/services/datasets/deferred.py); a registration of such data answers at once and
Spark reads its summary after the answer.

The service consumes no job (``in_process_consumer=False``: a job's own Spark jobs would blur "no Spark job during
the request"); the jobs these tests need run with the service's own runner in the test's thread."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from app.jobs.runner import run_job
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
    messy = frame[["a", "b"]].astype(str)
    messy.loc[5, "a"] = "n/a"  # Spark's inference: a string column
    messy.to_csv(data / "messy.csv", index=False)
    frame[["a", "b"]].rename(columns={"a": "x"}).to_csv(data / "other.csv", index=False)  # no column a
    (data / "broken.csv").write_text("a,b\n1.0,2\n1.0,2,3\n")  # a line with too many fields
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


def run_queued(svc: Service, job_id: str) -> dict[str, Any]:
    """Run a queued job with the service's runner in this thread (the service consumes nothing); the job then."""
    run_job(svc.runtime.jobs, job_id)
    return dict(svc.client.get(f"/jobs/{job_id}").json())


@pytest.fixture(scope="module")
def model(svc: Service) -> str:
    """A linear regression of b on a, trained on the CSV."""
    trained = run_queued(svc, svc.train({**linear_request(["a"]), "name": "no-spark-model"})["id"])
    assert trained["status"] == "SUCCEEDED", trained["error"]
    return "no-spark-model"


def evaluate_request(uri: str, **dataset: Any) -> dict[str, Any]:
    return {"model": {"name": "no-spark-model"}, "dataset": {"uri": uri, **dataset}, "metrics": ["regression"]}


def predict_request(uri: str, **dataset: Any) -> dict[str, Any]:
    return {"model": {"name": "no-spark-model"}, "dataset": {"uri": uri, "key": "b", **dataset}}


def test_inference_requests_answer_while_every_slot_is_held(
    spark: Any, svc: Service, model: str, tmp_path: Path
) -> None:
    """Evaluations and batch predictions on CSV, JSON lines and partitioned parquet, one on a CSV whose feature
    column Spark infers as text (one ``n/a``: parsed per row by the job, as in training), and ones left to the job
    (an option the sample reader does not know, date partitions): each answers 202 with no Spark job run."""
    requests = [
        ("/evaluate", evaluate_request("animals.csv")),
        ("/evaluate", evaluate_request("rows.json")),
        ("/evaluate", evaluate_request("parts")),
        ("/evaluate", evaluate_request("messy.csv", bad_rows="skip")),
        ("/evaluate", evaluate_request("animals.csv", options={"lineSep": "\n"})),
        ("/evaluate", evaluate_request("dated")),
        ("/predict", predict_request("animals.csv")),
        ("/predict", predict_request("rows.json")),
        ("/predict", predict_request("parts")),
        ("/predict", predict_request("dated")),
    ]
    release = tmp_path / "release"
    holder = hold_every_slot(spark, release)
    answered = []
    try:
        for path, body in requests:
            before = all_jobs(spark)
            answer = svc.client.post(path, json=body)
            assert answer.status_code == 202, answer.text
            assert all_jobs(spark) == before, f"a Spark job ran during POST {path} of {body['dataset']['uri']}"
            answered.append(answer.json()["id"])
    finally:
        release.touch()
        holder.join(timeout=60)
    assert not holder.is_alive()
    messy = run_queued(svc, answered[3])
    assert messy["status"] == "SUCCEEDED", messy["error"]
    assert (messy["result"]["rows"], messy["result"]["bad_rows"]) == (399, 1)  # 'n/a' is a bad row, skipped
    predicted = run_queued(svc, answered[-1])  # planned by the job: it writes where the answer said
    assert predicted["status"] == "SUCCEEDED", predicted["error"]
    assert predicted["result"]["rows"] == 400 and Path(predicted["result"]["output_uri"]).is_dir()


def test_a_deferred_evaluation_fails_with_the_requests_reason(svc: Service, model: str) -> None:
    """Data without the model's feature column: read on the driver, a 422; left to the job (an option the sample
    reader does not know), the job fails INVALID_REQUEST with the same words."""
    refused = svc.client.post("/evaluate", json=evaluate_request("other.csv"))
    assert refused.status_code == 422, refused.text
    reason = refused.json()["detail"]
    assert "no column 'a'" in reason
    deferred = svc.client.post("/evaluate", json=evaluate_request("other.csv", options={"lineSep": "\n"}))
    assert deferred.status_code == 202, deferred.text
    failed = run_queued(svc, deferred.json()["id"])
    assert failed["status"] == "FAILED"
    assert failed["error"] == {**failed["error"], "reason": "INVALID_REQUEST", "message": reason}


def wait_summary(svc: Service, dataset_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = dict(svc.client.get(f"/datasets/{dataset_id}").json())
        if found["summary"] != "pending":
            return found
        time.sleep(0.2)
    raise AssertionError(f"dataset {dataset_id} is still pending")


def test_registrations_answer_while_every_slot_is_held(spark: Any, svc: Service, tmp_path: Path) -> None:
    """Local CSV, JSON lines and parquet are registered from the driver with no Spark job; data the driver does not
    read itself is registered at once, its summary pending until Spark reads it after the answer (here once the
    slots are free): then complete as the driver would have read it, or failed with the registration's reason."""
    release = tmp_path / "release"
    holder = hold_every_slot(spark, release)
    try:
        local = {}
        for uri in ("animals.csv", "rows.json", "parts"):
            before = all_jobs(spark)
            answer = svc.client.post("/datasets", json={"uri": uri})
            assert answer.status_code == 201, answer.text
            assert all_jobs(spark) == before, f"a Spark job ran during POST /datasets of {uri}"
            local[uri] = answer.json()
            assert local[uri]["summary"] == "complete" and local[uri]["row_count"] == 400
        # answered while every slot is held: no Spark job in the request (its summary is read after the answer)
        pending = svc.client.post("/datasets", json={"uri": "animals.csv", "options": {"lineSep": "\n"}})
        broken = svc.client.post("/datasets", json={"uri": "broken.csv", "options": {"lineSep": "\n"}})
        for answer in (pending, broken):
            assert answer.status_code == 201, answer.text
            assert answer.json()["summary"] == "pending" and answer.json()["row_count"] is None
    finally:
        release.touch()
        holder.join(timeout=60)
    assert not holder.is_alive()
    read = wait_summary(svc, pending.json()["id"])
    assert read["summary"] == "complete", read["summary_error"]
    assert (read["schema"], read["row_count"], read["sample"]) == (
        local["animals.csv"]["schema"],
        400,
        local["animals.csv"]["sample"],
    )
    refused = svc.client.post("/datasets", json={"uri": "broken.csv"})
    assert refused.status_code == 422 and "do not parse" in refused.json()["detail"]
    failed = wait_summary(svc, broken.json()["id"])
    assert failed["summary"] == "failed" and failed["bad_rows"] == 1
    assert "1 of 2 lines of broken.csv do not parse as csv" in failed["summary_error"]


def test_registrations_a_stopped_driver_left_pending_are_read_by_the_next_driver(
    spark: Any, svc: Service, tmp_path: Path
) -> None:
    """A driver that stops between the 201 and Spark's read leaves the summary pending: the row as the request
    committed it, nothing read. The next driver on the database reads it at its start, with the registration's
    own bad-row policy (``skip`` here: the malformed line is counted, not a failure)."""
    from app.db.session import transaction
    from app.schemas.datasets import DatasetCreate
    from app.services.datasets.registry import register_dataset

    rt = svc.runtime
    bodies = [DatasetCreate(uri="animals.csv", options={"lineSep": "\n"}),
              DatasetCreate(uri="broken.csv", options={"lineSep": "\n"}, bad_rows="skip")]  # fmt: skip
    with transaction(rt.db) as session:  # what POST /datasets commits before its answer, and no read after it
        ids = [register_dataset(session=session, spark=spark, settings=rt.settings, body=b).id for b in bodies]
    assert [svc.client.get(f"/datasets/{i}").json()["summary"] for i in ids] == ["pending", "pending"]

    with running_service(spark, tmp_path, data_roots=rt.settings.data_roots, database_url=rt.settings.database_url,
                         in_process_consumer=False) as next_driver:  # fmt: skip
        animals, broken = (wait_summary(next_driver, i) for i in ids)
    assert animals["summary"] == "complete" and animals["row_count"] == 400, animals
    assert broken["summary"] == "complete" and (broken["row_count"], broken["bad_rows"]) == (1, 1), broken


def test_a_spark_ml_evaluation_that_fails_on_bad_rows_shows_the_first_ones(svc: Service, model: str) -> None:
    """A Spark ML model's evaluation checks its rows as a training job does: its BAD_ROWS shows the first ones,
    with the reason of each, as JSON a script can parse (tests/e2e/test_inference.py: a torch model's)."""
    answer = svc.client.post("/evaluate", json=evaluate_request("messy.csv"))
    assert answer.status_code == 202, answer.text
    failed = run_queued(svc, answer.json()["id"])
    assert (failed["status"], failed["error"]["reason"]) == ("FAILED", "BAD_ROWS"), failed["error"]
    message = failed["error"]["message"]
    shown, _ = json.JSONDecoder().raw_decode(message.split("first ones: ", 1)[1])
    assert len(shown) == 1 and "n/a" in shown[0]["reason"], message

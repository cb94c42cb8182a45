"""A job is planned once: the plan the request validated is stored with the job, and the runner executes that
plan, not a new plan of the stored request. Proved by breaking the stored request after submitting: the job still
runs what was planned. A retry changes only the plan's resume point."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.core.jobstates import JobStatus
from app.core.settings import Settings
from app.db.session import transaction
from app.jobs.runner import run_job
from app.jobs.runtime import JobRuntime
from app.schemas.train import TrainRequest
from app.services import jobs
from app.services.training import submit_training
from workers import plans
from workers.training.spark_ml.spec import SparkMLPlan

REPO = Path(__file__).resolve().parents[3]
BODY = json.loads((REPO / "examples/linear-regression-spark-ml.json").read_text())


def _settings(tmp_path: Path) -> Settings:
    return Settings(var_dir=tmp_path / "var", artifact_root=tmp_path / "artifacts", data_roots=[REPO / "datasets"])


def test_the_runner_executes_the_stored_plan_not_the_stored_request(db: Any, spark: Any, tmp_path: Path) -> None:
    sent: list[tuple[str, str]] = []
    settings = _settings(tmp_path)
    job, created = submit_training(
        db=db, settings=settings, spark=spark, enqueue=lambda task, job_id: sent.append((task, job_id)),
        request=TrainRequest.model_validate(BODY),
    )  # fmt: skip
    assert created and sent == [("train.spark_ml", job.id)]
    with db() as s:
        stored = jobs.get_job(session=s, job_id=job.id)
        plan = plans.load(SparkMLPlan, stored.plan or {})
    assert plan.train.path == str(REPO / "datasets/taxi/train.parquet")
    assert plan.train.features == tuple(BODY["dataset"]["features"])

    # Planning this request again would now fail (no such data): the job must not plan again.
    broken = {**BODY, "dataset": {**BODY["dataset"], "uri": "taxi/gone.parquet"}}
    with transaction(db) as s:
        jobs.get_job(session=s, job_id=job.id).request = broken
    run_job(JobRuntime(settings=settings, db=db, spark=spark), job.id)

    with db() as s:
        done = jobs.get_job(session=s, job_id=job.id)
        assert (done.status, done.error_message) == (JobStatus.SUCCEEDED, None)
        assert done.result is not None and done.result["rows"]["train"] == 8000
        assert done.model_version == 1


def test_a_job_queued_without_a_plan_is_planned_from_its_request(db: Any, spark: Any, tmp_path: Path) -> None:
    """Jobs queued by a release that did not store plans still run (planned again when they start)."""
    settings = _settings(tmp_path)
    with transaction(db) as s:
        job, _ = jobs.create_job(session=s, job_type="train", request=BODY, framework="spark_ml", name=BODY["name"])
        job_id = job.id
    run_job(JobRuntime(settings=settings, db=db, spark=spark), job_id)
    with db() as s:
        done = jobs.get_job(session=s, job_id=job_id)
        assert done.status == JobStatus.SUCCEEDED, done.error_message
        assert any("no stored plan" in line.message for line in jobs.list_logs(session=s, job_id=job_id))


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_broker_that_refuses_fails_the_job_and_nothing_stays_queued(db: Any, spark: Any, tmp_path: Path) -> None:
    from app.core.errors import ServiceUnavailable

    def refuse(task: str, job_id: str) -> None:
        raise ConnectionError("broker down")

    with pytest.raises(ServiceUnavailable):
        submit_training(db=db, settings=_settings(tmp_path), spark=spark, enqueue=refuse,
                        request=TrainRequest.model_validate(BODY))  # fmt: skip
    with db() as s:
        (job,), _ = jobs.list_jobs(session=s)
        assert (job.status, job.error_reason) == (JobStatus.FAILED, "ENQUEUE_FAILED")
        assert job.plan is not None


def test_a_driver_whose_cluster_cannot_hold_the_plan_fails_the_job_at_once(db: Any, spark: Any, tmp_path: Path) -> None:
    """Planned by a driver with more task slots than this one (drivers sharing a queue should be alike): the job
    fails as INVALID_REQUEST instead of waiting for a barrier stage that cannot start."""
    settings = _settings(tmp_path)
    body = json.loads((REPO / "examples/digits-cnn.json").read_text())
    job, _ = submit_training(db=db, settings=settings, spark=spark, enqueue=lambda *_: None,
                             request=TrainRequest.model_validate(body))  # fmt: skip
    with transaction(db) as s:
        row = jobs.get_job(session=s, job_id=job.id)
        row.plan = {**(row.plan or {}), "num_workers": 3}
    run_job(JobRuntime(settings=settings, db=db, spark=spark), job.id)
    with db() as s:
        done = jobs.get_job(session=s, job_id=job.id)
        assert (done.status, done.error_reason) == (JobStatus.FAILED, "INVALID_REQUEST")
        assert "3 workers" in (done.error_message or "") and "2 task slots" in (done.error_message or "")


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_plan_or_request_this_release_cannot_read_fails_saying_to_submit_again(
    db: Any, spark: Any, tmp_path: Path
) -> None:
    """A stored plan of another shape (another release's, or edited by hand) ended INTERNAL with a bare Python
    error, and an earlier release's request that this one refuses with pydantic's text (audit, 2026-12-06)."""
    settings = _settings(tmp_path)
    with transaction(db) as s:
        malformed, _ = jobs.create_job(session=s, job_type="train", request=BODY, framework="spark_ml",
                                       name=BODY["name"], plan={"train": ["not", "a", "dataset"]})  # fmt: skip
        refused, _ = jobs.create_job(session=s, job_type="train", request={**BODY, "learning_speed": 3},
                                     framework="spark_ml", name=BODY["name"])  # fmt: skip
        ids = (malformed.id, refused.id)
    rt = JobRuntime(settings=settings, db=db, spark=spark)
    for job_id in ids:
        run_job(rt, job_id)
    with db() as s:
        first, second = (jobs.get_job(session=s, job_id=job_id) for job_id in ids)
    assert (first.status, first.error_reason) == (JobStatus.FAILED, "UNSUPPORTED"), first.error_message
    assert "stored plan cannot be read" in (first.error_message or "") and "Submit it again" in first.error_message
    assert (second.status, second.error_reason) == (JobStatus.FAILED, "UNSUPPORTED"), second.error_message
    assert "learning_speed" in (second.error_message or "") and "submit it again" in second.error_message


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_retried_deferred_xgboost_job_continues_from_its_checkpoint(db: Any, spark: Any, tmp_path: Path) -> None:
    """A request whose data checks were left to the job (parquet with reader options) stores a deferred plan, and a
    retry plans the request again. A torch request names its checkpoint (``resume_from``); an xgboost request cannot,
    so its retry started from scratch (the known gap of 2026-12-06): the job now applies its newest checkpoint of
    rounds to the plan it made. The checkpoints are those of an uninterrupted run of the same request."""
    from uuid import uuid4

    from app.db.base import utcnow
    from app.db.models import Checkpoint
    from app.services.reconcile import end_and_retry

    settings = _settings(tmp_path)
    rt = JobRuntime(settings=settings, db=db, spark=spark)
    dataset = {"uri": "taxi/train.parquet", "options": {"mergeSchema": "false"}, "label": "fare_amount",
               "features": ["trip_distance", "passenger_count"], "task": "regression"}  # fmt: skip
    params = {"num_round": 20, "checkpoint_rounds": 5, "max_depth": 3, "num_workers": 1}
    body = {"framework": "xgboost", "dataset": dataset, "params": params}

    def submit(name: str) -> str:
        job, _ = submit_training(db=db, settings=settings, spark=spark, enqueue=lambda *_: None,
                                 request=TrainRequest.model_validate({**body, "name": name}))  # fmt: skip
        return job.id

    whole = submit("whole")
    run_job(rt, whole)
    lost = submit("lost")
    with transaction(db) as s:
        assert plans.is_deferred(jobs.get_job(session=s, job_id=lost).plan)
        saved = [c for c in s.query(Checkpoint).filter_by(job_id=whole) if c.epoch <= 10]
        assert sorted(c.epoch for c in saved) == [5, 10]
        jobs.transition(session=s, job_id=lost, sources=[JobStatus.QUEUED], target=JobStatus.STARTING,
                        worker_id="host:1:dead", started_at=utcnow(), heartbeat_at=utcnow())  # fmt: skip
        jobs.transition(session=s, job_id=lost, sources=[JobStatus.STARTING], target=JobStatus.RUNNING)
        for c in saved:  # what the lost attempt had checkpointed before its driver died
            s.add(Checkpoint(id=uuid4().hex, job_id=lost, attempt=1, epoch=c.epoch, uri=c.uri, metrics=c.metrics))
    with transaction(db) as s:
        retried = end_and_retry(session=s, job=jobs.get_job(session=s, job_id=lost), reason="DRIVER_LOST",
                                message="the driver died", now=utcnow(), sources=[JobStatus.RUNNING])  # fmt: skip
        assert retried is not None and retried["action"] == "retried", retried
    run_job(rt, lost)
    with db() as s:
        done = jobs.get_job(session=s, job_id=lost)
        assert (done.status, done.attempt) == (JobStatus.SUCCEEDED, 2), done.error_message
        assert done.result is not None and done.result["rounds"]["resumed_from"] == 10, done.result["rounds"]
        log = [line.message for line in jobs.list_logs(session=s, job_id=lost)]
        assert any("resumes from checkpoint" in line and "(round 10)" in line for line in log), log
        assert any(line.startswith("continuing from checkpoint") and "(round 10)" in line for line in log), log

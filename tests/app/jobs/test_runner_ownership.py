"""How a runner ends a job, on both databases, at the two races that no timing in an end-to-end test can pin:

- the cancel arrives after the work finished, before its result is recorded: the job is reported as what it
  did (SUCCEEDED, its model registered) with a warning that the cancel came too late;
- a runner whose job was given up while it still ran (its heartbeats stalled past the reconciler's limit, the
  job was queued again and another driver took attempt 2): it learns on its next heartbeat that the job is no
  longer its own, and it records nothing, neither a checkpoint nor a final state nor a model version.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from app.core.jobstates import JobStatus
from app.core.settings import Settings
from app.db.base import utcnow
from app.db.models import Checkpoint, Job, JobLog, JobMetric, ModelVersion
from app.db.session import transaction
from app.jobs.context import DbJobContext
from app.jobs.runtime import JobRuntime
from app.jobs.settle import settle
from app.services import jobs
from app.services.reconcile import reconcile
from tests.app.jobs.taking import take
from tests.helpers import spark_error
from workers.context import JobCancelled, JobFailure, JobOutcome, MetricPoint, ModelArtifact


def _runtime(db: Any, spark: Any, tmp_path: Path, name: str) -> JobRuntime:
    settings = Settings(var_dir=tmp_path / "var", artifact_root=tmp_path / "artifacts")
    return JobRuntime(settings=settings, db=db, spark=spark, worker_id=f"{name}:1:boot")


def _settle(rt: JobRuntime, ctx: DbJobContext, ended: Any, send: Any) -> None:
    settle(rt, ctx, ctx.running, ended, send)


def _new_job(db: Any) -> str:
    with transaction(db) as s:
        job, _ = jobs.create_job(session=s, job_type="train", request={"name": "m"}, framework="torch", name="m")
        return job.id


def _outcome(uri: str) -> JobOutcome:
    return JobOutcome(result={"done": True}, model=ModelArtifact(framework="torch", uri=uri))


def _versions(db: Any, job_id: str) -> int:
    with db() as s:
        return len(s.query(ModelVersion).filter(ModelVersion.job_id == job_id).all())


@pytest.fixture
def rt(db: Any, spark: Any, tmp_path: Path) -> JobRuntime:
    return _runtime(db, spark, tmp_path, "a")


def test_work_that_finished_as_the_cancel_arrived_is_reported_succeeded_with_a_warning(
    db: Any, rt: JobRuntime, tmp_path: Path
) -> None:
    job_id = _new_job(db)
    ctx = take(rt, job_id, tmp_path)
    with transaction(db) as s:
        job, stopping = jobs.request_cancel(session=s, job_id=job_id)
        assert (job.status, stopping) == (JobStatus.CANCELLING, True)
    _settle(rt, ctx, _outcome("file:///models/m"), None)  # the work had returned its result
    with db() as s:
        job = s.get(Job, job_id)
        assert job.status == "SUCCEEDED"
        assert job.warnings == ["the cancel arrived after the work had finished"]
        assert (job.model_name, job.model_version) == ("m", 1)
    assert _versions(db, job_id) == 1


def test_a_runner_whose_job_was_given_up_records_nothing(db: Any, spark: Any, tmp_path: Path) -> None:
    stalled, other = _runtime(db, spark, tmp_path, "a"), _runtime(db, spark, tmp_path, "b")
    job_id = _new_job(db)
    old = take(stalled, job_id, tmp_path)
    uri = (tmp_path / "checkpoints" / "epoch-1").as_uri()
    old.checkpoint(1, 10, uri, {"accuracy": 0.5})
    with transaction(db) as s:  # its heartbeats stop for longer than the reconciler waits
        s.get(Job, job_id).heartbeat_at = utcnow() - timedelta(seconds=120)
    sent: list[tuple[str, str, str]] = []
    actions = reconcile(db=db, send=lambda *m: sent.append(m), stale_after_s=30, default_queue="q")
    assert [a["action"] for a in actions] == ["retried"] and len(sent) == 1
    new = take(other, job_id, tmp_path)  # another driver takes attempt 2
    assert new.attempt == 2
    old.metrics([MetricPoint(key="loss", value=1.0, step=33, epoch=3, worker=0)])  # written nowhere
    old.log("epoch 3 done at step 33")  # kept, saying whose it is
    old.warn("a former attempt's warning")  # in its log line, not the job's warnings
    new.log("epoch 3 done at step 33")
    with db() as s:
        assert s.query(JobMetric).filter(JobMetric.job_id == job_id).count() == 0
        lines = [r.message for r in s.query(JobLog).filter(JobLog.job_id == job_id).order_by(JobLog.id)][-2:]
    assert lines == ["(attempt 1, no longer running this job) a former attempt's warning", "epoch 3 done at step 33"]
    with db() as s:
        assert s.get(Job, job_id).warnings == []

    with transaction(db) as s:
        assert jobs.heartbeat(session=s, job_id=job_id, worker_id=stalled.worker_id, attempt=1) is None
    with pytest.raises(JobCancelled):
        old.checkpoint(2, 20, (tmp_path / "checkpoints" / "epoch-2").as_uri(), {"accuracy": 0.6})
    assert old.cancelled, "the stalled runner was told to stop"
    _settle(stalled, old, _outcome("file:///models/stalled"), None)
    with db() as s:
        job = s.get(Job, job_id)
        assert (job.status, job.worker_id, job.attempt, job.model_version) == ("RUNNING", other.worker_id, 2, None)
        assert [(c.epoch, c.attempt) for c in s.query(Checkpoint).filter(Checkpoint.job_id == job_id)] == [(1, 1)]
    assert _versions(db, job_id) == 0

    with transaction(db) as s:
        assert jobs.heartbeat(session=s, job_id=job_id, worker_id=other.worker_id, attempt=2) == JobStatus.RUNNING
    _settle(other, new, _outcome("file:///models/new"), None)
    with db() as s:
        job = s.get(Job, job_id)
        assert (job.status, job.model_version) == ("SUCCEEDED", 1)
    assert _versions(db, job_id) == 1


def test_a_model_name_taken_by_another_owner_while_the_job_ran_fails_it_clearly(
    db: Any, rt: JobRuntime, tmp_path: Path
) -> None:
    """Two owners train the same new name at once: the first to finish owns it; the other job fails as
    MODEL_NAME_TAKEN (not INTERNAL), saying what to do, and registers nothing."""
    from app.services import models

    job_id = _new_job(db)  # queued by "anonymous" before the name existed
    with transaction(db) as s:
        models.register_version(session=s, name="m", framework="torch", artifact_uri="file:///other", metrics={},
                                params={}, job_id=None, owner="bob")  # fmt: skip
    _settle(rt, take(rt, job_id, tmp_path), _outcome("file:///models/m"), None)
    with db() as s:
        job = s.get(Job, job_id)
        assert (job.status, job.error_reason) == ("FAILED", "MODEL_NAME_TAKEN")
        assert "train again under another name" in (job.error_message or "")
    assert _versions(db, job_id) == 0


def test_a_trial_counts_from_its_tune_so_a_name_taken_during_the_search_is_not_written_into(
    db: Any, rt: JobRuntime, tmp_path: Path
) -> None:
    """A tune's trials are queued while the search runs, after its name was vetted: a name another owner took in
    between was written into, as if POST /train had vetted the trial (audit, 2026-12-06)."""
    from app.services import models

    with transaction(db) as s:
        tune, _ = jobs.create_job(session=s, job_type="tune", request={"name": "t"}, framework="torch", name="t")
        tune_id = tune.id
    with transaction(db) as s:  # another owner takes the name while the search runs
        models.register_version(session=s, name="t", framework="torch", artifact_uri="file:///other", metrics={},
                                params={}, job_id=None, owner="bob")  # fmt: skip
    with transaction(db) as s:  # then the trial is queued
        trial, _ = jobs.create_job(session=s, job_type="train", request={"name": "t"}, framework="torch", name="t",
                                   parent_id=tune_id, trial=0)  # fmt: skip
        trial_id = trial.id
    _settle(rt, take(rt, trial_id, tmp_path), _outcome("file:///models/t"), None)
    with db() as s:
        job = s.get(Job, trial_id)
        assert (job.status, job.error_reason) == ("FAILED", "MODEL_NAME_TAKEN")
    assert _versions(db, trial_id) == 0


def test_a_failure_as_the_cancel_arrived_is_reported_with_its_own_reason(
    db: Any, rt: JobRuntime, tmp_path: Path
) -> None:
    """The work failed on its own (bad rows) as the cancel arrived, before the runner saw the stop flag: the job
    stayed CANCELLING, and 30 s later the reconciler ended it saying its driver process was gone (audit,
    2026-12-06). It ends FAILED with the work's reason, as the success case ends SUCCEEDED."""
    from workers.context import JobFailure

    job_id = _new_job(db)
    ctx = take(rt, job_id, tmp_path)
    with transaction(db) as s:
        jobs.request_cancel(session=s, job_id=job_id)
    _settle(rt, ctx, JobFailure("BAD_ROWS", "3 rows have no label"), None)
    with db() as s:
        job = s.get(Job, job_id)
        assert (job.status, job.error_reason, job.error_message) == ("FAILED", "BAD_ROWS", "3 rows have no label")


def test_a_driver_without_executors_hands_the_job_back_for_later(rt: JobRuntime, db: Any, tmp_path: Path) -> None:
    """A cluster whose executors never registered is this driver's state, not the job's fault: the attempt ends
    NO_EXECUTORS and the job is queued again after the retry delay (another driver may have executors); it was
    INVALID_REQUEST, never retried."""
    job_id = _new_job(db)
    ctx = take(rt, job_id, tmp_path)
    sent: list[Any] = []
    _settle(rt, ctx, JobFailure("NO_EXECUTORS", "after 120 s, no executors are registered with spark://***"),
            lambda *m: sent.append(m))  # fmt: skip
    with db() as s:
        job = s.get(Job, job_id)
        assert (job.status, job.attempt) == ("QUEUED", 2), (job.status, job.error_reason)
        first, second = job.attempts[0], job.attempts[1]
    assert (first["error_reason"], first["status"]) == ("NO_EXECUTORS", "FAILED")
    assert "not_before" in second and sent == [], "sent after the retry delay, by a reconciler's pass"


def _executor_error(last_line: str) -> BaseException:
    """What pyspark raises for a Spark job an executor's Python error failed: the py4j exception's innermost cause
    holds the worker's traceback."""
    text = ("org.apache.spark.SparkException: Job aborted due to stage failure: barrier task failed\n"
            "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
            '  File "/srv/workers/training/torch/remote.py", line 441, in run\n    step()\n'
            f"{last_line}\n\tat org.apache.spark.scheduler.Task.run(Task.scala:147)\n")  # fmt: skip
    return spark_error(text)


@pytest.mark.parametrize(
    ("last_line", "status", "reason"),
    [("ValueError: a bad value", "FAILED", "SPARK_ERROR"),
     ("RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection closed by peer", "QUEUED", "WORKER_LOST")],
)  # fmt: skip
def test_an_executors_traceback_is_in_the_jobs_log_whether_or_not_the_job_is_retried(
    db: Any, rt: JobRuntime, tmp_path: Path, last_line: str, status: str, reason: str
) -> None:
    """The error's message says "the job's log has the traceback": a retried attempt (WORKER_LOST) wrote none."""
    job_id = _new_job(db)
    ctx = take(rt, job_id, tmp_path)
    _settle(rt, ctx, _executor_error(last_line), lambda *m: None)
    with db() as s:
        job = s.get(Job, job_id)
        # a job queued again keeps its first attempt's end in attempts; a job that ended, in its error
        ended = (
            job.attempts[0] if job.attempts else {"error_reason": job.error_reason, "error_message": job.error_message}
        )
        assert (job.status, ended["error_reason"]) == (status, reason), ended
        said = ended["error_message"]
        logged = [line.message for line in s.query(JobLog).filter(JobLog.job_id == job_id)]
    assert last_line in said and "the job's log has the traceback" in said, said  # WORKER_LOST: after its sentence
    tracebacks = [m for m in logged if "on the executor: Traceback (most recent call last)" in m]
    assert len(tracebacks) == 1 and "remote.py" in tracebacks[0] and "scala" not in tracebacks[0], logged

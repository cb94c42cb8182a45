"""What a job says when it ends (walkthrough on a standalone cluster, 2026-12-07): a FAILED job kept the progress
message of the retry it no longer made ("attempt 2 queued: resumes from checkpoint ..."), and a lost worker whose
error Spark heard first from a surviving rank read as gloo's "Connection reset by peer ... GLHF!", with no word of
a loss."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import update

from app.db.models import Job
from app.db.session import transaction
from app.jobs.failures import describe_failure
from app.jobs.runtime import JobRuntime
from app.services import resume
from tests.app.jobs.taking import take as _take
from tests.app.jobs.test_runner_ownership import _new_job, _runtime, _settle
from tests.helpers import spark_error
from workers.context import JobFailure

GLOO = ("RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
        "[127.0.0.1]:18624: Connection reset by peer. This is typically caused by a remote worker hanging or bugs in "
        "the application. GLHF!")  # fmt: skip
EXECUTOR_LOST = ("org.apache.spark.SparkException: Job aborted due to stage failure: Could not recover from a failed "
                 "barrier ResultStage. Most recent failure reason: Stage failed because barrier task ResultTask(81, 1) "
                 "finished unsuccessfully. ExecutorLostFailure (executor 0 exited caused by one of the running tasks) "
                 "Reason: Command exited with code 137")  # fmt: skip


def _executor_error(last_line: str) -> BaseException:
    frame = '  File "/srv/torch/distributed/distributed_c10d.py", line 4287, in all_gather\n    work.wait()\n'
    return spark_error("org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
                       f"{frame}{last_line}\n\tat org.apache.spark.scheduler.Task.run(Task.scala:147)\n")  # fmt: skip


def test_a_worker_lost_says_so_whoever_spoke_first() -> None:
    reason, message = describe_failure(_executor_error(GLOO))
    assert reason == "WORKER_LOST"
    assert message.startswith(
        "a worker of the job's barrier stage was lost (its executor or its Python process died); a surviving worker "
        "saw its connection to it break: RuntimeError: "
    ), message
    assert "GLHF!" in message, "gloo's words stay, after sparktrain's"
    reason, message = describe_failure(spark_error(EXECUTOR_LOST))
    assert reason == "WORKER_LOST"
    assert message == f"a worker of the job's barrier stage was lost (its executor or its Python process died): " \
                      f"{EXECUTOR_LOST}"  # fmt: skip


def test_a_barrier_stage_spark_refuses_for_slots_a_lost_executor_took_is_retried() -> None:
    """A surviving rank's error ended the attempt before Spark had removed the dead executor: the retry counted its
    slot, and Spark refused the barrier stage once it had (SPARK-24819). That ended the job for good, SPARK_ERROR."""
    refused = ("org.apache.spark.scheduler.BarrierJobSlotsNumberCheckFailed: [SPARK-24819]: Barrier execution mode "
               "does not allow run a barrier stage that requires more slots than the total number of slots in the "
               "cluster currently.")  # fmt: skip
    reason, message = describe_failure(spark_error(refused))
    assert reason == "NO_EXECUTORS" and reason in resume.RETRYABLE and reason in resume.DELAYED
    assert (
        message.startswith("the cluster had fewer task slots than the job's barrier stage needs") and refused in message
    )


def _said_last(db: Any, job_id: str, message: str) -> None:
    with transaction(db) as s:
        s.execute(update(Job).where(Job.id == job_id).values(progress_message=message))


def test_a_failed_job_does_not_keep_saying_that_it_resumes(db: Any, spark: Any, tmp_path: Path) -> None:
    rt: JobRuntime = _runtime(db, spark, tmp_path, "a")
    refused = _new_job(db)  # attempt 2 found a cluster of another shape
    ctx = _take(rt, refused, tmp_path)
    _said_last(db, refused, "attempt 2 queued: resumes from checkpoint 73970fc9 (epoch 11)")
    _settle(rt, ctx, JobFailure("INVALID_REQUEST", "the job was planned for 4 workers"), lambda *m: None)

    spent = _new_job(db)  # lost its worker again with no attempt left and no progress since
    with transaction(db) as s:
        s.execute(update(Job).where(Job.id == spent).values(attempt=3, max_attempts=3))
    ctx = _take(rt, spent, tmp_path)
    _said_last(db, spent, "epoch 12 of 150, step 300")
    _settle(rt, ctx, _executor_error(GLOO), lambda *m: None)
    with db() as s:
        ended = {job_id: (job.status, job.error_reason, job.progress_message)
                 for job_id in (refused, spent) if (job := s.get(Job, job_id)) is not None}  # fmt: skip
    assert ended == {refused: ("FAILED", "INVALID_REQUEST", "failed: INVALID_REQUEST"),
                     spent: ("FAILED", "WORKER_LOST", "failed: WORKER_LOST")}  # fmt: skip

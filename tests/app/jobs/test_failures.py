"""How a job ends. A failure's reason and message as a job records them (app/jobs/failures.py): storage failures
reported as text (by Spark's writers, xgboost, an executor's traceback) get the storage reason and what to fix,
whatever library spoke. And when a cancel kills the job's Spark jobs (app/jobs/runtime.py)."""

from __future__ import annotations

import errno

import pytest

from app.jobs.failures import STORAGE_FIXES, describe_failure
from tests.helpers import spark_error


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (RuntimeError("java.io.IOException: No space left on device"), "STORAGE_FULL"),
        (RuntimeError("XGBoostError: [Errno 28] No space left on device: '/artifacts/x'"), "STORAGE_FULL"),
        (RuntimeError("org.apache.hadoop...: /artifacts/jobs/x: Read-only file system"), "STORAGE_UNAVAILABLE"),
        (RuntimeError("OSError: [Errno 30] Read-only file system: '/artifacts/model'"), "STORAGE_UNAVAILABLE"),
        (OSError(errno.EROFS, "Read-only file system"), "STORAGE_UNAVAILABLE"),
        (OSError(errno.ENOSPC, "No space left on device"), "STORAGE_FULL"),
    ],
)
def test_storage_failures_in_any_words_get_their_reason_and_the_fix(error: BaseException, reason: str) -> None:
    got, message = describe_failure(error)
    assert got == reason
    assert message.endswith("while attempts remain") and STORAGE_FIXES[reason] in message


def test_a_database_away_past_the_runners_retries_is_not_the_jobs_fault() -> None:
    """It ended the job INTERNAL ("a bug"), never retried: a tune job whose database was away for longer than
    SPARKTRAIN_DB_RETRY_S failed for good (known gap of 2026-12-06)."""
    from sqlalchemy import create_engine
    from sqlalchemy.exc import OperationalError

    closed = create_engine("postgresql+psycopg://postgres@127.0.0.1:1/x")
    with pytest.raises(OperationalError) as refused:
        closed.connect()
    closed.dispose()
    reason, message = describe_failure(refused.value)
    assert reason == "DATABASE_UNAVAILABLE"
    assert "SPARKTRAIN_DB_RETRY_S" in message and message.endswith("while attempts remain")


def test_other_failures_keep_their_reason() -> None:
    assert describe_failure(RuntimeError("boom"))[0] == "INTERNAL"


def test_a_cancel_kills_the_spark_job_group_at_once_or_after_the_jobs_grace() -> None:
    """app/jobs/runtime.py: without a grace the group is cancelled at the first cancel; with one (a torch stage,
    whose workers stop by themselves) only once the grace since that first cancel has passed."""
    import time

    from app.jobs.runtime import RunningJob

    assert RunningJob("a").group_cancel_due()
    graceful = RunningJob("b", grace_s=0.3)
    assert not graceful.group_cancel_due()
    assert not graceful.group_cancel_due()  # asked again within the grace: still not
    time.sleep(0.35)
    assert graceful.group_cancel_due()


def test_an_xgboost_refusal_is_its_words_without_the_tracebacks() -> None:
    """xgboost's C++ checks reached the job's error as ~2,000 characters: the executor's Python traceback, then a
    C++ backtrace. The message is xgboost's own words. The error is a real one, raised by xgboost here, in the text
    Spark gives an executor's Python failure (py4j's Java exception, read by its cause's toString)."""
    import traceback

    import numpy as np
    import xgboost

    try:
        xgboost.train({"objective": "reg:gamma"}, xgboost.DMatrix(np.ones((4, 1)), label=-np.ones(4)), 1)
    except xgboost.core.XGBoostError:
        executor = "org.apache.spark.api.python.PythonException: " + traceback.format_exc()
    else:
        raise AssertionError("xgboost trained on negative gamma labels")

    reason, message = describe_failure(spark_error(executor))
    assert reason == "SPARK_ERROR" and message.startswith("xgboost: "), message
    assert "gamma" in message and "[bt]" not in message and "Traceback" not in message, message
    assert len(message) < 200, message


@pytest.mark.parametrize("gpus", [["0"], []])
def test_a_device_the_task_cannot_use_is_its_sentence_with_its_own_reason(gpus: list[str]) -> None:
    """A torch job with device "cuda" on an executor without CUDA (or without a GPU) ended SPARK_ERROR with ~1.5 KB:
    Spark's stage failure, the executor's traceback, the JVM's frames, and the sentence that says what to change
    last. The error is the real one, raised by workers/training/torch/remote.py here, in the words Spark wraps it
    in."""
    import traceback

    import torch

    from workers.training.torch.remote import select_device

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the device can be used")
    try:
        select_device("cuda", gpus)
    except RuntimeError:
        executor = (
            "org.apache.spark.SparkException: Job aborted due to stage failure: Could not recover from a failed "
            "barrier ResultStage. Most recent failure reason: Stage failed because barrier task ResultTask(3, 0) "
            "finished unsuccessfully.\norg.apache.spark.api.python.PythonException: " + traceback.format_exc()
            + "\n\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException("
            "PythonRunner.scala:624)\n\tat org.apache.spark.scheduler.Task.run(Task.scala:147)\n"
        )  # fmt: skip
    else:
        raise AssertionError("select_device gave a task CUDA on a machine without it")
    reason, message = describe_failure(spark_error(executor))
    assert reason == "DEVICE_UNAVAILABLE", (reason, message)
    wanted = "install a CUDA build of torch on the executors" if gpus else "or use device auto/cpu"
    assert message.endswith(wanted) and "\n" not in message and "Traceback" not in message, message
    if gpus:
        assert message.startswith("Spark gave this task GPU ['0'], but torch ") and "has no usable CUDA" in message


def test_an_executors_python_error_is_its_own_words_and_the_log_keeps_the_traceback() -> None:
    """A ValueError on an executor ended the job SPARK_ERROR with Spark's stage failure, the whole traceback and
    the server's paths as ``error.message`` (walkthrough). The error's words and where it was raised are the
    message; :func:`executor_traceback` gives the job's log the traceback."""
    import traceback

    from app.jobs.failures import executor_traceback
    from workers.training.torch.thresholds import make_threshold_algorithm

    try:
        make_threshold_algorithm({"type": "adaptive", "initial_threshold": 1e-3}).start_at(1e31)
    except ValueError:
        executor = (
            "org.apache.spark.SparkException: Job aborted due to stage failure: Could not recover from a failed "
            "barrier ResultStage. Most recent failure reason: Stage failed because barrier task ResultTask(3, 0) "
            "finished unsuccessfully.\norg.apache.spark.api.python.PythonException: " + traceback.format_exc()
            + " SQLSTATE: 38000\n\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator."
            "handlePythonException(PythonRunner.scala:581)\n\tat org.apache.spark.scheduler.Task.run(Task.scala:147)\n"
            "Driver stacktrace:\n\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(x.scala:1)"
        )  # fmt: skip
    else:
        raise AssertionError("a first threshold of 1e31 was taken")
    error = spark_error(executor)
    reason, message = describe_failure(error)
    assert reason == "SPARK_ERROR", (reason, message)
    assert message == (
        "ValueError: first threshold must be in [1e-30, 1e+30], got 1e+31 (raised on an executor in thresholds.py, "
        f"line {message.split('line ')[1].split(';')[0]}; the job's log has the traceback)"
    ), message
    assert "Traceback" not in message and "/" not in message.split("(raised")[0], message
    logged = executor_traceback(error)
    assert logged is not None and logged.startswith("Traceback (most recent call last)"), logged
    assert logged.rstrip().endswith("SQLSTATE: 38000") and "thresholds.py" in logged and "scala" not in logged

"""A driver whose Spark JVM dies under it (killed, out of memory) can run no job. It used to stay up and keep taking
jobs from the queue, each failing at once on the dead JVM. Now ``python -m app`` notices within seconds, stops as
for a signal (its running job is handed back or ends DRIVER_LOST, queued again either way) and exits with status 4
(app/__main__.py), so a supervisor starts it again; the next driver finishes the job. Its log tells of the death in
one line, not in py4j's tracebacks (app/spark/jvm_watch.py)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from app.__main__ import SPARK_LOST_EXIT
from app.spark.session import SPARK_LOST_LOG
from bench.chaos import Driver, digits_job, driver_env
from bench.processes import cmdline, descendants
from tests.e2e.chaos_support import wait_final
from tests.e2e.test_clean_stop import _wait_running

pytestmark = pytest.mark.slow


def test_a_driver_whose_jvm_died_exits_4_and_the_next_one_finishes_its_job(tmp_path: Path) -> None:
    env = driver_env(tmp_path)
    first = Driver(env, tmp_path / "first.log").start()
    try:
        job_id = first.client.post("/train", json=digits_job("jvm", epochs=6, units=64, batch=2)).json()["id"]
        _wait_running(first, job_id, progress=0.4)
        [jvm] = [p for p in descendants(first.pid) if "org.apache.spark" in cmdline(p) and "java" in cmdline(p)]
        os.kill(jvm, signal.SIGKILL)
        assert first.proc is not None
        status = first.proc.wait(120)
    finally:
        first.stop()
    log = first.log.read_text(errors="replace")
    assert status == SPARK_LOST_EXIT, log[-3000:]
    assert "SIGTERM" not in log, "no signal was sent: the stop says why it stops (operator walkthrough)"
    # one line tells of the death and what the driver does next; py4j's complaints about each call that found the JVM
    # gone ("Exception while sending command." and a Py4JNetworkError traceback), an ERROR line per message taken
    # meanwhile and Celery's traceback of its reject are gone
    after = log[log.index("started on") :]
    errors = [line.split(": ", 1)[1] for line in after.splitlines() if " ERROR " in line]
    assert errors == [SPARK_LOST_LOG % "driver"], after[-3000:]
    assert "Traceback" not in after and "Exception while sending command" not in after, after[-5000:]

    second = Driver(env, tmp_path / "second.log").start()
    try:
        job = wait_final(second.client, job_id)
        assert job["status"] == "SUCCEEDED", (job["error"], job["attempts"])
        first_attempt = job["attempts"][0]
        assert first_attempt["error_reason"] in ("DRIVER_STOPPED", "DRIVER_LOST"), job["attempts"]
        # past its first checkpoint (progress 0.4): the attempt cost nothing, and its message does not say it did
        assert job["max_attempts"] == 4, "a stop, or a loss after a checkpoint, costs the job no attempt"
        if first_attempt["error_reason"] == "DRIVER_LOST":
            assert "unless it saved a checkpoint" in first_attempt["error_message"], first_attempt
    finally:
        second.stop()

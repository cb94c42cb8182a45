"""Spark's own JVM lines carry the job_id of the job whose work they are about, with ``SPARKTRAIN_LOG_FORMAT=json``.

sparktrain's lines carried ``job_id``; Spark's JVM lines (spark-conf/log4j2-json.properties) had none, only the job
group in their text, so an operator could not select a job's lines by field. The runner now puts the job's id in
the log4j MDC (app/spark/session.py ``tag_job_logs``): the executor threads that run the job's tasks and the JVM
thread serving the job's own thread carry it; Spark's scheduler threads (DAGScheduler's event loop) do not. The
driver here runs with the shipped log4j configuration plus three Spark loggers at INFO, so that a small job logs
lines of each kind (at the shipped WARN it logs few or none)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from bench.chaos import Driver, driver_env
from tests.helpers import taxi_request

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
AT_INFO = {
    "executor": "org.apache.spark.executor.Executor",  # "Running task ...": an executor thread running a task
    "context": "org.apache.spark.SparkContext",  # "Starting job: ...": the job's own thread calling Spark
    "dag": "org.apache.spark.scheduler.DAGScheduler",  # "Got job ...": the scheduler's event loop, and the job's
}


def _conf_dir(tmp_path: Path) -> Path:
    conf = tmp_path / "spark-conf"
    shutil.copytree(REPO / "spark-conf", conf)
    with (conf / "log4j2.properties").open("a") as out:
        for key, name in AT_INFO.items():
            out.write(f"\nlogger.test_{key}.name = {name}\nlogger.test_{key}.level = info\n")
    return conf


def _records(log: str) -> list[dict[str, Any]]:
    """The JSON lines (the JVM's own start-up lines, before logging starts, are not JSON)."""
    return [json.loads(line) for line in log.splitlines() if line.startswith("{")]


def test_sparks_lines_about_a_jobs_work_carry_its_job_id(tmp_path: Path) -> None:
    env = driver_env(tmp_path, log_format="json", spark_conf_dir=str(_conf_dir(tmp_path)))
    driver = Driver(env, tmp_path / "driver.log").start()
    try:
        job_id = driver.client.post("/train", json=taxi_request("mdc")).json()["id"]
        job = driver.wait_job(job_id)
        assert job["status"] == "SUCCEEDED", job["error"]
    finally:
        driver.stop()
    records = _records(driver.log.read_text(errors="replace"))
    jvm = [r for r in records if r["logger"].startswith("org.apache.spark")]
    ours = [r for r in jvm if r.get("job_id") == job_id]
    by_logger = {name: [r for r in ours if r["logger"] == name] for name in AT_INFO.values()}
    assert any(r["message"].startswith("Running task") for r in by_logger[AT_INFO["executor"]]), jvm[:20]
    assert any(r["message"].startswith("Starting job") for r in by_logger[AT_INFO["context"]]), jvm[:20]
    # DAGScheduler logs from the job's thread ("Job 3 finished: ...") and from its event loop, which runs every
    # job's stages ("Got job 3 ..."): those carry no job's id, and no field at all
    scheduler = [r for r in jvm if r["logger"] == AT_INFO["dag"]]
    assert any(r["message"].startswith("Job ") and r.get("job_id") == job_id for r in scheduler), scheduler[:5]
    event_loop = [r for r in scheduler if r["message"].startswith("Got job ")]
    assert event_loop and not [r for r in event_loop if "job_id" in r], event_loop[:5]
    # no line carries an id that is not the job's (the start-up's, before any job, carry none)
    assert {r["job_id"] for r in jvm if "job_id" in r} == {job_id}

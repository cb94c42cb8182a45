"""The session the driver builds keeps a months-long run's memory bounded: the status store's retention caps from
``spark-defaults.conf`` are in effect (and enforced), and a job leaves nothing cached behind it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app.core.settings import REPO_ROOT
from app.spark.profile import read_conf_file
from app.spark.session import DRIVER_JAVA_OPTIONS, driver_java_options
from tests.helpers import Service, taxi_request

DEFAULTS = read_conf_file(REPO_ROOT / "spark-conf" / "spark-defaults.conf")
SPARK_DEFAULTS = {
    "spark.ui.retainedJobs": 1000,
    "spark.ui.retainedStages": 1000,
    "spark.ui.retainedTasks": 100_000,
    "spark.sql.ui.retainedExecutions": 1000,
    "spark.ui.retainedDeadExecutors": 100,
    "spark.ui.dagGraph.retainedRootRDDs": 2**31 - 1,
}
"""Spark's own values of the caps, which let the status store grow to gigabytes in a driver that never stops."""


def test_retention_caps_from_spark_defaults_are_in_effect(spark: Any) -> None:
    conf = spark.sparkContext.getConf()
    for key, spark_default in SPARK_DEFAULTS.items():
        assert key in DEFAULTS, f"spark-defaults.conf sets no {key}"
        assert conf.get(key) == DEFAULTS[key], key
        assert int(DEFAULTS[key]) < spark_default, key
    # the SQL listener reads its cap through the session's SQL conf
    assert spark.conf.get("spark.sql.ui.retainedExecutions") == DEFAULTS["spark.sql.ui.retainedExecutions"]
    assert conf.get("spark.python.worker.reuse", "true") == "true"
    assert conf.get("spark.executor.pyspark.memory", None) is None  # see spark-defaults.conf: RLIMIT_AS breaks CUDA


def test_the_status_store_forgets_jobs_past_the_cap(spark: Any) -> None:
    sc = spark.sparkContext
    cap = int(DEFAULTS["spark.ui.retainedJobs"])
    group = "test-retention"
    sc.setJobGroup(group, "more jobs than the status store keeps")
    try:
        rdd = sc.parallelize([1], 1)
        for _ in range(cap + 30):
            rdd.count()
    finally:
        sc._jsc.clearJobGroup()
    sc._jsc.sc().listenerBus().waitUntilEmpty()
    assert 0 < len(sc.statusTracker().getJobIdsForGroup(group)) <= cap


def _persistent_rdds(spark: Any) -> set[int]:
    return {int(k) for k in spark.sparkContext._jsc.getPersistentRDDs().keySet()}


def test_a_job_leaves_no_cached_data(service: Service, spark: Any) -> None:
    """Spark ML training caches its training rows and its validation predictions; both go when the job ends:
    no persisted RDD, no block in storage, and (when nothing was cached before) an empty SQL cache."""
    cache_manager = spark._jsparkSession.sharedState().cacheManager()
    sql_cache_was_empty = cache_manager.isEmpty()
    before = _persistent_rdds(spark)
    job = service.wait(service.train(taxi_request("hygiene"))["id"], {"SUCCEEDED", "FAILED"})
    assert job["status"] == "SUCCEEDED", job["error"]
    assert _persistent_rdds(spark) - before == set()
    blocks = spark.sparkContext._jsc.sc().getRDDStorageInfo()
    assert [info.id() for info in blocks if info.id() not in before] == []
    assert cache_manager.isEmpty() or not sql_cache_was_empty


def test_driver_java_options_join_the_file_derby_and_the_operator(tmp_path: Path) -> None:
    (tmp_path / "spark-defaults.conf").write_text(f"{DRIVER_JAVA_OPTIONS}  -XX:+ExitOnOutOfMemoryError\n")
    scratch = tmp_path / "var" / "spark"
    joined = driver_java_options(tmp_path, scratch, {DRIVER_JAVA_OPTIONS: "-XX:NativeMemoryTracking=summary"})
    assert joined == f"-XX:+ExitOnOutOfMemoryError -Dderby.system.home={scratch} -XX:NativeMemoryTracking=summary"
    assert driver_java_options(tmp_path / "none", scratch, {}) == f"-Dderby.system.home={scratch}"
    assert driver_java_options(tmp_path / "none", scratch, {}, json_logs=True) == f"-Dderby.system.home={scratch}"


@pytest.mark.slow
def test_json_logs_make_sparks_own_lines_json_too(tmp_path: Path) -> None:
    """SPARKTRAIN_LOG_FORMAT=json: Spark's JVM lines (a failed task's ``ERROR Executor`` and its Java stack trace,
    a cancel's warnings) were plain text among the JSON objects. A driver process with that setting logs through
    log4j: every line is one object, the stack trace one string in it, and log4j2.properties' levels still hold."""
    code = f"""
from app.core.settings import Settings
from app.spark.session import build_spark_session
spark = build_spark_session(Settings(var_dir={str(tmp_path)!r}, spark_master="local[1]", log_format="json",
                                     spark_conf={{"spark.ui.enabled": "false"}}))
manager = spark._jvm.org.apache.logging.log4j.LogManager
failure = spark._jvm.java.lang.IllegalStateException("x")
manager.getLogger("org.apache.spark.executor.Executor").error("task failed", failure)
manager.getLogger("org.apache.spark.util.Utils").warn("quieted by log4j2.properties")
spark.stop()
"""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                         timeout=300, check=False)  # fmt: skip
    assert run.returncode == 0, run.stderr
    # the lines the JVM itself writes before any logging starts: Spark's launcher adds an incubator module, and the
    # tests' JAVA_TOOL_OPTIONS (tests/conftest.py) is noted as any JVM notes it
    jvm_own = ("WARNING: Using incubator", "Picked up JAVA_TOOL_OPTIONS")
    lines = [line for line in run.stderr.splitlines() if line and not line.startswith(jvm_own)]
    records = [json.loads(line) for line in lines]  # each line is one object
    [error] = [r for r in records if r["logger"] == "org.apache.spark.executor.Executor"]
    assert error["level"] == "ERROR" and error["message"] == "task failed" and error["time"].endswith("+00:00")
    assert error["exception"].startswith("java.lang.IllegalStateException: x\n\tat ")
    assert not [r for r in records if "quieted" in r["message"]]


@pytest.mark.slow
def test_plain_spark_lines_of_a_jobs_tasks_name_the_job_and_others_are_unchanged(tmp_path: Path) -> None:
    """log4j2.properties' pattern: a line an executor thread logs for a task of a tagged job (``tag_job_logs``, as
    the runner does) reads ``Executor: [job <id>] Running task ...``, as sparktrain's own job lines name their job;
    a task of untagged work logs exactly as before. The Executor logger is at INFO here (WARN ships)."""
    conf = tmp_path / "conf"
    shutil.copytree(REPO_ROOT / "spark-conf", conf)
    with (conf / "log4j2.properties").open("a") as out:
        out.write("\nlogger.test.name = org.apache.spark.executor.Executor\nlogger.test.level = info\n")
    job = "ab" * 16
    code = f"""
from app.core.settings import Settings
from app.spark.session import build_spark_session, tag_job_logs
spark = build_spark_session(Settings(var_dir={str(tmp_path)!r}, spark_master="local[1]", spark_conf_dir={str(conf)!r},
                                     spark_conf={{"spark.ui.enabled": "false"}}))
tag_job_logs(spark, {job!r})
spark.sparkContext.parallelize([1, 2], 1).count()
tag_job_logs(spark, None)
spark.sparkContext.parallelize([1, 2], 1).count()
spark.stop()
"""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                         timeout=300, check=False)  # fmt: skip
    assert run.returncode == 0, run.stderr
    said = [line.split(" INFO Executor: ", 1)[-1] for line in run.stderr.splitlines() if " INFO Executor: " in line]
    tasks = [words for words in said if "Running task" in words]
    assert len(tasks) == 2, run.stderr[-3000:]
    assert tasks[0].startswith(f"[job {job}] Running task 0.0 in stage 0.0"), tasks
    assert tasks[1].startswith("Running task 0.0 in stage 1.0"), tasks


def test_the_driver_jvm_runs_with_the_options_of_spark_defaults_and_derbys_home(spark: Any) -> None:
    options = spark.sparkContext.getConf().get(DRIVER_JAVA_OPTIONS)
    assert DEFAULTS[DRIVER_JAVA_OPTIONS] in options and "-Dderby.system.home=" in options
    jvm = spark.sparkContext._jvm
    hotspot = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
    )
    assert hotspot.getVMOption("TrimNativeHeapInterval").getValue() == "60000"


def test_a_local_masters_jvm_and_python_workers_run_at_the_local_niceness_and_the_driver_does_not(spark: Any) -> None:
    """SPARKTRAIN_SPARK_LOCAL_NICE (default 10): the JVM and every executor-side Python worker start below the API,
    whose threads keep their niceness (app/spark/session.py)."""
    import os

    from app.core.settings import Settings

    def niceness(_: Any) -> Any:
        import os

        yield os.getpriority(os.PRIO_PROCESS, 0)

    mine = os.getpriority(os.PRIO_PROCESS, 0)
    expected = max(Settings().spark_local_nice, mine)
    assert spark.sparkContext.parallelize(range(2), 2).mapPartitions(niceness).collect() == [expected, expected]
    jvm = spark.sparkContext._gateway.proc.pid
    stat = Path(f"/proc/{jvm}/stat").read_text()
    assert int(stat[stat.rindex(")") + 2 :].split()[16]) == expected  # field 19, nice
    assert expected == mine or os.getpriority(os.PRIO_PROCESS, 0) < expected


def test_the_spark_ui_cannot_kill_stages(spark: Any) -> None:
    # The UI has no API key check (docs/security.md): its pages must not offer to kill another owner's stages.
    assert spark.sparkContext.getConf().get("spark.ui.killEnabled") == "false"

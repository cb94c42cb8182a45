"""The driver's Spark log stays readable: a user's cancel of a Spark ML fit is not logged as a Java ERROR with a stack
trace (spark-conf/log4j2.properties). A JVM reads its logging configuration once, at start, so this runs a driver
of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from app.core.settings import REPO_ROOT

pytestmark = pytest.mark.slow

CANCELLED_FIT = textwrap.dedent(
    """
    import threading, time
    from app.core.settings import Settings
    from app.spark.session import build_spark_session
    from pyspark.ml.classification import RandomForestClassifier
    from pyspark.ml.feature import VectorAssembler
    from pyspark.sql import functions as F

    spark = build_spark_session(Settings(var_dir=sys.argv[1], spark_master="local[2]",
                                         spark_conf={"spark.ui.enabled": "false"}))
    sc = spark.sparkContext
    rows = spark.range(20_000).select(F.rand(1).alias("a"), F.rand(2).alias("b"),
                                       (F.rand(3) > 0.5).cast("double").alias("label"))
    rows = VectorAssembler(inputCols=["a", "b"], outputCol="features").transform(rows).cache()
    rows.count()
    failed = []

    def fit():
        sc.setJobGroup("fit", "a fit to cancel", interruptOnCancel=True)
        try:
            RandomForestClassifier(numTrees=200, maxDepth=12).fit(rows)
        except Exception as exc:
            failed.append(str(exc))

    worker = threading.Thread(target=fit)
    worker.start()
    deadline = time.monotonic() + 120
    while not sc.statusTracker().getJobIdsForGroup("fit") and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)
    sc.cancelJobGroup("fit")
    worker.join(120)
    print("CANCELLED" if failed and "cancelled" in failed[0].lower() else f"NOT CANCELLED {failed}", flush=True)
    spark.stop()
    """
)


def test_a_cancelled_spark_ml_fit_leaves_no_java_stack_trace(tmp_path: Path) -> None:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": str(REPO_ROOT)}
    command = [sys.executable, "-c", "import sys\n" + CANCELLED_FIT, str(tmp_path)]
    run = subprocess.run(command, check=False, capture_output=True, text=True, timeout=300, env=env, cwd=REPO_ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "CANCELLED" in run.stdout.split(), (run.stdout, run.stderr[-3000:])
    assert "ERROR Instrumentation" not in run.stderr, run.stderr[-3000:]
    assert not [line for line in run.stderr.splitlines() if line.lstrip().startswith("at ")], run.stderr[-3000:]

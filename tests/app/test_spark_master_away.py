"""``python -m app`` whose Spark master does not answer exits within seconds, before it starts anything, with two lines
(what is wrong, how to fix it) and status 6. It used to try for 84 s (Spark registers 3 times, 20 s each), then
print ~280 lines of Java and uvicorn tracebacks ending in "Cannot call methods on a stopped SparkContext", and exit
with status 3, which says "database or broker unreachable". A SparkSession that cannot be built anyway ends the
start-up with one line naming the master and SPARKTRAIN_SPARK_MASTER, without a Python traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from app.__main__ import SPARK_AWAY_EXIT, SparkStart, spark_master_problem
from app.core.settings import load_settings
from tests.helpers import free_port

REPO = Path(__file__).resolve().parents[2]


def _driver(tmp_path: Path, master: str) -> tuple[subprocess.CompletedProcess[str], float]:
    values = {k: v for k, v in os.environ.items()
              if not k.startswith("SPARKTRAIN_") and k not in ("HADOOP_CONF_DIR", "YARN_CONF_DIR")}  # fmt: skip
    values.update(SPARK_LOCAL_IP="127.0.0.1", PYTHONPATH=str(REPO), SPARKTRAIN_VAR_DIR=str(tmp_path / "var"),
                  SPARKTRAIN_HOST="127.0.0.1", SPARKTRAIN_PORT=str(free_port()),
                  SPARKTRAIN_SPARK_MASTER=master)  # fmt: skip
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "app"], cwd=REPO, env=values, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    return done, time.monotonic() - start


def test_a_master_nothing_listens_on_stops_the_start_at_once_with_two_lines(tmp_path: Path) -> None:
    port = free_port()  # closed again: nothing listens there
    done, took = _driver(tmp_path, f"spark://127.0.0.1:{port}")
    output = done.stdout + done.stderr
    assert done.returncode == SPARK_AWAY_EXIT == 6, output[-3000:]
    assert done.stderr.strip().splitlines() == [
        f"sparktrain cannot start: it cannot reach the Spark master spark://127.0.0.1:{port} (connection refused)",
        "Start it (on this machine: scripts/cluster.sh start), or point SPARKTRAIN_SPARK_MASTER at one that runs.",
    ], output[-3000:]
    assert "Traceback" not in output and "Uvicorn" not in output and "startup" not in output, output[-3000:]
    assert took < 30, took
    assert not (tmp_path / "var" / "sparktrain.db").exists(), "it started the driver"


def test_every_master_of_a_list_is_asked_and_one_that_answers_is_enough() -> None:
    closed, unknown = free_port(), "nowhere.invalid:7077"
    with socket.socket() as live:
        live.bind(("127.0.0.1", 0))
        live.listen()
        answering = f"127.0.0.1:{live.getsockname()[1]}"
        assert spark_master_problem(load_settings(spark_master=f"spark://127.0.0.1:{closed},{answering}")) is None
    problem = spark_master_problem(load_settings(spark_master=f"spark://127.0.0.1:{closed},{unknown}"))
    assert problem is not None
    first = problem.splitlines()[0]
    assert first.startswith(f"it cannot reach the Spark master spark://127.0.0.1:{closed},{unknown} (")
    assert f"127.0.0.1:{closed}: connection refused; {unknown}: " in first, first
    for master in ("local[2]", "yarn", "k8s://https://127.0.0.1:1"):  # not asked: Spark reaches those its own way
        assert spark_master_problem(load_settings(spark_master=master)) is None


def test_a_spark_session_that_cannot_be_built_ends_in_one_line_without_a_traceback(tmp_path: Path) -> None:
    """A master the probe passes but Spark refuses: ``yarn`` without HADOOP_CONF_DIR, whose JVM exits at once
    (fast, unlike a port that answers but is no master, which Spark tries for 60 s)."""
    done, _ = _driver(tmp_path, "yarn")
    output = done.stdout + done.stderr
    assert done.returncode == SPARK_AWAY_EXIT, output[-3000:]
    assert done.stderr.strip().splitlines()[-1] == (
        "sparktrain cannot start: Spark did not start with master yarn (SPARKTRAIN_SPARK_MASTER): "
        "[JAVA_GATEWAY_EXITED] Java gateway process exited before sending its port number; Spark's own lines above "
        "say more"
    ), output[-3000:]
    assert "Traceback" not in output, output[-3000:]


def test_a_context_spark_stopped_while_starting_is_not_called_a_stopped_context() -> None:
    class Java:
        def toString(self) -> str:  # noqa: N802 - the Java method's name
            return "java.lang.IllegalStateException: Cannot call methods on a stopped SparkContext.\nThis stopped ..."

    class Py4JJavaError(Exception):
        java_exception = Java()

    class App:
        class router:  # noqa: N801 - FastAPI's attribute
            lifespan_context: Any = None

    started = SparkStart(App(), "spark://127.0.0.1:7077")
    started.failure = Py4JJavaError()
    line = started.failed()
    assert line.startswith("sparktrain cannot start: Spark did not start with master spark://127.0.0.1:7077 "
                           "(SPARKTRAIN_SPARK_MASTER): Spark stopped it while starting"), line  # fmt: skip
    assert "stopped SparkContext" not in line

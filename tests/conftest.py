"""Real services for the tests: PostgreSQL, Redis, a local[2] SparkSession, the service over real HTTP.

Set ``SPARKTRAIN_REQUIRE_SERVICES=1`` (CI does) to make a missing Redis or PostgreSQL fail the tests that need
them instead of skipping them.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Service, free_port, pg_database, running_service

REPO = Path(__file__).resolve().parents[1]
REQUIRE_SERVICES = os.environ.get("SPARKTRAIN_REQUIRE_SERVICES") == "1"
PG_HOST = os.environ.get("SPARKTRAIN_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432")
REDIS_HOST = os.environ.get("SPARKTRAIN_TEST_REDIS", "redis://127.0.0.1:6379")
REDIS_DB = 13  # a database of its own: tests flush nothing but their own queues

# An S3-compatible server (moto) for the storage tests. Its address must be in the environment before the test
# session's SparkSession starts: Spark's Python workers inherit the JVM's environment from then.
# Every pytest-xdist worker is a process of its own with its own SparkSession and moto server: each sets its own
# address (a worker inherits the controller's environment, which names the controller's port, not its own).
S3_PORT = free_port()
_S3 = {
    "AWS_ENDPOINT_URL": f"http://127.0.0.1:{S3_PORT}",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
for _key, _value in _S3.items():
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ[_key] = _value
    else:
        os.environ.setdefault(_key, _value)

# Every JVM the tests start (each worker's SparkSession, the drivers the process tests run, a standalone cluster's
# daemons and executors) compiles with C1 only and collects with the serial collector: on this 2-core machine a
# SparkSession's start and a few small jobs took 31% less CPU (9.7 s against 14.1 s; docs/testing.md), and the test
# JVMs are short-lived and small. The service's own JVM keeps Java's defaults, tuned for a long-lived driver.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


def _missing(what: str) -> None:
    message = f"{what} is not reachable on 127.0.0.1 (start it: scripts/services.sh, see docs/testing.md)"
    if REQUIRE_SERVICES:
        pytest.fail(message)
    pytest.skip(message)


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


# --- PostgreSQL and Redis ------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def pg_server() -> str:
    if not _port_open(5432):
        _missing("PostgreSQL")
    return PG_HOST


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test, dropped afterwards."""
    with pg_database(pg_server) as url:
        yield url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'sparktrain.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest) -> str:
    """Each database test runs on both backends."""
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))


@pytest.fixture(scope="session")
def redis_url() -> str:
    if not _port_open(6379):
        _missing("Redis")
    return f"{REDIS_HOST}/{REDIS_DB}"


@pytest.fixture(scope="session")
def s3_bucket() -> Iterator[str]:
    """A bucket on a real S3-compatible server (moto's server mode) listening on 127.0.0.1."""
    import subprocess
    import sys
    import time

    import boto3

    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(S3_PORT)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not _port_open(S3_PORT):
            assert time.monotonic() < deadline, "moto's S3 server did not start"
            time.sleep(0.1)
        boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"]).create_bucket(Bucket="sparktrain-test")
        yield "sparktrain-test"
    finally:
        server.terminate()
        server.wait(10)


@pytest.fixture
def db(db_url: str) -> Iterator[Any]:
    """A migrated database's sessionmaker."""
    from app.db.migrate import upgrade_database
    from app.db.session import create_db_engine, create_sessionmaker

    engine = create_db_engine(db_url)
    upgrade_database(engine)
    yield create_sessionmaker(engine)
    engine.dispose()


# --- Spark ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One real local[2] SparkSession for the whole test run (Spark allows one per process)."""
    from app.core.settings import Settings
    from app.spark.session import build_spark_session

    var = tmp_path_factory.mktemp("spark-var")
    settings = Settings(var_dir=var, spark_master="local[2]", spark_conf={"spark.ui.enabled": "false"})
    session = build_spark_session(settings)
    yield session
    session.stop()


# --- the service over real HTTP ------------------------------------------------------------------------------


@pytest.fixture
def make_service(spark: Any, tmp_path: Path) -> Callable[..., Any]:
    """``with make_service(database_url=..., broker_url=...) as svc:`` — one service at a time."""

    def factory(**overrides: Any) -> Any:
        return running_service(spark, tmp_path, **overrides)

    return factory


@pytest.fixture(scope="module")
def service(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """The embedded default (SQLite database, SQLite broker), shared by a test module."""
    with running_service(spark, tmp_path_factory.mktemp("svc")) as svc:
        yield svc


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``make test`` runs ``-n 2 --dist loadfile``) the files with slow tests are handed out
    first, so that a long chaos test does not end the run on one worker while the other idles. The order within a
    file, and among the fast files, is kept; a run without xdist keeps the collection order."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # the workers collect, and hand their order to the controller
        return
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}

    def rank(item: pytest.Item) -> int:
        if item.path.name in LONGEST_FILES:
            return LONGEST_FILES.index(item.path.name)
        return len(LONGEST_FILES) + (item.path not in slow_files)

    items.sort(key=rank)


# The files whose tests took longest in the last measured runs (the 60 slowest are printed at the end of every run),
# longest first: handed out first, they do not end a two-worker run on one worker.
LONGEST_FILES = (
    "test_train_spark_ml.py",
    "test_models_elsewhere.py",
    "test_train_xgboost.py",
    "test_driver_lost_kinds.py",
    "test_driver_lost.py",
    "test_clean_stop.py",
    "test_processes.py",
    "test_storage_faults.py",
    "test_spark_lost.py",
    "test_console_browser.py",
    "test_standalone.py",
    "test_two_drivers.py",
    "test_master_restart.py",
    "test_categorical.py",
    "test_tune.py",
    "test_tune_driver_lost.py",
    "test_cli.py",
)


_FILE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Sums each file's setup, call and teardown times (on the controller too, from the workers' reports)."""
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The 15 files that took longest: what ``LONGEST_FILES`` should follow."""
    if os.environ.get("PYTEST_XDIST_WORKER") or not _FILE_SECONDS:
        return
    terminalreporter.write_sep("=", "slowest 15 files")
    for path, seconds in sorted(_FILE_SECONDS.items(), key=lambda item: -item[1])[:15]:
        terminalreporter.write_line(f"{seconds:8.1f}s {path}")

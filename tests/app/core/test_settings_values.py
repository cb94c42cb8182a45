"""A bad SPARKTRAIN_* value stops the driver at start-up with a message naming the variable and what it accepts:
not a traceback, and not a value quietly dropped or taken as the working directory (audit, configuration)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.core.settings import REPO_ROOT, Settings

KEY_A = "alice-0123456789abcdef"
KEY_B = "bob-0123456789abcdef00"


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("SPARKTRAIN_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize(
    ("variable", "value", "words"),
    [
        # an empty path is the working directory: never what an operator meant
        ("VAR_DIR", "", "SPARKTRAIN_VAR_DIR is empty"),
        ("ARTIFACT_ROOT", "  ", "SPARKTRAIN_ARTIFACT_ROOT is empty"),
        ("SPARK_CONF_DIR", "", "SPARKTRAIN_SPARK_CONF_DIR is empty"),
        # Spark would start without spark-defaults.conf
        ("SPARK_CONF_DIR", "/no/such/spark-conf", "SPARKTRAIN_SPARK_CONF_DIR /no/such/spark-conf is not a directory"),
        # malformed URLs: a traceback from SQLAlchemy, or a broker Celery cannot use
        ("DATABASE_URL", "notaurl", "SPARKTRAIN_DATABASE_URL must be a SQLAlchemy URL"),
        ("DATABASE_URL", "postgres//db/sparktrain", "it does not parse"),
        ("DATABASE_URL", "postgress://db/sparktrain", "SQLAlchemy knows no such dialect"),
        ("BROKER_URL", "redis//redis:6379/0", "SPARKTRAIN_BROKER_URL must be a Celery broker URL"),
        ("BROKER_URL", "rabbit://broker/", "kombu has no transport 'rabbit'"),
        ("BROKER_URL", "redis://redis:port/0", "it does not parse"),
        # kombu's parse_url raised TypeError at start-up (a traceback): the password belongs in the user part
        ("BROKER_URL", "redis://127.0.0.1:6379/9?password=x", "e.g. redis://:PASSWORD@host:6379/0"),
        ("ARTIFACT_STORE", "my-bucket/models", "SPARKTRAIN_ARTIFACT_STORE must be a URI"),
        ("ARTIFACT_STORE", "s3:/bucket/models", "SPARKTRAIN_ARTIFACT_STORE must be a URI"),
        ("REMOTE_URI_PREFIXES", "hdfs", "SPARKTRAIN_REMOTE_URI_PREFIXES item 1 is not a remote URI prefix"),
        ("REMOTE_URI_PREFIXES", "s3a://b/data/,file:///etc/", "item 2 is not a remote URI prefix"),
        ("SPARK_MASTER", "", "SPARKTRAIN_SPARK_MASTER must be local"),
        ("SPARK_MASTER", "master:7077", "spark://host:port"),
        ("SPARK_MASTER", "local[0]", "SPARKTRAIN_SPARK_MASTER must be local"),
        # lists with an empty item (an unset variable in a template) are refused, not shortened
        ("DATA_ROOTS", "/srv/a,,/srv/b", "SPARKTRAIN_DATA_ROOTS item 2 is empty"),
        ("DATA_ROOTS", ",/srv/a", "SPARKTRAIN_DATA_ROOTS item 1 is empty"),
        ("REMOTE_URI_PREFIXES", "s3a://b/x/,,hdfs://nn/y/", "SPARKTRAIN_REMOTE_URI_PREFIXES item 2 is empty"),
        ("API_KEYS", f"{KEY_A}:alice,,{KEY_B}:bob", "SPARKTRAIN_API_KEYS item 2 is empty"),
        # names that cannot be empty
        ("SPARK_APP_NAME", "", "spark_app_name"),
        ("QUEUE", "", "queue"),
        ("HOST", "", "host"),
        # infinite times: the watcher, the reconciler and the stop would wait forever or overflow
        ("HEARTBEAT_INTERVAL_S", "inf", "finite number"),
        ("STOP_GRACE_S", "inf", "finite number"),
        ("RETRY_DELAY_S", "Infinity", "finite number"),
        ("LOST_MESSAGE_AFTER_S", "inf", "finite number"),
        # a retry's wait for its task slots: none at all, or one that holds a consumer for longer than an hour
        ("SLOT_WAIT_S", "0", "greater than or equal to 1"),
        ("SLOT_WAIT_S", "7200", "less than or equal to 3600"),
        ("SLOT_WAIT_S", "inf", "finite number"),
        # a running job would be taken for lost between two heartbeats
        ("HEARTBEAT_STALE_S", "1.5", "SPARKTRAIN_HEARTBEAT_STALE_S must be more than twice"),
        # Spark settings that were turned into "{'b': 1}" or "None"
        ("SPARK_CONF", "spark.executor.memory=4g", "SPARKTRAIN_SPARK_CONF is not JSON"),
        ("SPARK_CONF", '{"spark.executor.memory": {"size": "4g"}}', "every value a string, number or boolean"),
        ("SPARK_CONF", '{"spark.executor.memory": null}', "every value a string, number or boolean"),
        ("SPARK_CONF", '{"": "4g"}', "every key must be a name"),
        # an owner no key can have: the quota would never apply
        ("OWNER_QUOTAS", '{"alice ": {"concurrent_jobs": 1}}', "SPARKTRAIN_OWNER_QUOTAS: owner 'alice ' must be"),
        ("OWNER_QUOTAS", '{"": {"concurrent_jobs": 1}}', "SPARKTRAIN_OWNER_QUOTAS: owner '' must be"),
    ],
)
def test_a_bad_value_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, words: str
) -> None:
    monkeypatch.setenv(f"SPARKTRAIN_{variable}", value)
    with pytest.raises(ValidationError) as info:
        Settings()
    text = str(info.value)
    assert words in text, text
    assert f"SPARKTRAIN_{variable}" in text or variable.lower() in text, text


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("DATABASE_URL", "postgresql+psycopg://app:S3cretPw@db:port/sparktrain"),
        ("BROKER_URL", "redis://:S3cretPw@redis:port/0"),
        ("ARTIFACT_STORE", "S3cretPw"),
    ],
)
def test_a_refused_url_is_not_repeated(monkeypatch: pytest.MonkeyPatch, variable: str, value: str) -> None:
    monkeypatch.setenv(f"SPARKTRAIN_{variable}", value)
    with pytest.raises(ValidationError) as info:
        Settings()
    assert "S3cretPw" not in str(info.value)


def test_empty_means_unset_where_the_documentation_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """SPARKTRAIN_OWNER_ROOT= was the working directory (and overlapped the data roots), SPARKTRAIN_RAPIDS_JAR= the
    jar '.'; both are documented as 'empty: none'."""
    monkeypatch.setenv("SPARKTRAIN_OWNER_ROOT", "")
    monkeypatch.setenv("SPARKTRAIN_RAPIDS_JAR", "")
    settings = Settings()
    assert settings.owner_root is None
    assert settings.rapids_jar is None


def test_values_are_read_the_way_operators_write_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKTRAIN_LOG_LEVEL", "info")  # uvicorn's --log-level spelling
    monkeypatch.setenv("SPARKTRAIN_LOG_FORMAT", "JSON")
    monkeypatch.setenv("SPARKTRAIN_SPARK_CONF", '{"spark.sql.adaptive.enabled": true, "spark.task.cpus": 2}')
    settings = Settings()
    assert settings.log_level == "INFO" and settings.log_format == "json"
    assert settings.spark_conf == {"spark.sql.adaptive.enabled": "true", "spark.task.cpus": "2"}  # not "True"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("DATABASE_URL", "postgresql+psycopg://app:pw@db:5432/sparktrain?sslmode=require"),
        ("DATABASE_URL", "sqlite:////srv/sparktrain/state.db"),
        ("BROKER_URL", "rediss://:pw@redis:6380/0?ssl_cert_reqs=required"),
        ("BROKER_URL", "sqla+sqlite:////srv/sparktrain/broker.db"),
        ("ARTIFACT_STORE", "file:///srv/models"),
        ("ARTIFACT_STORE", "hdfs://namenode:8020/models"),
        ("REMOTE_URI_PREFIXES", "s3a://bucket/data/,hdfs://nn/data/,"),
        ("SPARK_MASTER", "local"),
        ("SPARK_MASTER", "local[*,3]"),
        ("SPARK_MASTER", "local-cluster[2,1,1024]"),
        ("SPARK_MASTER", "spark://m1:7077,m2:7077"),
        ("SPARK_MASTER", "k8s://https://kubernetes.default.svc:443"),
        ("SPARK_MASTER", "yarn"),
        ("HEARTBEAT_STALE_S", "3"),
        ("SLOT_WAIT_S", "90"),
    ],
)
def test_good_values_still_pass(monkeypatch: pytest.MonkeyPatch, variable: str, value: str) -> None:
    monkeypatch.setenv(f"SPARKTRAIN_{variable}", value)
    Settings()


def test_python_m_app_says_what_is_wrong_without_a_traceback(tmp_path: Path) -> None:
    """It was SQLAlchemy's NoSuchModuleError traceback (the database probe ran on the unchecked URL)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKTRAIN_")}
    env.update(PYTHONPATH=str(REPO_ROOT), SPARK_LOCAL_IP="127.0.0.1", SPARKTRAIN_DATABASE_URL="postgress://db/x",
               SPARKTRAIN_RECONCILE_INTERVAL_S="inf", SPARKTRAIN_MAX_EPOCH="5",
               SPARKTRAIN_HEARTBEAT_STALE_S="1")  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "app"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    assert "  SPARKTRAIN_DATABASE_URL must be a SQLAlchemy URL" in "\n".join(lines), lines  # not led twice
    assert "  SPARKTRAIN_RECONCILE_INTERVAL_S: Input should be a finite number" in lines, lines  # not the field
    # name, and not the value: a setting's value may be a secret (docs/security.md)
    assert "  SPARKTRAIN_MAX_EPOCH is not a setting, and is ignored (did you mean SPARKTRAIN_MAX_EPOCHS?)" in lines
    # a check across settings too, in the same start: pydantic skips those once a field failed (operator walkthrough)
    assert any(line.startswith("  SPARKTRAIN_HEARTBEAT_STALE_S must be more than twice") for line in lines), lines


def test_a_variable_that_is_not_a_setting_is_named_with_the_setting_it_resembles() -> None:
    from app.core.variables import unknown_variables

    environ = {"SPARKTRAIN_DATABSE_URL": "x", "sparktrain_port": "1", "SPARKTRAIN_URL": "http://x",
               "SPARKTRAIN_FROBNICATE": "1", "PATH": "/bin", "SPARKTRAIN_API_KEYS": "k"}  # fmt: skip
    assert unknown_variables(environ) == [
        "SPARKTRAIN_DATABSE_URL is not a setting, and is ignored (did you mean SPARKTRAIN_DATABASE_URL?)",
        "SPARKTRAIN_FROBNICATE is not a setting, and is ignored (docs/configuration.md lists the settings)",
    ]


def test_the_clis_key_set_on_the_driver_without_its_keys_is_named() -> None:
    """SPARKTRAIN_API_KEY (the CLI's, one letter short of the driver's SPARKTRAIN_API_KEYS) left the service open
    without a word: it is a known variable, so no did-you-mean either."""
    from app.core.variables import unknown_variables

    [line] = unknown_variables({"SPARKTRAIN_API_KEY": "alice-key-0123456789abcdef:alice:admin"})
    assert line.startswith("SPARKTRAIN_API_KEY is the CLI's key and configures nothing here: the driver's keys are "
                           "SPARKTRAIN_API_KEYS") and "alice-key" not in line  # fmt: skip
    assert unknown_variables({"SPARKTRAIN_API_KEY": "k", "SPARKTRAIN_API_KEYS": "k1:alice"}) == []
    assert unknown_variables({"SPARKTRAIN_API_KEY": " "}) == []


def test_every_cross_setting_problem_is_said_at_once(tmp_path: Path) -> None:
    """The first stopped the start, and the next showed only once it was fixed (README walkthrough)."""
    (tmp_path / "data").mkdir()
    with pytest.raises(ValidationError) as info:
        Settings(var_dir=tmp_path / "var", spark_profile="nosuch", owner_root=tmp_path / "data",
                 data_roots=[tmp_path / "data"], heartbeat_stale_s=1, heartbeat_interval_s=1)  # fmt: skip
    [error] = info.value.errors()
    lines = str(error["msg"]).removeprefix("Value error, ").split("\n  ")
    assert [line.split(" ")[0] for line in lines] == [
        "SPARKTRAIN_HEARTBEAT_STALE_S", "SPARKTRAIN_OWNER_ROOT", "SPARKTRAIN_SPARK_PROFILE"
    ], lines  # fmt: skip


def test_a_check_across_settings_failing_alone_is_said_once(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKTRAIN_")}
    env.update(PYTHONPATH=str(REPO_ROOT), SPARKTRAIN_HEARTBEAT_STALE_S="1")
    done = subprocess.run(
        [sys.executable, "-m", "app"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 1 and done.stderr.count("SPARKTRAIN_HEARTBEAT_STALE_S must be more than") == 1, (
        done.stderr[-2000:]
    )

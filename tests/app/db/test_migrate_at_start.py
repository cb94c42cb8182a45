"""The start-up's migration says what it did (operator walkthrough: nothing in the driver's log showed the schema going
from 0010 to 0014), and refuses to migrate a database that a driver of an older release still runs jobs on (it
migrated under a running one without a word, which went on writing rows the new schema relies on: a version number
was reused after a delete). A database already up to date is never refused: drivers of one release start freely."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, bindparam, text

from app.core.settings import Settings
from app.db.base import UTCDateTime
from app.db.migrate import OlderDriversRunning, alembic_config, upgrade_database
from app.db.session import create_db_engine
from tests.helpers import free_port

REPO = Path(__file__).resolve().parents[3]
OLD = "0010"  # the release of the walkthrough
JOB = "0123456789abcdef0123456789abcdef"
WORKER = "old-host:4242:abcd1234"


def _head() -> str:
    from alembic.script import ScriptDirectory

    from app.db.migrate import MIGRATIONS

    return str(ScriptDirectory(str(MIGRATIONS)).get_current_head())


def _at(engine: Engine, revision: str) -> None:
    from alembic import command

    with engine.begin() as conn:
        cfg = alembic_config(engine)
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def _running_job(engine: Engine, beat_ago_s: float) -> None:
    """A job as a driver of the old release runs it: RUNNING, its heartbeat ``beat_ago_s`` ago (columns of 0001)."""
    beat = datetime.now(UTC) - timedelta(seconds=beat_ago_s)
    insert = text(
        "INSERT INTO jobs (id, type, status, progress, attempt, max_attempts, request, warnings, owner, created_at, "
        "slots, worker_id, started_at, heartbeat_at) VALUES (:id, 'train', 'RUNNING', 0.5, 1, 3, '{}', '[]', "
        "'alice', :at, 1, :worker, :at, :beat)"
    ).bindparams(bindparam("at", type_=UTCDateTime()), bindparam("beat", type_=UTCDateTime()))
    with engine.begin() as conn:
        conn.execute(insert, {"id": JOB, "worker": WORKER, "at": beat, "beat": beat})


def _revision(engine: Engine) -> str:
    with engine.connect() as conn:
        return str(conn.scalar(text("SELECT version_num FROM alembic_version")))


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "sparktrain.db" and r.levelno == logging.INFO]


def test_the_migration_and_an_up_to_date_schema_are_logged(db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    engine = create_db_engine(db_url)
    _at(engine, OLD)
    head = _head()
    with caplog.at_level(logging.INFO, logger="sparktrain.db"):
        upgrade_database(engine)
    said = [m for m in _said(caplog) if m.startswith("database schema")]
    assert len(said) == 1, said
    n = int(head) - int(OLD)
    assert said[0].startswith(f"database schema {OLD} → {head} ({n} migrations: 0011 job output path, 0012 "), said
    assert said[0].endswith(" s)") and f"{head} " in said[0].split(": ", 1)[1], said
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="sparktrain.db"):
        upgrade_database(engine)  # the next start
    assert _said(caplog) == [f"database schema up to date ({head})"]
    engine.dispose()


def test_a_new_database_is_logged_as_created(sqlite_url: str, caplog: pytest.LogCaptureFixture) -> None:
    engine = create_db_engine(sqlite_url)
    with caplog.at_level(logging.INFO, logger="sparktrain.db"):
        upgrade_database(engine)
    said = _said(caplog)
    assert len(said) == 1 and said[0].startswith(f"database schema created ({_head()}, {int(_head())} migrations, ")
    engine.dispose()


def test_a_database_behind_is_not_migrated_while_an_older_driver_runs_a_job(db_url: str) -> None:
    engine = create_db_engine(db_url)
    _at(engine, OLD)
    _running_job(engine, beat_ago_s=2)
    with pytest.raises(OlderDriversRunning) as refused:
        upgrade_database(engine, heartbeat_stale_s=30)
    said = str(refused.value)
    lines = said.splitlines()
    assert len(lines) == 2, said
    assert f"at schema revision {OLD} and this release would migrate it to {_head()}" in lines[0], said
    assert re.search(rf"job {JOB} \(driver {WORKER}, beat \d+ s ago\)", lines[0]), said
    assert re.match(r"Stop every driver of the older release \(SIGTERM hands their jobs back\), then start this one; "
                    r"or wait \d+ s if they are already stopped", lines[1]), said  # fmt: skip
    assert _revision(engine) == OLD, "nothing migrated"
    engine.dispose()


def test_a_database_behind_whose_jobs_stopped_beating_is_migrated(db_url: str) -> None:
    engine = create_db_engine(db_url)
    _at(engine, OLD)
    _running_job(engine, beat_ago_s=120)  # its driver died (or was stopped without handing it back)
    upgrade_database(engine, heartbeat_stale_s=30)
    assert _revision(engine) == _head()
    engine.dispose()


def test_an_up_to_date_database_starts_beside_a_running_driver(db_url: str) -> None:
    engine = create_db_engine(db_url)
    upgrade_database(engine)
    _running_job(engine, beat_ago_s=0)
    upgrade_database(engine, heartbeat_stale_s=30)  # a second driver of the same release
    assert _revision(engine) == _head()
    engine.dispose()


def test_the_start_up_uses_the_heartbeat_setting(sqlite_url: str, tmp_path: Path) -> None:
    """A heartbeat 100 s old is stale by the default 30 s, and live by SPARKTRAIN_HEARTBEAT_STALE_S=600: the
    start-up refuses before it builds Spark."""
    from app.runtime import start_runtime

    engine = create_db_engine(sqlite_url)
    _at(engine, OLD)
    _running_job(engine, beat_ago_s=100)
    settings = Settings(var_dir=tmp_path, database_url=sqlite_url, heartbeat_stale_s=600)
    with pytest.raises(OlderDriversRunning, match="SPARKTRAIN_HEARTBEAT_STALE_S=600"):
        start_runtime(settings, consume=False, reconcile=False)
    assert _revision(engine) == OLD
    engine.dispose()


def test_the_driver_exits_with_status_3_and_says_what_to_do(sqlite_url: str, tmp_path: Path) -> None:
    engine = create_db_engine(sqlite_url)
    _at(engine, OLD)
    _running_job(engine, beat_ago_s=1)
    engine.dispose()
    env = {**os.environ, "SPARKTRAIN_VAR_DIR": str(tmp_path), "SPARKTRAIN_DATABASE_URL": sqlite_url,
           "SPARKTRAIN_PORT": str(free_port())}  # fmt: skip
    run = subprocess.run([sys.executable, "-m", "app"], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=180, check=False)  # fmt: skip
    assert run.returncode == 3, run.stderr[-3000:]
    assert "Traceback" not in run.stderr and "Uvicorn" not in run.stderr, run.stderr[-3000:]
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"sparktrain cannot start: the database {sqlite_url} is at "), lines
    assert f"job {JOB} (driver {WORKER}" in lines[0] and lines[1].startswith("Stop every driver of the older release")
    assert _revision(create_db_engine(sqlite_url)) == OLD


def test_the_probe_before_uvicorn_names_the_older_drivers(db_url: str, tmp_path: Path) -> None:
    from app.__main__ import database_problem

    engine = create_db_engine(db_url)
    _at(engine, OLD)
    _running_job(engine, beat_ago_s=1)
    said = database_problem(Settings(var_dir=tmp_path, database_url=db_url))
    assert said is not None and f"job {JOB} (driver {WORKER}" in said and len(said.splitlines()) == 2, said
    assert _revision(engine) == OLD
    upgrade_database(engine, heartbeat_stale_s=0.001)  # its driver stopped: stale now
    assert database_problem(Settings(var_dir=tmp_path, database_url=db_url)) is None, "up to date: never asked"
    engine.dispose()

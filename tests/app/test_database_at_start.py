"""Start-up with a database it cannot use says what to do, in two lines and no traceback: a database or role that
does not exist (the server runs: create it), and a database a newer release migrated (alembic's "Can't locate
revision" traceback, 164 lines, after uvicorn had started: operator walkthrough)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from app.__main__ import database_problem
from app.core.settings import Settings
from app.db.migrate import upgrade_database

REPO = Path(__file__).resolve().parents[2]


def _migrated_by_a_newer_release(url: str) -> None:
    engine = create_engine(url)
    upgrade_database(engine)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    engine.dispose()


def _refused_after_a_newer_release(url: str, tmp_path: Path) -> None:
    upgrade_database(create_engine(url))
    assert database_problem(Settings(var_dir=tmp_path, database_url=url)) is None, "this release's own schema"
    _migrated_by_a_newer_release(url)
    said = database_problem(Settings(var_dir=tmp_path, database_url=url))
    assert said is not None and "was migrated by a newer sparktrain (its schema revision 0099" in said, said
    assert "Run the release that migrated it" in said


def test_a_postgresql_database_a_newer_release_migrated_is_refused(tmp_path: Path, pg_url: str) -> None:
    _refused_after_a_newer_release(pg_url, tmp_path)


def test_a_database_a_newer_release_migrated_stops_the_start_in_two_lines(tmp_path: Path) -> None:
    sqlite = f"sqlite:///{tmp_path / 'sparktrain.db'}"
    _refused_after_a_newer_release(sqlite, tmp_path)
    env = {**os.environ, "SPARKTRAIN_VAR_DIR": str(tmp_path), "SPARKTRAIN_DATABASE_URL": sqlite}
    run = subprocess.run([sys.executable, "-m", "app"], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=120, check=False)  # fmt: skip
    assert run.returncode == 3, run.stderr
    assert "Traceback" not in run.stderr and "Uvicorn" not in run.stderr, run.stderr[-3000:]
    assert "schema revision 0099" in run.stderr and len(run.stderr.strip().splitlines()) <= 4, run.stderr


def test_a_database_that_does_not_exist_says_to_create_it(pg_server: str, tmp_path: Any) -> None:
    said = database_problem(Settings(var_dir=tmp_path, database_url=f"{pg_server}/sparktrain_no_such_database"))
    assert said is not None and 'database "sparktrain_no_such_database" does not exist' in said, said
    assert "Create it (createdb" in said and "Start it" not in said, said

"""The Alembic migrations build exactly the schema of the SQLAlchemy models, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text

from app.db.migrate import upgrade_database
from app.db.models import Base
from app.db.session import create_db_engine


def test_migrations_match_models(db_url: str) -> None:
    engine = create_db_engine(db_url)
    upgrade_database(engine)
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = compare_metadata(ctx, Base.metadata)
    assert diff == [], f"models and migrations differ; write a migration: {diff}"
    tables = set(inspect(engine).get_table_names())
    expected = {"jobs", "job_metrics", "job_logs", "models", "model_versions", "checkpoints", "datasets"}
    assert expected <= tables
    engine.dispose()


def test_upgrade_is_idempotent(db_url: str) -> None:
    engine = create_db_engine(db_url)
    upgrade_database(engine)
    upgrade_database(engine)  # a second driver starting against a migrated database
    with engine.connect() as conn:
        assert MigrationContext.configure(conn).get_current_revision() is not None
    engine.dispose()


def test_revision_0011_records_the_outputs_of_earlier_predictions(db_url: str) -> None:
    """Batch predictions queued before the output path was a column get it from their stored request."""
    import json
    from datetime import UTC, datetime

    from alembic import command

    from app.db.migrate import alembic_config
    from app.services.outputs import key

    engine = create_db_engine(db_url)
    with engine.begin() as conn:
        cfg = alembic_config(engine)
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0010")
        for job_id, job_type, request in (
            ("a" * 32, "predict", {"model": {"name": "m"}, "output_uri": "/data/preds/out"}),
            ("b" * 32, "train", {"name": "m"}),
        ):
            conn.execute(
                text(
                    "INSERT INTO jobs (id, type, status, progress, attempt, max_attempts, request, warnings, owner, "
                    "created_at, slots) VALUES (:id, :type, 'SUCCEEDED', 1.0, 1, 3, :request, '[]', 'alice', :at, 1)"
                ),
                {"id": job_id, "type": job_type, "request": json.dumps(request), "at": datetime.now(UTC)},
            )
        command.upgrade(cfg, "head")
        rows = dict(conn.execute(text("SELECT id, output_path FROM jobs")).all())
        keys = dict(conn.execute(text("SELECT id, output_key FROM jobs")).all())
    assert rows == {"a" * 32: "/data/preds/out", "b" * 32: None}
    assert keys["a" * 32] == key("/data/preds/out") and keys["b" * 32] is None
    engine.dispose()


def test_revision_0012_keeps_the_points_and_never_reuses_their_ids(db_url: str) -> None:
    """On SQLite the metric table is copied into one declared AUTOINCREMENT: the points and their ids stay, and a
    point written after the newest is dropped does not take its id again."""
    from datetime import UTC, datetime

    from alembic import command

    from app.db.migrate import alembic_config

    engine = create_db_engine(db_url)
    insert = text("INSERT INTO job_metrics (job_id, key, step, value, time) VALUES (:job, 'loss', :step, 1.0, :at)")
    with engine.begin() as conn:
        cfg = alembic_config(engine)
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0011")
        conn.execute(
            text(
                "INSERT INTO jobs (id, type, status, progress, attempt, max_attempts, request, warnings, owner, "
                "created_at, slots) VALUES (:id, 'train', 'RUNNING', 0.5, 1, 3, '{}', '[]', 'alice', :at, 1)"
            ),
            {"id": "a" * 32, "at": datetime.now(UTC)},
        )
        for step in range(3):
            conn.execute(insert, {"job": "a" * 32, "step": step, "at": datetime.now(UTC)})
        before = conn.execute(text("SELECT id, step FROM job_metrics ORDER BY id")).all()
        command.upgrade(cfg, "head")
        assert conn.execute(text("SELECT id, step FROM job_metrics ORDER BY id")).all() == before
        conn.execute(text("DELETE FROM job_metrics WHERE id = :id"), {"id": before[-1][0]})
        conn.execute(insert, {"job": "a" * 32, "step": 2, "at": datetime.now(UTC)})
        newest = conn.execute(text("SELECT max(id) FROM job_metrics")).scalar_one()
    assert newest > before[-1][0]
    engine.dispose()


def test_an_upgrade_that_fails_midway_leaves_the_database_as_it_was_and_the_next_one_succeeds(
    db_url: str, tmp_path: Path
) -> None:
    """0012 copies the metric table on SQLite. A failure during the copy (a full disk, a kill) left the copy's table
    behind at revision 0011 (its CREATE had committed on its own), and every later start failed on it."""
    from alembic import command
    from sqlalchemy import event

    from app.db.migrate import alembic_config

    if not db_url.startswith("sqlite"):
        pytest.skip("PostgreSQL's DDL is transactional, and 0012 changes nothing there")
    engine = create_db_engine(f"sqlite:///{tmp_path / 'half.db'}")
    with engine.begin() as conn:
        cfg = alembic_config(engine)
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0011")

    def fail_the_copy(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        # the copy fails, and so does Alembic's clean-up after it (as when the process is killed, or the database
        # is locked by another driver)
        if statement.lstrip().startswith(("INSERT INTO _alembic_tmp_job_metrics", "DROP TABLE _alembic_tmp")):
            raise OSError(28, "No space left on device")

    event.listen(engine, "before_cursor_execute", fail_the_copy)
    with pytest.raises(Exception, match="No space left"):
        upgrade_database(engine)
    event.remove(engine, "before_cursor_execute", fail_the_copy)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == "0011"
        assert not conn.execute(text("SELECT name FROM sqlite_master WHERE name LIKE '_alembic_tmp%'")).all()
    upgrade_database(engine)  # the next start, to the newest revision
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == "0014"
    engine.dispose()

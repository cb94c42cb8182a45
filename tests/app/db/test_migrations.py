"""The Alembic migrations build exactly the schema of the SQLAlchemy models, on SQLite and PostgreSQL."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

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

"""Alembic environment: runs against the connection handed over by app.db.migrate (online mode only)."""

from __future__ import annotations

from alembic import context

from app.db.models import Base

config = context.config
connection = config.attributes.get("connection")
if connection is None:
    engine = config.attributes.get("engine")
    if engine is None:
        raise RuntimeError("run migrations through app.db.migrate.upgrade_database")
    connection = engine.connect()

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()

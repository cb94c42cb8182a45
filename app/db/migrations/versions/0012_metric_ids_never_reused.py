"""Metric point ids are never reused on SQLite (AUTOINCREMENT): a retried job drops its points past the checkpoint
it continues from, and SQLite's plain rowid gave the next attempt's points the ids of the dropped ones, so an event
stream following the job by id (GET /jobs/{id}/events) skipped them. PostgreSQL's sequence never reuses ids.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def _recreate(autoincrement: bool) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    op.execute("DROP TABLE IF EXISTS _alembic_tmp_job_metrics")  # a copy an interrupted upgrade of 0.1.0 left
    with op.batch_alter_table("job_metrics", recreate="always", table_kwargs={"sqlite_autoincrement": autoincrement}):
        pass  # the table is copied into one declared with (or without) AUTOINCREMENT, its indexes with it


def upgrade() -> None:
    _recreate(True)


def downgrade() -> None:
    _recreate(False)

"""Reliability, second round: the task slots a job holds and the quota a queued job waits for (owner quotas), and
the request token buckets shared by drivers without Redis.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("slots", sa.Integer(), server_default="1", nullable=False))
        batch.add_column(sa.Column("waiting_for", sa.String(length=32), nullable=True))
        batch.add_column(sa.Column("woken_at", sa.DateTime(timezone=True), nullable=True))
        batch.create_index("ix_jobs_owner_status", ["owner", "status"], unique=False)
    op.create_table(
        "rate_buckets",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("tokens", sa.Float(), nullable=False),
        sa.Column("updated", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_rate_buckets")),
    )


def downgrade() -> None:
    op.drop_table("rate_buckets")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ix_jobs_owner_status")
        batch.drop_column("woken_at")
        batch.drop_column("waiting_for")
        batch.drop_column("slots")

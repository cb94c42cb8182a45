"""Registered datasets whose summary (schema, row count, sample rows) Spark reads after the answer: the summary's
state and, when the read failed, why.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.add_column(sa.Column("summary", sa.String(length=16), server_default="complete", nullable=False))
        batch.add_column(sa.Column("summary_error", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("summary_error")
        batch.drop_column("summary")

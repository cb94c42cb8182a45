"""Trials of tuning jobs: a job's parent (the tune job) and its trial number, one job per (parent, trial).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("parent_id", sa.String(length=32), nullable=True))
        batch.add_column(sa.Column("trial", sa.Integer(), nullable=True))
        batch.create_index("ix_jobs_parent_id", ["parent_id"], unique=False)
        batch.create_unique_constraint("uq_jobs_parent_id_trial", ["parent_id", "trial"])


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_constraint("uq_jobs_parent_id_trial", type_="unique")
        batch.drop_index("ix_jobs_parent_id")
        batch.drop_column("trial")
        batch.drop_column("parent_id")

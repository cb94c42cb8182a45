"""The bad-row policy a dataset was registered with, so that a driver can read a ``pending`` summary that another
(stopped) driver left unread.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.add_column(sa.Column("bad_rows_policy", sa.String(length=8), server_default="fail", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("bad_rows_policy")

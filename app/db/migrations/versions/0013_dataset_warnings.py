"""What a dataset's registration warns about (a CSV that doubles its quotes, read by Spark only with
``options.escape``), kept with the dataset so that ``GET /datasets/{id}`` says it too.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.add_column(sa.Column("warnings", sa.JSON(), server_default=sa.text("'[]'"), nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("warnings")

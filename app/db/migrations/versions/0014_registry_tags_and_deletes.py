"""The registry as MLflow users expect it: key/value tags on models and on versions, and version numbers that are
never given again once deleted (``models.last_version``, the highest number ever given, filled from the versions
there are).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def _tags(table: str, owner_column: str, owner_table: str) -> None:
    op.create_table(
        table,
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column(owner_column, sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=250), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            [owner_column],
            [f"{owner_table}.id"],
            name=op.f(f"fk_{table}_{owner_column}_{owner_table}"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f(f"pk_{table}")),
        sa.UniqueConstraint(owner_column, "key", name=f"uq_{table}_{owner_column}_key"),
    )


def upgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.add_column(sa.Column("last_version", sa.Integer(), server_default="0", nullable=False))
    op.execute(
        "UPDATE models SET last_version = COALESCE("
        "(SELECT MAX(model_versions.version) FROM model_versions WHERE model_versions.model_id = models.id), 0)"
    )
    _tags("model_tags", "model_id", "models")
    _tags("model_version_tags", "version_id", "model_versions")


def downgrade() -> None:
    op.drop_table("model_version_tags")
    op.drop_table("model_tags")
    with op.batch_alter_table("models") as batch:
        batch.drop_column("last_version")

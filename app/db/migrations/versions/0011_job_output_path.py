"""Where a batch prediction writes, so that its output stays private to the job's owner: the path and its
SHA-256 (indexed). Jobs queued before this revision get theirs from their stored request.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06
"""

from __future__ import annotations

import hashlib
import json

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("output_path", sa.Text(), nullable=True))
        batch.add_column(sa.Column("output_key", sa.String(length=64), nullable=True))
        batch.create_index("ix_jobs_output_key", ["output_key"])
    bind = op.get_bind()
    jobs = sa.table(
        "jobs",
        sa.column("id", sa.String),
        sa.column("type", sa.String),
        sa.column("request", sa.JSON),
        sa.column("output_path", sa.Text),
        sa.column("output_key", sa.String),
    )
    for job_id, request in bind.execute(sa.select(jobs.c.id, jobs.c.request).where(jobs.c.type == "predict")):
        body = json.loads(request) if isinstance(request, str) else request
        path = (body or {}).get("output_uri")
        if isinstance(path, str):
            key = hashlib.sha256(path.encode("utf-8", "surrogatepass")).hexdigest()
            bind.execute(jobs.update().where(jobs.c.id == job_id).values(output_path=path, output_key=key))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ix_jobs_output_key")
        batch.drop_column("output_key")
        batch.drop_column("output_path")

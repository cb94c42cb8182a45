"""Job metrics by (job_id, id): the event stream (GET /jobs/{id}/events) and the Prometheus scrape read a job's
newest points by id; the (job_id, key, step) index would make each read walk all of the job's points.

Revision ID: 0007
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_job_metrics_job_id_id", "job_metrics", ["job_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_job_metrics_job_id_id", table_name="job_metrics")

"""Job metrics by (job_id, id): the event stream (GET /jobs/{id}/events) reads a job's newest points by id, and the
(job_id, key, step) index would make each read walk all of the job's points. Jobs by (type, framework, status,
started_at, finished_at): the Prometheus scrape counts and times every job from this index alone, without reading the
rows (their request and result JSON).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_job_metrics_job_id_id", "job_metrics", ["job_id", "id"])
    op.create_index("ix_jobs_type_state_times", "jobs", ["type", "framework", "status", "started_at", "finished_at"])


def downgrade() -> None:
    op.drop_index("ix_jobs_type_state_times", table_name="jobs")
    op.drop_index("ix_job_metrics_job_id_id", table_name="job_metrics")

"""An event stream's cursor across a retry, on SQLite and PostgreSQL: a retried attempt drops the job's metric points
past the checkpoint it continues from (checkpoints.forget_metrics_after) and writes them again. A client that had
followed the dropped points reconnects with a ``Last-Event-ID`` beyond the job's newest point; that cursor is still
one the job issued, and the attempt's new points come after it (on SQLite they took the dropped points' ids, so a
follower never got them)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select, text

from app.core.auth import Caller
from app.core.errors import BadRequest
from app.db.models import Checkpoint, Job, JobMetric
from app.db.session import transaction
from app.services import checkpoints, events, jobs


def _points(db: Any, job_id: str, steps: range) -> list[int]:
    with transaction(db) as session:
        jobs.add_metrics(session=session, job_id=job_id, points=[{"key": "loss", "value": s, "step": s} for s in steps])
    with db() as session:
        ids = session.scalars(select(JobMetric.id).where(JobMetric.job_id == job_id).order_by(JobMetric.id))
        return list(ids)[-len(steps) :]


def test_a_cursor_into_points_a_retry_dropped_is_valid_and_the_new_points_follow_it(db: Any) -> None:
    with transaction(db) as session:
        job, _ = jobs.create_job(session=session, job_type="train", request={}, framework="torch")
        session.add(Checkpoint(id="c" * 32, job_id=job.id, epoch=1, step=2, uri="file:///c"))
        job_id = job.id
    first = _points(db, job_id, range(1, 6))  # steps 1..5; the follower saw them all
    seen = events.Cursor(metric=first[-1])
    caller = Caller()
    with transaction(db) as session:  # attempt 2 continues from step 2: steps 3..5 go
        session.get(Job, job_id).attempt = 2
    with transaction(db) as session:
        assert checkpoints.forget_metrics_after(session=session, job_id=job_id, checkpoint_id="c" * 32) == 3
    with db() as session:
        entry = session.get(Job, job_id).attempts[-1]
    assert (entry["attempt"], entry["dropped_metrics"], entry["dropped_metric_ids_upto"]) == (2, 3, first[-1])

    assert events.start(db=db, job_id=job_id, caller=caller, after=seen) == seen  # was a 400: "ahead"
    with pytest.raises(BadRequest, match="ahead of this job's events"):  # an id this job never had is still one
        events.start(db=db, job_id=job_id, caller=caller, after=events.Cursor(metric=first[-1] + 1))

    again = _points(db, job_id, range(3, 6))  # attempt 2 writes steps 3..5 again
    assert min(again) > first[-1], f"ids of dropped points were reused: {first} then {again}"
    with db() as session:
        window = events.read_window(session=session, job_id=job_id, after=seen, limit=100)
    assert [(p["id"], p["step"]) for p in window.metrics] == list(zip(again, range(3, 6), strict=True))


def test_sqlite_metric_ids_are_declared_autoincrement(db: Any, db_url: str) -> None:
    """Migration 0012: SQLite's plain rowid takes the highest id left plus one, a dropped tail's ids again."""
    if not db_url.startswith("sqlite"):
        pytest.skip("PostgreSQL's sequences never reuse ids")
    with db() as session:
        ddl = session.execute(text("SELECT sql FROM sqlite_master WHERE name = 'job_metrics'")).scalar_one()
        indexes = set(session.scalars(text("SELECT name FROM sqlite_master WHERE tbl_name = 'job_metrics' "
                                           "AND type = 'index'")))  # fmt: skip
    assert "AUTOINCREMENT" in ddl.upper()
    assert {"ix_job_metrics_job_key_step", "ix_job_metrics_job_id_id"} <= indexes

"""One job whose stored row cannot be read does not stop the reconciler for every other job (SQLite and
PostgreSQL): that job ends FAILED saying what could not be read and to submit it again, the rest of the pass goes
on, and the next pass does not trip on it again."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from app.core.jobstates import JobStatus
from app.db.base import utcnow
from app.db.models import Job
from app.db.session import transaction
from app.services import jobs
from tests.app.services.test_reconcile import never, reconcile, running_job


def _assert_failed_unreadable(db: Any, job_id: str, what: str) -> None:
    with db() as s:
        job = s.get(Job, job_id)
        assert (job.status, job.error_reason) == ("FAILED", "UNREADABLE_JOB")
        assert what in job.error_message and "submit it again" in job.error_message, job.error_message
        assert job.finished_at is not None
        lines = [line.message for line in jobs.list_logs(session=s, job_id=job_id)]
    assert any("submit it again" in line for line in lines), lines


def test_a_lost_job_whose_plan_raises_attribute_error_fails_alone(db: Any) -> None:
    """A cross-validation plan whose grid was stored as a list: reading it raises AttributeError."""
    bad = running_job(db, status=JobStatus.RUNNING, beat_age_s=60, framework="spark_ml",
                      plan={"spec": {"grid": ["maxDepth"], "num_folds": 2}})  # fmt: skip
    good = running_job(db, status=JobStatus.RUNNING, beat_age_s=60, framework="torch", queue="q")
    sent: list[tuple[str, str, str]] = []

    actions = {a["job_id"]: a for a in reconcile(db=db, send=lambda *m: sent.append(m), stale_after_s=30)}

    assert actions[good]["action"] == "retried" and sent == [("train.torch", good, "q")]
    assert actions[bad]["action"] == "failed"
    _assert_failed_unreadable(db, bad, "stored plan")
    assert reconcile(db=db, send=never, stale_after_s=30) == [], "the next pass finds nothing to do"


def test_a_lost_job_whose_attempts_cannot_be_read_fails_alone(db: Any) -> None:
    bad = running_job(db, status=JobStatus.RUNNING, beat_age_s=60, framework="torch")
    good = running_job(db, status=JobStatus.CANCELLING, beat_age_s=60, framework="torch")
    with transaction(db) as s:
        s.get(Job, bad).attempts = [5]

    actions = {a["job_id"]: a for a in reconcile(db=db, send=never, stale_after_s=30)}

    assert actions[good] == {"job_id": good, "action": "cancelled"}
    assert actions[bad]["action"] == "failed"
    _assert_failed_unreadable(db, bad, "cannot be read")
    with db() as s:
        assert s.get(Job, bad).attempts == [5], "what could not be read is kept as it was, for a look"
    assert reconcile(db=db, send=never, stale_after_s=30) == []


def _unsent_retry(db: Any, **entry: Any) -> str:
    """A job queued again as attempt 2 whose message has not gone out yet."""
    with transaction(db) as s:
        job, _ = jobs.create_job(session=s, job_type="train", request={"name": "x"}, framework="torch")
        row = s.get(Job, job.id)
        row.attempt = 2
        row.attempts = [{"attempt": 1, "queue": "q", "status": "FAILED", "error_reason": "DRIVER_LOST"},
                        {"attempt": 2, "queue": "q", "sent": False, **entry}]  # fmt: skip
        return job.id


def test_an_unsent_retry_whose_times_cannot_be_read_fails_alone(db: Any) -> None:
    """A malformed ``not_before`` stopped the whole pass before it even looked for lost jobs."""
    old = (utcnow() - timedelta(minutes=5)).isoformat()
    bad = _unsent_retry(db, queued_at=old, not_before="soon")
    good = _unsent_retry(db, queued_at=old)
    lost = running_job(db, status=JobStatus.CANCELLING, beat_age_s=60)
    sent: list[tuple[str, str, str]] = []

    actions = {a["job_id"]: a for a in reconcile(db=db, send=lambda *m: sent.append(m), stale_after_s=30)}

    assert actions[lost]["action"] == "cancelled"
    assert actions[good] == {"job_id": good, "action": "sent again", "attempt": 2}
    assert sent == [("train.torch", good, "q")]
    assert actions[bad]["action"] == "failed"
    _assert_failed_unreadable(db, bad, "not_before")
    assert reconcile(db=db, send=never, stale_after_s=30) == []

"""Job rows on both databases: guarded transitions, idempotency keys, paging, cancel, metrics and logs."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from app.core.errors import BadRequest, Conflict, NotFound
from app.core.jobstates import JobStatus
from app.db.base import utcnow
from app.db.session import transaction
from app.services import attempts, jobs


def _create(db: Any, body: dict[str, Any] | None = None, **kwargs: Any) -> str:
    with transaction(db) as s:
        job, created = jobs.create_job(session=s, job_type="train", request=body or {"a": 1}, **kwargs)
        assert created
        return job.id


def test_create_and_read(db: Any) -> None:
    job_id = _create(db, framework="spark_ml", name="m")
    with db() as s:
        job = jobs.get_job(session=s, job_id=job_id)
        assert job.status == JobStatus.QUEUED
        assert job.attempt == 1
        assert job.created_at.tzinfo is not None
    with db() as s, pytest.raises(NotFound):
        jobs.get_job(session=s, job_id="nope")


def test_transition_is_guarded(db: Any) -> None:
    job_id = _create(db)
    with transaction(db) as s:
        assert jobs.transition(session=s, job_id=job_id, sources=[JobStatus.QUEUED], target=JobStatus.STARTING)
    with transaction(db) as s:
        # the second delivery of the same message finds the row taken
        assert not jobs.transition(session=s, job_id=job_id, sources=[JobStatus.QUEUED], target=JobStatus.STARTING)
    with pytest.raises(ValueError, match="not an edge"), transaction(db) as s:
        jobs.transition(session=s, job_id=job_id, sources=[JobStatus.SUCCEEDED], target=JobStatus.RUNNING)


def test_the_attempt_that_finished_the_job_reads_as_ended(db: Any) -> None:
    job_id = _create(db)
    with transaction(db) as s:
        jobs.transition(session=s, job_id=job_id, sources=[JobStatus.QUEUED], target=JobStatus.STARTING)
        job = jobs.get_job(session=s, job_id=job_id)
        job.attempts = attempts.update_attempt(job, 1, queue="default", started_at=utcnow().isoformat())
    with db() as s:
        running = attempts.history(jobs.get_job(session=s, job_id=job_id))
        assert "ended_at" not in running[0] and "status" not in running[0], "a running attempt has not ended"
    with transaction(db) as s:
        jobs.transition(session=s, job_id=job_id, sources=[JobStatus.STARTING], target=JobStatus.RUNNING)
        jobs.transition(session=s, job_id=job_id, sources=[JobStatus.RUNNING], target=JobStatus.FAILED,
                        finished_at=utcnow(), error_reason="SPARK_ERROR", error_message="boom")  # fmt: skip
    with db() as s:
        job = jobs.get_job(session=s, job_id=job_id)
        (entry,) = attempts.history(job)
        # written as the job's own times are (..Z): a reader saw +00:00 here and Z beside it (audit, 2026-12-06)
        assert entry["ended_at"] == job.finished_at.isoformat().replace("+00:00", "Z")
        assert entry["started_at"].endswith("Z") and job.attempts[0]["started_at"].endswith("+00:00")
        assert (entry["status"], entry["error_reason"], entry["error_message"]) == ("FAILED", "SPARK_ERROR", "boom")
        assert "ended_at" not in job.attempts[0], "the stored history is left as it was"


def test_racing_starts_have_one_winner(db: Any) -> None:
    job_id = _create(db)
    barrier = threading.Barrier(6)
    wins: list[bool] = []
    lock = threading.Lock()

    def start() -> None:
        barrier.wait()
        with transaction(db) as s:
            won = jobs.transition(session=s, job_id=job_id, sources=[JobStatus.QUEUED], target=JobStatus.STARTING)
        with lock:
            wins.append(won)

    threads = [threading.Thread(target=start) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(wins) == [False] * 5 + [True]


def test_idempotency_key(db: Any) -> None:
    with transaction(db) as s:
        first, created = jobs.create_job(session=s, job_type="train", request={"x": 1}, idempotency_key="k1")
    with transaction(db) as s:
        again, created_again = jobs.create_job(session=s, job_type="train", request={"x": 1}, idempotency_key="k1")
    assert created and not created_again and again.id == first.id
    with pytest.raises(Conflict, match="different request body"), transaction(db) as s:
        jobs.create_job(session=s, job_type="train", request={"x": 2}, idempotency_key="k1")
    with transaction(db) as s:  # keys are per owner
        other, created_other = jobs.create_job(
            session=s, job_type="train", request={"x": 2}, idempotency_key="k1", owner="someone"
        )
    assert created_other and other.id != first.id


def test_paging_newest_first(db: Any) -> None:
    ids = [_create(db, {"i": i}) for i in range(7)]
    seen: list[str] = []
    cursor = None
    with db() as s:
        while True:
            page, cursor = jobs.list_jobs(session=s, limit=3, cursor=cursor)
            seen += [j.id for j in page]
            if cursor is None:
                break
    assert seen == list(reversed(ids))
    with db() as s, pytest.raises(BadRequest):
        jobs.list_jobs(session=s, cursor="not-a-cursor!")


def test_filters(db: Any) -> None:
    a = _create(db)
    _create(db)
    with transaction(db) as s:
        jobs.transition(session=s, job_id=a, sources=[JobStatus.QUEUED], target=JobStatus.CANCELLED)
    with db() as s:
        page, _ = jobs.list_jobs(session=s, status="CANCELLED")
        assert [j.id for j in page] == [a]
        page, _ = jobs.list_jobs(session=s, job_type="evaluate")
        assert page == []


@pytest.mark.parametrize(
    ("start", "expected", "stopping"),
    [
        ([], JobStatus.CANCELLED, False),
        ([JobStatus.STARTING], JobStatus.CANCELLING, True),
        ([JobStatus.STARTING, JobStatus.RUNNING], JobStatus.CANCELLING, True),
    ],
)
def test_cancel_from_each_active_state(db: Any, start: list[JobStatus], expected: JobStatus, stopping: bool) -> None:
    job_id = _create(db)
    current = JobStatus.QUEUED
    for target in start:
        with transaction(db) as s:
            assert jobs.transition(session=s, job_id=job_id, sources=[current], target=target)
        current = target
    with transaction(db) as s:
        job, now = jobs.request_cancel(session=s, job_id=job_id)
        assert (job.status, now) == (expected, stopping)
    with transaction(db) as s:  # a repeat is harmless
        job, now = jobs.request_cancel(session=s, job_id=job_id)
        assert (job.status, now) == (expected, False)


def test_a_queued_job_cancelled_says_so_and_waits_for_no_quota(db: Any) -> None:
    """A cancelled queued job kept what its last attempt said ("checking the executors") and its waiting_for."""
    job_id = _create(db)
    with transaction(db) as s:
        row = jobs.get_job(session=s, job_id=job_id)
        row.progress_message, row.waiting_for = "checking the executors", "task_slots"
    with transaction(db) as s:
        job, _ = jobs.request_cancel(session=s, job_id=job_id)
    with db() as s:
        job = jobs.get_job(session=s, job_id=job_id)
        assert (job.progress_message, job.waiting_for) == ("cancelled before it started", None)


@pytest.mark.parametrize("final", [JobStatus.SUCCEEDED, JobStatus.FAILED])
def test_cancel_finished_job_conflicts(db: Any, final: JobStatus) -> None:
    job_id = _create(db)
    for source, target in [(JobStatus.QUEUED, JobStatus.STARTING), (JobStatus.STARTING, JobStatus.RUNNING)]:
        with transaction(db) as s:
            jobs.transition(session=s, job_id=job_id, sources=[source], target=target)
    with transaction(db) as s:
        jobs.transition(session=s, job_id=job_id, sources=[JobStatus.RUNNING], target=final)
    with pytest.raises(Conflict, match="already finished"), transaction(db) as s:
        jobs.request_cancel(session=s, job_id=job_id)


def test_metrics_and_logs(db: Any) -> None:
    job_id = _create(db)
    with transaction(db) as s:
        jobs.add_metrics(
            session=s,
            job_id=job_id,
            points=[{"key": "loss", "step": i, "value": 1.0 / (i + 1), "epoch": 0, "worker": 1} for i in range(5)],
        )
        jobs.add_metrics(session=s, job_id=job_id, points=[{"key": "acc", "step": 4, "value": 0.9}])
        for i in range(250):
            jobs.add_log(session=s, job_id=job_id, message=f"line {i}")
    with db() as s:
        loss = jobs.page_metrics(session=s, job_id=job_id, key="loss", since_step=2)[0]
        assert [(m.step, m.value) for m in loss] == [(3, 0.25), (4, 0.2)]
        assert loss[0].worker == 1
        assert len(jobs.page_metrics(session=s, job_id=job_id)[0]) == 6
        recent = jobs.list_logs(session=s, job_id=job_id, limit=200)
        assert recent[0].message == "line 50" and recent[-1].message == "line 249"
        after = jobs.list_logs(session=s, job_id=job_id, after_id=recent[-2].id)
        assert [r.message for r in after] == ["line 249"]


def test_checkpoint_retention_keeps_the_newest_and_the_pinned_best_epoch(db: Any) -> None:
    from app.services import checkpoints

    job_id = _create(db)
    gone: list[str] = []
    for epoch in range(1, 7):
        with transaction(db) as s:
            checkpoints.record(session=s, job_id=job_id, attempt=1, epoch=epoch, step=epoch * 10,
                               uri=f"file:///ckpt/{epoch}", metrics={})  # fmt: skip
            gone += checkpoints.prune(session=s, job_id=job_id, keep=2, keep_epoch=2)
    with db() as s:
        kept = sorted(row.epoch for row in checkpoints.list_for_job(session=s, job_id=job_id))
    assert kept == [2, 5, 6], "the newest two, and early stopping's best epoch whatever its age"
    assert sorted(gone) == ["file:///ckpt/1", "file:///ckpt/3", "file:///ckpt/4"]

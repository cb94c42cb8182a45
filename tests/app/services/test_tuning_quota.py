"""A trial that the owner's ``queued_jobs`` quota refuses (429) waits and is submitted again once a queued job has
started, rather than being recorded FAIL; the search does not end while a trial waits (a real database, a real
SparkSession planning each trial; no consumer runs, so the first trial stays QUEUED until the test starts it)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from app.core.jobstates import JobStatus
from app.core.settings import Settings
from app.db.models import Job
from app.db.session import transaction
from app.schemas.train import TrainRequest
from app.schemas.tune import TuneRequest
from app.services import jobs
from app.services.tuning.runner import QUOTA_RETRY_S, _Search
from app.services.tuning.submit import resolved
from app.services.tuning.trials import TuneDriver
from bench.chaos import digits_job
from tests.app.services.test_tuning_resume import Recorded


def test_a_trial_refused_by_the_queued_jobs_quota_waits_and_is_submitted_again(
    db: Any, spark: Any, tmp_path: Any
) -> None:
    space = {"training.optimizer.learning_rate": {"type": "loguniform", "low": 1e-3, "high": 1e-2}}
    tune = TuneRequest.model_validate({"name": "quota", "base": digits_job("quota", epochs=1, workers=1),
                                       "space": space, "trials": 2, "parallel": 2, "metric": "accuracy"})  # fmt: skip
    request = resolved(tune, TrainRequest.model_validate(tune.base))
    with transaction(db) as s:
        row, _ = jobs.create_job(session=s, job_type="tune", request=request, framework="torch", name="quota")
        tune_id = row.id
        s.get(Job, tune_id).status = JobStatus.RUNNING.value  # the running tune job is not a queued job
    settings = Settings(var_dir=tmp_path, quota_queued_jobs=1)
    driver = TuneDriver(db=db, settings=settings, spark=spark, enqueue=lambda t, j: None,
                        cancel_local=lambda j: False, stopping=lambda: False,
                        owner={"worker_id": "w", "attempt": 1})  # fmt: skip
    ctx = Recorded(tune_id)
    search = _Search(ctx, request, driver, "anonymous")
    search.rebuild()

    search.launch()  # trial 0 is queued; trial 1 is one queued job too many
    assert list(search.active) == [0] and not search.finished, search.finished
    assert search.waiting is not None and search.waiting[0] == 1 and search.next_number == 2
    assert any(line.startswith("trial 1 waits for the owner's quota") for line in ctx.lines), ctx.lines
    search.waiting_tried -= QUOTA_RETRY_S  # as if that much time had passed: submitted again, and refused again
    search.launch()  # still queued: it keeps waiting, the same trial, no second ask of the study
    assert search.waiting[0] == 1 and len(search.study.trials) == 2 and not search.finished

    with transaction(db) as s:  # a consumer takes trial 0
        s.get(Job, search.active[0].record.job_id).status = JobStatus.RUNNING.value
    search.launch()  # not tried again within QUOTA_RETRY_S of the last refusal (a search polls ten times a second)
    assert search.waiting is not None and sorted(search.active) == [0]
    search.waiting_tried -= QUOTA_RETRY_S
    search.launch()
    assert search.waiting is None and sorted(search.active) == [0, 1] and not search.finished
    assert search.active[1].record.params == search.active[1].trial.params
    with db() as s:
        trials = s.scalars(select(Job.trial).where(Job.parent_id == tune_id)).all()
    assert sorted(trials) == [0, 1]
    assert any(line.startswith("trial 1 submitted after") for line in ctx.lines), ctx.lines


def test_a_running_search_does_not_count_against_its_trials_concurrent_jobs(db: Any) -> None:
    """With ``concurrent_jobs: 1`` the running tune job was the owner's one active job, so its own first trial
    waited for ever (audit, 2026-12-06). A search runs no work of its own: its trials count, it does not."""
    from app.services import quotas

    limits = quotas.Limits(concurrent_jobs=1)
    with transaction(db) as s:
        row, _ = jobs.create_job(session=s, job_type="tune", request={"name": "q"}, framework="torch", name="q")
        row.status = JobStatus.RUNNING.value
        tune_id = row.id
    with db() as s:
        assert quotas.blocking_quota(session=s, owner="anonymous", slots=1, limits=limits) is None
        assert quotas.usage(session=s, owner="anonymous", limits=limits)["quotas"]["concurrent_jobs"]["used"] == 0
    with transaction(db) as s:  # its first trial runs: now the owner's one job is active
        trial, _ = jobs.create_job(session=s, job_type="train", request={"name": "q"}, framework="torch", name="q",
                                   parent_id=tune_id, trial=0)  # fmt: skip
        trial.status = JobStatus.RUNNING.value
    with db() as s:
        assert quotas.blocking_quota(session=s, owner="anonymous", slots=1, limits=limits) == "concurrent_jobs"

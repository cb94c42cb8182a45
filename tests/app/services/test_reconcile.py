"""The reconciler's rules on a real database (SQLite and PostgreSQL): which lost jobs are retried (every kind, from
its checkpoint or from scratch), which are cancelled, which stay, that two reconcilers never both act on one job,
that a retry goes to the queue its job came from (drivers with different queues share one database), and how a
stopping driver hands its jobs back."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select

from app.core.jobstates import JobStatus
from app.db.base import utcnow
from app.db.models import Checkpoint, Job, JobMetric
from app.db.session import transaction
from app.services import attempts, checkpoints, jobs
from app.services.reconcile import end_and_retry, hand_back
from app.services.reconcile import reconcile as reconcile_pass


def reconcile(*, db: Any, send: Any, stale_after_s: float, default_queue: str = "default") -> list[dict[str, Any]]:
    return reconcile_pass(db=db, send=send, stale_after_s=stale_after_s, default_queue=default_queue)


def never(name: str, job_id: str, queue: str) -> None:
    raise AssertionError(f"nothing should be queued, got {name} {job_id} on {queue}")


def running_job(
    db: Any,
    *,
    status: JobStatus,
    beat_age_s: float,
    framework: str = "spark_ml",
    queue: str | None = None,
    job_type: str = "train",
    plan: dict[str, Any] | None = None,
) -> str:
    """A job some driver took (from ``queue``, recorded as the runner does; None: a job from before queues were
    recorded) and whose heartbeat is ``beat_age_s`` old."""
    with transaction(db) as session:
        job, _ = jobs.create_job(session=session, job_type=job_type, request={"name": "x"}, framework=framework,
                                 plan=plan)  # fmt: skip
        jobs.transition(session=session, job_id=job.id, sources=[JobStatus.QUEUED], target=JobStatus.STARTING,
                        worker_id="host:1:dead", started_at=utcnow(),
                        heartbeat_at=utcnow() - timedelta(seconds=beat_age_s))  # fmt: skip
        if queue is not None:
            session.refresh(job)
            job.attempts = attempts.update_attempt(job, job.attempt, queue=queue)
        if status != JobStatus.STARTING:
            jobs.transition(session=session, job_id=job.id, sources=[JobStatus.STARTING], target=JobStatus.RUNNING)
        if status == JobStatus.CANCELLING:
            jobs.transition(session=session, job_id=job.id, sources=[JobStatus.RUNNING], target=JobStatus.CANCELLING)
        return job.id


def test_a_fresh_heartbeat_is_left_alone(db: Any) -> None:
    job_id = running_job(db, status=JobStatus.RUNNING, beat_age_s=1)
    assert reconcile(db=db, send=never, stale_after_s=30) == []
    with db() as session:
        assert session.get(Job, job_id).status == "RUNNING"


@pytest.mark.parametrize(
    ("job_type", "framework", "task"),
    [("train", "spark_ml", "train.spark_ml"), ("train", "xgboost", "train.xgboost"),
     ("evaluate", "torch", "evaluate.run"), ("predict", "xgboost", "predict.run"), ("tune", None, "tune.run")],
)  # fmt: skip
def test_a_lost_job_of_any_kind_without_a_checkpoint_starts_again_from_scratch(
    db: Any, job_type: str, framework: str | None, task: str
) -> None:
    """Nothing a job writes is visible before it succeeds, so running it again is safe: every kind is retried,
    a kind added later (``tune``) too, with its stored plan unchanged."""
    job_id = running_job(db, status=JobStatus.RUNNING, beat_age_s=60, framework=framework or "", queue="q",
                         job_type=job_type, plan={"kept": "as it was"})  # fmt: skip
    with transaction(db) as session:
        jobs.add_metrics(session=session, job_id=job_id, points=[{"key": "loss", "value": 0.5, "step": 3}])
    sent: list[tuple[str, str, str]] = []
    actions = reconcile(db=db, send=lambda *m: sent.append(m), stale_after_s=30)
    how = "resumes its search from the study in the database" if job_type == "tune" else "starts from scratch"
    assert actions == [{"job_id": job_id, "action": "retried", "attempt": 2, "how": how, "queue": "q", "task": task}]
    assert sent == [(task, job_id, "q")]
    with db() as session:
        job = session.get(Job, job_id)
        assert (job.status, job.attempt, job.max_attempts, job.plan) == ("QUEUED", 2, 3, {"kept": "as it was"})
        first = job.attempts[0]
        assert (first["status"], first["error_reason"]) == ("FAILED", "DRIVER_LOST")
        assert "host:1:dead" in first["error_message"]
        # the job's start stays the first attempt's (its duration counts every attempt), and it says what it awaits
        assert job.started_at is not None and first["started_at"] == job.started_at.isoformat()
        assert (job.progress, job.progress_message) == (0.0, f"attempt 2 queued: {how}")
    with transaction(db) as session:  # from scratch: the attempt's start drops every point
        assert checkpoints.forget_metrics_after(session=session, job_id=job_id, checkpoint_id=None) == 1
    assert reconcile(db=db, send=never, stale_after_s=30) == [], "a second pass finds nothing to do"


def test_a_lost_cancel_ends_cancelled(db: Any) -> None:
    job_id = running_job(db, status=JobStatus.CANCELLING, beat_age_s=60)
    assert reconcile(db=db, send=never, stale_after_s=30) == [{"job_id": job_id, "action": "cancelled"}]
    with db() as session:
        assert session.get(Job, job_id).status == "CANCELLED"


def test_a_torch_job_out_of_attempts_is_not_retried(db: Any) -> None:
    job_id = running_job(db, status=JobStatus.STARTING, beat_age_s=60, framework="torch")
    with transaction(db) as session:
        session.get(Job, job_id).attempt = 3
        session.add(Checkpoint(id="c" * 32, job_id=job_id, epoch=1, uri="file:///nowhere"))
    assert reconcile(db=db, send=never, stale_after_s=30)[0]["why"] == "no attempts left"


@pytest.mark.parametrize(("earlier", "mine", "retried"), [((1,), (2,), True), ((2,), (1,), False), ((1, 2), (), False),
                                                         ((), (1,), True)])  # fmt: skip
def test_a_lost_attempt_that_saved_progress_costs_no_attempt(
    db: Any, earlier: tuple[int, ...], mine: tuple[int, ...], retried: bool
) -> None:
    """Attempt 3 of 3 lost with its driver is queued again (as attempt 4 of 4) only when it registered a
    checkpoint past every earlier attempt's: a job moving forward between kills is never failed by them, a crash
    loop (dying again before the next checkpoint) runs out of attempts."""
    job_id = running_job(db, status=JobStatus.RUNNING, beat_age_s=60, framework="torch")
    with transaction(db) as session:
        session.get(Job, job_id).attempt = 3
        for epoch in earlier:
            session.add(Checkpoint(id=f"e{epoch:031d}", job_id=job_id, attempt=2, epoch=epoch, uri=f"file:///e{epoch}"))
        for epoch in mine:
            session.add(Checkpoint(id=f"m{epoch:031d}", job_id=job_id, attempt=3, epoch=epoch, uri=f"file:///m{epoch}"))
    (action,) = reconcile(db=db, send=lambda *m: None, stale_after_s=30)
    with db() as session:
        job = session.get(Job, job_id)
        if not retried:
            assert action["why"] == "no attempts left"
            assert job.status == "FAILED"
            return
        assert action["action"] == "retried" and action["how"].startswith("resumes from checkpoint m")
        assert (job.status, job.attempt, job.max_attempts) == ("QUEUED", 4, 4)
        logs = [line.message for line in jobs.list_logs(session=session, job_id=job_id)]
    assert any(line.endswith("(it saved progress first: this costs no attempt)") for line in logs), logs


def test_a_spark_ml_cross_validation_continues_after_its_fits_done(db: Any) -> None:
    """Its checkpoints count (fold, parameter map) fits; the final fit of the best parameters is one more unit,
    so a checkpoint after the last fold still resumes (4 fits + 1)."""
    from workers import plans
    from workers.data.spec import ResolvedDataset
    from workers.training.spark_ml.spec import SparkMLPlan, SparkMLResume, SparkMLSpec

    planned = SparkMLPlan(
        train=ResolvedDataset(path="/data/t.parquet", format="parquet", features=("x",), label="y", task="regression"),
        validation=None, spec=SparkMLSpec(algorithm="random_forest", task="regression",
                                          estimator_class="pyspark.ml.regression.RandomForestRegressor",
                                          grid={"maxDepth": (3, 5)}, num_folds=2),
    )  # fmt: skip
    job_id = running_job(db, status=JobStatus.RUNNING, beat_age_s=60, framework="spark_ml", plan=plans.dump(planned))
    with transaction(db) as session:
        session.add(Checkpoint(id=f"{4:032d}", job_id=job_id, epoch=4, uri="file:///cv-4"))
    (action,) = reconcile(db=db, send=lambda *m: None, stale_after_s=30)
    assert action["how"] == f"resumes from checkpoint {4:032d} (fit 4)"
    with db() as session:
        resumed = plans.load(SparkMLPlan, session.get(Job, job_id).plan)
    assert resumed.resume == SparkMLResume(checkpoint_id=f"{4:032d}", uri="file:///cv-4", fits=4, job_id=job_id)
    assert resumed.spec == planned.spec


def _two_checkpoints(db: Any, job_id: str) -> None:
    with transaction(db) as session:
        session.add(Checkpoint(id="a" * 32, job_id=job_id, epoch=1, uri="file:///one"))
        session.add(Checkpoint(id="b" * 32, job_id=job_id, epoch=2, uri="file:///two"))


def test_a_torch_job_with_a_checkpoint_is_queued_again_on_its_own_queue(db: Any) -> None:
    job_id = running_job(db, status=JobStatus.RUNNING, beat_age_s=60, framework="torch", queue="gpu-drivers")
    _two_checkpoints(db, job_id)
    queued: list[tuple[str, str, str]] = []
    # the reconciler runs on a driver that consumes another queue
    actions = reconcile(db=db, send=lambda *m: queued.append(m), stale_after_s=30, default_queue="cpu-drivers")
    assert actions == [{"job_id": job_id, "action": "retried", "attempt": 2, "queue": "gpu-drivers",
                        "how": f"resumes from checkpoint {'b' * 32} (epoch 2)", "task": "train.torch"}]  # fmt: skip
    assert queued == [("train.torch", job_id, "gpu-drivers")]
    with db() as session:
        job = session.get(Job, job_id)
        assert (job.status, job.attempt, job.worker_id) == ("QUEUED", 2, None)
        assert job.request["training"]["resume_from"] == "b" * 32
        assert [a["attempt"] for a in job.attempts] == [1, 2]
        first, second = job.attempts
        assert (first["status"], first["error_reason"], first["queue"]) == ("FAILED", "DRIVER_LOST", "gpu-drivers")
        assert (second["queue"], second["sent"]) == ("gpu-drivers", True)
        assert attempts.queue_of(job) == "gpu-drivers"
    assert reconcile(db=db, send=never, stale_after_s=30) == [], "a second pass finds nothing to do"


def test_a_job_without_a_recorded_queue_is_retried_on_the_reconcilers_queue(db: Any) -> None:
    job_id = running_job(db, status=JobStatus.RUNNING, beat_age_s=60, framework="torch")
    _two_checkpoints(db, job_id)
    queued: list[tuple[str, str, str]] = []
    reconcile(db=db, send=lambda *m: queued.append(m), stale_after_s=30, default_queue="cpu-drivers")
    assert queued == [("train.torch", job_id, "cpu-drivers")]


def test_a_retry_the_broker_refused_is_sent_again_by_the_next_pass(db: Any) -> None:
    job_id = running_job(db, status=JobStatus.RUNNING, beat_age_s=60, framework="torch", queue="gpu-drivers")
    _two_checkpoints(db, job_id)

    def refuse(name: str, jid: str, queue: str) -> None:
        raise ConnectionError("the broker is down")

    actions = reconcile(db=db, send=refuse, stale_after_s=30)
    assert [a["action"] for a in actions] == ["retried"]
    with db() as session:
        job = session.get(Job, job_id)
        assert (job.status, job.attempts[-1]["sent"]) == ("QUEUED", False)
    # too recent to be sent again yet: the first send might still be on its way on another driver
    assert reconcile(db=db, send=never, stale_after_s=30) == []
    queued: list[tuple[str, str, str]] = []
    actions = reconcile(db=db, send=lambda *m: queued.append(m), stale_after_s=0)
    assert actions == [{"job_id": job_id, "action": "sent again", "attempt": 2}]
    assert queued == [("train.torch", job_id, "gpu-drivers")]
    with db() as session:
        assert session.get(Job, job_id).attempts[-1]["sent"] is True
    assert reconcile(db=db, send=never, stale_after_s=0) == []


def test_a_job_lost_after_its_last_checkpoint_redoes_the_last_epoch(db: Any) -> None:
    """Its driver died after the checkpoint of the last epoch (while saving the model or recording the result):
    a resume must train at least one epoch, so attempt 2 starts from the checkpoint before the last."""
    job_id = running_job(db, status=JobStatus.RUNNING, beat_age_s=60, framework="torch", queue="q")
    with transaction(db) as session:
        session.get(Job, job_id).request = {"name": "x", "training": {"epochs": 3}}
        for epoch in (1, 2, 3):
            session.add(Checkpoint(id=str(epoch) * 32, job_id=job_id, epoch=epoch, uri=f"file:///{epoch}"))
    (action,) = reconcile(db=db, send=lambda *m: None, stale_after_s=30)
    assert action["how"] == f"resumes from checkpoint {'2' * 32} (epoch 2)"


def test_a_job_whose_only_checkpoint_is_its_last_epoch_starts_again_from_scratch(db: Any) -> None:
    job_id = running_job(db, status=JobStatus.RUNNING, beat_age_s=60, framework="torch")
    with transaction(db) as session:
        session.get(Job, job_id).request = {"name": "x", "training": {"epochs": 1}}
        session.add(Checkpoint(id="1" * 32, job_id=job_id, epoch=1, uri="file:///1"))
    (action,) = reconcile(db=db, send=lambda *m: None, stale_after_s=30)
    assert action["how"] == "starts from scratch"
    with db() as session:
        assert "resume_from" not in session.get(Job, job_id).request.get("training", {})


def _store_plan(db: Any, job_id: str, plan: Any) -> None:
    with transaction(db) as session:
        session.get(Job, job_id).plan = plan


def test_a_retry_moves_the_stored_plans_resume_point_and_nothing_else(db: Any) -> None:
    from workers import plans
    from workers.data.spec import ResolvedDataset
    from workers.training.torch.config import ResumePoint, SharingConfig, TorchPlan

    planned = TorchPlan(
        train=ResolvedDataset(path="/data/t.parquet", format="parquet", features=("x",), label="y", task="regression"),
        validation=None, network={"layers": []}, optimizer={"type": "sgd"}, sharing=SharingConfig(),
        mode="gradient_sharing", epochs=5, batch_size=8, num_workers=2, seed=1, averaging_frequency=5, device="cpu",
        input_shape=(1,), array_column=False,
    )  # fmt: skip
    job_id = running_job(db, status=JobStatus.RUNNING, beat_age_s=60, framework="torch")
    _store_plan(db, job_id, plans.dump(planned))
    _two_checkpoints(db, job_id)
    assert reconcile(db=db, send=lambda *m: None, stale_after_s=30)[0]["action"] == "retried"
    with db() as session:
        resumed = plans.load(TorchPlan, session.get(Job, job_id).plan)
    point = ResumePoint(checkpoint_id="b" * 32, path="file:///two", epoch=2, job_id=job_id)
    assert resumed == TorchPlan(**{**planned.__dict__, "resume": point})


def test_a_retry_of_a_deferred_plan_plans_its_request_again_from_the_checkpoint(db: Any) -> None:
    """A request whose data checks were left to the job stored a DeferredPlan: a retry keeps it, and the stored
    request names the checkpoint, so the job plans the request again resuming from it."""
    from workers import plans

    checks = ("the schema of s3a://b/t (a remote URI)",)
    deferred = plans.dump(plans.DeferredPlan(deferred_checks=checks, num_workers=2))
    job_id = running_job(db, status=JobStatus.RUNNING, beat_age_s=60, framework="torch")
    _store_plan(db, job_id, deferred)
    _two_checkpoints(db, job_id)
    assert reconcile(db=db, send=lambda *m: None, stale_after_s=30)[0]["action"] == "retried"
    with db() as session:
        job = session.get(Job, job_id)
        assert job.plan == deferred and job.request["training"]["resume_from"] == "b" * 32


def test_a_job_whose_stored_plan_cannot_be_read_stays_failed(db: Any) -> None:
    job_id = running_job(db, status=JobStatus.RUNNING, beat_age_s=60, framework="torch")
    _store_plan(db, job_id, {"train": "not a dataset"})
    _two_checkpoints(db, job_id)
    (action,) = reconcile(db=db, send=never, stale_after_s=30)
    assert action["action"] == "failed" and action["why"].startswith("its stored plan cannot be read")
    with db() as session:
        job = session.get(Job, job_id)
        assert (job.status, job.error_reason) == ("FAILED", "UNREADABLE_JOB")
        assert "stored plan cannot be read" in job.error_message and "submit it again" in job.error_message


def test_an_xgboost_retry_continues_from_its_newest_checkpoint_of_rounds(db: Any) -> None:
    from workers import plans
    from workers.data.spec import ResolvedDataset
    from workers.training.xgboost.spec import XGBoostPlan, XGBoostResume, XGBoostSpec

    planned = XGBoostPlan(
        train=ResolvedDataset(path="/data/t.parquet", format="parquet", features=("x",), label="y", task="regression"),
        validation=None, spec=XGBoostSpec(task="regression", objective="reg:squarederror", num_round=100,
                                          checkpoint_rounds=10), num_workers=1, device="cpu",
    )  # fmt: skip
    job_id = running_job(db, status=JobStatus.RUNNING, beat_age_s=60, framework="xgboost", plan=plans.dump(planned))
    with transaction(db) as session:  # rounds 10..100: the one at the last round leaves nothing to train
        for rounds in (10, 20, 100):
            session.add(Checkpoint(id=f"{rounds:032d}", job_id=job_id, epoch=rounds, step=rounds,
                                   uri=f"file:///r{rounds}"))  # fmt: skip
        points = [{"key": "validation_rmse", "value": 1.0 / r, "step": r} for r in range(1, 26)]
        jobs.add_metrics(session=session, job_id=job_id, points=points)
    (action,) = reconcile(db=db, send=lambda *m: None, stale_after_s=30)
    assert action["how"] == f"resumes from checkpoint {20:032d} (round 20)"
    with transaction(db) as session:  # the attempt's start drops rounds 21-25: it trains them again (they were twice)
        assert checkpoints.forget_metrics_after(session=session, job_id=job_id, checkpoint_id=f"{20:032d}") == 5
        steps = session.scalars(select(JobMetric.step).where(JobMetric.job_id == job_id)).all()
    assert sorted(steps) == list(range(1, 21))
    with db() as session:
        resumed = plans.load(XGBoostPlan, session.get(Job, job_id).plan)
    assert resumed.resume == XGBoostResume(checkpoint_id=f"{20:032d}", uri="file:///r20", rounds=20, job_id=job_id)
    assert resumed.spec == planned.spec


def test_a_stopping_driver_hands_its_job_back_at_no_cost_of_an_attempt(db: Any) -> None:
    """Attempt 3 of 3 handed back by a driver told to stop is queued again as attempt 4 of 4: no number of
    restarts of the service fails a user's job. Only the driver and attempt that run the job can hand it back."""
    job_id = running_job(db, status=JobStatus.RUNNING, beat_age_s=0, framework="xgboost", queue="q")
    with transaction(db) as session:
        session.get(Job, job_id).attempt = 3
    sent: list[tuple[str, str, str]] = []
    kwargs = {"db": db, "send": lambda *m: sent.append(m), "job_id": job_id, "default_queue": "d"}
    assert hand_back(worker_id="host:2:other", attempt=3, **kwargs) is None, "not that driver's job"
    assert hand_back(worker_id="host:1:dead", attempt=2, **kwargs) is None, "not that attempt"
    outcome = hand_back(worker_id="host:1:dead", attempt=3, **kwargs)
    assert outcome is not None and outcome["action"] == "retried"
    assert sent == [("train.xgboost", job_id, "q")]
    with db() as session:
        job = session.get(Job, job_id)
        assert (job.status, job.attempt, job.max_attempts) == ("QUEUED", 4, 4)
        assert next(e for e in job.attempts if e["attempt"] == 3)["error_reason"] == "DRIVER_STOPPED"


@pytest.mark.parametrize("reason", ["STORAGE_FULL", "DATABASE_UNAVAILABLE"])
def test_a_storage_or_database_failure_is_retried_after_the_delay(db: Any, reason: str) -> None:
    job_id = running_job(db, status=JobStatus.RUNNING, beat_age_s=0, framework="torch", queue="q")
    with transaction(db) as session:
        job = session.get(Job, job_id)
        outcome = end_and_retry(session=session, job=job, reason=reason, message="away",
                                now=utcnow(), sources=[JobStatus.RUNNING], retry_delay_s=60)  # fmt: skip
    assert outcome is not None and outcome["action"] == "retried" and outcome["send"] is False
    assert reconcile(db=db, send=never, stale_after_s=0) == [], "not before its time"
    with transaction(db) as session:  # an hour later
        job = session.get(Job, job_id)
        job.attempts = attempts.update_attempt(job, 2, not_before=(utcnow() - timedelta(seconds=1)).isoformat())
    sent: list[tuple[str, str, str]] = []
    assert reconcile(db=db, send=lambda *m: sent.append(m), stale_after_s=30) == [
        {"job_id": job_id, "action": "sent again", "attempt": 2}
    ]
    assert sent == [("train.torch", job_id, "q")]


@pytest.mark.parametrize("reason", ["BAD_ROWS", "SPARK_ERROR", "INTERNAL"])
def test_a_failure_of_the_job_itself_is_not_retried(db: Any, reason: str) -> None:
    job_id = running_job(db, status=JobStatus.RUNNING, beat_age_s=0, framework="torch")
    with transaction(db) as session:
        outcome = end_and_retry(session=session, job=session.get(Job, job_id), reason=reason, message="m",
                                now=utcnow(), sources=[JobStatus.RUNNING])  # fmt: skip
    assert outcome == {"job_id": job_id, "action": "failed", "why": f"{reason} is not retried"}


def test_noting_a_sent_retry_keeps_the_runner_that_took_it_meanwhile(db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The retry's message can be taken before the sender notes it went out: the note must not put back the
    attempt's entry as it was before the runner's STARTING (seen once in CI: two drivers, SQLite, the entry lost
    its worker_id). The runner tries to commit between the note's read and its write: it must wait for the note
    (and then add to it), not slip in and be overwritten."""
    job_id = running_job(db, status=JobStatus.RUNNING, beat_age_s=60, queue="default")

    def refuse(name: str, jid: str, queue: str) -> None:
        raise ConnectionError("not yet")

    assert [a["action"] for a in reconcile(db=db, send=refuse, stale_after_s=30)] == ["retried"]
    original = attempts.update_attempt

    def take() -> None:  # as app/jobs/runner.py takes an attempt
        with transaction(db) as runner:
            assert jobs.transition(session=runner, job_id=job_id, sources=[JobStatus.QUEUED],
                                   target=JobStatus.STARTING, worker_id="host:2:alive")  # fmt: skip
            job = runner.get(Job, job_id)
            runner.refresh(job)
            job.attempts = original(job, 2, worker_id="host:2:alive")

    runner = threading.Thread(target=take)

    def between_read_and_write(job: Job, attempt: int, **values: Any) -> list[dict[str, Any]]:
        runner.start()
        runner.join(2.0)  # with the row locked first, the runner waits here until the note commits
        return original(job, attempt, **values)

    monkeypatch.setattr(attempts, "update_attempt", between_read_and_write)
    with transaction(db) as noting:
        attempts.mark_sent(session=noting, job_id=job_id, attempt=2)
    runner.join(60)
    assert not runner.is_alive()
    with db() as session:
        entry = session.get(Job, job_id).attempts[-1]
    assert (entry["attempt"], entry.get("worker_id"), entry["sent"]) == (2, "host:2:alive", True)


def test_a_first_message_never_sent_is_sent_by_the_next_pass(db: Any) -> None:
    """The driver that queued a job died between the commit and the send (here: the send is interrupted): the job
    stayed QUEUED for ever on the embedded broker, whose messages no sweep looks for (audit, 2026-12-06). Its first
    attempt is unsent until the send returns, and a reconciler pass sends it; a job sent as usual is left alone."""
    sent: list[tuple[str, str, str]] = []

    def interrupted(task: str, job_id: str) -> None:
        raise KeyboardInterrupt  # what a kill between the commit and the send leaves: no ENQUEUE_FAILED either

    with pytest.raises(KeyboardInterrupt):
        jobs.submit(db=db, enqueue=interrupted, job_type="train", request={"name": "lost"}, framework="spark_ml")
    normal, _ = jobs.submit(db=db, enqueue=lambda task, job_id: None, job_type="train", request={"name": "fine"},
                            framework="spark_ml")  # fmt: skip
    with db() as s:
        lost = s.scalars(select(Job).where(Job.id != normal.id)).one()
        assert (lost.status, lost.attempts[0]["sent"]) == ("QUEUED", False)
        assert s.get(Job, normal.id).attempts[0]["sent"] is True
    actions = reconcile_pass(db=db, send=lambda *a: sent.append(a), stale_after_s=0, default_queue="q")
    assert sent == [("train.spark_ml", lost.id, "q")] and actions == [
        {"job_id": lost.id, "action": "sent again", "attempt": 1}
    ]
    assert reconcile_pass(db=db, send=lambda *a: sent.append(a), stale_after_s=0, default_queue="q") == []

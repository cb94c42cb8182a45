"""A stop, or the reconciler, that lands between two steps of a job's start or end, on both databases. The runner's
steps are driven on threads, paused where the interleaving needs them (as a signal or a slow driver would pause
them); Spark and the database are real, the messages sent are collected.

- a stop that begins while a delivery is taking its job (QUEUED -> STARTING committed, the job not yet registered
  as running here): the stop is done only once that job is handed back, so that a second signal, which exits once
  it is, never leaves the job STARTING with no driver;
- a driver that was only slow: the reconciler gave its attempt 1 up and it took attempt 2 itself; attempt 1's end
  must neither forget attempt 2 (a stop would not hand it back, nor a cancel reach it at once) nor cancel attempt
  2's Spark jobs (both attempts' jobs are in the group named for the job);
- a success recorded as the stop hands the job back: one of the two wins, with one message at most;
- the reconciler that read a stale heartbeat just before the slow driver wrote one leaves the job to it.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from app.core.jobstates import JobStatus
from app.core.settings import Settings
from app.db.base import utcnow
from app.db.models import Job, ModelVersion
from app.db.session import transaction
from app.jobs import runner
from app.jobs.context import DbJobContext
from app.jobs.runtime import DriverStopping, JobRuntime, RunningJob
from app.jobs.settle import settle
from app.jobs.stop import hand_back_all
from app.services import jobs
from app.services.reconcile import reconcile
from workers.context import JobOutcome, ModelArtifact


def _runtime(db: Any, spark: Any, tmp_path: Path) -> JobRuntime:
    settings = Settings(var_dir=tmp_path / "var", artifact_root=tmp_path / "artifacts")
    return JobRuntime(settings=settings, db=db, spark=spark, worker_id="slow:1:boot")


def _new_job(db: Any, job_type: str = "train", name: str = "m") -> str:
    with transaction(db) as s:
        framework = "torch" if job_type == "train" else None
        job, _ = jobs.create_job(session=s, job_type=job_type, request={"name": name}, framework=framework, name=name)
        return job.id


def _status(db: Any, job_id: str) -> tuple[str, int]:
    with db() as s:
        job = s.get(Job, job_id)
        return job.status, job.attempt


def test_a_stop_during_a_take_is_done_once_the_job_is_handed_back(
    db: Any, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = _runtime(db, spark, tmp_path)
    job_id = _new_job(db)
    sent: list[tuple[str, str, str]] = []
    taken, go_on = threading.Event(), threading.Event()
    add = rt.running.add

    def add_once_the_stop_began(job_id: str, attempt: int = 1) -> RunningJob | None:
        taken.set()  # QUEUED -> STARTING is committed
        go_on.wait(10)
        return add(job_id, attempt)

    monkeypatch.setattr(rt.running, "add", add_once_the_stop_began)
    delivery = threading.Thread(target=runner.run_job, args=(rt, job_id), kwargs={"send": lambda *m: sent.append(m)})
    delivery.start()
    try:
        assert taken.wait(30)
        assert _status(db, job_id) == ("STARTING", 1)
        threading.Timer(0.3, go_on.set).start()  # the take goes on while the stop runs
        hand_back_all(rt, quiet=False)
        # what a second signal finds once the hand-back is done (it exits then)
        assert _status(db, job_id) == ("QUEUED", 2), "the stop was done with a job STARTING and no driver for it"
        assert sent == [("train.torch", job_id, rt.settings.queue)]
    finally:
        go_on.set()
        delivery.join(30)
    with pytest.raises(DriverStopping):  # a delivery after that takes nothing: its message goes back
        runner.run_job(rt, job_id, send=lambda *m: sent.append(m))
    assert _status(db, job_id) == ("QUEUED", 2) and len(sent) == 1


def test_the_end_of_an_attempt_given_up_leaves_the_next_one_here_registered(
    db: Any, spark: Any, tmp_path: Path
) -> None:
    rt = _runtime(db, spark, tmp_path)
    job_id = _new_job(db, "recipe", "no-such-recipe")  # its work fails at once, whichever attempt runs it
    first = runner._take(rt, job_id, "default")
    assert first is not None
    old = rt.running.add(job_id, first.attempt)
    assert old is not None
    with transaction(db) as s:  # the driver was slow: its heartbeats stalled past the reconciler's limit
        s.get(Job, job_id).heartbeat_at = utcnow() - timedelta(seconds=120)
    sent: list[tuple[str, str, str]] = []
    assert [a["action"] for a in reconcile(db=db, send=lambda *m: sent.append(m), stale_after_s=30,
                                           default_queue="default")] == ["retried"]  # fmt: skip
    second = runner._take(rt, job_id, "default")  # the retry's message reached the same driver
    assert second is not None and second.attempt == 2
    new = rt.running.add(job_id, second.attempt)
    assert new is not None
    runner._run_to_end(rt, first, old, None)  # attempt 1 notices, and ends recording nothing
    assert rt.running.get(job_id) is new, "attempt 1's end forgot attempt 2, which runs here"
    assert [r.attempt for r in rt.running.stop()] == [2], "a stop would not hand attempt 2 back"
    assert _status(db, job_id) == ("STARTING", 2)


def test_an_attempt_given_up_does_not_cancel_the_spark_jobs_of_the_next_one_here(
    db: Any, spark: Any, tmp_path: Path
) -> None:
    """Both attempts' Spark jobs are in the job's group (its id): attempt 1, told by its heartbeat that it is no
    longer its driver's, cancelled that group, and drained it after its end, which stopped attempt 2's work."""
    rt = _runtime(db, spark, tmp_path)
    job_id = _new_job(db, "recipe", "no-such-recipe")
    first = runner._take(rt, job_id, "default")
    assert first is not None
    old = rt.running.add(job_id, first.attempt)
    assert old is not None
    with transaction(db) as s:
        s.get(Job, job_id).heartbeat_at = utcnow() - timedelta(seconds=120)
    reconcile(db=db, send=lambda *m: None, stale_after_s=30, default_queue="default")
    second = runner._take(rt, job_id, "default")
    assert second is not None and rt.running.add(job_id, second.attempt) is not None
    started, ended = threading.Event(), []

    def attempt_2_works() -> None:
        sc = spark.sparkContext
        sc.setJobGroup(job_id, "attempt 2", interruptOnCancel=True)
        started.set()
        try:
            ended.append(sc.parallelize(range(2), 2).map(lambda x: time.sleep(4) or x).count())
        except Exception as exc:
            ended.append(type(exc).__name__)

    work = threading.Thread(target=attempt_2_works)
    work.start()
    assert started.wait(10)
    time.sleep(1.0)  # its Spark job runs
    runner._run_to_end(rt, first, old, None)
    work.join(30)
    assert ended == [2], "attempt 1 cancelled attempt 2's Spark jobs"


def _ends_as_it_is_handed_back(db: Any, spark: Any, tmp_path: Path, name: str) -> tuple[str, int, int, int]:
    rt = _runtime(db, spark, tmp_path)
    job_id = _new_job(db, name=name)
    with transaction(db) as s:
        assert jobs.transition(session=s, job_id=job_id, sources=[JobStatus.QUEUED], target=JobStatus.STARTING,
                               worker_id=rt.worker_id, started_at=utcnow(), heartbeat_at=utcnow())  # fmt: skip
        assert jobs.transition(session=s, job_id=job_id, sources=[JobStatus.STARTING], target=JobStatus.RUNNING)
    running = rt.running.add(job_id, 1)
    assert running is not None
    sent: list[tuple[str, str, str]] = []
    rt.send = lambda *m: sent.append(m)
    ctx = DbJobContext(rt, job_id, 1, running, tmp_path)
    outcome = JobOutcome(result={}, model=ModelArtifact(framework="torch", uri=f"file:///models/{name}"))
    both = threading.Barrier(2)

    def succeed() -> None:
        both.wait(10)
        settle(rt, ctx, running, outcome, None)

    ends = threading.Thread(target=succeed)
    ends.start()
    both.wait(10)
    hand_back_all(rt, quiet=False)
    ends.join(30)
    with db() as s:
        job = s.get(Job, job_id)
        versions = s.query(ModelVersion).filter(ModelVersion.job_id == job_id).count()
        return job.status, job.attempt, versions, len(sent)


def test_a_job_that_ends_as_it_is_handed_back_is_either_succeeded_or_queued_with_one_message(
    db: Any, spark: Any, tmp_path: Path
) -> None:
    """The runner records a success while the stop hands the job back, at once (a barrier, several times): one of
    the two guarded writes wins; never SUCCEEDED and queued again, never a model version and a retry, never two
    messages."""
    for i in range(6):
        state = _ends_as_it_is_handed_back(db, spark, tmp_path, f"m{i}")
        assert state in (("SUCCEEDED", 1, 1, 0), ("QUEUED", 2, 0, 1)), state


def test_a_heartbeat_written_as_the_reconciler_reads_the_job_keeps_it_its_drivers(
    db: Any, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reconciler read the job's stale heartbeat, then its slow driver's watcher wrote one, then the
    reconciler ended the attempt anyway: it gave a live driver's job up (another attempt, a retry message)."""
    from app.services import reconcile as reconcile_module

    if db.kw["bind"].dialect.name == "sqlite":
        pytest.skip("SQLite's one writer: the heartbeat waits for the reconciler's commit, then finds the job gone")
    rt = _runtime(db, spark, tmp_path)
    job_id = _new_job(db, "recipe", "no-such-recipe")
    assert runner._take(rt, job_id, "default") is not None
    with transaction(db) as s:
        s.get(Job, job_id).heartbeat_at = utcnow() - timedelta(seconds=120)
    end_and_retry = reconcile_module.end_and_retry

    def beat_first(**kwargs: Any) -> Any:  # the watcher's heartbeat commits between the read and the write
        with transaction(db) as s:
            assert jobs.heartbeat(session=s, job_id=job_id, worker_id=rt.worker_id, attempt=1) is not None
        return end_and_retry(**kwargs)

    monkeypatch.setattr(reconcile_module, "end_and_retry", beat_first)
    sent: list[tuple[str, str, str]] = []
    reconcile(db=db, send=lambda *m: sent.append(m), stale_after_s=30, default_queue="default")
    assert (_status(db, job_id), sent) == (("STARTING", 1), []), "the reconciler gave a live driver's job up"


def test_a_take_that_hangs_is_waited_for_once_not_at_every_call_of_the_stop(
    db: Any, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Review: python -m app's end calls the stop again after the signal's hand-back, and each call waited
    ``TAKE_WAIT_S`` for a take that hung (on the database, the broker): twice the wait, and the warning twice."""
    from app.jobs import stop

    monkeypatch.setattr(stop, "TAKE_WAIT_S", 0.2)
    rt = _runtime(db, spark, tmp_path)
    assert rt.running.begin_take()  # a delivery taking its job, hung: it never ends its take
    with caplog.at_level("WARNING", logger="sparktrain.jobs"):
        hand_back_all(rt, quiet=False)
        hand_back_all(rt, quiet=False)
    hung = [r for r in caplog.records if "a job being taken was not handed back" in r.getMessage()]
    assert len(hung) == 1, [r.getMessage() for r in caplog.records]
    rt.running.end_take()

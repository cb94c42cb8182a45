"""A running search outlives a short outage of the database or of the job broker (audit, 2026-12-07), on a real
database (SQLite and PostgreSQL).

The database outage is the one a PostgreSQL restart makes: the engine's pooled connections are dropped and its next
connections are refused, each with the OperationalError a connection to a closed port really raises. The broker
outage is a real Celery app sending to a closed port (kombu's connection error, after ``send_job``'s own retries),
then a broker that is back and takes the message."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import create_engine, event, select
from sqlalchemy.exc import OperationalError

from app.core.jobstates import JobStatus
from app.core.settings import Settings
from app.db.models import Job
from app.db.session import transaction
from app.services import jobs
from app.services.tuning.runner import _Search, run_tune
from app.services.tuning.trials import TuneDriver
from tests.app.services.test_tuning_resume import Recorded, _child, _curve, _tune_request

CLOSED = "postgresql+psycopg://postgres@127.0.0.1:1/x"
OWNER = {"worker_id": "w", "attempt": 1}


class Outage:
    """The next ``n`` connections the engine opens are refused (the error connecting to a closed port raises),
    after its pooled ones were dropped; then the database is back."""

    def __init__(self, db: Any) -> None:
        self.engine, self.left, self.refused = db.kw["bind"], 0, 0
        event.listen(self.engine, "do_connect", self._connect)

    def _connect(self, *_: Any) -> None:
        if self.left > 0:
            self.left -= 1
            self.refused += 1
            closed = create_engine(CLOSED)
            try:
                closed.connect()
            finally:
                closed.dispose()
        return None  # the engine's own connect

    def start(self, refused: int) -> None:
        self.engine.dispose()
        self.left = refused

    def end(self) -> None:
        event.remove(self.engine, "do_connect", self._connect)


@pytest.fixture
def outage(db: Any) -> Any:
    down = Outage(db)
    yield down
    down.end()


class Running(Recorded):
    """The job context of a running tune job, as run_tune uses it; ``on_check`` runs at its first cancel check."""

    def __init__(self, job_id: str, on_check: Any = None) -> None:
        super().__init__(job_id)
        self.on_check = on_check

    def check_cancelled(self) -> None:
        if self.on_check is not None:
            self.on_check, start = None, self.on_check
            start()

    def progress(self, fraction: float, message: str | None = None) -> None:
        self.lines.append(f"progress {fraction}")


def _running_tune(db: Any) -> tuple[str, dict[str, Any]]:
    request = _tune_request()
    with transaction(db) as s:
        tune, _ = jobs.create_job(session=s, job_type="tune", request=request, framework="torch", name="resumed")
        tune.status, tune.worker_id, tune.attempt = JobStatus.RUNNING.value, OWNER["worker_id"], OWNER["attempt"]
        return tune.id, request


def _driver(db: Any, settings: Settings, enqueue: Any = None, stopping: bool = False, spark: Any = None) -> TuneDriver:
    return TuneDriver(db=db, settings=settings, spark=spark, enqueue=enqueue or (lambda t, j: None),
                      cancel_local=lambda j: False, stopping=lambda: stopping, owner=dict(OWNER))  # fmt: skip


def _status(db: Any, job_id: str) -> tuple[str, str | None]:
    with db() as s:
        row = s.get(Job, job_id)
        return row.status, row.error_reason


def test_the_search_waits_out_a_database_restart(db: Any, outage: Outage, tmp_path: Any) -> None:
    """Its reads and writes retry as the job runner's do: a restart failed the tune job (FAILED INTERNAL)."""
    tune_id, request = _running_tune(db)
    trial = _child(db, tune_id, 0, 0.003, JobStatus.RUNNING)
    _curve(db, trial, [0.5])
    search = _Search(Recorded(tune_id), request, _driver(db, Settings(var_dir=tmp_path)), "anonymous")
    outage.start(2)
    search.rebuild()
    assert list(search.active) == [0] and search.active[0].reported == {1}

    _curve(db, trial, [0.5, 0.7])
    outage.start(3)
    search.poll()
    assert search.active[0].reported == {1, 2}

    with transaction(db) as s:
        row = s.get(Job, trial)
        row.status, row.result = JobStatus.SUCCEEDED.value, {"validation": {"accuracy": 0.7}}
    outage.start(3)
    search.poll()
    assert not search.active and [(r.state, r.metric) for r in search.finished] == [("COMPLETE", 0.7)]
    outage.start(3)
    search.publish()
    assert outage.refused == 11 and outage.left == 0
    with db() as s:
        assert s.get(Job, tune_id).result["leaderboard"][0]["metric"] == 0.7


@pytest.mark.parametrize("stopping", [False, True])
def test_a_search_the_database_outlasts_is_handed_on_with_its_trials(
    db: Any, outage: Outage, tmp_path: Any, stopping: bool
) -> None:
    """An outage longer than ``db_retry_s`` ends the attempt (DATABASE_UNAVAILABLE, queued again: it failed the
    tune job for good, INTERNAL, and cancelled its trials): its trials go on, and the next attempt attaches to them,
    as when a stopping driver hands the job back."""
    tune_id, request = _running_tune(db)
    trial = _child(db, tune_id, 0, 0.003, JobStatus.RUNNING)
    ctx = Running(tune_id, on_check=lambda: outage.start(1))
    driver = _driver(db, Settings(var_dir=tmp_path, db_retry_s=0), stopping=stopping)
    with pytest.raises(OperationalError):
        run_tune(ctx, request, driver, owner="anonymous")
    assert outage.refused == 1
    assert _status(db, trial)[0] == JobStatus.RUNNING


def test_a_search_that_fails_cancels_its_trials(db: Any, tmp_path: Any) -> None:
    """A failure of the search itself ends the tune job here for good: its trials are cancelled first, not left
    running for a search that is over."""
    tune_id, request = _running_tune(db)
    trial = _child(db, tune_id, 0, 0.003, JobStatus.RUNNING)

    def fail() -> None:
        raise RuntimeError("the search broke")

    ctx = Running(tune_id, on_check=fail)
    with pytest.raises(RuntimeError):
        run_tune(ctx, request, _driver(db, Settings(var_dir=tmp_path)), owner="anonymous")
    assert _status(db, trial)[0] == JobStatus.CANCELLING
    assert any(line.startswith("trial 0 (job") and "the tune job failed" in line for line in ctx.lines), ctx.lines


class Broker:
    """``enqueue`` through a real Celery app whose broker is down (a closed port) for the first ``down`` sends;
    then the broker is back and takes what is sent."""

    def __init__(self, tmp_path: Any, down: int) -> None:
        from app.jobs.celery_app import create_celery

        self.app = create_celery(Settings(var_dir=tmp_path, broker_url="redis://127.0.0.1:1/0"))
        self.down, self.refused, self.sent = down, 0, []

    def __call__(self, task: str, job_id: str) -> None:
        from app.jobs.celery_app import send_job

        if self.down > 0:
            self.down -= 1
            self.refused += 1
            send_job(self.app, task, job_id, "sparktrain")
        self.sent.append((task, job_id))


def test_a_trial_the_broker_refused_waits_and_is_sent_again_under_its_number(
    db: Any, spark: Any, tmp_path: Any
) -> None:
    """It was recorded FAIL ("broker unreachable") and used up its number: a broker restart during a search
    ended it NO_TRIAL_COMPLETED. It waits as a trial over its quota does; its job (ENQUEUE_FAILED, holding the
    number) is queued again and sent."""
    tune_id, request = _running_tune(db)
    request = {**request, "trials": 2, "parallel": 1}
    broker = Broker(tmp_path, down=2)
    ctx = Recorded(tune_id)
    search = _Search(ctx, request, _driver(db, Settings(var_dir=tmp_path), broker, spark=spark), "anonymous")
    search.rebuild()

    search.launch()
    assert not search.finished and not search.active, search.finished
    assert search.waiting is not None and search.waiting[0] == 0 and search.next_number == 1
    with db() as s:
        (first,) = s.scalars(select(Job).where(Job.parent_id == tune_id)).all()
    assert (first.trial, first.status, first.error_reason) == (0, JobStatus.FAILED, "ENQUEUE_FAILED")
    search.launch()  # not tried again at once
    assert broker.refused == 1
    search.waiting_tried = 0.0  # as if long ago: tried again, and the broker is still down
    search.launch()
    assert broker.refused == 2 and not search.finished and search.waiting[0] == 0
    assert _status(db, first.id) == (JobStatus.FAILED, "ENQUEUE_FAILED")
    search.waiting_tried = 0.0
    search.launch()  # the broker is back: the same job, the same number, the same study trial
    assert search.waiting is None and list(search.active) == [0] and not search.finished
    assert search.active[0].record.job_id == first.id and broker.sent == [("train.torch", first.id)]
    assert _status(db, first.id) == (JobStatus.QUEUED, None)
    assert len(search.study.trials) == 1
    assert any(line.startswith("trial 0 waits for the job broker") for line in ctx.lines), ctx.lines


def test_a_resumed_search_sends_again_the_trial_the_broker_refused(db: Any, tmp_path: Any) -> None:
    """The driver died while its last trial waited for the broker: the resumed search does not count that trial
    FAIL; it sends its job again."""
    tune_id, request = _running_tune(db)
    request = {**request, "trials": 2}
    _child(db, tune_id, 0, 0.003, JobStatus.SUCCEEDED, result={"validation": {"accuracy": 0.9}})
    refused = _child(db, tune_id, 1, 0.01, JobStatus.FAILED, error_reason="ENQUEUE_FAILED", started_at=None)
    sent: list[tuple[str, str]] = []
    driver = _driver(db, Settings(var_dir=tmp_path), lambda t, j: sent.append((t, j)))
    search = _Search(Recorded(tune_id), request, driver, "anonymous")
    search.rebuild()
    assert [r.number for r in search.finished] == [0] and search.waiting is not None and search.waiting[0] == 1
    assert search.next_number == 2
    search.launch()
    assert sent == [("train.torch", refused)] and search.active[1].record.job_id == refused
    assert search.active[1].trial.params == {"training.optimizer.learning_rate": 0.01}
    assert _status(db, refused) == (JobStatus.QUEUED, None)

"""A tune job that starts again (its driver died, the reconciler queued it again) rebuilds its study from its trial
jobs on a real database (SQLite and PostgreSQL): finished trials are added as they ended and never submitted
again, trials still running are attached to (their metrics keep reaching the pruner), new trials take the next
numbers, and one job per (tune job, trial) is all the database accepts."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy.exc import IntegrityError

from app.core.jobstates import JobStatus
from app.core.settings import Settings
from app.db.base import utcnow
from app.db.models import Job
from app.db.session import transaction
from app.schemas.train import TrainRequest
from app.schemas.tune import TuneRequest
from app.services import jobs
from app.services.tuning import space as spaces
from app.services.tuning.runner import PRUNED_NOTE, _Search
from app.services.tuning.submit import resolved
from app.services.tuning.trials import TuneDriver
from bench.chaos import digits_job

SPACE = {"training.optimizer.learning_rate": {"type": "loguniform", "low": 1e-4, "high": 1e-1}}


class Recorded:
    """The job context the search reports through, keeping what it was told."""

    def __init__(self, job_id: str) -> None:
        self.job_id, self.lines = job_id, []

    def log(self, message: str, level: str = "INFO") -> None:
        self.lines.append(message)

    def warn(self, message: str) -> None:
        self.lines.append(message)


def _tune_request() -> dict[str, Any]:
    tune = TuneRequest.model_validate({"name": "resumed", "base": digits_job("resumed", epochs=5, workers=1),
                                       "space": SPACE, "trials": 5, "parallel": 2, "pruner": "median",
                                       "metric": "accuracy"})  # fmt: skip
    return resolved(tune, TrainRequest.model_validate(tune.base))


def _child(db: Any, tune_id: str, trial: int, lr: float, status: JobStatus, **values: Any) -> str:
    body = spaces.substitute(digits_job("resumed", epochs=5, workers=1), {"training.optimizer.learning_rate": lr})
    with transaction(db) as s:
        job, _ = jobs.create_job(session=s, job_type="train", request=body, framework="torch", name="resumed",
                                 parent_id=tune_id, trial=trial)  # fmt: skip
        row = s.get(Job, job.id)
        row.status = status.value
        now = utcnow()
        row.started_at, row.finished_at = now - timedelta(seconds=30), now
        for key, value in values.items():
            setattr(row, key, value)
        return job.id


def _curve(db: Any, job_id: str, values: list[float]) -> None:
    with transaction(db) as s:
        points = [{"key": "validation_accuracy", "step": 10 * (e + 1), "epoch": e + 1, "value": v}
                  for e, v in enumerate(values)]  # fmt: skip
        jobs.add_metrics(session=s, job_id=job_id, points=points)


def test_a_resumed_study_keeps_finished_trials_and_attaches_to_running_ones(db: Any, tmp_path: Any) -> None:
    request = _tune_request()
    with transaction(db) as s:
        tune, _ = jobs.create_job(session=s, job_type="tune", request=request, framework="torch", name="resumed")
        tune_id = tune.id
    done = _child(db, tune_id, 0, 0.003, JobStatus.SUCCEEDED, result={"validation": {"accuracy": 0.9}},
                  model_name="resumed", model_version=1)  # fmt: skip
    _curve(db, done, [0.6, 0.8, 0.9])
    pruned = _child(db, tune_id, 1, 0.0001, JobStatus.CANCELLED, warnings=[f"{PRUNED_NOTE} {tune_id} at epoch 1"])
    _curve(db, pruned, [0.1])
    running = _child(db, tune_id, 2, 0.01, JobStatus.RUNNING)
    _curve(db, running, [0.7])

    driver = TuneDriver(db=db, settings=Settings(var_dir=tmp_path), spark=None, enqueue=lambda t, j: None,
                        cancel_local=lambda j: False, stopping=lambda: False,
                        owner={"worker_id": "w", "attempt": 2})  # fmt: skip
    search = _Search(Recorded(tune_id), request, driver, "anonymous")
    search.rebuild()

    states = {r.number: (r.state, r.metric, r.epochs) for r in search.finished}
    assert states == {0: ("COMPLETE", 0.9, 3), 1: ("PRUNED", 0.1, 1)}  # a pruned trial: its last value, as Optuna
    assert search.finished[1].row("torch")["pruned_at"] == 1
    assert list(search.active) == [2] and search.next_number == 3
    attached = search.active[2]
    assert attached.record.job_id == running and attached.record.params == {"training.optimizer.learning_rate": 0.01}
    assert attached.trial.params == {"training.optimizer.learning_rate": 0.01}
    assert attached.reported == {1}, "the running trial's epochs reach the pruner again"
    assert [t.state.name for t in search.study.trials] == ["COMPLETE", "PRUNED", "RUNNING"]
    assert search.study.best_value == 0.9

    # the running trial ends: the next poll records it, and the study then knows three finished trials. It was
    # pruned as its last epoch ended, too late to stop it: it succeeded, is COMPLETE, and its job says so
    with transaction(db) as s:
        row = s.get(Job, running)
        row.status, row.result = JobStatus.SUCCEEDED.value, {"validation": {"accuracy": 0.95}}
        row.model_name, row.model_version = "resumed", 2
        row.warnings = [f"{PRUNED_NOTE} {tune_id} at epoch 5"]
    search.poll()
    assert not search.active and search.finished[-1].state == "COMPLETE" and search.finished[-1].metric == 0.95
    assert search.study.best_value == 0.95
    with transaction(db) as s:
        warnings = s.get(Job, running).warnings
    assert len(warnings) == 2 and "kept as COMPLETE" in warnings[1], warnings
    assert any("trial 2: the prune reached it after its training ended" in line for line in search.ctx.lines)

    with pytest.raises(IntegrityError), transaction(db) as s:  # one job per trial number, whatever resumes
        jobs.create_job(session=s, job_type="train", request={}, parent_id=tune_id, trial=2)


def test_a_cancelled_search_keeps_a_trial_that_finished_as_the_cancel_arrived(db: Any, tmp_path: Any) -> None:
    """It ended SUCCEEDED (its work was done when the cancel came) and the tune's leaderboard did not have it:
    result null, "0 of 4 trials finished" (tuning walkthrough)."""
    request = _tune_request()
    with transaction(db) as s:
        tune, _ = jobs.create_job(session=s, job_type="tune", request=request, framework="torch", name="resumed")
        tune_id = tune.id
        row = s.get(Job, tune_id)
        row.status, row.worker_id, row.attempt = JobStatus.CANCELLING.value, "w", 1  # this driver's
    running = _child(db, tune_id, 0, 0.01, JobStatus.RUNNING)
    driver = TuneDriver(db=db, settings=Settings(var_dir=tmp_path), spark=None, enqueue=lambda t, j: None,
                        cancel_local=lambda j: False, stopping=lambda: False,
                        owner={"worker_id": "w", "attempt": 1})  # fmt: skip
    search = _Search(Recorded(tune_id), request, driver, "anonymous")
    search.rebuild()
    assert list(search.active) == [0]
    with transaction(db) as s:  # the trial's runner records it as it ends, after the cancel request
        row = s.get(Job, running)
        row.status, row.result = JobStatus.SUCCEEDED.value, {"validation": {"accuracy": 0.9}}
        row.model_name, row.model_version = "resumed", 1
    search.settle_ending()
    assert not search.active and [(r.state, r.metric) for r in search.finished] == [("COMPLETE", 0.9)]
    with transaction(db) as s:
        row = s.get(Job, tune_id)
        result, progress = row.result, (row.progress, row.progress_message)
    assert result["partial"] and [r["trial"] for r in result["leaderboard"]] == [0], result
    assert progress == (0.2, "1 of 5 trials finished"), "the progress counts it too"


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_a_seeded_search_resumed_draws_what_it_would_have_drawn(sampler: str) -> None:
    """A resumed search built its sampler again, and its one generator started over: trials 4 and 5 of a random
    search resumed after trial 3 drew trials 0 and 1's parameters (audit, 2026-12-06). Each trial's draws now come
    from a generator seeded for that trial number (TPE's first trials are random draws too)."""
    import optuna

    from app.services.tuning import trials

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = {**SPACE, "network.layers.0.units": {"type": "int", "low": 16, "high": 256, "step": 16}}
    tune = TuneRequest.model_validate({"name": "s", "base": digits_job("s", epochs=1, workers=1), "space": space,
                                       "trials": 40, "sampler": sampler, "seed": 11})  # fmt: skip
    dists = {path: spaces.to_optuna(d) for path, d in tune.space.items()}
    straight = optuna.create_study(sampler=trials.sampler(tune))
    drawn = [trials.ask(straight, tune, n, dists).params for n in range(6)]
    assert len({tuple(sorted(p.items())) for p in drawn}) == 6
    resumed = optuna.create_study(sampler=trials.sampler(tune))  # as rebuild() makes it: three trials finished
    for params in drawn[:3]:
        resumed.add_trial(optuna.trial.create_trial(params=params, distributions=dists, value=0.5))
    assert [trials.ask(resumed, tune, n, dists).params for n in range(3, 6)] == drawn[3:]


def test_a_search_that_moves_best_off_another_searchs_version_says_so(db: Any) -> None:
    """A second search under the same name moved ``best`` to a worse model without a word (tuning walkthrough)."""
    import optuna

    from app.services import models
    from app.services.tuning.report import TrialRecord, outcome

    def register() -> int:
        with transaction(db) as s:
            job, _ = jobs.create_job(session=s, job_type="train", request={}, name="moved-best")
            return models.register_version(session=s, name="moved-best", framework="torch", artifact_uri="file:///x",
                                           metrics={}, params={}, job_id=job.id).version  # fmt: skip

    earlier, ours = register(), register()
    with transaction(db) as s:
        models.set_alias(session=s, name="moved-best", alias="best", version=earlier)
        tune, _ = jobs.create_job(session=s, job_type="tune", request={}, name="moved-best")
    study = optuna.create_study(direction="maximize")
    record = TrialRecord(0, {}, state="COMPLETE", metric=0.1, model={"name": "moved-best", "version": ours})
    ctx = Recorded(tune.id)
    outcome(ctx, study, [record], metric="accuracy", db=db, name="moved-best", framework="torch")
    assert any(f"moved from version {earlier}, which this search did not train, to version {ours}" in line
               for line in ctx.lines), ctx.lines  # fmt: skip
    again = Recorded(tune.id)  # its own version already named: nothing to say
    outcome(again, study, [record], metric="accuracy", db=db, name="moved-best", framework="torch")
    assert not any("moved from" in line for line in again.lines), again.lines


def test_a_search_cut_short_by_its_timeout_says_so_in_its_result(db: Any) -> None:
    """``result.trials`` counted the trials that ran and nothing said that timeout_minutes had cut the search short
    (tuning walkthrough): the result has ``trials_requested`` and ``timed_out``, and the job a warning."""
    import optuna

    from app.services.tuning.report import TrialRecord, outcome

    with transaction(db) as s:
        tune, _ = jobs.create_job(session=s, job_type="tune", request={}, name="cut-short")
    study = optuna.create_study(direction="maximize")
    records = [TrialRecord(n, {}, state="COMPLETE", metric=0.1 * n) for n in (0, 1)]
    ctx = Recorded(tune.id)
    result = outcome(ctx, study, records, metric="accuracy", db=db, name="cut-short", framework="torch", requested=5,
                     timed_out=True).result  # fmt: skip
    assert result is not None
    assert (result["trials"], result["trials_requested"], result["timed_out"]) == (2, 5, True)
    assert any("timeout_minutes passed after 2 of the 5 trials" in line for line in ctx.lines), ctx.lines
    whole = outcome(Recorded(tune.id), study, records, metric="accuracy", db=db, name="cut-short", framework="torch",
                    requested=2).result  # fmt: skip
    assert whole is not None and (whole["trials"], whole["trials_requested"], whole["timed_out"]) == (2, 2, False)


def test_a_trial_that_failed_before_its_job_existed_is_kept_when_the_search_resumes(db: Any, tmp_path: Any) -> None:
    """A sampled body that does not plan fails its trial before a job exists; a search resumed after a driver loss
    then lost it, numbered past it and ended with fewer than ``trials`` entries (tuning walkthrough). The search
    publishes the failed trial before it sends the next one, and a rebuilt study reads it back."""
    from app.core.errors import ValidationFailed

    request = _tune_request()
    with transaction(db) as s:
        tune, _ = jobs.create_job(session=s, job_type="tune", request=request, framework="torch", name="resumed")
        tune_id = tune.id
        row = s.get(Job, tune_id)
        row.status, row.worker_id, row.attempt = JobStatus.RUNNING.value, "w", 1  # this driver's
    driver = TuneDriver(db=db, settings=Settings(var_dir=tmp_path), spark=None, enqueue=lambda t, j: None,
                        cancel_local=lambda j: False, stopping=lambda: False,
                        owner={"worker_id": "w", "attempt": 1})  # fmt: skip
    first = _Search(Recorded(tune_id), request, driver, "anonymous")
    first.rebuild()
    sent: list[int] = []

    def submit(number: int, params: dict[str, Any]) -> str:
        if number == 0:
            raise ValidationFailed.at("network.layers.0.units", "a body the sampled value makes does not plan")
        sent.append(number)
        return _child(db, tune_id, number, params["training.optimizer.learning_rate"], JobStatus.RUNNING)

    first._submit = submit  # type: ignore[method-assign]  # the planning path needs a SparkSession
    first.launch()  # trial 0 fails; trials 1 and 2 start (parallel 2)
    assert sent == [1, 2] and [(r.number, r.state) for r in first.finished] == [(0, "FAIL")]
    # the driver dies here, before its loop published anything more

    again = _Search(Recorded(tune_id), request, driver, "anonymous")
    again.rebuild()
    assert [(r.number, r.state, r.job_id) for r in again.finished] == [(0, "FAIL", None)]
    assert sorted(again.active) == [1, 2] and again.next_number == 3
    assert [t.state.name for t in again.study.trials] == ["RUNNING", "RUNNING", "FAIL"]
    assert again.finished[0].params == first.finished[0].params


def test_a_search_whose_job_another_driver_took_publishes_nothing(db: Any, tmp_path: Any) -> None:
    """The leaderboard and progress are written only while this driver's attempt still holds the tune job: a runner
    whose job the reconciler gave to another driver (its heartbeat went stale) wrote over that driver's result."""
    request = _tune_request()
    with transaction(db) as s:
        tune, _ = jobs.create_job(session=s, job_type="tune", request=request, framework="torch", name="resumed")
        tune_id = tune.id
        row = s.get(Job, tune_id)
        row.status, row.worker_id, row.attempt = JobStatus.RUNNING.value, "w", 1
    _child(db, tune_id, 0, 0.003, JobStatus.SUCCEEDED, result={"validation": {"accuracy": 0.9}},
           model_name="resumed", model_version=1)  # fmt: skip
    driver = TuneDriver(db=db, settings=Settings(var_dir=tmp_path), spark=None, enqueue=lambda t, j: None,
                        cancel_local=lambda j: False, stopping=lambda: False,
                        owner={"worker_id": "w", "attempt": 1})  # fmt: skip
    search = _Search(Recorded(tune_id), request, driver, "anonymous")
    search.rebuild()
    search.publish()
    with transaction(db) as s:
        row = s.get(Job, tune_id)
        assert (row.progress, row.result["trials"]) == (0.2, 1)
        row.worker_id, row.attempt, row.result, row.progress = "other", 2, None, 0.0  # the next attempt, elsewhere
    search.publish()
    with transaction(db) as s:
        row = s.get(Job, tune_id)
        assert (row.result, row.progress) == (None, 0.0), "the old attempt's runner wrote over the new one's"

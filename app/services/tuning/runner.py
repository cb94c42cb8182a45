"""The search of a ``tune`` job, run by the job runner on the driver (the tune job holds no task slots, nor, once
taken, a consumer thread: app/jobs/runner.py).

Each trial is an ordinary training job (``parent_id`` = the tune job, ``trial`` = its number), submitted through the
same path as ``POST /train``, so it has its metrics, logs, checkpoints and a model version under the tune's name.
The Optuna study lives in memory and is rebuilt from the database when the tune job starts: its trial jobs are the
record. A finished trial is added to the study as it ended and never runs again; a trial job still queued or running
(the reconciler retries it like any job when its driver died) is attached to again; new trials take the next
numbers. So a tune job resumed after a driver was lost ends with exactly ``trials`` trials.

Pruning reads each running trial's per-epoch (torch) or per-round (xgboost) validation metric from the job's
metrics and reports it to the study; a trial the pruner stops is cancelled through the normal cancel path and
recorded PRUNED (a warning on its job says so and at which epoch). Spark ML trials run to the end.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from app.core.errors import AppError, TooManyRequests
from app.core.jobstates import TERMINAL, JobStatus, JobType
from app.core.settings import Settings
from app.db.base import utcnow
from app.db.models import Job, JobMetric
from app.schemas.tune import TuneRequest
from app.services import jobs, quotas
from app.services.planning.training import plan_training
from app.services.tuning import space as spaces
from app.services.tuning.report import TrialRecord, outcome, partial
from app.services.tuning.submit import train_request
from app.services.tuning.trials import threshold_warnings, trial_body
from workers.context import JobFailure, JobOutcome

if TYPE_CHECKING:
    import optuna
    from pyspark.sql import SparkSession

log = logging.getLogger("sparktrain.jobs")
POLL_S = 0.1
"""How often the search reads its running trials' metrics: a pruned trial is cancelled within this of the epoch
that condemned it, and the next trial starts within this of the last one's end. A torch epoch of the digits CNN
takes about 0.1 s here: polling every 0.5 s (and the monitor's half-second cancel check), a trial pruned at epoch 1
went on to epoch 8 in the case measured, and trials started up to a second apart (bench/README.md, bench.tune)."""
QUOTA_RETRY_S = 1.0
"""How often a trial that an owner's quota refused is submitted again."""
PRUNED_NOTE = "pruned by tune job"


@dataclass(frozen=True)
class TuneDriver:
    """What the search needs of the process that runs it (app/jobs/dispatch.py wires the job runtime)."""

    db: sessionmaker[Session]
    settings: Settings
    spark: SparkSession
    enqueue: Callable[[str, str], None]
    cancel_local: Callable[[str], bool]
    stopping: Callable[[], bool]
    owner: dict[str, Any]
    """The tune job's runner (``worker_id``, ``attempt``): a cancel of the tune job is its own only while it holds."""


@dataclass
class _Active:
    record: TrialRecord
    trial: optuna.trial.Trial
    reported: set[int] = field(default_factory=set)
    pruning: bool = False
    seen: int = 0
    """The id of the last metric row read: each poll reads only the rows written since."""


class _Search:
    def __init__(self, ctx: Any, request: dict[str, Any], driver: TuneDriver, owner: str) -> None:
        import optuna

        self.ctx, self.driver, self.owner = ctx, driver, owner
        self.tune = TuneRequest.model_validate(request)
        self.metric, self.mode = str(request["metric"]), str(request["mode"])
        self.base: dict[str, Any] = request["base"]
        self.framework = str(self.base.get("framework"))
        self.dists = {path: spaces.to_optuna(d) for path, d in self.tune.space.items()}
        self.points = spaces.grid(self.tune.space) if self.tune.sampler == "grid" else None
        self.study = optuna.create_study(
            direction="maximize" if self.mode == "max" else "minimize", sampler=_sampler(self.tune),
            pruner=_pruner(self.tune),
        )  # fmt: skip
        self.finished: list[TrialRecord] = []
        self.active: dict[int, _Active] = {}
        self.next_number = 0
        self.deadline: float | None = None
        self.waiting: tuple[int, optuna.trial.Trial, dict[str, Any]] | None = None
        """A trial asked of the study whose job a quota refused (429): submitted again on the next passes."""
        self.waiting_since: float | None = None
        self.waiting_tried = 0.0

    # --- the study rebuilt from the trial jobs -----------------------------------------------------------------
    def rebuild(self) -> None:
        import optuna

        with self.driver.db() as s:
            tune_row = s.get(Job, self.ctx.job_id)
            children = s.scalars(select(Job).where(Job.parent_id == self.ctx.job_id).order_by(Job.trial)).all()
            if self.tune.timeout_minutes is not None and tune_row is not None:
                ends = tune_row.created_at + timedelta(minutes=self.tune.timeout_minutes)
                self.deadline = time.monotonic() + (ends - utcnow()).total_seconds()
            for child in children:
                number = int(child.trial or 0)
                self.next_number = max(self.next_number, number + 1)
                params = spaces.params_of(child.request, self.tune.space)
                record = TrialRecord(number=number, params=params, job_id=child.id)
                curve, seen = self._curve(s, child.id)
                if child.status in TERMINAL:
                    self._settle(record, child, curve)
                    state = optuna.trial.TrialState.COMPLETE if record.state == "COMPLETE" else _state(record.state)
                    try:
                        self.study.add_trial(optuna.trial.create_trial(
                            params=params, distributions=self.dists, state=state, intermediate_values=curve,
                            value=record.metric if record.state == "COMPLETE" else None,
                        ))  # fmt: skip
                    except ValueError as exc:  # a value outside today's space: on the leaderboard, not in the study
                        log.warning("trial %d of tune job %s not added to the study: %s", number, self.ctx.job_id, exc)
                    self.finished.append(record)
                else:
                    self.study.enqueue_trial(params)
                    active = _Active(record, self.study.ask(self.dists), seen=seen)
                    self.active[number] = active
                    self._report(active, curve)
        if children:
            self.ctx.log(f"resumed the study: {len(self.finished)} trials finished, {len(self.active)} attached to")
            return
        for warning in threshold_warnings(self.base, self.tune.space):
            self.ctx.warn(warning)
        if self.tune.pruner != "none" and self.framework == "torch":
            self.ctx.log(
                f"pruner {self.tune.pruner}: a gradient-sharing trial that leaves its first threshold to "
                "the trainer starts it at one optimizer step, so that its first epochs show what it learns"
            )

    # --- one pass ----------------------------------------------------------------------------------------------
    def timed_out(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def launch(self) -> None:
        while len(self.active) < self.tune.parallel and not self.timed_out():
            if self.waiting is not None:  # refused by a quota on an earlier pass: the same trial, submitted again
                if time.monotonic() - self.waiting_tried < QUOTA_RETRY_S:
                    return
                number, trial, params = self.waiting
                self.waiting = None
            elif self.next_number < self.tune.trials:
                number = self.next_number
                if self.points is not None:
                    self.study.enqueue_trial(self.points[number])
                trial = ask(self.study, self.tune, number, self.dists)
                params = {path: trial.params[path] for path in self.tune.space}
                self.next_number += 1
            else:
                return
            record = TrialRecord(number=number, params=params)
            try:
                record.job_id = self._submit(number, params)
            except TooManyRequests as exc:  # the owner's queued_jobs quota: wait for a queued job to start
                if self.waiting_since is None:
                    self.waiting_since = time.monotonic()
                    self.ctx.log(f"trial {number} waits for the owner's quota: {exc.detail}")
                self.waiting, self.waiting_tried = (number, trial, params), time.monotonic()
                return
            except AppError as exc:  # the sampled body does not plan (checked at its extremes): a failed trial
                self.ctx.warn(f"trial {number} {params}: {exc.detail}")
                record.state, record.finished = "FAIL", time.time()
                self.study.tell(trial, state=_state("FAIL"))
                self.finished.append(record)
                continue
            if self.waiting_since is not None:
                self.ctx.log(f"trial {number} submitted after {time.monotonic() - self.waiting_since:.0f} s of quota")
                self.waiting_since = None
            self.active[number] = _Active(record, trial)
            self.ctx.log(f"trial {number} started as job {record.job_id}: {params}")

    def _submit(self, number: int, params: dict[str, Any]) -> str:
        train = train_request(trial_body(self.base, params, pruned=self.tune.pruner != "none"), "base")
        plan = plan_training(request=train, settings=self.driver.settings, spark=self.driver.spark, db=self.driver.db)
        limits = quotas.limits_for(settings=self.driver.settings, owner=self.owner)
        job, _ = jobs.submit(
            db=self.driver.db, enqueue=self.driver.enqueue, job_type=JobType.TRAIN,
            request=train.model_dump(mode="json", exclude_none=True), plan=plan, framework=train.framework,
            name=train.name, owner=self.owner, limits=limits, parent_id=self.ctx.job_id, trial=number,
        )  # fmt: skip
        return job.id

    def poll(self) -> None:
        for number, active in list(self.active.items()):
            with self.driver.db() as s:
                child = s.get(Job, active.record.job_id)
                if child is None:
                    continue
                curve, active.seen = self._curve(s, child.id, after=active.seen)
                self._report(active, curve, running=child.status == JobStatus.RUNNING)
                if child.status not in TERMINAL:
                    continue
                self._settle(active.record, child, None)
            record = active.record
            if record.state == "COMPLETE":
                self.study.tell(active.trial, record.metric)
            else:
                self.study.tell(active.trial, state=_state(record.state))
            del self.active[number]
            self.finished.append(record)
            self.ctx.log(f"trial {number} {record.state}: {self.metric} {record.metric}")

    def publish(self) -> None:
        """The leaderboard so far as the tune job's result, while it runs (a cancelled search keeps it); the final
        result replaces it when the search ends."""
        result = partial(self.finished, metric=self.metric, mode=self.mode, trials=self.tune.trials,
                         framework=self.framework)  # fmt: skip
        with self.driver.db.begin() as s:
            s.execute(update(Job).where(Job.id == self.ctx.job_id, Job.status.in_(_LIVE)).values(result=result))

    def _curve(self, s: Session, job_id: str, after: int = 0) -> tuple[dict[int, float], int]:
        """The trial's validation metric per epoch (torch) or boosting round (xgboost) from the rows after metric row
        ``after``, and the last row's id (Spark ML reports none). A trial's rows of one key come from one writer
        in order, so polling from the last id read sees each row once."""
        if self.framework == "spark_ml":
            return {}, after
        rows = s.execute(
            select(JobMetric.id, JobMetric.step, JobMetric.epoch, JobMetric.value)
            .where(JobMetric.job_id == job_id, JobMetric.key == f"validation_{self.metric}", JobMetric.id > after)
            .order_by(JobMetric.id)
        ).all()
        curve: dict[int, float] = {}
        for row_id, step, epoch, value in rows:
            curve.setdefault(int(epoch if epoch is not None else step), float(value))
            after = row_id
        return curve, after

    def _report(self, active: _Active, curve: dict[int, float], running: bool = False) -> None:
        for step in sorted(set(curve) - active.reported):
            active.trial.report(curve[step], step)
            active.reported.add(step)
            active.record.epochs = max(active.record.epochs or 0, step)
            # should_prune also records the trial's rung (ASHA): call it for every step, act only while it runs
            if self.tune.pruner != "none" and not active.pruning and active.trial.should_prune() and running:
                self._prune(active, step)

    def _prune(self, active: _Active, step: int) -> None:
        """Cancel the trial's job through the normal cancel path; a warning on it says it was pruned."""
        job_id = str(active.record.job_id)
        unit = "round" if self.framework == "xgboost" else "epoch"
        note = f"{PRUNED_NOTE} {self.ctx.job_id} at {unit} {step}"

        def cancel(s: Session) -> bool:
            jobs.add_warning(session=s, job_id=job_id, message=note)
            _, stopping = jobs.request_cancel(session=s, job_id=job_id)
            return stopping

        try:
            stopping = self.driver_write(cancel)
        except AppError:  # it finished meanwhile (a 409): it is recorded as it ended
            return
        active.pruning = True
        if stopping:
            self.driver.cancel_local(job_id)
        self.ctx.log(f"trial {active.record.number}: {note}")

    def driver_write(self, work: Callable[[Session], Any]) -> Any:
        with self.driver.db.begin() as s:
            return work(s)

    def _settle(self, record: TrialRecord, child: Job, curve: dict[int, float] | None) -> None:
        """The trial as its job ended: COMPLETE with the metric, PRUNED, CANCELLED or FAIL."""
        record.duration_s = (
            (child.finished_at - child.started_at).total_seconds() if child.finished_at and child.started_at else None
        )
        record.finished = time.time()
        if curve:
            record.epochs = max(curve)
        if child.status == JobStatus.SUCCEEDED:
            value = ((child.result or {}).get("validation") or {}).get(self.metric)
            if isinstance(value, int | float):
                record.state, record.metric = "COMPLETE", float(value)
                if child.model_name and child.model_version:
                    record.model = {"name": child.model_name, "version": child.model_version}
                rounds = (child.result or {}).get("rounds") or {}
                if self.framework == "xgboost" and rounds.get("kept"):
                    record.epochs = int(rounds["kept"])
                elif self.framework == "torch" and isinstance((child.result or {}).get("epochs"), int):
                    record.epochs = int(child.result["epochs"])  # type: ignore[index]
                if any(str(w).startswith(PRUNED_NOTE) for w in child.warnings or []):  # the cancel came too late
                    late = "the prune reached it after its training ended: it finished and is kept as COMPLETE"
                    self.driver_write(lambda s: jobs.add_warning(session=s, job_id=child.id, message=late))
                    self.ctx.log(f"trial {record.number}: {late}")
                return
            record.state = "FAIL"
            self.ctx.warn(f"trial {record.number}: its result has no validation {self.metric!r}")
            return
        pruned = any(str(w).startswith(PRUNED_NOTE) for w in child.warnings or [])
        record.state = "PRUNED" if pruned else ("CANCELLED" if child.status == JobStatus.CANCELLED else "FAIL")

    # --- cancel ------------------------------------------------------------------------------------------------
    def cancel_trials(self, why: str) -> None:
        for active in self.active.values():
            job_id = str(active.record.job_id)

            def cancel(s: Session, job_id: str = job_id) -> bool:
                return jobs.request_cancel(session=s, job_id=job_id)[1]

            try:
                stopping = self.driver_write(cancel)
            except AppError:
                continue
            if stopping:
                self.driver.cancel_local(job_id)
            self.ctx.log(f"trial {active.record.number} (job {job_id}) cancelled: {why}")

    def cancel_requested(self) -> bool:
        """Whether the tune job itself was cancelled, while this runner still holds it (not given up by the
        reconciler, nor handed back by a stopping driver: then its trials are left running)."""
        if self.driver.stopping():
            return False
        try:
            with self.driver.db() as s:
                row = s.get(Job, self.ctx.job_id)
                return (
                    row is not None
                    and row.status == JobStatus.CANCELLING
                    and row.worker_id == self.driver.owner["worker_id"]
                    and row.attempt == self.driver.owner["attempt"]
                )
        except Exception:  # the database is away: the trials then run to their end
            log.exception("tune job %s: could not read whether it was cancelled", self.ctx.job_id)
            return False


def _state(name: str) -> Any:
    import optuna

    return optuna.trial.TrialState.PRUNED if name == "PRUNED" else optuna.trial.TrialState.FAIL


_LIVE = (JobStatus.RUNNING.value, JobStatus.CANCELLING.value)


def _sampler(tune: TuneRequest, number: int | None = None) -> Any:
    """The study's sampler; with a seed, ``number``'s own: seeded from the search's seed and the trial number."""
    import optuna

    seed = tune.seed if tune.seed is None or number is None else (tune.seed * 1_000_003 + number) % 2**32
    if tune.sampler == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(10, max(2, tune.trials // 4)))
    return optuna.samplers.RandomSampler(seed=seed)  # grid: every point enqueued in the listed order


def ask(study: Any, tune: TuneRequest, number: int, dists: dict[str, Any]) -> Any:
    """Trial ``number`` of the study. With a seed, each trial's draws come from a generator seeded for it: one
    generator for the whole search started over when a resumed search built its sampler again, and trials 4 and 5
    of a search resumed after trial 3 drew what trials 0 and 1 had. An enqueued trial (grid, resume) takes no draw."""
    if tune.seed is not None:
        study.sampler = _sampler(tune, number)
    return study.ask(dists)


def _pruner(tune: TuneRequest) -> Any:
    import optuna

    if tune.pruner == "asha":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=2)
    if tune.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=0)
    return optuna.pruners.NopPruner()


def run_tune(ctx: Any, request: dict[str, Any], driver: TuneDriver, *, owner: str) -> JobOutcome:
    """Run the search to its end: every trial finished (or the timeout passed), then the leaderboard."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    search = _Search(ctx, request, driver, owner)
    search.rebuild()
    threads = driver.settings.consumer_concurrency
    if search.tune.parallel > threads:
        ctx.log(f"parallel {search.tune.parallel}: this driver runs {threads} jobs at once "
                "(SPARKTRAIN_CONSUMER_CONCURRENCY), so at most that many trials run here at a time; other drivers on "
                "the queue may run the rest")  # fmt: skip
    shown = None
    try:
        while True:
            ctx.check_cancelled()
            search.poll()  # first: a trial that just ended makes room for the next one in this same pass
            search.launch()
            done = len(search.finished)
            if done != shown:  # a database write: only when it changed (the last trial's end too)
                ctx.progress(done / search.tune.trials, f"{done} of {search.tune.trials} trials finished")
                if done:
                    search.publish()
                shown = done
            ended = (search.next_number >= search.tune.trials and search.waiting is None) or search.timed_out()
            if not search.active and ended:
                break
            if search.timed_out() and search.active and not any(a.pruning for a in search.active.values()):
                search.cancel_trials("the tune job's timeout_minutes passed")
                for active in search.active.values():
                    active.pruning = True
            time.sleep(POLL_S)
    except BaseException:  # JobCancelled, or the Spark job of a trial's planning cancelled with the tune's group
        if search.cancel_requested():
            search.cancel_trials("the tune job was cancelled")
        raise
    if not any(r.state == "COMPLETE" for r in search.finished):
        raise JobFailure("NO_TRIAL_COMPLETED", f"none of the {len(search.finished)} trials completed")
    return outcome(ctx, search.study, search.finished, metric=search.metric, db=driver.db, name=search.base["name"],
                   framework=search.framework)  # fmt: skip

"""The search of a ``tune`` job, run by the job runner on the driver (the tune job holds no task slots, nor, once
taken, a consumer thread: app/jobs/runner.py).

Each trial is an ordinary training job (``parent_id`` = the tune job, ``trial`` = its number), submitted through the
same path as ``POST /train``, so it has its metrics, logs, checkpoints and a model version under the tune's name.
The Optuna study lives in memory and is rebuilt from the database when the tune job starts: its trial jobs are the
record. A finished trial is added to the study as it ended and never runs again; a trial still queued or running (the
reconciler retries it like any job) is attached to again; new trials take the next numbers, never past ``trials``.

Pruning reads each running trial's per-epoch (torch) or per-round (xgboost) validation metric from the job's
metrics and reports it to the study; a trial the pruner stops is cancelled through the normal cancel path and
recorded PRUNED (a warning on its job says so and at which epoch). Spark ML trials run to the end.

The search outlives short outages: its reads and writes wait out a database restart as the job runner's do, and a
trial the broker refused is sent again under its number, as one over a quota is. A cancel keeps finished trials.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.core.errors import AppError, ServiceUnavailable, TooManyRequests
from app.core.jobstates import TERMINAL, JobStatus, JobType
from app.db.base import utcnow
from app.db.models import Job
from app.db.session import retrying, unavailable
from app.schemas.tune import TuneRequest
from app.services import jobs, quotas
from app.services.spaces import for_owner
from app.services.training import plan_in_request
from app.services.tuning import space as spaces
from app.services.tuning import trials as helpers
from app.services.tuning.report import TrialRecord, metric_curve, never_submitted, outcome, partial
from app.services.tuning.submit import train_request
from app.services.tuning.trials import ask, pruner, resend, sampler, threshold_warnings, trial_body, trial_state, unsent
from app.spark.session import spark_alive
from workers.context import JobCancelled, JobFailure, JobOutcome

if TYPE_CHECKING:
    import optuna

    from app.services.tuning.trials import TuneDriver

log = logging.getLogger("sparktrain.jobs")
T = TypeVar("T")
SETTLE_S = 10.0  # how long a cancelled search waits for its trials to end (one may have finished: it is kept)
POLL_S = 0.1
"""How often the search reads its running trials' metrics: a pruned trial is cancelled, and the next trial starts,
within this (a digits CNN epoch takes ~0.1 s: polling every 0.5 s, a trial pruned at epoch 1 went on to epoch 8)."""
QUOTA_RETRY_S = 1.0
"""How often a trial that an owner's quota refused is submitted again."""
BROKER_RETRY_S = 5.0
"""How often a trial whose message the job broker refused is sent again: a broker restart takes seconds, and each try
holds the search (its polls of the running trials too) for up to a second of send_job's own retries."""
PRUNED_NOTE = "pruned by tune job"


@dataclass
class _Active:
    record: TrialRecord
    trial: optuna.trial.Trial
    reported: set[int] = field(default_factory=set)
    pruning: bool = False
    seen: int = 0
    """The id of the last metric row read: each poll reads only the rows written since."""
    last: float | None = None
    """The last metric reported: a pruned trial's on the leaderboard, as Optuna keeps its last intermediate value."""


class _Search:
    def __init__(self, ctx: Any, request: dict[str, Any], driver: TuneDriver, owner: str) -> None:
        import optuna

        self.ctx, self.driver, self.owner = ctx, driver, owner
        self.tune = TuneRequest.model_validate(request)
        self.metric, self.mode = str(request["metric"]), str(request["mode"])
        self.base: dict[str, Any] = request["base"]
        self.framework = str(self.base.get("framework"))
        self.dists = {path: spaces.to_optuna(d) for path, d in self.tune.space.items()}
        self._curve = functools.partial(metric_curve, framework=self.framework, metric=self.metric)
        self.points = spaces.grid(self.tune.space, self.tune.trials) if self.tune.sampler == "grid" else None
        self.study = optuna.create_study(
            direction="maximize" if self.mode == "max" else "minimize", sampler=sampler(self.tune),
            pruner=pruner(self.tune),
        )  # fmt: skip
        self.finished: list[TrialRecord] = []
        self.published = 0  # how many finished trials the last publish wrote
        self.active: dict[int, _Active] = {}
        self.next_number = 0
        self.deadline: float | None = None
        self.waiting: tuple[int, optuna.trial.Trial, dict[str, Any]] | None = None
        """A trial asked of the study whose job a quota (429) or the job broker (503) refused: submitted again on the
        next passes, every ``waiting_every`` seconds."""
        self.waiting_since: float | None = None
        self.waiting_tried, self.waiting_every = 0.0, QUOTA_RETRY_S

    # --- the study rebuilt from the trial jobs -----------------------------------------------------------------
    def rebuild(self) -> None:

        def read(s: Session) -> tuple[Job | None, list[tuple[Job, dict[int, float], int]]]:
            rows = s.scalars(select(Job).where(Job.parent_id == self.ctx.job_id).order_by(Job.trial)).all()
            return s.get(Job, self.ctx.job_id), [(row, *self._curve(s, row.id)) for row in rows]

        tune_row, children = self.db_call(read, "reading its trials")
        if self.tune.timeout_minutes is not None and tune_row is not None:
            ends = tune_row.created_at + timedelta(minutes=self.tune.timeout_minutes)
            self.deadline = time.monotonic() + (ends - utcnow()).total_seconds()
        for child, curve, seen in children:
            number = int(child.trial or 0)
            self.next_number = max(self.next_number, number + 1)
            params = spaces.params_of(child.request, self.tune.space)
            record = TrialRecord(number=number, params=params, job_id=child.id)
            if child is children[-1][0] and unsent(child):  # the last trial waited for the broker: it waits again
                self.study.enqueue_trial(params)
                self.waiting, self.waiting_every = (number, self.study.ask(self.dists), params), BROKER_RETRY_S
            elif child.status in TERMINAL:
                self._settle(record, child, curve)
                self._rebuilt(record, curve)
            else:
                self.study.enqueue_trial(params)
                active = _Active(record, self.study.ask(self.dists), seen=seen)
                self.active[number] = active
                self._report(active, curve)
        for record in never_submitted(tune_row.result if tune_row else None, {int(c.trial or 0) for c, *_ in children}):
            self.next_number = max(self.next_number, record.number + 1)
            self._rebuilt(record, {})
        if self.finished or self.active or self.waiting:
            self.ctx.log(f"resumed the study: {len(self.finished)} trials finished, {len(self.active)} attached to")
            return
        for warning in threshold_warnings(self.base, self.tune.space):
            self.ctx.warn(warning)
        note = helpers.one_step_note(self.base, self.tune.pruner)
        if note is not None:
            self.ctx.log(note)

    def _rebuilt(self, record: TrialRecord, curve: dict[int, float]) -> None:
        """A trial that ended before this attempt, added to the study as it ended and to the leaderboard."""
        import optuna

        state = optuna.trial.TrialState.COMPLETE if record.state == "COMPLETE" else trial_state(record.state)
        try:
            self.study.add_trial(optuna.trial.create_trial(
                params=record.params, distributions=self.dists, state=state, intermediate_values=curve,
                value=record.metric if record.state == "COMPLETE" else None,
            ))  # fmt: skip
        except ValueError as exc:  # a value outside today's space: on the leaderboard, not in the study
            log.warning("trial %d of tune job %s not added to the study: %s", record.number, self.ctx.job_id, exc)
        self.finished.append(record)

    # --- one pass ----------------------------------------------------------------------------------------------
    def timed_out(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def launch(self) -> None:
        while len(self.active) < self.tune.parallel and not self.timed_out():
            if self.waiting is not None:  # refused on an earlier pass: the same trial, submitted again
                if time.monotonic() - self.waiting_tried < self.waiting_every:
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
            except (TooManyRequests, ServiceUnavailable) as exc:  # the owner's queued_jobs quota, or the broker away
                broker = isinstance(exc, ServiceUnavailable)  # its job keeps the number: trials.resend sends it later
                if self.waiting_since is None:
                    self.waiting_since, what = time.monotonic(), "the job broker" if broker else "the owner's quota"
                    self.ctx.log(f"trial {number} waits for {what}: {exc.detail}")
                self.waiting, self.waiting_tried = (number, trial, params), time.monotonic()
                self.waiting_every = BROKER_RETRY_S if broker else QUOTA_RETRY_S
                return
            except AppError as exc:  # the sampled body does not plan (checked at its extremes): a failed trial
                self.ctx.warn(f"trial {number} {json.dumps(params)}: {exc.detail}")
                record.state, record.finished = "FAIL", time.time()
                self.study.tell(trial, state=trial_state("FAIL"))
                self.finished.append(record)
                self.publish()  # its only record (it has no job) before the next trial's job exists: never_submitted
                continue
            if self.waiting_since is not None:
                self.ctx.log(f"trial {number} submitted after {time.monotonic() - self.waiting_since:.0f} s of waiting")
                self.waiting_since = None
            self.active[number] = _Active(record, trial)
            self.ctx.log(f"trial {number} started as job {record.job_id}: {json.dumps(params)}")

    def _submit(self, number: int, params: dict[str, Any]) -> str:
        """Trial ``number``'s job, sent: a new one, or the one already written for the number and never sent
        (trials.resend: the broker refused it, or a restart lost the answer to its commit). Retried whole while the
        database is away; the retry's own session stays unused (a session connects on its first statement), as
        jobs.submit opens its transactions itself. Run again, it finds the job a lost commit wrote, rather than fail
        on the (parent_id, trial) constraint."""
        limits = quotas.limits_for(settings=self.driver.settings, owner=self.owner)

        def send(_session: Session) -> str:
            with self.driver.db() as s:
                written = s.scalar(select(Job.id).where(Job.parent_id == self.ctx.job_id, Job.trial == number))
            if written is not None:
                resend(db=self.driver.db, enqueue=self.driver.enqueue, job_id=written, owner=self.owner, limits=limits)
                return written
            body = trial_body(self.base, params, pruned=self.tune.pruner != "none")
            train, db = train_request(body, "base"), self.driver.db
            settings = for_owner(self.driver.settings, self.owner)
            plan = helpers.quiet_injected(plan_in_request(request=train, settings=settings, spark=self.driver.spark,
                                                        db=db), body, self.base)  # fmt: skip
            job, _ = jobs.submit(
                db=db, enqueue=self.driver.enqueue, job_type=JobType.TRAIN, plan=plan,
                request=train.model_dump(mode="json", exclude_none=True), framework=train.framework,
                name=train.name, owner=self.owner, limits=limits, parent_id=self.ctx.job_id, trial=number,
            )  # fmt: skip
            return job.id

        return self.db_call(send, f"submitting trial {number}")

    def poll(self) -> None:
        for number, active in list(self.active.items()):

            def read(s: Session, job_id: str = str(active.record.job_id), after: int = active.seen) -> Any:
                child = s.get(Job, job_id)
                return None if child is None else (child, *self._curve(s, job_id, after=after))

            got = self.db_call(read, f"reading trial {number}")
            if got is None:
                continue
            child, curve, active.seen = got
            self._report(active, curve, running=child.status == JobStatus.RUNNING)
            if child.status not in TERMINAL:
                continue
            self._settle(active.record, child, None)
            record = active.record
            if record.state == "PRUNED":
                record.metric = active.last
            if record.state == "COMPLETE":
                self.study.tell(active.trial, record.metric)
            else:
                self.study.tell(active.trial, state=trial_state(record.state))
            del self.active[number]
            self.finished.append(record)
            self.ctx.log(f"trial {number} {record.state}: {self.metric} {json.dumps(record.metric)}")

    def publish(self) -> None:
        """The leaderboard so far as the tune job's result, while it runs (a cancelled search keeps it); the final
        result replaces it when the search ends."""
        done, trials, owner = len(self.finished), self.tune.trials, self.driver.owner
        result = partial(self.finished, metric=self.metric, mode=self.mode, trials=trials, framework=self.framework)
        mine = (Job.id == self.ctx.job_id, Job.worker_id == owner["worker_id"], Job.attempt == owner["attempt"])
        said = {"progress": done / trials, "progress_message": f"{done} of {trials} trials finished"}
        stmt = update(Job).where(*mine, Job.status.in_(_LIVE)).values(result=result, heartbeat_at=utcnow(), **said)
        # the progress too, in the same write: a cancelled search's trials end after its loop ("0 of 4 finished")
        self.db_call(lambda s: s.execute(stmt), "publishing the leaderboard")
        self.published = done

    def _report(self, active: _Active, curve: dict[int, float], running: bool = False) -> None:
        for step in sorted(set(curve) - active.reported):
            active.trial.report(curve[step], step)
            active.reported.add(step)
            active.record.epochs = max(active.record.epochs or 0, step)
            active.last = curve[step]
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
        active.pruning, active.record.pruned_at = True, step
        if stopping:
            self.driver.cancel_local(job_id)
        self.ctx.log(f"trial {active.record.number}: {note}")

    def driver_write(self, work: Callable[[Session], T]) -> T:
        return self.db_call(work, "writing to its trials")

    def db_call(self, work: Callable[[Session], T], what: str) -> T:
        """``work`` in a transaction of its own, run again while the database is away with the job runner's helper,
        backoff and budget (app.db.session.retrying, ``db_retry_s``): a search lives as long as its trials, and a
        PostgreSQL restart under it failed it for good (FAILED INTERNAL, its trials left running). ``work`` may run
        more than once, so it only reads and writes rows; the study is told what it found after it returns."""
        budget, where = self.driver.settings.db_retry_s, f"tune job {self.ctx.job_id} {what}"
        return retrying(self.driver.db, work, budget_s=budget, what=where)

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
                record.state, record.metric, record.pruned_at = "COMPLETE", float(value), None  # a late prune
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
        pruned = next((str(w) for w in child.warnings or [] if str(w).startswith(PRUNED_NOTE)), None)
        record.state = "PRUNED" if pruned else ("CANCELLED" if child.status == JobStatus.CANCELLED else "FAIL")
        if pruned is not None and pruned.rsplit(" ", 1)[-1].isdigit():  # "... at epoch 4": a study rebuilt
            record.pruned_at = int(pruned.rsplit(" ", 1)[-1])
        if pruned is not None and curve:
            record.metric = curve[max(curve)]

    # --- cancel ------------------------------------------------------------------------------------------------
    def cancel_trials(self, why: str) -> None:
        for active in self.active.values():
            job_id = str(active.record.job_id)

            def cancel(s: Session, job_id: str = job_id) -> bool:
                return jobs.request_cancel(session=s, job_id=job_id)[1]

            try:
                if self.driver_write(cancel):
                    self.driver.cancel_local(job_id)
                self.ctx.log(f"trial {active.record.number} (job {job_id}): cancel requested, {why}")
            except AppError:  # it finished meanwhile (a 409)
                continue
            except Exception:  # the database is still away: this one runs to its end
                log.exception("tune job %s: could not cancel trial job %s", self.ctx.job_id, job_id)

    def end_trials(self, error: BaseException) -> None:
        """Cancel the active trials when the tune job ends with ``error`` here for good: cancelled, or failed while
        this runner holds it (a failed search left them running, for a search that was over). They are left running
        when the job goes on elsewhere, where its next attempt attaches to them: a stopping driver hands it back,
        the reconciler gave it up, the Spark JVM died (DRIVER_LOST) or the database stayed away past ``db_retry_s``
        (DATABASE_UNAVAILABLE): both queued again."""
        if self.driver.stopping():
            return
        try:
            status = self.db_call(self._own_status, "reading its status")
        except Exception:  # the database is still away: the trials then run to their end
            log.exception("tune job %s: could not read whether it still runs here", self.ctx.job_id)
            return
        failed = isinstance(error, Exception) and not isinstance(error, JobCancelled)
        if status == JobStatus.CANCELLING:
            self.cancel_trials("the tune job was cancelled")
            self.settle_ending()
        elif status == JobStatus.RUNNING and failed and not unavailable(error) and self._spark_alive():
            self.cancel_trials(f"the tune job failed ({type(error).__name__})")

    def settle_ending(self) -> None:
        """After a cancel: trials that end within :data:`SETTLE_S` are recorded (one whose work was done SUCCEEDED)."""
        try:
            deadline = time.monotonic() + SETTLE_S
            while self.active and time.monotonic() < deadline:
                self.poll()
                time.sleep(POLL_S if self.active else 0)
            self.publish()
        except Exception:  # the cancel goes on with the leaderboard published last
            log.exception("tune job %s: could not record its last trials", self.ctx.job_id)

    def _spark_alive(self) -> bool:
        return self.driver.spark is None or spark_alive(self.driver.spark)

    def _own_status(self, s: Session) -> str | None:
        """The tune job's status while this runner holds it; None once it was given up or handed back."""
        row, owner = s.get(Job, self.ctx.job_id), self.driver.owner
        if row is None or row.worker_id != owner["worker_id"] or row.attempt != owner["attempt"]:
            return None
        return row.status


_LIVE = (JobStatus.RUNNING.value, JobStatus.CANCELLING.value)


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
    shown, cut_short = None, False
    try:
        while True:
            ctx.check_cancelled()
            search.poll()  # first: a trial that just ended makes room for the next one in this same pass
            search.launch()
            done = len(search.finished)
            if done != shown and not (done and done == search.published):  # once per change (a FAIL published it)
                search.publish() if done else ctx.progress(0, f"0 of {search.tune.trials} trials finished")
            shown = done
            ended = (search.next_number >= search.tune.trials and search.waiting is None) or search.timed_out()
            if not search.active and ended:
                break
            if search.timed_out() and search.active and not any(a.pruning for a in search.active.values()):
                cut_short = True  # those trials end CANCELLED: the search did not run its trials to their end
                search.cancel_trials("the tune job's timeout_minutes passed")
                for active in search.active.values():
                    active.pruning = True
            time.sleep(POLL_S)
    except BaseException as exc:  # cancelled, failed or handed back: end_trials says what becomes of the trials
        search.end_trials(exc)
        raise
    ran, asked = len(search.finished), search.tune.trials
    if not any(r.state == "COMPLETE" for r in search.finished):
        cut = f" before timeout_minutes ({search.tune.timeout_minutes}) passed" if search.timed_out() else ""
        why = f"{cut}{', which cancelled those still running' if cut_short else ''}; their jobs and the log say why"
        raise JobFailure("NO_TRIAL_COMPLETED", f"none of the {ran} trials that ran (of {asked}) completed{why}")
    return outcome(ctx, search.study, search.finished, metric=search.metric, db=driver.db, name=search.base["name"],
                   framework=search.framework, budget_s=driver.settings.db_retry_s, requested=asked,
                   timed_out=search.timed_out() and (ran < asked or cut_short))  # fmt: skip

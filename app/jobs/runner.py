"""Runs one job for a Celery task: the guarded start (under its owner's quotas), the Spark job group, heartbeats,
the job's work, and exactly one final state (app/jobs/settle.py).

A runner owns its job while the row names its driver (``worker_id``) and its attempt. Everything it records
after the start (checkpoints, progress, the final state, the model version) is conditional on that, so a runner
whose job was given up by the reconciler (its heartbeats stalled; another driver may run the next attempt now)
stops and records nothing: one job never has two writers.

An attempt that ends for a reason that is not the job's fault (Spark lost a worker, the artifact store is full
or unreachable, Spark stopped under it) is ended and the job queued again while attempts remain, whatever its
kind (app/services/resume.py says how each kind continues). A driver told to stop hands its running jobs back at
once (app/jobs/stop.py); a delivery that reaches a stopping driver goes back to the broker.

A ``tune`` job goes on, once taken, on a thread of its own (``DetachedRuns``, app/jobs/runtime.py), and its delivery
ends there: its search mostly waits for its trials, training jobs that need the consumer's threads. Everything above
holds for it as for any job; only its message is acknowledged at the take rather than at the end, which loses
nothing: from the take on, the job row, its heartbeats and the reconciler carry a job, not its message (a delivery
of a job that started is dropped).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from sqlalchemy.orm import Session

from app.core.jobstates import TERMINAL, JobStatus, JobType
from app.db.base import utcnow
from app.db.models import Job
from app.jobs.context import DbJobContext
from app.jobs.dispatch import TakenJob, execute
from app.jobs.runtime import DriverStopping, JobRuntime, RunningJob, Send, spark_call
from app.jobs.settle import settle
from app.jobs.watcher import Watcher
from app.services import attempts, jobs, quotas, reconcile
from app.spark.session import tag_job_logs

log = logging.getLogger("sparktrain.jobs")


def run_job(rt: JobRuntime, job_id: str, *, queue: str | None = None, send: Send | None = None) -> None:
    """Entry point of every job task. A delivery that does not win QUEUED -> STARTING does nothing; one whose
    owner is over a quota leaves the job waiting in QUEUED. ``queue`` is the queue the message came from (recorded
    on the job, where its retries go); ``send`` queues a retry (default: the runtime's). A tune job's run goes on
    on a thread of its own: this returns once it is taken. Raises :class:`DriverStopping` once the driver is
    stopping (its message goes back)."""
    send = send or rt.send
    if not rt.running.begin_take():
        raise DriverStopping(f"driver {rt.worker_id} is stopping")
    try:  # a stop that begins meanwhile waits for this (hand_back_all): a job it left STARTING had no driver
        taken = _take_and_register(rt, job_id, queue or rt.settings.queue, send)
    finally:
        rt.running.end_take()
    if taken is None:
        return
    job, running = taken
    if job.type == JobType.TUNE:  # its search waits on its trials: it must not hold a consumer thread they need
        rt.detached.start(job_id, lambda: _run_to_end(rt, job, running, send))
        return
    _run_to_end(rt, job, running, send)


def _take_and_register(
    rt: JobRuntime, job_id: str, queue: str, send: Send | None
) -> tuple[TakenJob, RunningJob] | None:
    job = _take(rt, job_id, queue)
    if job is None:
        return None
    running = rt.running.add(job_id, job.attempt)
    if running is None:  # the driver began to stop between the take and now
        if send is not None:
            reconcile.hand_back(db=rt.db, send=send, job_id=job_id, worker_id=rt.worker_id, attempt=job.attempt,
                                default_queue=rt.settings.queue)  # fmt: skip
        return None
    return job, running


def _run_to_end(rt: JobRuntime, job: TakenJob, running: RunningJob, send: Send | None) -> None:
    try:
        _run(rt, job, running, send)
    finally:
        rt.running.remove(running)
        _wake_waiting(rt, job.owner, send)


def _take(rt: JobRuntime, job_id: str, queue: str) -> TakenJob | None:
    """QUEUED -> STARTING as this driver, in one transaction with the owner's quota check."""
    with rt.db() as s:
        row = s.get(Job, job_id)
        owner = row.owner if row is not None else ""
        queued = row is not None and row.status == JobStatus.QUEUED
    if not queued:
        _ignore_delivery(rt, job_id)
        return None
    limits = quotas.limits_for(settings=rt.settings, owner=owner)

    def take(s: Session) -> TakenJob | str | None:
        job = s.get(Job, job_id, populate_existing=True)
        if job is None or job.status != JobStatus.QUEUED:
            return None
        blocked = None
        if limits.any_job_limit:
            blocked = quotas.blocking_quota(session=s, owner=owner, slots=job.slots, limits=limits)
        if blocked:
            if job.waiting_for != blocked:
                jobs.add_log(session=s, job_id=job_id, message=f"waits in QUEUED: its owner's {blocked} quota is "
                             "used up; it starts when one of the owner's jobs ends")  # fmt: skip
            job.waiting_for, job.woken_at = blocked, None  # its message is used up: the next end may wake it
            job.attempts = attempts.update_attempt(job, job.attempt, queue=queue, sent=True)  # it was delivered
            return blocked
        now = utcnow()
        won = jobs.transition(session=s, job_id=job_id, sources=[JobStatus.QUEUED], target=JobStatus.STARTING,
                              worker_id=rt.worker_id, started_at=job.started_at or now, heartbeat_at=now,
                              waiting_for=None,
                              woken_at=None, spark_app_id=rt.spark.sparkContext.applicationId)  # fmt: skip
        if not won:
            return None
        s.refresh(job)
        job.attempts = attempts.update_attempt(job, job.attempt, queue=queue, worker_id=rt.worker_id, sent=True,
                                               started_at=now.isoformat())  # fmt: skip
        return TakenJob(id=job.id, type=job.type, framework=job.framework, name=job.name, request=job.request,
                        plan=job.plan, attempt=job.attempt, owner=job.owner)  # fmt: skip

    taken = rt.write(take, "taking a job", begin=lambda: quotas.owner_lock(rt.db, owner, needed=limits.any_job_limit))
    if taken is None:
        _ignore_delivery(rt, job_id)
        return None
    if isinstance(taken, str):
        log.info("job %s waits: its owner %s is at the %s quota", job_id, owner, taken)
        return None
    return taken


def _run(rt: JobRuntime, job: TakenJob, running: RunningJob, send: Send | None) -> None:
    job_id = job.id
    watcher = Watcher(rt, running, job.attempt)
    sc = rt.spark.sparkContext
    work_dir = rt.settings.artifact_root / "jobs" / job_id
    ctx = DbJobContext(rt, job_id, job.attempt, running, work_dir)
    try:
        work_dir.mkdir(parents=True, exist_ok=True)  # inside: a full or unwritable disk settles the job, not STARTING
        sc.setJobGroup(job_id, f"sparktrain {job.type} job {job_id}", interruptOnCancel=True)
        tag_job_logs(rt.spark, job_id)  # Spark's JVM lines about its work carry its job_id
        watcher.start()
        ctx.log(f"attempt {job.attempt} started on {rt.worker_id} (Spark application {sc.applicationId})")
        rt.write(lambda s: jobs.transition(session=s, job_id=job_id, sources=[JobStatus.STARTING],
                                           target=JobStatus.RUNNING, only_if=ctx.owner))  # fmt: skip
        ctx.check_cancelled()
        outcome = execute(rt, ctx, job)
    except BaseException as exc:
        # not in a group that a later attempt of the job runs in here now (this one was given up)
        if not running.handed_back and not rt.stopping and rt.running.get(job_id) is running:
            # a torch job's one barrier stage is over once its driver returns: nothing of it submits more
            single_stage = job.type == "train" and job.framework == "torch"
            _drain_job_group(rt, job_id, quiet_s=0.0 if single_stage else 2.0)
        settle(rt, ctx, running, exc, send)
        if not isinstance(exc, Exception):
            raise
    else:
        settle(rt, ctx, running, outcome, send)
    finally:
        watcher.stop()
        spark_call(lambda: sc._jsc.clearJobGroup())  # noqa: PLW0108 (_jsc is None once Spark stopped)
        spark_call(lambda: tag_job_logs(rt.spark, None))  # the thread runs other jobs next
        _drop_empty(rt, job_id, work_dir)


def _drop_empty(rt: JobRuntime, job_id: str, work_dir: Path) -> None:
    """A job that ended for good and left nothing in its working directory (an evaluation, a prediction, most
    failures) leaves no empty directory behind under the artifact root. Not while another attempt may come: it
    could be making the same directory at this moment."""
    try:
        if any(work_dir.iterdir()):
            return
        with rt.db() as session:
            ended = session.get(Job, job_id)
            if ended is None or ended.status not in TERMINAL:
                return
        work_dir.rmdir()
    except Exception:  # only tidying: a missing directory, a database away
        log.debug("left the working directory of job %s", job_id, exc_info=True)


def _drain_job_group(rt: JobRuntime, job_id: str, quiet_s: float = 2.0, limit_s: float = 60.0) -> None:
    """After a job ends badly, threads it started (Spark ML's CrossValidator pool keeps fitting after an error)
    may still submit Spark jobs in its group: cancel the group until it has been quiet for ``quiet_s``."""
    sc = rt.spark.sparkContext
    deadline = time.monotonic() + limit_s
    quiet_since = time.monotonic()
    while time.monotonic() < deadline and not rt.stopping:
        tracker = spark_call(sc.statusTracker)
        if tracker is None:
            return  # Spark is gone: nothing is left to drain
        active = set(tracker.getActiveJobsIds()) & set(tracker.getJobIdsForGroup(job_id))
        if active:
            spark_call(lambda: sc.cancelJobGroup(job_id))
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_s:
            return
        time.sleep(0.1)
    if not rt.stopping:
        log.warning("job %s: its Spark job group was still busy after %.0f s", job_id, limit_s)


def _wake_waiting(rt: JobRuntime, owner: str, send: Send | None) -> None:
    """A job of ``owner`` ended here: send the owner's waiting jobs that fit now (quotas.wake)."""
    if send is None or rt.stopping or not quotas.limits_for(settings=rt.settings, owner=owner).any_job_limit:
        return
    try:
        quotas.wake(db=rt.db, settings=rt.settings, send=send, owner=owner, queue_of=attempts.queue_of)
    except Exception:
        log.exception("could not wake the waiting jobs of %s; the reconciler will", owner)


def _ignore_delivery(rt: JobRuntime, job_id: str) -> None:
    def note(s: Session) -> str | None:
        job = s.get(Job, job_id)
        if job is None:
            return None
        message = f"a delivery of this job reached {rt.worker_id} while it was {job.status}: ignored"
        jobs.add_log(session=s, job_id=job_id, level="WARNING", message=message)
        return job.status

    status = rt.write(note, "noting a duplicate delivery")
    if status is None:
        log.warning("message for unknown job %s dropped", job_id)
    else:
        log.info("job %s is %s: duplicate delivery ignored", job_id, status)

"""How each kind of job continues when an attempt ended early: the one place that says it.

An attempt ends early when its driver dies (``DRIVER_LOST``) or stops (``DRIVER_STOPPED``), when Spark loses a
worker of its barrier stage (``WORKER_LOST``), or when the artifact store is full or unreachable
(``STORAGE_FULL``, ``STORAGE_UNAVAILABLE``), or when the database stayed away past the runner's retries
(``DATABASE_UNAVAILABLE``). Every kind of job is then queued again while attempts remain: none of
them writes anything visible before it succeeds (a model version is registered, a batch prediction's output is
renamed into place, an evaluation's result is stored, all at the very end), so running one again is safe.

- A kind that writes checkpoints has a :class:`Resume` rule in :data:`RULES`: the next attempt continues from its
  newest checkpoint (torch: epochs, with every rank's optimizer and residual state; xgboost: boosting rounds, from
  the saved booster; a Spark ML cross-validation: the (fold, parameter map) fits done, with their metrics).
  Without a checkpoint yet it starts from scratch, or from where the request said (an xgboost plan's
  ``started_from``, another job's checkpoint named by ``training.resume_from``, stays its resume point).
- Every other kind (Spark ML fits without cross-validation, evaluation, batch prediction, recipes, tune jobs, which
  rebuild their study from their trial jobs, and any kind added later) starts from scratch with its stored plan
  unchanged. A new kind that checkpoints adds its rule here;
  nothing else in the retry path knows about kinds.

A stop (``DRIVER_STOPPED``: an operator restarting the service) costs the job no attempt: ``max_attempts`` grows
with the retry, so no number of restarts fails a user's job. Neither does a lost driver or worker
(``DRIVER_LOST``, ``WORKER_LOST``) when the attempt saved progress first (:func:`made_progress`: a checkpoint past
every earlier attempt's): a job that keeps moving forward between failures is never failed by them, while one that
dies again before its next checkpoint (a crash loop) runs out of attempts as before. A storage failure is tried
again after ``SPARKTRAIN_RETRY_DELAY_S`` (a full disk rarely empties itself in a millisecond), and so is an
attempt that outlasted the database's patience.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.db.models import Checkpoint, Job
from workers import plans

RETRYABLE = frozenset(
    {"DRIVER_LOST", "DRIVER_STOPPED", "WORKER_LOST", "STORAGE_FULL", "STORAGE_UNAVAILABLE", "DATABASE_UNAVAILABLE",
     "NO_EXECUTORS"}
)  # fmt: skip
"""Reasons an attempt ends that are not the job's fault: the job is queued again while attempts remain."""
FREE = frozenset({"DRIVER_STOPPED"})
"""Reasons that cost no attempt."""
FREE_AFTER_PROGRESS = frozenset({"DRIVER_LOST", "WORKER_LOST"})
"""Reasons that cost no attempt when the attempt saved progress first (:func:`made_progress`)."""
DELAYED = frozenset({"STORAGE_FULL", "STORAGE_UNAVAILABLE", "DATABASE_UNAVAILABLE", "NO_EXECUTORS"})
"""Reasons whose retry waits ``retry_delay_s`` before its message is sent."""


@dataclass(frozen=True)
class Resume:
    """A kind of job that writes checkpoints. Checkpoints are numbered in the kind's units (``Checkpoint.epoch``:
    torch epochs, xgboost rounds)."""

    total: Callable[[dict[str, Any] | None, dict[str, Any]], int]
    """The units the job trains in all, from its plan and request: a checkpoint at the last one has nothing left to
    train, so a retry continues from the one before (it redoes the last unit, which gives the same model)."""
    resuming: Callable[[dict[str, Any], Checkpoint, str], dict[str, Any]]
    """The stored plan, continuing from the checkpoint (of the job whose id is given)."""
    request_key: str | None = None
    """A section of the stored request whose ``resume_from`` names the checkpoint too (torch's ``training``)."""
    unit: str = "epoch"
    """What ``Checkpoint.epoch`` counts, as the job's log says it."""


def _torch_total(plan: dict[str, Any] | None, request: dict[str, Any]) -> int:
    from app.schemas.train import TrainingOptions

    if plan is not None and "epochs" in plan:
        return int(plan["epochs"])
    epochs = (request.get("training") or {}).get("epochs")
    return int(epochs or TrainingOptions.model_fields["epochs"].default)


def _torch_resuming(plan: dict[str, Any], checkpoint: Checkpoint, job_id: str) -> dict[str, Any]:
    from workers.training.torch.config import ResumePoint, TorchPlan

    point = ResumePoint(checkpoint_id=checkpoint.id, path=checkpoint.uri, epoch=checkpoint.epoch, job_id=job_id)
    return plans.dump(replace(plans.load(TorchPlan, plan), resume=point))


def _xgboost_total(plan: dict[str, Any] | None, request: dict[str, Any]) -> int:
    return int(((plan or {}).get("spec") or {}).get("num_round") or 0)


def _xgboost_resuming(plan: dict[str, Any], checkpoint: Checkpoint, job_id: str) -> dict[str, Any]:
    from workers.training.xgboost.spec import XGBoostPlan, XGBoostResume

    point = XGBoostResume(checkpoint_id=checkpoint.id, uri=checkpoint.uri, rounds=checkpoint.epoch, job_id=job_id)
    return plans.dump(replace(plans.load(XGBoostPlan, plan), resume=point))


def _spark_ml_total(plan: dict[str, Any] | None, request: dict[str, Any]) -> int:
    """The cross-validation's fits and the final fit of the best parameters, which is never checkpointed: a
    checkpoint after the last fold still leaves that to do."""
    spec = (plan or {}).get("spec") or {}
    grid = spec.get("grid") or {}
    folds = spec.get("num_folds")
    if not folds:
        return 0
    return int(folds) * math.prod(len(v) for v in grid.values()) + 1


def _spark_ml_resuming(plan: dict[str, Any], checkpoint: Checkpoint, job_id: str) -> dict[str, Any]:
    from workers.training.spark_ml.spec import SparkMLPlan, SparkMLResume

    point = SparkMLResume(checkpoint_id=checkpoint.id, uri=checkpoint.uri, fits=checkpoint.epoch, job_id=job_id)
    return plans.dump(replace(plans.load(SparkMLPlan, plan), resume=point))


RULES: dict[str, Resume] = {
    "train.torch": Resume(total=_torch_total, resuming=_torch_resuming, request_key="training"),
    "train.xgboost": Resume(total=_xgboost_total, resuming=_xgboost_resuming, unit="round"),
    "train.spark_ml": Resume(total=_spark_ml_total, resuming=_spark_ml_resuming, unit="fit"),
}
"""Kinds (``kind_of``) that continue from a checkpoint; every other kind starts again from scratch."""


class _Kinded(Protocol):
    @property
    def type(self) -> str: ...
    @property
    def framework(self) -> str | None: ...
    @property
    def name(self) -> str | None: ...


def kind_of(job: _Kinded) -> str:
    """``train.<framework>``, ``recipe.<name>``, or the job type (``evaluate``, ``predict``, ``tune``, ...)."""
    if job.type == "train":
        return f"train.{job.framework}"
    if job.type == "recipe":
        return f"recipe.{job.name}"
    return str(job.type)


@dataclass(frozen=True)
class NextAttempt:
    """What the job's next attempt runs."""

    plan: dict[str, Any] | None
    request: dict[str, Any]
    checkpoint: Checkpoint | None
    unit: str = "epoch"
    kind: str = ""

    @property
    def how(self) -> str:
        if self.kind == "tune":  # its study is in the database: finished trials stay, running ones resume
            return "resumes its search from the study in the database"
        if self.checkpoint is None:
            return "starts from scratch"
        return f"resumes from checkpoint {self.checkpoint.id} ({self.unit} {self.checkpoint.epoch})"


def made_progress(session: Session, job: Job) -> bool:
    """Whether the job's current attempt registered a checkpoint past every checkpoint of its earlier attempts."""
    newest = func.max(Checkpoint.epoch)
    mine = session.scalar(select(newest).where(Checkpoint.job_id == job.id, Checkpoint.attempt == job.attempt))
    before = session.scalar(select(newest).where(Checkpoint.job_id == job.id, Checkpoint.attempt < job.attempt))
    return mine is not None and mine > (before if before is not None else -1)


def newest_checkpoint(session: Session, job_id: str, below: int | None) -> Checkpoint | None:
    """The job's newest checkpoint before unit ``below`` (the job's total, see :attr:`Resume.total`; None: any)."""
    stmt = select(Checkpoint).where(Checkpoint.job_id == job_id)
    if below is not None:
        stmt = stmt.where(Checkpoint.epoch < below)
    return session.execute(stmt.order_by(Checkpoint.epoch.desc()).limit(1)).scalar_one_or_none()


def next_attempt(session: Session, job: Job) -> NextAttempt:
    """The plan (and request) of the job's next attempt. Raises TypeError, ValueError or KeyError when the stored
    plan cannot be read.

    A job whose request left its data checks to the job (a deferred plan) keeps it: the job plans its request again,
    and a torch request names the checkpoint (``resume_from``); for the kinds whose request cannot name one the job
    applies the newest checkpoint to the plan it made (:func:`continuing`), which is also the one named here."""
    rule = RULES.get(kind_of(job))
    if rule is None:
        return NextAttempt(plan=job.plan, request=dict(job.request), checkpoint=None, kind=kind_of(job))
    deferred = job.plan is None or plans.is_deferred(job.plan)
    below = None if deferred and rule.request_key is None else rule.total(job.plan, job.request)
    checkpoint = newest_checkpoint(session, job.id, below)
    if checkpoint is None:
        return NextAttempt(plan=job.plan, request=dict(job.request), checkpoint=None)
    request = dict(job.request)
    if rule.request_key is not None:
        request[rule.request_key] = {**dict(request.get(rule.request_key) or {}), "resume_from": checkpoint.id}
    if deferred or job.plan is None:  # the job plans its request (see above)
        return NextAttempt(plan=job.plan, request=request, checkpoint=checkpoint, unit=rule.unit)
    plan = rule.resuming(job.plan, checkpoint, job.id)
    return NextAttempt(plan=plan, request=request, checkpoint=checkpoint, unit=rule.unit)


def continuing(
    session: Session, job: _Kinded, job_id: str, plan: dict[str, Any], request: dict[str, Any]
) -> tuple[dict[str, Any], Checkpoint | None]:
    """A retried job that planned its request again (a deferred plan): ``plan`` continuing from the job's newest
    checkpoint before its last unit, for the kinds whose request cannot name a checkpoint (xgboost rounds, Spark ML
    fits); the plan unchanged, and None, for every other kind or without a checkpoint."""
    rule = RULES.get(kind_of(job))
    if rule is None or rule.request_key is not None:
        return plan, None
    checkpoint = newest_checkpoint(session, job_id, rule.total(plan, request))
    if checkpoint is None:
        return plan, None
    return rule.resuming(plan, checkpoint, job_id), checkpoint

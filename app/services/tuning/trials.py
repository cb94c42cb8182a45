"""What a trial runs: its ``/train`` body, built from the base and the sampled values, and what the search should
be told about gradient sharing's threshold before it starts; how a trial is asked of the study (its sampler, seeded
per trial, and pruner) and told how it ended; and the sending again of a trial's job that the broker refused."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from sqlalchemy.orm import Session, sessionmaker

from app.core.errors import ServiceUnavailable
from app.core.jobstates import JobStatus
from app.db.base import utcnow
from app.db.models import Job
from app.db.session import transaction
from app.schemas.train import TrainingOptions
from app.schemas.tune import TuneRequest
from app.services import jobs, quotas
from app.services.tuning import space as spaces
from workers.errors import SpecError
from workers.families import task_name
from workers.training.torch.config import ADAM_FAMILY, default_initial_threshold
from workers.training.torch.spec import parse_optimizer
from workers.training.xgboost.spec import ALIASES, XGBoostSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from app.core.settings import Settings


def trial_body(base: dict[str, Any], params: dict[str, Any], *, pruned: bool = False) -> dict[str, Any]:
    """A trial's ``/train`` body: the base with the sampled values. A torch trial whose base does not choose a data
    path takes the Export path: every trial reads the same rows, so the first one prepares them while it trains
    and writes each worker's tensors, and the others start from those (no Spark pass, no shuffle: about half a
    second less per trial on the digits, ``bench.tune``). The export is keyed by the data files, the columns, the
    split and the worker count, so a space over any of those still gets the right rows.

    ``pruned`` (a search with a pruner): a gradient-sharing trial whose body leaves the first threshold to the
    trainer starts it at one optimizer step (:func:`one_step_threshold`)."""
    body = spaces.substitute(base, params)
    if body.get("framework") != "torch":
        return body
    training = dict(body.get("training") or {})
    if not training.get("data_path"):
        training["data_path"] = "export"
    body["training"] = one_step_threshold(training) if pruned else training
    return body


LEARNING_RATE = "training.optimizer.learning_rate"
THRESHOLD = "training.gradient_sharing.threshold_algorithm"


def threshold_warnings(base: dict[str, Any], space: dict[str, Any]) -> list[str]:
    """What the search should be told before it starts: a base that fixes gradient sharing's threshold (in the
    units of the parameters) while the space samples the learning rate (the size of a step) gives trials a first
    threshold of very different numbers of steps: from almost none to hundreds, where nothing is sent for the
    first epochs."""
    training = base.get("training") or {}
    if base.get("framework") != "torch" or training.get("mode", "gradient_sharing") != "gradient_sharing":
        return []
    algorithm = (training.get("gradient_sharing") or {}).get("threshold_algorithm") or {}
    key = "threshold" if algorithm.get("type") == "fixed" else "initial_threshold"
    value, rates = algorithm.get(key), space.get(LEARNING_RATE)
    if not isinstance(value, (int, float)) or value <= 0 or rates is None or f"{THRESHOLD}.{key}" in space:
        return []
    ends = [float(v) for v in rates.extremes() if isinstance(v, (int, float)) and v > 0]
    if not ends:
        return []
    steps = f"{value / max(ends):.2g} to {value / min(ends):.2g}"
    what = "the first threshold holds back" if key == "initial_threshold" else "the threshold stays at"
    return [
        f"{THRESHOLD}.{key} is fixed at {value:g} in the base while the space samples {LEARNING_RATE} from "
        f"{min(ends):g} to {max(ends):g}: {what} {steps} optimizer steps (Adam's step is about the learning rate). "
        f"Leave {key} out of the base and each trial's threshold follows its own learning rate, or sample it too"
    ]


def one_step_threshold(training: dict[str, Any]) -> dict[str, Any]:
    """``training`` with gradient sharing's first threshold written in at one optimizer step (Adam family: the
    learning rate), where the body leaves it to the trainer; anything else unchanged.

    Left to the trainer, the first threshold follows the planned length: up to ten optimizer steps in a long run,
    which costs nothing at its end but holds back most of what its first epochs learn, and those epochs are what a
    pruner judges a trial by. Measured on the digits CNN planned for 20 epochs at batch 16 (seeds 7 to 9,
    ``bench.sharing_accuracy --set early``): 0.62 validation accuracy after epoch 1 (0.44 to 0.74) against 0.91
    with one step and 0.95 with ``allreduce``; the rung at epoch 1 then ranks trials by the seed's luck."""
    if training.get("mode", "gradient_sharing") != "gradient_sharing":
        return training
    sharing = dict(training.get("gradient_sharing") or {})
    algorithm = dict(sharing.get("threshold_algorithm") or {})
    if algorithm.get("type", "adaptive") == "fixed" or "initial_threshold" in algorithm:
        return training
    try:
        optimizer = parse_optimizer(TrainingOptions.model_validate(training).optimizer)
    except (ValidationError, SpecError):  # the trial's planning says what is wrong with it
        return training
    if optimizer.type not in ADAM_FAMILY:  # SGD's first threshold does not follow the planned length
        return training
    algorithm["initial_threshold"] = default_initial_threshold(optimizer)
    return {**training, "gradient_sharing": {**sharing, "threshold_algorithm": algorithm}}


def one_step_note(base: dict[str, Any], pruner: str) -> str | None:
    """What the search logs when :func:`one_step_threshold` changes its trials (None when it changes none: no pruner,
    another mode, SGD, a first threshold the base chooses)."""
    if pruner == "none" or base.get("framework") != "torch":
        return None
    training = dict(base.get("training") or {})
    if one_step_threshold(training) == training:
        return None
    return (
        f"pruner {pruner}: gradient sharing's first threshold starts at one optimizer step in each trial (the "
        "base leaves it to the trainer), so that its first epochs show what it learns"
    )


def quiet_injected(plan: Any, trial: dict[str, Any], base: dict[str, Any]) -> Any:
    """A trial's plan without the warning that a threshold does not apply, when the threshold is the one
    :func:`one_step_threshold` wrote in (a small network is exchanged exactly): the user set none."""
    given = ((base.get("training") or {}).get("gradient_sharing") or {}).get("threshold_algorithm")
    written = ((trial.get("training") or {}).get("gradient_sharing") or {}).get("threshold_algorithm")
    if given == written or not getattr(plan, "warnings", ()):
        return plan
    kept = tuple(w for w in plan.warnings if not w.startswith("training.gradient_sharing.threshold_algorithm does"))
    return replace(plan, warnings=kept)


def trial_state(name: str) -> Any:
    """The study's state for a trial that did not complete: PRUNED, or FAIL (a cancel, a failure)."""
    import optuna

    return optuna.trial.TrialState.PRUNED if name == "PRUNED" else optuna.trial.TrialState.FAIL


def sampler(tune: TuneRequest, number: int | None = None) -> Any:
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
        study.sampler = sampler(tune, number)
    return study.ask(dists)


XGBOOST_MIN_ROUNDS, XGBOOST_MIN_SHARE = 5, 0.03
"""ASHA's first rung for xgboost where the search leaves it out: 3% of num_round, at least 5 rounds. At round 1 every
trial is a handful of trees from the base score, and a slow learning rate that would win is judged by them."""


def min_resource(tune: TuneRequest) -> int:
    """When ASHA first judges a trial (its first rung): the request's ``min_resource``, else one epoch for torch (an
    epoch is a pass over the data) and for xgboost :data:`XGBOOST_MIN_SHARE` of the base's ``num_round`` (or its
    aliases; 100 by default), at least :data:`XGBOOST_MIN_ROUNDS`."""
    if tune.min_resource is not None:
        return tune.min_resource
    if tune.base.get("framework") != "xgboost":
        return 1
    params = tune.base.get("params")
    named = {ALIASES.get(k, k): v for k, v in params.items()} if isinstance(params, dict) else {}
    rounds = named.get("num_round")
    rounds = rounds if isinstance(rounds, int) and not isinstance(rounds, bool) else XGBoostSpec.num_round
    return max(XGBOOST_MIN_ROUNDS, math.ceil(rounds * XGBOOST_MIN_SHARE))


def pruner(tune: TuneRequest) -> Any:
    """ASHA (reduction factor 2), first judging a trial at step :func:`min_resource` (epochs and rounds count from 1);
    the median pruner after one finished trial, from the first step, or from ``min_resource`` where the request
    gives it."""
    import optuna

    if tune.pruner == "asha":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=min_resource(tune), reduction_factor=2)
    if tune.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=tune.min_resource or 0)
    return optuna.pruners.NopPruner()


ENQUEUE_FAILED = "ENQUEUE_FAILED"


def unsent(job: Job) -> bool:
    """Whether a trial's job was written and its message refused by the broker (jobs.submit failed it so)."""
    return job.status == JobStatus.FAILED and job.error_reason == ENQUEUE_FAILED


def resend(
    *, db: sessionmaker[Session], enqueue: Callable[[str, str], None], job_id: str, owner: str, limits: quotas.Limits
) -> None:
    """Send again the message of a trial's job that was never sent: one the broker refused (``ENQUEUE_FAILED``), or
    one still QUEUED because a database restart lost the answer to the commit that wrote it (jobs.submit sends after
    its commit). A job in any other state was sent, or ended: left as it is.

    The trial keeps its number and its job. The (parent_id, trial) unique constraint lets one job hold a number,
    and a resumed search rebuilds its study from those jobs, so a second job for the number would need the first
    deleted, and jobs are never deleted (a client may hold its id already, and its FAILED state was public). The
    refused job goes back to QUEUED instead, by the state machine's retry edge (FAILED -> QUEUED), past the same
    ``queued_jobs`` check as a new job under the owner's lock (a 429 then: the caller waits for the quota); the
    plan it was written with still holds, since the trial's body has not changed. If the broker refuses again, the
    job is ENQUEUE_FAILED again and the caller gets the same 503 as from jobs.submit. A second message for a job
    that was sent after all is a duplicate delivery, which the runner ignores."""
    with quotas.owner_lock(db, owner, needed=bool(limits.queued_jobs)) as s:
        job = s.get(Job, job_id)
        if job is None or not (unsent(job) or job.status == JobStatus.QUEUED):
            return
        if unsent(job):
            quotas.check_submit(session=s, owner=owner, limits=limits, slots=job.slots)
            jobs.transition(session=s, job_id=job_id, sources=[JobStatus.FAILED], target=JobStatus.QUEUED,
                            finished_at=None, error_reason=None, error_message=None)  # fmt: skip
            jobs.add_log(session=s, job_id=job_id, message="the broker had refused this job: queued again")
        task = task_name(job.type, job.framework or "")
    try:
        enqueue(task, job_id)
    except Exception as exc:
        with transaction(db) as s:
            jobs.transition(session=s, job_id=job_id, sources=[JobStatus.QUEUED], target=JobStatus.FAILED,
                            finished_at=utcnow(), error_reason=ENQUEUE_FAILED,
                            error_message=f"the job broker did not accept the job: {exc}")  # fmt: skip
        raise ServiceUnavailable(
            f"The job broker is unreachable ({type(exc).__name__}); nothing was queued, try again later."
        ) from exc


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

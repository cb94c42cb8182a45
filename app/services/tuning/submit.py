"""``POST /tune``: check the search against the data before the job exists, then submit the ``tune`` job.

Every check is the one ``/train`` runs: the base body, and the base body with each end of each range substituted,
go through the same schema and the same planning (app/services/planning), so a trial can never fail on a value
the search was allowed to sample. Nothing is written until every check passed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from sqlalchemy.orm import Session, sessionmaker

from app.core.auth import Caller
from app.core.errors import AppError, Conflict, ValidationFailed, first_of, message
from app.core.jobstates import JobType
from app.core.settings import Settings
from app.db.models import Job
from app.schemas.train import TrainRequest
from app.schemas.tune import TuneRequest
from app.services import jobs, quotas
from app.services.access import check_train
from app.services.planning.torch_plan import pin_init_from
from app.services.training import plan_in_request
from app.services.tuning import space as spaces
from workers import cluster
from workers.training.torch.spec.early_stopping import TASK_METRICS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

HIGHER_IS_BETTER = frozenset({"accuracy", "f1", "precision", "recall", "r2", "auc", "areaUnderROC"})


def default_metric(train: TrainRequest, task: str | None = None) -> str:
    if train.framework == "torch":
        return "loss"
    return "accuracy" if (task or train.dataset.task) == "classification" else "rmse"


def resolved(request: TuneRequest, train: TrainRequest, task: str | None = None) -> dict[str, Any]:
    """The request as stored with the job: its base named after the tune, the metric and mode filled in (``task``:
    the base's, as planned, where the request left it to the data)."""
    body = request.model_dump(mode="json", exclude_none=True)
    body["base"] = {**request.base, "name": request.name}  # init_from pinned by submit_tune
    body["metric"] = (request.metric or default_metric(train, task)).removeprefix("validation_")
    body["mode"] = request.mode or ("max" if body["metric"] in HIGHER_IS_BETTER else "min")
    return body


def train_request(body: dict[str, Any], loc: str) -> TrainRequest:
    """``body`` as a ``/train`` request; a 422 naming ``loc`` and the field inside it otherwise."""
    try:
        return TrainRequest.model_validate(body)
    except ValidationError as exc:
        errors = [
            {"loc": ".".join([loc, *(str(p) for p in e["loc"])]), "in": "body", "msg": message(e), "type": e["type"]}
            for e in exc.errors()
        ]
        raise ValidationFailed(f"{errors[0]['loc']}: {errors[0]['msg']}", errors=errors) from None


def reported_metrics(framework: str, task: str) -> tuple[str, ...]:
    """The metrics in a trial's ``result.validation``, which the leaderboard ranks by: torch computes the loss and
    accuracy or rmse after every epoch (workers/training/torch/remote.py ``_evaluate``); xgboost and Spark ML the
    regression metrics or accuracy and weighted F1 (``workers.training.validation.validation_metrics``)."""
    if framework == "torch":  # what early stopping may watch, without its val_ prefix
        return tuple(m.removeprefix("val_") for m in TASK_METRICS[task])
    return ("accuracy", "f1") if task == "classification" else ("rmse", "mae", "r2", "mse")


def _located(exc: AppError, loc: str, what: str = "") -> ValidationFailed:
    """A planning error of a body the search would run, as a 422 at ``loc``: for the base, at the field inside it
    (``base.dataset.label``); for a space path, at the path. The field inside the body is kept as ``inner``."""
    errors = exc.errors or [{}]
    inner = errors[0].get("loc")
    if loc == "base" and inner:  # every field's problem, each at base.x (base.x: y, not base.x: x: y)
        located = [{**e, "loc": f"base.{e['loc']}"} for e in errors if e.get("loc")]
        return ValidationFailed(first_of(located), errors=located, inner=inner)
    detail = exc.every_problem()  # each of the body's problems: this 422 names the space path alone
    return ValidationFailed.at(loc, f"{what}: {detail}" if what else detail, inner=inner)


_FIXED = {"name": "every trial registers its version under the tune's name", "framework": "the leaderboard "
          "ranks one family's trials by one metric: run a search per framework"}  # fmt: skip


def check_space(request: TuneRequest, base: dict[str, Any]) -> None:
    """The paths name values of the base body that a search may vary (list indices written once: ``0``, never
    ``00``), and a uniform samples values its field takes, tried inside its range (at ``low + step`` with a step): a
    uniform over an integer field passed at its whole ends, then every trial failed."""
    for path, dist in request.space.items():
        loc = f"space.{path}"
        if any(part.isdigit() and not spaces.index(part) for part in path.split(".")):  # 00 and 0: one value, twice
            raise ValidationFailed.at(loc, "write list indices as 0, 1, 2 (no leading zeros, ASCII digits only)")
        outer = next((other for other in request.space if path.startswith(other + ".")), None)
        if outer is not None:  # the outer value replaces it, or it changes the outer choice in place
            raise ValidationFailed.at(loc, f"lies inside space.{outer}, whose values replace it: search one of "
                                      "the two (or put the inner values into the outer choice)")  # fmt: skip
        if path in _FIXED:
            raise ValidationFailed.at(loc, f"{path} cannot be searched: {_FIXED[path]}")
        if not spaces.exists(base, path):
            missing = f"no such path in the base body (dotted keys, list indices): give base.{path} a value first"
            raise ValidationFailed.at(loc, missing)
        if dist.type == "uniform" and dist.high != dist.low:  # a step's first value: 1.5 of 1 to 3 by 0.5
            low, high = float(dist.low or 0), float(dist.high or 0)
            inside = round(low + dist.step, 12) if dist.step is not None else low + (high - low) * 0.377
            try:
                TrainRequest.model_validate(spaces.substitute(base, {path: inside}))
            except ValidationError as exc:
                raise ValidationFailed.at(
                    loc, f"a value inside the range ({inside:.4g}) makes an invalid body: {message(exc.errors()[0])}; "
                    "for whole numbers use type int"
                ) from None  # fmt: skip
    try:
        spaces.grid(request.space) if request.sampler == "grid" else None
    except ValueError as exc:
        raise ValidationFailed.at("space", str(exc)) from None


_ROUND_DEFAULTS = {"reg:squarederror": "rmse", "reg:absoluteerror": "mae"}
"""What an xgboost regression evaluates each round without ``eval_metric``, among the metrics a trial reports."""


def pruning_warnings(request: TuneRequest, train: TrainRequest, task: str | None) -> list[str]:
    """A pruner that can stop no trial, said in the 202: Spark ML reports no metric while it fits, and an xgboost
    trial reports each round only what xgboost evaluates (a classifier's accuracy, a regression's eval_metric)."""
    if request.pruner == "none" or task is None or train.framework == "torch":
        return []
    if train.framework == "spark_ml":
        return [f"pruner {request.pruner!r} stops no trial: Spark ML trials report no metric while they fit, so "
                "each runs to its end"]  # fmt: skip
    metric = (request.metric or default_metric(train, task)).removeprefix("validation_")
    params = train.params or {}
    given = params.get("eval_metric") or _ROUND_DEFAULTS.get(params.get("objective", "reg:squarederror"), "")
    each_round = {*([given] if isinstance(given, str) else given), *(["accuracy"] if task == "classification" else [])}
    if metric in each_round:
        return []
    return [f"pruner {request.pruner!r} stops no trial: xgboost evaluates {metric!r} only when a trial ends, so "
            "no round reports it; search on a metric in the base's params.eval_metric (accuracy for a classifier), "
            "or add it there"]  # fmt: skip


def check_trials(*, db: sessionmaker[Session], request: TuneRequest, caller: Caller, settings: Settings) -> None:
    """What a trial may name is the caller's, as for ``POST /train``: every value of a ``choice`` is checked in the
    body it makes (a model name, a dataset id, a checkpoint to resume from); the other distributions sample numbers,
    which name nothing. A refusal names the space path (409 for a model name another owner holds). The space's
    paths are checked already (:func:`check_space`)."""
    base = {**request.base, "name": request.name}
    for path, dist in request.space.items():
        if dist.type != "choice":
            continue
        for value in dist.values or []:
            body = spaces.substitute(base, {path: value})
            try:
                check_train(db=db, request=train_request(body, "base"), caller=caller, settings=settings)
            except ValidationFailed as exc:
                raise _located(exc, f"space.{path}", f"the value {value!r}") from None
            except Conflict as exc:
                raise Conflict(f"space.{path}: the value {value!r}: {exc.detail}") from None


def check(
    *, request: TuneRequest, settings: Settings, spark: SparkSession, db: sessionmaker[Session] | None
) -> tuple[TrainRequest, int, str | None]:
    """Every check of the search (422 naming the field); returns the base request, the slots one trial holds and the
    base's task as planned (None while its data checks are deferred to the job). The space's paths are checked
    already (:func:`check_space`)."""
    base = {**request.base, "name": request.name}
    train = train_request(base, "base")
    points = spaces.grid(request.space) if request.sampler == "grid" else None
    if request.trials > settings.max_trials:  # trials left out: every point of a grid
        every = points is not None and request.trials == len(points)
        asked = (
            f"a trial for each of the grid's {request.trials} points" if every else f"{request.trials} trials asked for"
        )
        raise ValidationFailed.at(
            "trials", f"{asked}; this service runs at most {settings.max_trials} per search (SPARKTRAIN_MAX_TRIALS)"
        )
    if request.sampler == "grid":
        if points is None:
            raise ValidationFailed.at("sampler", "grid needs choice, int or stepped uniform distributions only")
        if request.trials > len(points):
            raise ValidationFailed.at("trials", f"the grid has {len(points)} points; ask for at most that many trials")
    try:
        plans = [plan_in_request(request=train, settings=settings, spark=spark, db=db)]
    except ValidationFailed as exc:
        raise _located(exc, "base") from None
    # the task as planned (a request may leave it to the label's type); unknown while the data checks are deferred
    task = getattr(getattr(plans[0], "train", None), "task", None) or train.dataset.task
    if task is not None:
        metric = (request.metric or default_metric(train, task)).removeprefix("validation_")
        reported = reported_metrics(train.framework, task)
        if metric not in reported:
            raise ValidationFailed.at(
                "metric", f"{metric!r} is not in the trials' results: a {train.framework} {task} trial reports "
                f"{', '.join(reported)}"
            )  # fmt: skip
    for path, dist in request.space.items():
        for value in dist.extremes():
            if value == spaces.lookup(base, path):
                continue
            loc = f"space.{path}"
            what = f"the value {value!r} makes an invalid /train body"
            body = spaces.substitute(base, {path: value})
            try:
                plans.append(
                    plan_in_request(request=train_request(body, "base"), settings=settings, spark=spark, db=db)
                )
            except ValidationFailed as exc:
                raise _located(exc, loc, what) from None
    per_trial = max(quotas.job_slots(plan) for plan in plans)
    total = cluster.task_slots(spark)
    if request.parallel * per_trial > total:
        raise ValidationFailed.at(
            "parallel",
            f"{request.parallel} trials of {per_trial} barrier workers need {request.parallel * per_trial} task "
            f"slots at once and the cluster has {total}: ask for parallel <= {max(1, total // per_trial)}",
        )
    return train, per_trial, task


def submit_tune(
    *,
    db: sessionmaker[Session],
    settings: Settings,
    spark: SparkSession,
    enqueue: Callable[[str, str], None],
    request: TuneRequest,
    owner: str = "anonymous",
    idempotency_key: str | None = None,
    caller: Caller | None = None,
) -> tuple[Job, bool]:
    """Check the search (422 naming the field, nothing written), then write the QUEUED ``tune`` job and queue it.
    The tune job holds no task slots: its trials do, each as the training job it is. An Idempotency-Key already
    used for this body returns its job before anything is checked (``caller``: the access checks of the route)."""
    fingerprint = jobs.posted_fingerprint(request)
    first = jobs.replayed(db=db, owner=owner, idempotency_key=idempotency_key, fingerprint=fingerprint)
    if first is not None:
        return first, False
    base = {**request.base, "name": request.name}
    base_train = train_request(base, "base")
    check_space(request, base)  # first: the access checks substitute into the space's paths
    if caller is not None:
        try:
            check_train(db=db, request=base_train, caller=caller, settings=settings)
        except ValidationFailed as exc:  # at the field inside the base (it said training.resume_from)
            raise _located(exc, "base") from None
        check_trials(db=db, request=request, caller=caller, settings=settings)
    train, _, task = check(request=request, settings=settings, spark=spark, db=db)
    job, created = jobs.submit(
        warnings=pruning_warnings(request, train, task),
        db=db,
        enqueue=enqueue,
        job_type=JobType.TUNE,
        request={**(stored := resolved(request, train, task)), "base": pin_init_from(stored["base"], db)},
        framework=train.framework,
        name=request.name,
        owner=owner,
        idempotency_key=idempotency_key,
        limits=quotas.limits_for(settings=settings, owner=owner),
        slots=0,
        fingerprint=fingerprint,
    )
    return job, created

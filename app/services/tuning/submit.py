"""``POST /tune``: check the search against the data before the job exists, then submit the ``tune`` job.

Every check is the one ``/train`` runs: the base body, and the base body with each end of each range substituted,
go through the same schema and the same planning (app/services/planning), so a trial can never fail on a value
the search was allowed to sample. Nothing is written until every check passed.
"""

from __future__ import annotations

import json
import math
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
from app.schemas.tune import Distribution, TuneRequest
from app.services import jobs, quotas
from app.services.access import check_train
from app.services.planning.torch_plan import pin_init_from
from app.services.training import plan_in_request
from app.services.tuning import space as spaces
from app.services.tuning.trials import min_resource
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
    """The request as stored with the job: its base named after the tune, the metric, the mode and ASHA's first rung
    filled in (``task``: the base's, as planned, where the request left it to the data)."""
    body = request.model_dump(mode="json", exclude_none=True)
    body["base"] = {**request.base, "name": request.name}  # init_from pinned by submit_tune
    body["metric"] = (request.metric or default_metric(train, task)).removeprefix("validation_")
    body["mode"] = request.mode or ("max" if body["metric"] in HIGHER_IS_BETTER else "min")
    if request.pruner == "asha" and train.framework != "spark_ml":  # the first rung, as the search runs it
        body["min_resource"] = min_resource(request)
    return body


def train_request(body: dict[str, Any], loc: str = "") -> TrainRequest:
    """``body`` as a ``/train`` request; a 422 otherwise, each field at ``loc.<field>`` (``base.dataset``; the field
    alone without ``loc``), the first field inside the body as ``inner`` (``dataset``)."""
    try:
        return TrainRequest.model_validate(body)
    except ValidationError as exc:
        fields = [".".join(str(p) for p in e["loc"]) for e in exc.errors()]
        errors = [
            {"loc": ".".join(p for p in (loc, inner) if p), "in": "body", "msg": message(e), "type": e["type"]}
            for e, inner in zip(exc.errors(), fields, strict=True)
        ]
        raise ValidationFailed(first_of(errors), errors=errors, inner=fields[0] or None) from None


def reported_metrics(framework: str, task: str) -> tuple[str, ...]:
    """The metrics in a trial's ``result.validation``, which the leaderboard ranks by: torch computes the loss and
    accuracy or rmse after every epoch (workers/training/torch/remote.py ``_evaluate``); xgboost and Spark ML the
    regression metrics or accuracy and weighted F1 (``workers.training.validation.validation_metrics``)."""
    if framework == "torch":  # what early stopping may watch, without its val_ prefix
        return tuple(m.removeprefix("val_") for m in TASK_METRICS[task])
    return ("accuracy", "f1") if task == "classification" else ("rmse", "mae", "r2", "mse")


def _located(exc: AppError, loc: str, what: str = "", hint: str = "") -> ValidationFailed:
    """A planning error of a body the search would run, as a 422 at ``loc``: for the base, at the field inside it
    (``base.dataset.label``); for a space path, at the path (``what`` before the body's problems, ``hint`` after).
    The field inside the ``/train`` body is kept as ``inner`` (``dataset.label``, never ``base.dataset.label``)."""
    errors = exc.errors or [{}]
    inner = exc.extra.get("inner") or errors[0].get("loc")
    if loc == "base" and inner:  # every field's problem, each at base.x (base.x: y, not base.x: x: y)
        located = [{**e, "loc": f"base.{e['loc']}"} for e in errors if e.get("loc")]
        return ValidationFailed(first_of(located), errors=located, inner=inner)
    detail = exc.every_problem()  # each of the body's problems: this 422 names the space path alone
    detail = f"{what}: {detail}" if what else detail
    return ValidationFailed.at(loc, f"{detail}; {hint}" if hint else detail, inner=inner)


_FIXED = {"name": "every trial registers its version under the tune's name", "framework": "the leaderboard "
          "ranks one family's trials by one metric: run a search per framework"}  # fmt: skip


def check_space(request: TuneRequest, base: dict[str, Any]) -> None:
    """The paths name values of the base body that a search may vary (list indices written once: ``0``, never
    ``00``), a float range samples values its field takes (tried inside it against the schema here; :func:`check`
    plans it), and a grid's size is counted, never listed: a uniform over an integer field passed at its whole ends,
    then every trial failed."""
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
        inside = dist.inside()  # a step's first value: 1.5 of 1 to 3 by 0.5
        if inside is not None:
            try:
                TrainRequest.model_validate(spaces.substitute(base, {path: inside}))
            except ValidationError as exc:
                first = exc.errors()[0]
                raise ValidationFailed.at(
                    loc, f"a value inside the range ({inside:.4g}) makes an invalid body: {message(first)}; "
                    f"{WHOLE_HINT}", inner=".".join(str(p) for p in first["loc"]) or None,
                ) from None  # fmt: skip
    try:
        spaces.grid_size(request.space) if request.sampler == "grid" else None
    except ValueError as exc:
        raise ValidationFailed.at("space", str(exc)) from None


WHOLE_HINT = (
    'a uniform or loguniform samples floats (8.0, 17.3): for a whole-number field use type "int" (with '
    '"log": true for a log scale)'
)
MAX_PLANNED_CHOICES = 16
"""A choice's values planned against the data before the job exists (the first, the last and evenly spaced others);
every value is checked as a ``/train`` body, and a value among the rest that does not plan fails its trial."""


def planned_values(dist: Distribution) -> list[Any]:
    """The values of ``dist`` that :func:`check` plans: a range's ends as the sampler gives them and a value inside a
    float range; at most MAX_PLANNED_CHOICES of a choice's (a choice of 300 took 300 plans, seconds, in the request)."""
    if dist.type != "choice":
        inside = dist.inside()
        return [*dist.extremes(), *([] if inside is None else [inside])]
    values = list(dist.values or [])
    if len(values) <= MAX_PLANNED_CHOICES:
        return values
    last = len(values) - 1
    return [values[round(i * last / (MAX_PLANNED_CHOICES - 1))] for i in range(MAX_PLANNED_CHOICES)]


_ROUND_DEFAULTS = {"reg:squarederror": "rmse", "reg:absoluteerror": "mae"}
"""What an xgboost regression evaluates each round without ``eval_metric``, among the metrics a trial reports."""
_EVAL_METRICS = frozenset({"rmse", "mae"})
"""The metrics of a regression trial's result that xgboost can evaluate each round (``params.eval_metric``); a
classifier's accuracy is reported every round whatever eval_metric says, and f1, mse and r2 are never."""


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
    said = f"pruner {request.pruner!r} stops no trial: xgboost evaluates {metric!r} only when a trial ends, so no "
    if metric in _EVAL_METRICS:  # one xgboost has: evaluated each round once eval_metric names it
        listed = [*([given] if isinstance(given, str) else given), metric]
        return [f"{said}round reports it; add it to the base's params.eval_metric (a list keeps the others: "
                f"{json.dumps([m for m in listed if m])}), or search on a metric that lists"]  # fmt: skip
    instead = (
        "accuracy, which every round reports" if task == "classification"
        else 'rmse (it ranks trials as mse and r2 do), or mae with "mae" in the base\'s params.eval_metric'
    )  # fmt: skip
    return [f"{said}round reports it (xgboost has no {metric} eval_metric); search on {instead}, or leave the "
            f"pruner out (none) to rank the trials by {metric} at their end"]  # fmt: skip


_NAMING = ("dataset", "validation", "training.init_from", "training.resume_from")
"""The fields of a ``/train`` body besides its name that name something an owner holds (what access.check_train
reads): a choice over a path outside them and above none of them changes nothing that check reads."""


def _within(path: str, field: str) -> bool:
    return path == field or path.startswith(field + ".")


def check_trials(*, db: sessionmaker[Session], request: TuneRequest, caller: Caller, settings: Settings) -> None:
    """What a trial may name is the caller's, as for ``POST /train``: every value of a ``choice`` is checked in the
    body it makes (a model name, a dataset id, a checkpoint to resume from); the other distributions sample numbers,
    which name nothing, and so does a choice of values that name nothing (a learning rate: checked with the base).
    A refusal names the space path (409 for a model name another owner holds). The space's paths are checked already
    (:func:`check_space`)."""
    base = {**request.base, "name": request.name}
    for path, dist in request.space.items():
        if dist.type != "choice" or not any(_within(path, field) or _within(field, path) for field in _NAMING):
            continue
        for value in dist.values or []:
            body = spaces.substitute(base, {path: value})
            try:
                check_train(db=db, request=train_request(body), caller=caller, settings=settings)
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
    points = spaces.grid_size(request.space) if request.sampler == "grid" else None  # counted, never listed
    if request.trials > settings.max_trials:  # trials left out: every point of a grid
        every = points is not None and request.trials == points
        asked = (
            f"a trial for each of the grid's {request.trials} points" if every else f"{request.trials} trials asked for"
        )
        raise ValidationFailed.at(
            "trials", f"{asked}; this service runs at most {settings.max_trials} per search (SPARKTRAIN_MAX_TRIALS)"
        )
    if request.sampler == "grid":
        if points is None:
            raise ValidationFailed.at("sampler", "grid needs choice, int or stepped uniform distributions only")
        if request.trials > points:
            raise ValidationFailed.at("trials", f"the grid has {points:,} points; ask for at most that many trials")
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

    def plan(path: str, value: Any) -> Any:  # the body a trial would run with this value, planned
        body = train_request(spaces.substitute(base, {path: value}))
        return plan_in_request(request=body, settings=settings, spark=spark, db=db)

    for path, dist in request.space.items():
        loc, given = f"space.{path}", spaces.lookup(base, path)
        planned = planned_values(dist)
        if dist.type == "choice" and len(planned) < len(dist.values or []):
            for value in dist.values or []:  # the values not planned too, each as a /train body (cheap)
                try:
                    train_request(spaces.substitute(base, {path: value}))
                except ValidationFailed as exc:
                    raise _located(exc, loc, f"the value {value!r} makes an invalid /train body") from None
        for value in planned:
            if value == given and type(value) is type(given):  # planned as the base (8.0 is not the base's 8)
                continue
            shown = f"{value:.4g}" if isinstance(value, float) and len(repr(value)) > 10 else repr(value)
            try:
                plans.append(plan(path, value))
            except ValidationFailed as exc:
                hint = WHOLE_HINT if _whole_only(plan, path, value) else ""
                raise _located(exc, loc, f"the value {shown} makes an invalid /train body", hint) from None
    per_trial = max(quotas.job_slots(plan) for plan in plans)
    total = cluster.task_slots(spark)
    if request.parallel * per_trial > total:
        raise ValidationFailed.at(
            "parallel",
            f"{request.parallel} trials of {per_trial} barrier worker{'s' if per_trial != 1 else ''} need "
            f"{request.parallel * per_trial} task "
            f"slots at once and the cluster has {total}: ask for parallel <= {max(1, total // per_trial)}",
        )
    return train, per_trial, task


def _whole_only(plan: Callable[[str, Any], Any], path: str, value: Any) -> bool:
    """Whether a float the body refused plans as the whole number nearest it: a field of whole numbers searched
    with a float range (``network.layers.0.units`` from 8.0 to 64.0), which ``int`` samples."""
    if not isinstance(value, float) or not math.isfinite(value):
        return False
    try:
        plan(path, round(value))
    except ValidationFailed:
        return False
    return True


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

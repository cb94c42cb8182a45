"""``framework: "xgboost"`` parameters: booster parameters passed through to ``xgboost.spark``, checked first.

Pure Python (the API validates requests with it before a job exists). Every name is checked against a table of
the booster parameters that ``xgboost.spark`` estimators take, with types and bounds, so a typo is a 422 that
names it instead of a parameter xgboost silently ignores; a test checks the table against xgboost's own
estimator so it cannot drift.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from workers.data.spec import ResolvedDataset
from workers.errors import Problems, SpecError
from workers.numbers import shown
from workers.training.spark_ml.spec import MAX_BINS, ParamRule, Scalar, _check_value, check_seed

Task = Literal["classification", "regression"]


def _positive(v: Any) -> bool:
    return bool(v >= 1)


def _non_negative(v: Any) -> bool:
    return bool(v >= 0)


def _fraction(v: Any) -> bool:
    return bool(0 < v <= 1)


BOOSTER_PARAMS: dict[str, ParamRule] = {
    "learning_rate": ParamRule(float, lambda v: 0 < v <= 1, "in (0, 1]"),
    "max_depth": ParamRule(int, lambda v: 0 <= v <= 64, "between 0 (no limit, lossguide only) and 64"),
    "min_child_weight": ParamRule(float, _non_negative, ">= 0"),
    "gamma": ParamRule(float, _non_negative, ">= 0"),
    "subsample": ParamRule(float, _fraction, "in (0, 1]"),
    "colsample_bytree": ParamRule(float, _fraction, "in (0, 1]"),
    "colsample_bylevel": ParamRule(float, _fraction, "in (0, 1]"),
    "colsample_bynode": ParamRule(float, _fraction, "in (0, 1]"),
    "reg_lambda": ParamRule(float, _non_negative, ">= 0"),
    "reg_alpha": ParamRule(float, _non_negative, ">= 0"),
    "max_delta_step": ParamRule(float, _non_negative, ">= 0"),
    "max_bin": ParamRule(int, lambda v: 2 <= v <= MAX_BINS, f"between 2 and {MAX_BINS}"),
    "max_leaves": ParamRule(int, _non_negative, ">= 0"),
    "grow_policy": ParamRule(str, choices=("depthwise", "lossguide")),
    "tree_method": ParamRule(str, choices=("hist", "approx", "gpu_hist")),
    "booster": ParamRule(str, choices=("gbtree", "dart")),
    "scale_pos_weight": ParamRule(float, lambda v: v > 0, "> 0"),
    "base_score": ParamRule(float),
    "num_parallel_tree": ParamRule(int, _positive, ">= 1"),
    "sampling_method": ParamRule(str, choices=("uniform", "gradient_based")),
    "huber_slope": ParamRule(float, lambda v: v > 0, "> 0"),
    "quantile_alpha": ParamRule(float, lambda v: 0 < v < 1, "in (0, 1)"),
    "tweedie_variance_power": ParamRule(float, lambda v: 1 <= v < 2, "in [1, 2)"),
    "rate_drop": ParamRule(float, lambda v: 0 <= v <= 1, "in [0, 1]"),
    "skip_drop": ParamRule(float, lambda v: 0 <= v <= 1, "in [0, 1]"),
    "max_cat_to_onehot": ParamRule(int, _positive, ">= 1"),
}
"""Booster parameters by their ``xgboost.spark`` (scikit-learn) names."""

ALIASES = {
    "eta": "learning_rate",
    "lambda": "reg_lambda",
    "alpha": "reg_alpha",
    "min_split_loss": "gamma",
    "n_estimators": "num_round",
    "num_boost_round": "num_round",
    "random_state": "seed",
}
"""xgboost's native names, accepted and stored under the names on the left of BOOSTER_PARAMS."""

REGRESSION_OBJECTIVES = (
    "reg:squarederror",
    "reg:squaredlogerror",
    "reg:pseudohubererror",
    "reg:absoluteerror",
    "reg:quantileerror",
    "reg:logistic",
    "reg:gamma",
    "reg:tweedie",
    "count:poisson",
)
CLASSIFICATION_OBJECTIVES = ("binary:logistic", "multi:softprob")
"""``xgboost.spark``'s classifier always learns probabilities; it picks one of these from the number of classes."""

REGRESSION_METRICS = ("rmse", "rmsle", "mae", "mape", "mphe", "poisson-nloglik", "gamma-nloglik", "gamma-deviance",
                      "tweedie-nloglik", "quantile")  # fmt: skip
BINARY_METRICS = ("logloss", "error", "auc", "aucpr")
MULTI_METRICS = ("mlogloss", "merror", "auc", "aucpr")
DEFAULT_METRICS = {"binary:logistic": "logloss", "multi:softprob": "mlogloss"}
"""xgboost's own evaluation metric for the classification objectives when ``eval_metric`` is not given."""
CONTROL_KEYS = ("objective", "eval_metric", "num_round", "early_stopping_rounds", "num_workers",
                "threads_per_worker", "seed", "validation_fraction", "checkpoint_rounds")  # fmt: skip
MAX_ROUNDS = 100_000


@dataclass(frozen=True)
class XGBoostSpec:
    task: Task
    objective: str
    num_round: int = 100
    params: dict[str, Scalar] = field(default_factory=dict)
    eval_metric: tuple[str, ...] = ()
    early_stopping_rounds: int | None = None
    num_workers: int | None = None
    """None: one task per slot of the cluster (one task with every core on a local master)."""
    threads_per_worker: int | None = None
    """None: spark.task.cpus (xgboost.spark's rule) on a cluster, the local master's cores / num_workers."""
    seed: int = 0
    validation_fraction: float = 0.2
    warnings: tuple[str, ...] = ()
    checkpoint_rounds: int = 0
    """A checkpoint (the booster so far) every this many rounds, to continue from after a lost attempt; 0: none.
    Default: about every 10% of ``num_round``."""

    def fit_eval_metrics(self) -> tuple[str, ...]:
        """The metrics a fit evaluates each round: ``eval_metric`` (xgboost's default when empty), and for a
        classifier its error (``error``, at threshold 0.5, or ``merror``) in front when missing, from which each
        round's accuracy comes (remote.py). In front, because xgboost early-stops on the last metric: that stays
        the requested one. Empty: xgboost's default (regression)."""
        if self.task != "classification":
            return self.eval_metric
        error = "error" if self.objective == "binary:logistic" else "merror"
        given = self.eval_metric or (DEFAULT_METRICS[self.objective],)
        return given if error in given else (error, *given)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "objective": self.objective,
            "num_round": self.num_round,
            "params": dict(self.params),
            "eval_metric": list(self.eval_metric),
            "early_stopping_rounds": self.early_stopping_rounds,
            "num_workers": self.num_workers,
            "threads_per_worker": self.threads_per_worker,
            "seed": self.seed,
            "validation_fraction": self.validation_fraction,
            "checkpoint_rounds": self.checkpoint_rounds,
        }


@dataclass(frozen=True)
class XGBoostResume:
    """Where an xgboost job continues: a checkpoint (the booster after ``rounds`` rounds) of its own (a retry), or of
    the job ``training.resume_from`` names."""

    checkpoint_id: str
    uri: str
    rounds: int
    job_id: str
    keep_best: bool = True
    """Whether early stopping goes on from the booster's best round and score; False starts it afresh (a new job
    that early-stops on another metric, or not at all, than the checkpoint's)."""


@dataclass(frozen=True)
class XGBoostPlan:
    """What an xgboost job runs: checked datasets, parameters, workers and device."""

    train: ResolvedDataset
    validation: ResolvedDataset | None
    spec: XGBoostSpec
    num_workers: int
    device: Literal["cpu", "cuda"]
    threads: int | None = None
    """xgboost threads per worker when not spark.task.cpus."""
    class_labels: tuple[str, ...] | None = None
    warnings: tuple[str, ...] = ()
    resume: XGBoostResume | None = None
    """Where the fit continues (``training.resume_from``; a retry's own checkpoint, app/services/resume.py); None
    trains from scratch."""
    started_from: XGBoostResume | None = None
    """The checkpoint ``training.resume_from`` named: where the job's first attempt starts, kept through retries."""
    categories: dict[str, Any] | None = None
    """That checkpoint's categories (``dataset.categorical``): its trees split on those one-hot columns."""


def default_checkpoint_rounds(num_round: int) -> int:
    """About every 10% of the rounds (at least every round)."""
    return max(1, round(num_round / 10))


def _int(path: str, value: Any, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise SpecError(path, f"must be an integer between {low} and {high}, got {shown(value)}")
    return value


def _optional_int(name: str, raw: Mapping[str, Any], high: int, low: int = 1) -> int | None:
    return None if raw.get(name) is None else _int(f"params.{name}", raw[name], low, high)


def _seed(value: Any, said: str) -> int:
    try:
        return check_seed(value)
    except SpecError as exc:  # random_state, as given
        raise SpecError(f"params.{said}", exc.message) from None


def _fraction_of(value: Any) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value < 1:
        raise SpecError("params.validation_fraction", f"must be a number in (0, 1), got {shown(value)}")
    return float(value)


def _checkpoint_every(every: int | None, num_round: int) -> int:
    """``checkpoint_rounds``: at most ``num_round``; by default about every 10% of the rounds."""
    return (
        default_checkpoint_rounds(num_round) if every is None else _int("params.checkpoint_rounds", every, 0, num_round)
    )


def _canonical(params: Mapping[str, Any], problems: Problems) -> dict[str, Any]:
    """The parameters under their canonical names; a name given twice (eta and learning_rate) is a problem, and
    the first one given is checked."""
    out: dict[str, Any] = {}
    given_as: dict[str, str] = {}
    for name, value in params.items():
        canon = ALIASES.get(name, name)
        if canon in out:
            with problems.field():
                raise SpecError(f"params.{name}", f"{given_as[canon]} and {name} are the same parameter; give one")
            continue
        out[canon], given_as[canon] = value, name
    return out


UNKNOWN_HINTS = {
    "nthread": "sparktrain sets xgboost's threads: use params.threads_per_worker",
    "n_jobs": "sparktrain sets xgboost's threads: use params.threads_per_worker",
    "missing": "sparktrain trains on complete rows: a null or NaN feature is a bad row (dataset.bad_rows: "
    "fail or skip)",
    "num_class": "the number of classes comes from the label column",
    "device": "device is a field of the request beside params (auto, cpu or cuda)",
}
"""What to do instead, for the xgboost parameters users of its other APIs reach for that sparktrain sets itself."""

APPLIES_TO: dict[str, tuple[str, ...]] = {
    "rate_drop": ("booster dart",),
    "skip_drop": ("booster dart",),
    "huber_slope": ("objective reg:pseudohubererror", "eval_metric mphe"),
    "quantile_alpha": ("objective reg:quantileerror", "eval_metric quantile"),
    "tweedie_variance_power": ("objective reg:tweedie", "eval_metric tweedie-nloglik"),
}
"""Parameters xgboost reads only with one of these settings (it ignores them otherwise, without a word)."""

LABEL_DOMAINS: dict[str, tuple[float, float, bool, str]] = {
    "reg:gamma": (0.0, math.inf, False, "positive"),
    "reg:tweedie": (0.0, math.inf, True, ">= 0"),
    "count:poisson": (0.0, math.inf, True, ">= 0"),
    "reg:logistic": (0.0, 1.0, True, "in [0, 1]"),
    "reg:squaredlogerror": (-1.0, math.inf, False, "> -1"),
}
"""The labels a regression objective takes: (low, high, whether low itself is allowed, in words). xgboost fails the
fit on any other label with a C++ backtrace; the job checks the labels first (driver.py)."""


def label_problem(objective: str, low: float, high: float) -> str | None:
    """Why labels between ``low`` and ``high`` do not suit ``objective``, or None."""
    domain = LABEL_DOMAINS.get(objective)
    if domain is None:
        return None
    floor, ceiling, closed, words = domain
    if low < floor or (low == floor and not closed) or high > ceiling:
        return (f"params.objective {objective} needs labels {words}; the training labels run from {low:g} to "
                f"{high:g}: choose another objective (reg:squarederror takes any) or transform the label")  # fmt: skip
    return None


def _objective(task: Task, num_classes: int | None, given: Any) -> str:
    default = "reg:squarederror" if task == "regression" else _classifier_objective(num_classes)
    if given is None:
        return default
    if not isinstance(given, str):
        raise SpecError("params.objective", f"must be a string, got {shown(given)}")
    if task == "regression":
        if given in REGRESSION_OBJECTIVES:
            return given
        if given in (*CLASSIFICATION_OBJECTIVES, "multi:softmax", "binary:hinge", "binary:logitraw"):
            raise SpecError("params.objective", f"{given} is a classification objective but dataset.task is regression")
        raise SpecError(
            "params.objective", f"unknown objective {given!r}; for regression one of {', '.join(REGRESSION_OBJECTIVES)}"
        )
    if given in REGRESSION_OBJECTIVES:
        raise SpecError("params.objective", f"{given} is a regression objective but dataset.task is classification")
    if given != default:
        raise SpecError(
            "params.objective",
            f"xgboost.spark's classifier learns probabilities with {default} for "
            f"{num_classes or 'these'} classes; leave objective out or set it to {default}, not {given!r}",
        )
    return given


def _objective_checks(
    objective: str, booster: Mapping[str, Scalar], metrics: tuple[str, ...], problems: Problems, bad: set[str]
) -> list[str]:
    """422s for what xgboost refuses only when the fit starts (or would train into saturated predictions), and a
    warning for each parameter it would ignore. ``booster`` holds the valid booster parameters, ``bad`` names the
    invalid ones."""
    chosen = {f"objective {objective}", f"booster {booster.get('booster', 'gbtree')}"}
    chosen |= {f"eval_metric {m.split('@', 1)[0]}" for m in metrics}
    with problems.field():
        if chosen & {"objective reg:quantileerror", "eval_metric quantile"} and not {"quantile_alpha"} & {
            *booster,
            *bad,
        }:
            raise SpecError("params.quantile_alpha", "reg:quantileerror and the quantile metric need quantile_alpha: "
                            "the quantile, in (0, 1) (0.5 is the median)")  # fmt: skip
    base = booster.get("base_score")
    with problems.field():
        if isinstance(base, int | float) and objective in ("binary:logistic", "reg:logistic") and not 0 < base < 1:
            raise SpecError(
                "params.base_score", f"{objective} takes a base_score in (0, 1) (a probability), got {shown(base)}"
            )
        if isinstance(base, int | float) and objective in ("reg:gamma", "reg:tweedie", "count:poisson") and base <= 0:
            raise SpecError("params.base_score", f"{objective} takes a base_score > 0, got {shown(base)}")
    warnings = []
    for name, settings in APPLIES_TO.items():
        if name in booster and not chosen.intersection(settings):
            warnings.append(f"params.{name} is not used: xgboost reads it only with {' or '.join(settings)} (this "
                            f"job's objective is {objective})")  # fmt: skip
    if "max_cat_to_onehot" in booster:
        warnings.append("params.max_cat_to_onehot is not used: sparktrain one-hot encodes dataset.categorical "
                        "columns itself, and xgboost sees only numbers")  # fmt: skip
    return warnings


def _classifier_objective(num_classes: int | None) -> str:
    return "binary:logistic" if (num_classes or 2) <= 2 else "multi:softprob"


def _eval_metrics(task: Task, num_classes: int | None, given: Any) -> tuple[str, ...]:
    if given is None:
        return ()
    names = [given] if isinstance(given, str) else given
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise SpecError("params.eval_metric", f"must be a metric name or a non-empty list of names, got {shown(given)}")
    allowed: tuple[str, ...]
    if task == "regression":
        allowed = REGRESSION_METRICS
    else:
        allowed = BINARY_METRICS if (num_classes or 2) <= 2 else MULTI_METRICS
    for name in names:
        base = name.split("@", 1)[0]
        if base not in allowed:
            kind = task if task == "regression" else ("binary" if (num_classes or 2) <= 2 else "multi-class")
            raise SpecError("params.eval_metric", f"{name!r} is not a {kind} metric; one of {', '.join(allowed)}")
    return tuple(names)


def _check_known(unknown: list[str], problems: Problems) -> None:
    """One problem per name: what to use instead for one sparktrain sets itself, else the known names."""
    known = ", ".join(sorted((*BOOSTER_PARAMS, *CONTROL_KEYS)))
    for name in unknown:
        with problems.field():
            hint = UNKNOWN_HINTS.get(name)
            if hint is not None:
                raise SpecError(f"params.{name}", f"{name!r} is not a parameter here: {hint}")
            raise SpecError(f"params.{name}", f"unknown xgboost parameter {name!r}; known: {known}")


def parse_xgboost_params(
    params: Mapping[str, Any] | None, *, task: Task | None, num_classes: int | None = None
) -> XGBoostSpec:
    """Validate ``params`` of an xgboost training request (paths in errors start at ``params``). Every problem is
    in one SpecError (``also``): each field's, and those of the checks that read several fields whose values are
    each valid."""
    if task is None:
        raise SpecError("dataset.task", "required for xgboost: classification or regression")
    problems = Problems()
    raw = _canonical(params or {}, problems)
    given = {ALIASES.get(k, k): k for k in params or {}}  # errors name a parameter as the request did (eta)
    unknown = sorted(name for name in raw if name not in BOOSTER_PARAMS and name not in CONTROL_KEYS)
    _check_known(unknown, problems)
    bad, check = problems.bad, problems.check  # the fields found invalid: the checks that read them are left out

    booster: dict[str, Scalar] = {}
    for name, value in raw.items():
        if name in BOOSTER_PARAMS:
            said = given.get(name, name)
            label = name if said == name else f"{said} ({name})"
            checked = check(name, partial(_check_value, f"params.{said}", label, BOOSTER_PARAMS[name], value), None)
            if name not in bad:
                booster[name] = checked
    rounds_at = f"params.{given.get('num_round', 'num_round')}"  # n_estimators, num_boost_round
    num_round = check("num_round", lambda: _int(rounds_at, raw.get("num_round", 100), 1, MAX_ROUNDS), 100)
    early = check("early_stopping_rounds", lambda: _optional_int("early_stopping_rounds", raw, MAX_ROUNDS), None)
    workers = check("num_workers", lambda: _optional_int("num_workers", raw, 10_000), None)
    threads = check("threads_per_worker", lambda: _optional_int("threads_per_worker", raw, 1024), None)
    seed = check("seed", lambda: _seed(raw.get("seed", 0), given.get("seed", "seed")), 0)
    fraction = check("validation_fraction", lambda: _fraction_of(raw.get("validation_fraction", 0.2)), 0.2)
    every = check("checkpoint_rounds", lambda: _optional_int("checkpoint_rounds", raw, MAX_ROUNDS, low=0), None)
    objective = check("objective", lambda: _objective(task, num_classes, raw.get("objective")), "")
    metrics = check("eval_metric", lambda: _eval_metrics(task, num_classes, raw.get("eval_metric")), ())
    # Checks that read more than one field: each once the fields it reads are valid.
    warnings: list[str] = []
    if not bad & {"checkpoint_rounds", "num_round"}:
        every = check("checkpoint_rounds", lambda: _checkpoint_every(every, num_round), every)
    if booster.get("tree_method") == "gpu_hist":
        booster["tree_method"] = "hist"
        warnings.append('tree_method "gpu_hist" was removed in xgboost 2.0: training with "hist" on the job\'s device')
    if not bad & {"max_depth", "grow_policy"} and booster.get("max_depth") == 0:
        with problems.field():
            if booster.get("grow_policy") != "lossguide":
                raise SpecError("params.max_depth", 'max_depth 0 (no limit) needs grow_policy "lossguide"')
    if not bad & {"objective", "eval_metric", "booster"}:
        warnings += _objective_checks(objective, booster, metrics, problems, bad)
    problems.raise_found()
    return XGBoostSpec(
        task=task,
        objective=objective,
        num_round=num_round,
        params=booster,
        eval_metric=metrics,
        early_stopping_rounds=early,
        num_workers=workers,
        threads_per_worker=threads,
        seed=seed,
        validation_fraction=float(fraction),
        warnings=tuple(warnings),
        checkpoint_rounds=every,
    )

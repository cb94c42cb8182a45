"""``framework: "spark_ml"`` parameters: which estimator, its parameters, an optional cross-validated grid.

Pure Python (the API validates requests with it before a job exists). The tables name each estimator's
tunable parameters with their types and bounds; a test checks every entry against pyspark's estimators so the
table cannot drift from Spark.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from workers.data.spec import ResolvedDataset
from workers.errors import Problems, SpecError
from workers.numbers import INT32_MAX, INT64_MAX, is_finite_number, shown

Task = Literal["classification", "regression"]
Scalar = bool | int | float | str


@dataclass(frozen=True)
class ParamRule:
    kind: type
    check: Callable[[Any], bool] = lambda _v: True
    hint: str = ""
    choices: tuple[str, ...] = ()


def _positive(v: Any) -> bool:
    return bool(v >= 1)


def _non_negative(v: Any) -> bool:
    return bool(v >= 0)


def _unit(v: Any) -> bool:
    return bool(0 <= v <= 1)


def _fraction(v: Any) -> bool:
    return bool(0 < v <= 1)


_STRATEGIES = ("auto", "all", "onethird", "sqrt", "log2")
_WHOLE = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def _feature_subset(v: str) -> bool:
    """Spark's rule (``TreeEnsembleParams.featureSubsetStrategy``): a named strategy in any case, a whole number
    ``n >= 1`` that a Java ``int`` holds, or a fraction in (0, 1]. Numbers are matched as text first: Python's
    ``float`` also reads ``nan``, ``inf`` and ``1_0``, which Spark refuses."""
    if v.lower() in _STRATEGIES:
        return True
    if _WHOLE.fullmatch(v):
        return len(v.lstrip("+-").lstrip("0")) <= 10 and 1 <= int(v) <= INT32_MAX
    return bool(_DECIMAL.fullmatch(v)) and 0 < float(v) <= 1


MAX_BINS = 65_536
"""Bins per continuous feature (Spark's maxBins, xgboost's max_bin): each costs memory per node on every executor;
xgboost failed on 2**31 with a C++ backtrace, and Spark on 10**12 with a ClassCastException."""
MAX_TREES = 10_000
"""A forest's trees (each is a pass over the data on the executors; 10**9 was accepted and would have held the
cluster for days)."""
_TREE = {
    "numTrees": ParamRule(int, lambda v: 1 <= v <= MAX_TREES, f"between 1 and {MAX_TREES}"),
    "maxDepth": ParamRule(int, lambda v: 0 <= v <= 30, "between 0 and 30"),
    "maxBins": ParamRule(int, lambda v: 2 <= v <= MAX_BINS, f"between 2 and {MAX_BINS}"),
    "minInstancesPerNode": ParamRule(int, _positive, ">= 1"),
    "minInfoGain": ParamRule(float, _non_negative, ">= 0"),
    "subsamplingRate": ParamRule(float, _fraction, "in (0, 1]"),
    "bootstrap": ParamRule(bool),
    "featureSubsetStrategy": ParamRule(
        str,
        _feature_subset,
        "auto, all, onethird, sqrt, log2, a whole number n >= 1 or a fraction in (0, 1], as text",
    ),
}
_LINEAR = {
    "maxIter": ParamRule(int, _non_negative, ">= 0"),
    "regParam": ParamRule(float, _non_negative, ">= 0"),
    "elasticNetParam": ParamRule(float, _unit, "in [0, 1]"),
    "fitIntercept": ParamRule(bool),
    "standardization": ParamRule(bool),
    "tol": ParamRule(float, _non_negative, ">= 0"),
}

ALGORITHMS: dict[str, dict[Task, tuple[str, dict[str, ParamRule]]]] = {
    "random_forest": {
        "regression": (
            "pyspark.ml.regression.RandomForestRegressor",
            {**_TREE, "impurity": ParamRule(str, choices=("variance",))},
        ),
        "classification": (
            "pyspark.ml.classification.RandomForestClassifier",
            {**_TREE, "impurity": ParamRule(str, choices=("gini", "entropy"))},
        ),
    },
    "linear_regression": {
        "regression": (
            "pyspark.ml.regression.LinearRegression",
            {
                **_LINEAR,
                "loss": ParamRule(str, choices=("squaredError", "huber")),
                "solver": ParamRule(str, choices=("auto", "normal", "l-bfgs")),
            },
        ),
    },
    "logistic_regression": {
        "classification": (
            "pyspark.ml.classification.LogisticRegression",
            {
                **_LINEAR,
                "threshold": ParamRule(float, _unit, "in [0, 1]"),
                "family": ParamRule(str, choices=("auto", "binomial", "multinomial")),
            },
        ),
    },
}

METRICS: dict[Task, tuple[str, ...]] = {
    "regression": ("rmse", "mse", "mae", "r2"),
    "classification": ("f1", "accuracy", "weightedPrecision", "weightedRecall"),
}
MAX_GRID_POINTS = 256
CONTROL_KEYS = ("algorithm", "grid", "num_folds", "metric", "standardize", "seed", "validation_fraction")


@dataclass(frozen=True)
class SparkMLSpec:
    algorithm: str
    task: Task
    estimator_class: str
    params: dict[str, Scalar] = field(default_factory=dict)
    grid: dict[str, tuple[Scalar, ...]] = field(default_factory=dict)
    num_folds: int | None = None
    metric: str = "rmse"
    standardize: bool = True
    seed: int = 42
    validation_fraction: float = 0.2

    @property
    def cross_validated(self) -> bool:
        return self.num_folds is not None

    @property
    def grid_size(self) -> int:
        return math.prod(len(v) for v in self.grid.values()) if self.grid else 1

    def searched(self, name: str, default: Scalar) -> tuple[str, tuple[Scalar, ...]]:
        """Where ``name`` is given and the values the job fits it with (the grid's, the fixed one, or Spark's
        default)."""
        if name in self.grid:
            return f"params.grid.{name}", self.grid[name]
        return f"params.{name}", (self.params.get(name, default),)

    def check_classes(self, num_classes: int) -> None:
        """A SpecError for a binomial logistic regression (fixed or searched) of more than 2 classes, which Spark
        fails when it fits ("Binomial family only supports 1 or 2 outcome classes")."""
        path, families = self.searched("family", "auto")
        if self.algorithm == "logistic_regression" and num_classes > 2 and "binomial" in families:
            raise SpecError(path, f"binomial supports 1 or 2 classes and the label has {num_classes}: use auto or "
                            "multinomial")  # fmt: skip

    def class_warnings(self, num_classes: int) -> list[str]:
        """What a label of ``num_classes`` classes makes Spark ignore: a logistic regression's threshold (binary
        only; Spark decides a multinomial one by the largest probability)."""
        path, thresholds = self.searched("threshold", 0.5)
        if self.algorithm == "logistic_regression" and num_classes > 2 and path.startswith("params.grid."):
            return [f"{path} is not used: threshold applies to a binary logistic regression, and the label has "
                    f"{num_classes} classes (each row gets the class of largest probability)"]  # fmt: skip
        if self.algorithm == "logistic_regression" and num_classes > 2 and "threshold" in self.params:
            return [f"params.threshold {shown(thresholds[0])} is not used: threshold applies to a binary logistic "
                    f"regression, and the label has {num_classes} classes (each row gets the class of largest "
                    "probability)"]  # fmt: skip
        return []

    @property
    def cv_fits(self) -> int:
        """Fits of the cross-validation (folds x parameter maps; 0 without one), the units its checkpoints count."""
        return (self.num_folds or 0) * self.grid_size if self.cross_validated else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "algorithm": self.algorithm,
            "task": self.task,
            "params": dict(self.params),
            "grid": {k: list(v) for k, v in self.grid.items()},
            "num_folds": self.num_folds,
            "metric": self.metric,
            "standardize": self.standardize,
            "seed": self.seed,
            "validation_fraction": self.validation_fraction,
        }


@dataclass(frozen=True)
class SparkMLResume:
    """Where a retried cross-validation continues: a checkpoint of its own holding the metric of each of the
    first ``fits`` (fold, parameter map) fits."""

    checkpoint_id: str
    uri: str
    fits: int
    job_id: str


@dataclass(frozen=True)
class SparkMLPlan:
    """What a spark_ml job runs: checked datasets and parameters."""

    train: ResolvedDataset
    validation: ResolvedDataset | None
    spec: SparkMLSpec
    resume: SparkMLResume | None = None
    """Set on a retry of a cross-validation that continues from a checkpoint (app/services/resume.py)."""
    warnings: tuple[str, ...] = ()
    """Said in the 202 and again when the job starts."""


_KINDS = {bool: "true or false", int: "a whole number", float: "a finite number", str: "text"}


def _check_value(path: str, name: str, rule: ParamRule, value: Any) -> Scalar:
    given = value  # as the request wrote it (-1, not the -1.0 it is checked as)
    if rule.kind is bool:
        ok = isinstance(value, bool)
    elif rule.kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        if ok and not -INT32_MAX - 1 <= value <= INT32_MAX:  # Spark's Java int, xgboost's C int
            raise SpecError(path, f"{name} must be at most {INT32_MAX} in size, got {shown(value)}")
    elif rule.kind is float:
        ok = is_finite_number(value)
        value = float(value) if ok else value
    else:
        ok = isinstance(value, str)
    if not ok:
        raise SpecError(path, f"{name} must be {_KINDS[rule.kind]}, got {shown(value)}")
    if rule.choices and value not in rule.choices:
        raise SpecError(path, f"{name} must be one of {', '.join(rule.choices)}, got {shown(given)}")
    if not rule.check(value):
        raise SpecError(path, f"{name} must be {rule.hint}, got {shown(given)}")
    return value


def check_seed(value: Any) -> int:
    """A seed: a whole number that a Java ``long`` (Spark) and xgboost's 64-bit seed hold."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise SpecError("params.seed", f"must be a whole number, got {shown(value)}")
    if not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise SpecError("params.seed", f"must be at most {INT64_MAX} in size, got {shown(value)}")
    return value


def _unknown(path: str, name: str, allowed: Mapping[str, Any], algorithm: str) -> SpecError:
    return SpecError(
        path, f"unknown parameter {name!r} for {algorithm}; known parameters: {', '.join(sorted(allowed))}"
    )


def _check_together(spec: SparkMLSpec) -> None:
    """Values each valid alone that Spark refuses together when it fits (the ``require``s of ``LinearRegression``),
    refused here if any combination the job fits has them."""
    if spec.algorithm == "linear_regression":
        where, losses = spec.searched("loss", "squaredError")
        if "huber" in losses:
            path, nets = spec.searched("elasticNetParam", 0.0)
            bad = [v for v in nets if isinstance(v, float) and v > 0]
            if bad:
                raise SpecError(path, f"must be 0 with loss huber ({where}): Spark's LinearRegression with huber "
                                f"loss supports only L2 regularization; got {shown(bad[0])}")  # fmt: skip
            path, solvers = spec.searched("solver", "auto")
            if "normal" in solvers:
                raise SpecError(path, f"normal does not work with loss huber ({where}) in Spark's LinearRegression: "
                                "use auto or l-bfgs")  # fmt: skip


def parse_spark_ml_params(
    params: Mapping[str, Any] | None, *, task: Task | None, num_classes: int | None = None
) -> SparkMLSpec:
    """Validate ``params`` of a spark_ml training request (paths in errors start at ``params``). ``num_classes``:
    a classification label's classes, when known, so that a binomial logistic regression of more is refused."""
    params = dict(params or {})
    algorithm = params.get("algorithm")
    if algorithm is None:
        raise SpecError("params.algorithm", f"required; one of {', '.join(ALGORITHMS)}")
    if algorithm not in ALGORITHMS:
        raise SpecError("params.algorithm", f"unknown algorithm {algorithm!r}; one of {', '.join(ALGORITHMS)}")
    if task is None:
        raise SpecError("dataset.task", "required for spark_ml: classification or regression")
    by_task = ALGORITHMS[algorithm]
    if task not in by_task:
        raise SpecError(
            "params.algorithm",
            f"{algorithm} does not do {task}; it does {', '.join(by_task)} (see dataset.task)",
        )
    estimator_class, rules = by_task[task]
    problems = Problems()  # every problem in one SpecError; a rule of several fields once they are valid
    bad, check = problems.bad, problems.check  # the fields found invalid: the checks that read them are left out

    estimator_params: dict[str, Scalar] = {}
    for name, value in params.items():
        if name in CONTROL_KEYS:
            continue
        if name not in rules:
            with problems.field():
                raise _unknown(f"params.{name}", name, rules, algorithm)
            continue
        checked = check(name, partial(_check_value, f"params.{name}", name, rules[name], value), None)
        if name not in bad:
            estimator_params[name] = checked

    grid: dict[str, tuple[Scalar, ...]] = {}
    grid_in = params.get("grid") or {}
    if not isinstance(grid_in, Mapping):
        check("grid", partial(_refuse, "params.grid", "must be an object mapping parameter names to lists of values"),
              None)  # fmt: skip
        grid_in = {}
    for name, values in grid_in.items():
        searched = check(name, partial(_grid_values, name, values, rules, algorithm, estimator_params), None)
        if searched is not None:
            grid[name] = searched
    size = math.prod(len(v) for v in grid.values()) if grid else 1
    if size > MAX_GRID_POINTS:
        check("grid", partial(_refuse, "params.grid", f"{size} combinations; at most {MAX_GRID_POINTS} are allowed"),
              None)  # fmt: skip

    num_folds = check("num_folds", partial(_num_folds, params.get("num_folds")), None)
    if grid and num_folds is None and "num_folds" not in bad:
        num_folds = 3
    metric = check("metric", partial(_metric, task, params.get("metric", METRICS[task][0])), METRICS[task][0])
    standardize = check("standardize", partial(_flag, "params.standardize", params.get("standardize", True)), True)
    seed = check("seed", partial(check_seed, params.get("seed", 42)), 42)
    fraction = check("validation_fraction", partial(_fraction_of, params.get("validation_fraction", 0.2)), 0.2)
    spec = SparkMLSpec(
        algorithm=algorithm,
        task=task,
        estimator_class=estimator_class,
        params=estimator_params,
        grid=grid,
        num_folds=num_folds,
        metric=metric,
        standardize=standardize,
        seed=seed,
        validation_fraction=float(fraction),
    )
    if not bad & {"loss", "elasticNetParam", "solver"}:
        with problems.field():
            _check_together(spec)
    if num_classes is not None and "family" not in bad:
        with problems.field():
            spec.check_classes(num_classes)
    problems.raise_found()
    return spec


def _refuse(path: str, message: str) -> None:
    raise SpecError(path, message)


def _grid_values(
    name: str, values: Any, rules: Mapping[str, ParamRule], algorithm: str, fixed: Mapping[str, Scalar]
) -> tuple[Scalar, ...]:
    path = f"params.grid.{name}"
    if name not in rules:
        raise _unknown(path, name, rules, algorithm)
    if not isinstance(values, list) or not values:
        raise SpecError(path, "must be a non-empty list of values")
    checked = tuple(_check_value(path, name, rules[name], v) for v in values)
    if name in fixed:
        raise SpecError(path, f"{name} is both fixed in params and searched in the grid; keep one")
    return checked


def _num_folds(value: Any) -> int | None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not 2 <= value <= 20):
        raise SpecError("params.num_folds", f"must be an integer between 2 and 20, got {shown(value)}")
    return value


def _metric(task: Task, metric: Any) -> str:
    if metric not in METRICS[task]:
        raise SpecError("params.metric", f"for {task} one of {', '.join(METRICS[task])}, got {shown(metric)}")
    return str(metric)


def _flag(path: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise SpecError(path, f"must be true or false, got {shown(value)}")
    return value


def _fraction_of(value: Any) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value < 1:
        raise SpecError("params.validation_fraction", f"must be a number in (0, 1), got {shown(value)}")
    return float(value)

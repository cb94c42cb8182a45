"""spark_ml parameters: the article's grid works, mistakes name the field, the table matches pyspark."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from workers.errors import SpecError
from workers.training.spark_ml.spec import ALGORITHMS, parse_spark_ml_params

ARTICLE_GRID = {"maxBins": [100, 200], "maxDepth": [2, 7, 10], "numTrees": [5, 20]}


def test_article_grid() -> None:
    spec = parse_spark_ml_params(
        {"algorithm": "random_forest", "grid": ARTICLE_GRID, "num_folds": 3}, task="regression"
    )
    assert spec.cross_validated and spec.num_folds == 3 and spec.grid_size == 12
    assert spec.estimator_class == "pyspark.ml.regression.RandomForestRegressor"
    assert spec.metric == "rmse"


def test_grid_without_folds_defaults_to_three() -> None:
    spec = parse_spark_ml_params({"algorithm": "random_forest", "grid": {"maxDepth": [3, 4]}}, task="regression")
    assert spec.num_folds == 3


def test_plain_fit_and_classification() -> None:
    spec = parse_spark_ml_params({"algorithm": "logistic_regression", "regParam": 0.1}, task="classification")
    assert not spec.cross_validated and spec.params == {"regParam": 0.1} and spec.metric == "f1"


@pytest.mark.parametrize(
    ("params", "task", "path", "words"),
    [
        ({}, "regression", "params.algorithm", "required"),
        ({"algorithm": "gbt"}, "regression", "params.algorithm", "unknown algorithm 'gbt'"),
        ({"algorithm": "linear_regression"}, "classification", "params.algorithm", "does not do classification"),
        ({"algorithm": "random_forest", "numTress": 5}, "regression", "params.numTress", "known parameters"),
        ({"algorithm": "random_forest", "grid": {"depth": [2]}}, "regression", "params.grid.depth", "unknown"),
        ({"algorithm": "random_forest", "grid": {"maxDepth": []}}, "regression", "params.grid.maxDepth", "non-empty"),
        ({"algorithm": "random_forest", "grid": {"maxDepth": [2, "x"]}}, "regression", "params.grid.maxDepth", "whole"),
        ({"algorithm": "random_forest", "numTrees": 0}, "regression", "params.numTrees", "between 1 and 10000"),
        ({"algorithm": "random_forest", "numTrees": True}, "regression", "params.numTrees", "whole number, got true"),
        ({"algorithm": "random_forest", "subsamplingRate": 1.5}, "regression", "params.subsamplingRate", "(0, 1]"),
        ({"algorithm": "random_forest", "impurity": "gini"}, "regression", "params.impurity", "variance"),
        ({"algorithm": "random_forest", "num_folds": 1}, "regression", "params.num_folds", "between 2 and 20"),
        ({"algorithm": "random_forest", "metric": "f1"}, "regression", "params.metric", "rmse"),
        (
            {"algorithm": "random_forest", "maxDepth": 3, "grid": {"maxDepth": [2]}},
            "regression",
            "params.grid.maxDepth",
            "both fixed",
        ),
        ({"algorithm": "random_forest"}, None, "dataset.task", "required"),
    ],
)
def test_mistakes_name_the_field(params: dict[str, Any], task: Any, path: str, words: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spark_ml_params(params, task=task)
    assert info.value.path == path
    assert words in info.value.message


def test_grid_size_is_bounded() -> None:
    grid = {"maxDepth": list(range(1, 21)), "numTrees": list(range(1, 21))}
    with pytest.raises(SpecError, match="400 combinations"):
        parse_spark_ml_params({"algorithm": "random_forest", "grid": grid}, task="regression")


def test_table_matches_pyspark(spark: Any) -> None:
    """Every parameter the table allows is a real parameter of the pyspark estimator."""
    for by_task in ALGORITHMS.values():
        for class_path, rules in by_task.values():
            module, _, name = class_path.rpartition(".")
            estimator = getattr(importlib.import_module(module), name)()
            missing = [p for p in rules if not estimator.hasParam(p)]
            assert missing == [], f"{class_path} has no {missing}"


SPARK_ACCEPTS = ["auto", "SQRT", "Log2", "1", "+3", "2147483647", "1.0", "0.5", ".5", "1.", "1e-1", "4.9e-324"]
SPARK_REFUSES = ["0", "-1", "nan", "NaN", "2.5", "1.5", "0.0", "-0.5", "inf", "Infinity", "1e400", "3000000000",
                 "1_0", "0x10", "half", "", "9" * 5000]  # fmt: skip


@pytest.mark.parametrize("value", SPARK_REFUSES)
def test_feature_subset_strategies_spark_refuses_are_422s(value: str) -> None:
    """Each failed the job inside Spark with an IllegalArgumentException; now the request names the field."""
    forest = {"algorithm": "random_forest"}
    with pytest.raises(SpecError) as info:
        parse_spark_ml_params({**forest, "featureSubsetStrategy": value}, task="classification")
    assert info.value.path == "params.featureSubsetStrategy" and "a whole number n >= 1" in info.value.message
    with pytest.raises(SpecError) as info:
        parse_spark_ml_params({**forest, "grid": {"featureSubsetStrategy": ["sqrt", value]}}, task="regression")
    assert info.value.path == "params.grid.featureSubsetStrategy"


def test_feature_subset_strategy_follows_sparks_own_rule(spark: Any) -> None:
    """What the JVM's parameter validator says of each value (it runs when pyspark hands the parameter over) is what
    the spec says. Spark also takes " 0.5" and "0.5d" (Java's number parsing), which the spec refuses."""
    from pyspark.ml.regression import RandomForestRegressor

    def spark_takes(value: str) -> bool:
        try:
            RandomForestRegressor(featureSubsetStrategy=value)._transfer_params_to_java()
        except Exception as exc:  # py4j's IllegalArgumentException, converted by pyspark
            assert "featureSubsetStrategy" in str(exc)
            return False
        return True

    def ours(value: str) -> bool:
        try:
            parse_spark_ml_params({"algorithm": "random_forest", "featureSubsetStrategy": value}, task="regression")
        except SpecError:
            return False
        return True

    values = SPARK_ACCEPTS + SPARK_REFUSES[:-1]  # Java reads 5,000 digits too, to a number > 1
    assert {v: ours(v) for v in values} == {v: spark_takes(v) for v in values}
    assert {v: spark_takes(v) for v in values} == {v: v in SPARK_ACCEPTS for v in values}
    assert spark_takes(" 0.5") and not ours(" 0.5")


@pytest.mark.parametrize(
    ("params", "path", "words"),
    [
        ({"loss": "huber", "elasticNetParam": 0.5}, "params.elasticNetParam", "must be 0 with loss huber"),
        ({"loss": "huber", "grid": {"elasticNetParam": [0.0, 1.0]}}, "params.grid.elasticNetParam", "got 1.0"),
        ({"elasticNetParam": 0.2, "grid": {"loss": ["squaredError", "huber"]}}, "params.elasticNetParam",
         "huber (params.grid.loss)"),
        ({"loss": "huber", "solver": "normal"}, "params.solver", "use auto or l-bfgs"),
        ({"loss": "huber", "grid": {"solver": ["l-bfgs", "normal"]}}, "params.grid.solver", "use auto or l-bfgs"),
    ],
)  # fmt: skip
def test_huber_with_l1_or_the_normal_solver_is_a_422(params: dict[str, Any], path: str, words: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spark_ml_params({"algorithm": "linear_regression", **params}, task="regression")
    assert info.value.path == path and words in info.value.message, info.value


@pytest.mark.parametrize(
    "params",
    [
        {"loss": "huber"},
        {"loss": "huber", "elasticNetParam": 0, "solver": "l-bfgs", "regParam": 0.1},
        {"loss": "squaredError", "elasticNetParam": 0.5, "solver": "normal"},
        {"grid": {"loss": ["squaredError", "huber"], "regParam": [0.0, 0.1]}},
    ],
)
def test_huber_with_l2_is_taken(params: dict[str, Any]) -> None:
    parse_spark_ml_params({"algorithm": "linear_regression", **params}, task="regression")


@pytest.mark.parametrize(
    ("params", "path"),
    [
        ({"family": "binomial"}, "params.family"),
        ({"grid": {"family": ["multinomial", "binomial"]}}, "params.grid.family"),
    ],
)
def test_binomial_of_more_than_two_classes_is_a_422(params: dict[str, Any], path: str) -> None:
    logistic = {"algorithm": "logistic_regression", **params}
    with pytest.raises(SpecError) as info:
        parse_spark_ml_params(logistic, task="classification", num_classes=3)
    assert info.value.path == path and "the label has 3" in info.value.message
    for known in (2, None):  # two classes, or a count the planner does not know (the job checks it)
        parse_spark_ml_params(logistic, task="classification", num_classes=known)
    parse_spark_ml_params({"algorithm": "logistic_regression", "family": "multinomial"}, task="classification",
                          num_classes=3)  # fmt: skip


@pytest.mark.parametrize(
    ("estimator", "params", "classes"),
    [
        ("LinearRegression", {"loss": "huber", "elasticNetParam": 0.5}, 0),
        ("LinearRegression", {"loss": "huber", "solver": "normal"}, 0),
        ("LogisticRegression", {"family": "binomial"}, 3),
    ],
)
def test_what_is_refused_is_what_spark_fails(spark: Any, estimator: str, params: dict[str, Any], classes: int) -> None:
    """The combinations refused above fail Spark's own fit; the same estimator with the conflict removed fits."""
    import pyspark.ml.classification
    import pyspark.ml.regression
    from pyspark.ml.linalg import Vectors

    cls = getattr(pyspark.ml.regression, estimator, None) or getattr(pyspark.ml.classification, estimator)
    rows = [(Vectors.dense([float(i), float(i % 3)]), float(i % 3 if classes else i)) for i in range(12)]
    frame = spark.createDataFrame(rows, ["features", "label"])
    with pytest.raises(Exception, match=r"huber loss|Binomial family only supports"):
        cls(**params).fit(frame)
    fixed = {**params, "elasticNetParam": 0.0, "solver": "auto"} if classes == 0 else {"family": "multinomial"}
    cls(maxIter=5, **fixed).fit(frame)


def test_every_problem_is_in_one_error() -> None:
    """Only numTrees was named; the request was refused four more times, one field each (walkthrough)."""
    params = {"algorithm": "random_forest", "numTrees": 0, "maxDepth": 31, "maxBins": 1, "foo": 1,
              "subsamplingRate": 0, "grid": {"impurity": ["gini", "nope"], "bar": [1]}, "num_folds": 1,
              "metric": "auc", "standardize": "yes", "seed": 1.5, "validation_fraction": 2}  # fmt: skip
    with pytest.raises(SpecError) as caught:
        parse_spark_ml_params(params, task="classification")
    assert [p.path for p in caught.value.problems] == [
        "params.numTrees", "params.maxDepth", "params.maxBins", "params.foo", "params.subsamplingRate",
        "params.grid.impurity", "params.grid.bar", "params.num_folds", "params.metric", "params.standardize",
        "params.seed", "params.validation_fraction",
    ]  # fmt: skip
    assert "unknown parameter 'foo' for random_forest" in caught.value.problems[3].message


def test_a_rule_of_several_fields_is_named_with_the_other_problems() -> None:
    with pytest.raises(SpecError) as caught:
        parse_spark_ml_params({"algorithm": "linear_regression", "loss": "huber", "elasticNetParam": 0.5,
                               "maxIter": -1}, task="regression")  # fmt: skip
    assert [p.path for p in caught.value.problems] == ["params.maxIter", "params.elasticNetParam"]
    with pytest.raises(SpecError) as caught:  # the loss itself is bad: only its own problem
        parse_spark_ml_params({"algorithm": "linear_regression", "loss": "hub", "elasticNetParam": 0.5},
                              task="regression")  # fmt: skip
    assert [p.path for p in caught.value.problems] == ["params.loss"]


def test_a_multiclass_threshold_is_warned_about() -> None:
    """Spark decides a multinomial logistic regression by the largest probability: threshold did nothing."""
    spec = parse_spark_ml_params({"algorithm": "logistic_regression", "threshold": 0.3}, task="classification")
    assert spec.class_warnings(2) == []
    (said,) = spec.class_warnings(3)
    assert said.startswith("params.threshold 0.3 is not used: threshold applies to a binary logistic regression")
    searched = parse_spark_ml_params({"algorithm": "logistic_regression", "grid": {"threshold": [0.3, 0.6]}},
                                     task="classification")  # fmt: skip
    assert searched.class_warnings(4)[0].startswith("params.grid.threshold is not used")

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
        ({"algorithm": "random_forest", "numTrees": True}, "regression", "params.numTrees", "whole number, got True"),
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

"""The Spark ML driver on a real local[2] SparkSession: string class labels indexed in sorted order (as every other
family and docs/datasets.md), validation metrics after the last fit, a cross-validation without a grid said out
loud, and a binomial logistic regression of three classes refused before Spark fails it."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
import pandas as pd
import pytest

from tests.job_context import QuietContext
from workers.context import JobFailure, MetricPoint
from workers.data.spec import ResolvedDataset
from workers.training.spark_ml.driver import train
from workers.training.spark_ml.spec import SparkMLPlan, parse_spark_ml_params

SIZES = {"low": 0.0, "mid": 1.0, "high": 2.0}
"""Each class's x1 band. "mid" is the most frequent class and "high" the rarest: by frequency (Spark's
StringIndexer default) they are ['mid', 'low', 'high'], sorted ['high', 'low', 'mid']."""


class Context(QuietContext):
    """A JobContext that keeps what the driver reports in lists (no database)."""

    def __init__(self, spark: Any, work_dir: Path) -> None:
        self.spark, self.work_dir, self.job_id = spark, work_dir, "spark-ml-driver"
        self.points: list[MetricPoint] = []
        self.warnings: list[str] = []

    def metrics(self, points: Iterable[MetricPoint]) -> None:
        self.points.extend(points)

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def steps(self, prefix: str) -> set[int]:
        return {p.step for p in self.points if p.key.startswith(prefix)}


def _sizes(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    size = rng.choice(list(SIZES), size=n, p=[0.3, 0.55, 0.15])
    x1 = np.array([SIZES[s] for s in size]) + rng.uniform(0.1, 0.9, size=n)
    return pd.DataFrame({"x1": x1, "x2": rng.normal(size=n), "size": size, "y": 2 * x1 + rng.normal(size=n)})


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sizes")
    _sizes(300, 1).to_parquet(root / "train.parquet")
    _sizes(60, 2).to_parquet(root / "eval.parquet")
    frame = _sizes(60, 3)
    frame.assign(level=frame["size"].map({"low": 0, "mid": 1, "high": 2})).to_parquet(root / "levels.parquet")
    return root


def _plan(data: Path, params: dict[str, Any], *, label: str = "size", file: str = "train.parquet") -> SparkMLPlan:
    task = "regression" if label == "y" else "classification"
    ds = ResolvedDataset(path=str(data / file), format="parquet", features=("x1", "x2"), label=label, task=task,
                         column_types={"x1": "double", "x2": "double"})  # fmt: skip
    spec = parse_spark_ml_params(params, task=task)
    return SparkMLPlan(train=ds, validation=None, spec=spec)


def test_string_class_labels_are_indexed_in_sorted_order(spark: Any, data: Path, tmp_path: Path) -> None:
    from pyspark.ml import PipelineModel

    ctx = Context(spark, tmp_path)
    outcome = train(ctx, _plan(data, {"algorithm": "random_forest", "numTrees": 5}))  # type: ignore[arg-type]
    assert outcome.model is not None
    labels = outcome.model.params["class_labels"]
    assert labels == ["high", "low", "mid"], "sorted, as xgboost and torch index them; not by frequency"
    assert outcome.model.params["num_classes"] == 3
    assert outcome.result["validation"]["accuracy"] > 0.95

    rows = _sizes(40, 4)  # rows without their label, as a prediction gets them
    model = PipelineModel.load(urlparse(outcome.model.uri).path)
    predicted = model.transform(spark.createDataFrame(rows[["x1", "x2"]])).select("prediction").toPandas()
    named = [labels[int(i)] for i in predicted["prediction"]]
    assert np.mean(np.array(named) == rows["size"].to_numpy()) > 0.95, "a class index names its class"
    assert ctx.steps("validation_") == {1}, "a plain fit is the job's one fit"
    assert ctx.warnings == []


def test_a_class_only_in_held_out_rows_is_one_of_the_classes(spark: Any, tmp_path: Path) -> None:
    """The classes are read from every row of the training data, as the planner reads them for xgboost: a class whose
    only row the seeded split holds out is a class (it failed the job as a held-out row of an unknown label)."""
    from pyspark.sql import functions as F

    frame, path = _sizes(300, 5), tmp_path / "rare.parquet"
    frame.to_parquet(path)
    held = spark.read.parquet(str(path)).select(F.rand(7) < 0.2).toPandas().iloc[:, 0].to_numpy()  # clean_holdout's
    frame.loc[int(np.flatnonzero(held)[0]), "size"] = "huge"
    frame.to_parquet(path)
    ds = ResolvedDataset(path=str(path), format="parquet", features=("x1", "x2"), label="size", task="classification")
    spec = parse_spark_ml_params({"algorithm": "random_forest", "numTrees": 3}, task="classification")
    outcome = train(Context(spark, tmp_path), SparkMLPlan(train=ds, validation=None, spec=spec))  # type: ignore[arg-type]
    assert outcome.model is not None and outcome.model.params["class_labels"] == ["high", "huge", "low", "mid"]


def test_validation_metrics_come_after_the_last_cross_validation_fit(spark: Any, data: Path, tmp_path: Path) -> None:
    ctx = Context(spark, tmp_path)
    params = {"algorithm": "random_forest", "numTrees": 3, "grid": {"maxDepth": [2, 3]}, "num_folds": 2}
    outcome = train(ctx, _plan(data, params, label="y"))  # type: ignore[arg-type]
    assert ctx.steps("cv_rmse") == {1, 2, 3, 4}
    assert ctx.steps("validation_") == {5}, "after the 2 x 2 fits, where the model fitted on all rows is scored"
    assert len(outcome.result["cross_validation"]["grid"]) == 2
    assert ctx.warnings == []


def test_num_folds_without_a_grid_cross_validates_one_configuration_and_says_so(
    spark: Any, data: Path, tmp_path: Path
) -> None:
    ctx = Context(spark, tmp_path)
    outcome = train(ctx, _plan(data, {"algorithm": "linear_regression", "num_folds": 3}, label="y"))  # type: ignore[arg-type]
    assert ctx.warnings == [
        "num_folds without a grid: cross-validates the one configuration (3 fits) and trains it once more on all rows"
    ]
    assert ctx.steps("cv_rmse") == {1, 2, 3} and ctx.steps("validation_") == {4}
    assert [row["params"] for row in outcome.result["cross_validation"]["grid"]] == [{}]


@pytest.mark.parametrize(("label", "file"), [("size", "train.parquet"), ("level", "levels.parquet")])
def test_binomial_of_three_classes_fails_before_spark_does(
    spark: Any, data: Path, tmp_path: Path, label: str, file: str
) -> None:
    """String labels and integer ones alike (the planner may not know the classes): a clear INVALID_REQUEST, not
    Spark's "Binomial family only supports 1 or 2 outcome classes" from inside the fit."""
    plan = _plan(data, {"algorithm": "logistic_regression", "grid": {"family": ["binomial", "auto"]}}, label=label,
                 file=file)  # fmt: skip
    with pytest.raises(JobFailure) as info:
        train(Context(spark, tmp_path), plan)  # type: ignore[arg-type]
    assert info.value.reason == "INVALID_REQUEST"
    assert info.value.message.startswith("params.family: binomial supports 1 or 2 classes and the label has 3")

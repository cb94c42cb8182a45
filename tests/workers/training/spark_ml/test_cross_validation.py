"""The Spark ML job's cross-validation on a real local[2] SparkSession: the same folds, metrics and best model as
pyspark's ``CrossValidator`` (``parallelism=1``), and a run that died after some of its fits continues from its
checkpoint with only the fits left, to the same table."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.job_context import QuietContext
from workers.context import MetricPoint
from workers.data.spec import ResolvedDataset
from workers.training.spark_ml.driver import _cross_validate, _estimator, _evaluator
from workers.training.spark_ml.spec import SparkMLPlan, SparkMLResume, SparkMLSpec

SPEC = SparkMLSpec(
    algorithm="random_forest",
    task="regression",
    estimator_class="pyspark.ml.regression.RandomForestRegressor",
    params={"numTrees": 4},
    grid={"maxDepth": (2, 5)},
    num_folds=3,
    metric="rmse",
    seed=11,
)
PLAN = SparkMLPlan(
    train=ResolvedDataset(path="unused", format="parquet", features=("a", "b"), label="y", task="regression"),
    validation=None,
    spec=SPEC,
)


class Died(Exception):
    """The driver 'dies' right after a checkpoint."""


class Context(QuietContext):
    """The part of a JobContext the cross-validation uses: progress, metrics, logs and checkpoints in lists."""

    job_id = "cv-test"

    def __init__(self, spark: Any, work_dir: Path, die_after: int | None = None) -> None:
        self.spark, self.work_dir, self.die_after = spark, work_dir, die_after
        self.points: list[MetricPoint] = []
        self.lines: list[str] = []
        self.checkpoints: list[tuple[int, str]] = []

    def metrics(self, points: Iterable[MetricPoint]) -> None:
        self.points.extend(points)

    def log(self, message: str, level: str = "INFO") -> None:
        self.lines.append(message)

    def checkpoint(self, epoch: int, step: int, uri: str, metrics: dict[str, Any], **_: Any) -> str:
        self.checkpoints.append((epoch, uri))
        if self.die_after is not None and len(self.checkpoints) >= self.die_after:
            raise Died
        return f"{epoch:032d}"


@pytest.fixture(scope="module")
def frame(spark: Any) -> Any:
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=400), rng.normal(size=400)
    y = 3 * a - 2 * b * b + rng.normal(scale=0.3, size=400)
    rows = [(float(x1), float(x2), float(t)) for x1, x2, t in zip(a, b, y, strict=True)]
    return spark.createDataFrame(rows, "a double, b double, y double").repartition(2).cache()


def _pipeline() -> tuple[Any, Any]:
    from pyspark.ml import Pipeline
    from pyspark.ml.feature import VectorAssembler

    estimator = _estimator(SPEC, "y", None)
    return Pipeline(stages=[VectorAssembler(inputCols=["a", "b"], outputCol="features"), estimator]), estimator


def test_the_grid_matches_pysparks_cross_validator(spark: Any, frame: Any, tmp_path: Path) -> None:
    from pyspark.ml.tuning import CrossValidator, ParamGridBuilder

    pipeline, estimator = _pipeline()
    ctx = Context(spark, tmp_path)
    model, table, best = _cross_validate(ctx, PLAN, pipeline, estimator, "y", frame)  # type: ignore[arg-type]

    grid = ParamGridBuilder().addGrid(estimator.getParam("maxDepth"), [2, 5]).build()
    theirs = CrossValidator(estimator=pipeline, estimatorParamMaps=grid, evaluator=_evaluator(SPEC, "y", "rmse"),
                            numFolds=3, seed=11, parallelism=1).fit(frame)  # fmt: skip
    assert [row["rmse"] for row in table] == pytest.approx(list(theirs.avgMetrics), rel=1e-12)
    assert [row["std"] for row in table] == pytest.approx(list(theirs.stdMetrics), rel=1e-12, abs=1e-12)
    assert best == {"numTrees": 4, "maxDepth": [2, 5][int(np.argmin(theirs.avgMetrics))]}
    ours = model.transform(frame).select("prediction").toPandas()["prediction"]
    cv = theirs.bestModel.transform(frame).select("prediction").toPandas()["prediction"]
    assert ours.tolist() == cv.tolist(), "the same best model, fitted on all the data"
    assert [p.step for p in ctx.points] == [1, 2, 3, 4, 5, 6]
    assert [epoch for epoch, _ in ctx.checkpoints] == [1, 2, 3, 4, 5, 6]


def test_a_run_that_died_continues_after_the_fits_it_saved(spark: Any, frame: Any, tmp_path: Path) -> None:
    pipeline, estimator = _pipeline()
    whole = Context(spark, tmp_path / "whole")
    _, expected, expected_best = _cross_validate(whole, PLAN, pipeline, estimator, "y", frame)  # type: ignore[arg-type]

    first = Context(spark, tmp_path / "resumed", die_after=4)  # two of three folds done with maxDepth 2, one with 5
    with pytest.raises(Died):
        _cross_validate(first, PLAN, pipeline, estimator, "y", frame)  # type: ignore[arg-type]
    fits, uri = first.checkpoints[-1]
    assert fits == 4 and (Path(uri) / "cv.json").exists()

    point = SparkMLResume(checkpoint_id="c" * 32, uri=uri, fits=4, job_id="cv-test")
    resumed_plan = SparkMLPlan(train=PLAN.train, validation=None, spec=SPEC, resume=point)
    second = Context(spark, tmp_path / "resumed")
    _, table, best = _cross_validate(second, resumed_plan, pipeline, estimator, "y", frame)  # type: ignore[arg-type]
    assert [p.step for p in second.points] == [5, 6], "only the two fits left ran"
    assert table == expected and best == expected_best
    assert any("4 done before, continuing from checkpoint " + "c" * 32 in line for line in second.lines)


def test_a_checkpoint_of_another_grid_is_refused(spark: Any, frame: Any, tmp_path: Path) -> None:
    from workers import storage
    from workers.context import JobFailure

    uri = storage.publish_files(str(tmp_path), "cv-1", {"cv.json": b'{"fits": 1, "metrics": [[1.0, null]]}'})
    plan = SparkMLPlan(train=PLAN.train, validation=None, spec=SPEC,
                       resume=SparkMLResume(checkpoint_id="d" * 32, uri=uri, fits=1, job_id="cv-test"))  # fmt: skip
    pipeline, estimator = _pipeline()
    with pytest.raises(JobFailure, match="not this job's"):
        _cross_validate(Context(spark, tmp_path), plan, pipeline, estimator, "y", frame)  # type: ignore[arg-type]

"""A Spark ML job says what it does while it does it, on a real local[2] SparkSession: reading the data is a log line
before the first Spark job, each cross-validation fit is announced before it runs (with the bar at its share) and
logged with its fold, parameters and metric when it ends, and the bar never goes back. The README's first job, a
36-fit grid, sat at "0% reading data" for a minute without a word, then moved only as fits ended."""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.job_context import QuietContext
from workers.context import MetricPoint
from workers.data.spec import ResolvedDataset
from workers.training.spark_ml.driver import _cross_validate, _estimator, train
from workers.training.spark_ml.spec import SparkMLPlan, SparkMLSpec, parse_spark_ml_params

SPEC = SparkMLSpec(
    algorithm="random_forest",
    task="regression",
    estimator_class="pyspark.ml.regression.RandomForestRegressor",
    params={"numTrees": 3},
    grid={"maxDepth": (2, 4)},
    num_folds=3,
    metric="rmse",
    seed=5,
)
PLAN = SparkMLPlan(
    train=ResolvedDataset(path="unused", format="parquet", features=("a", "b"), label="y", task="regression"),
    validation=None,
    spec=SPEC,
)
FIT_LINE = re.compile(r"^fit (\d+) of 6: fold (\d) of 3, maxDepth=(\d): rmse (\S+)$")


class Context(QuietContext):
    """What the driver reports, in one list in the order it came: ("progress", fraction, message), ("metric",
    point), ("log", message). Its Spark jobs run in the job group named after it, as the runner's do."""

    def __init__(self, spark: Any, work_dir: Path, job_id: str) -> None:
        self.spark, self.work_dir, self.job_id = spark, work_dir, job_id
        self.events: list[tuple[Any, ...]] = []
        spark.sparkContext.setJobGroup(job_id, "a test job")

    def progress(self, fraction: float, message: str | None = None) -> None:
        assert 0 <= fraction <= 1
        self.events.append(("progress", fraction, message))

    def metrics(self, points: Iterable[MetricPoint]) -> None:
        self.events.extend(("metric", p) for p in points)

    def log(self, message: str, level: str = "INFO") -> None:
        self.events.append(("log", message))

    def warn(self, message: str) -> None:
        self.events.append(("log", message))

    def of(self, kind: str) -> list[tuple[int, tuple[Any, ...]]]:
        return [(i, e) for i, e in enumerate(self.events) if e[0] == kind]


@pytest.fixture(scope="module")
def frame(spark: Any) -> Any:
    rng = np.random.default_rng(9)
    a, b = rng.normal(size=300), rng.normal(size=300)
    rows = [(float(x), float(z), float(2 * x - z * z)) for x, z in zip(a, b, strict=True)]
    return spark.createDataFrame(rows, "a double, b double, y double").repartition(2).cache()


def test_each_fit_is_announced_before_it_runs_and_logged_when_it_ends(spark: Any, frame: Any, tmp_path: Path) -> None:
    from pyspark.ml import Pipeline
    from pyspark.ml.feature import VectorAssembler

    estimator = _estimator(SPEC, "y", None)
    pipeline = Pipeline(stages=[VectorAssembler(inputCols=["a", "b"], outputCol="features"), estimator])
    ctx = Context(spark, tmp_path, "cv-progress")
    _, table, _ = _cross_validate(ctx, PLAN, pipeline, estimator, "y", frame)  # type: ignore[arg-type]

    points = ctx.of("metric")
    assert [e[1].step for _, e in points] == [1, 2, 3, 4, 5, 6]
    fits = [(i, FIT_LINE.match(e[1])) for i, e in ctx.of("log") if FIT_LINE.match(e[1])]
    assert [int(m[1]) for _, m in fits] == [1, 2, 3, 4, 5, 6], ctx.events
    for (at, point), (logged, match) in zip(points, fits, strict=True):
        assert logged > at and float(match[4]) == pytest.approx(point[1].value, rel=1e-5)  # the fit's own metric
    assert [int(m[2]) for _, m in fits] == [1, 1, 2, 2, 3, 3]  # fold by fold, each parameter map in a fold
    assert [int(m[3]) for _, m in fits] == [2, 4, 2, 4, 2, 4]
    means = {depth: np.mean([float(m[4]) for _, m in fits if int(m[3]) == depth]) for depth in (2, 4)}
    assert [row["rmse"] for row in table] == pytest.approx([means[2], means[4]], rel=1e-5)

    progress = ctx.of("progress")
    for k, (at, _) in enumerate(points, start=1):  # announced (bar at its share) before the fit's point
        before = [e for i, e in progress if i < at and e[2] and f"fit {k} running" in e[2]]
        assert before, f"fit {k} was not announced before it ended: {ctx.events}"
        assert before[0][1] == pytest.approx(0.05 + 0.85 * (k - 1) / 6)
    announced = [e[2] for _, e in progress if e[2] and "running" in e[2]]
    assert announced[0].startswith("cross-validating: fit 1 running (fold 1 of 3)")
    assert all(m.startswith("cross-validation fit ") for m in announced if "fit 1 running" not in m), announced
    fractions = [e[1] for _, e in progress]
    assert fractions == sorted(fractions), "the bar never goes back"
    assert fractions[-1] >= 0.9  # the best parameters fitted on all the rows last
    assert any(e[1].startswith("best of the grid: maxDepth=") for _, e in ctx.of("log"))


def test_reading_the_data_is_said_before_it_starts(spark: Any, tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    x = rng.normal(size=120)
    pd.DataFrame({"x": x, "y": 3 * x + rng.normal(size=120)}).to_parquet(tmp_path / "rows.parquet")
    data = ResolvedDataset(path=str(tmp_path / "rows.parquet"), format="parquet", features=("x",), label="y",
                           task="regression")  # fmt: skip
    spec = parse_spark_ml_params({"algorithm": "linear_regression"}, task="regression")
    ctx = Context(spark, tmp_path / "work", "read-progress")
    train(ctx, SparkMLPlan(train=data, validation=None, spec=spec))  # type: ignore[arg-type]
    lines = [e[1] for _, e in ctx.of("log")]
    reading = next(i for i, line in enumerate(lines) if line.startswith("reading the training data: "))
    assert reading < next(i for i, line in enumerate(lines) if line.startswith("training on "))
    fractions = [e[1] for _, e in ctx.of("progress")]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0


def test_before_its_first_stage_the_bar_says_what_it_waits_for(spark: Any, tmp_path: Path) -> None:
    from workers.spark_progress import StageProgress

    ctx = Context(spark, tmp_path, "no-spark-job-yet")
    StageProgress(ctx, low=0.05, high=0.1, label="cross-validating: fit 1 running (fold 1 of 3)").poll()
    assert ctx.events == [("progress", 0.05, "cross-validating: fit 1 running (fold 1 of 3)")]  # not "0/0 Spark stages"


STAGES = re.compile(r"^fitting: (\d+)/(\d+) Spark stages")


def test_a_forest_bar_follows_its_stages(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 20-tree forest of depth 8 over 3 million rows sat at 0.9 from 62 s to 177 s of a 182 s job: each finished
    stage took half of what was left, and a forest runs two stages per tree level. Half of its stages done is now
    about half of the fit's band. The bar is polled every 20 ms here (1 s in a job) to see every stage."""
    from workers.spark_progress import StageProgress
    from workers.training.spark_ml import driver

    monkeypatch.setattr(driver, "StageProgress", partial(StageProgress, interval_s=0.02))
    rng = np.random.default_rng(8)
    x, z = rng.normal(size=2000), rng.normal(size=2000)
    pd.DataFrame({"x": x, "z": z, "y": 2 * x - z * z}).to_parquet(tmp_path / "rows.parquet")
    data = ResolvedDataset(path=str(tmp_path / "rows.parquet"), format="parquet", features=("x", "z"), label="y",
                           task="regression")  # fmt: skip
    spec = parse_spark_ml_params({"algorithm": "random_forest", "numTrees": 5, "maxDepth": 8}, task="regression")
    ctx = Context(spark, tmp_path / "work", "forest-progress")
    train(ctx, SparkMLPlan(train=data, validation=None, spec=spec))  # type: ignore[arg-type]

    fractions = [e[1] for _, e in ctx.of("progress")]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    fitting = [(f, int(m[1])) for _, (_, f, msg) in ctx.of("progress") if msg and (m := STAGES.match(msg))]
    trace = [(done, round((f - 0.1) / 0.8, 3)) for f, done in fitting]  # (stages done, share of the fit's band)
    print("forest progress (stages done, share of band):", trace)
    total = trace[-1][0]
    assert total >= 16, trace  # two stages per level of 8
    halfway = next(share for done, share in trace if done >= total / 2)
    assert halfway < 0.75, f"half the stages done showed {halfway} of the band: {trace}"
    assert trace[-1][1] >= 0.8, trace  # and the estimate is not far above the stages it ran
    assert all(0.1 <= f < 0.9 for f, _ in fitting), trace


def test_the_bar_moves_by_the_expected_stages_then_halves_past_them() -> None:
    from workers.spark_progress import ESTIMATED_SHARE, band_fraction

    assert band_fraction(5, 0.0, expected=10) == pytest.approx(ESTIMATED_SHARE / 2)
    assert band_fraction(10, 0.0, expected=10) == pytest.approx(ESTIMATED_SHARE)
    assert band_fraction(9, 1.0, expected=10) == pytest.approx(ESTIMATED_SHARE)  # continuous at the estimate
    assert band_fraction(11, 0.0, expected=10) == pytest.approx(ESTIMATED_SHARE + (1 - ESTIMATED_SHARE) / 2)
    for expected in (None, 1, 10):
        shown = [band_fraction(done, partial, expected) for done in range(40) for partial in (0.0, 0.5, 0.99)]
        assert shown == sorted(shown) and all(0 <= s < 1 for s in shown), expected
    assert band_fraction(3, 0.0) == pytest.approx(1 - 0.5**3)  # no estimate: as before

"""An evaluation's bar moves with Spark's stages and tasks while the data is scored, on a real SparkSession and a
real Spark ML model: over 3 million rows the job said "0.05 evaluating" until it ended."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.job_context import QuietContext
from workers.data.spec import ResolvedDataset
from workers.evaluation.driver import evaluate
from workers.inference.spec import EvaluationPlan, ModelRef


class Context(QuietContext):
    """Records the bar; its Spark jobs run in the job group named after it, as the runner's do."""

    def __init__(self, spark: Any, work_dir: Path) -> None:
        super().__init__(spark, work_dir, "c" * 32)
        self.reported: list[tuple[float, str | None]] = []
        spark.sparkContext.setJobGroup(self.job_id, "a test job")

    def progress(self, fraction: float, message: str | None = None) -> None:
        self.reported.append((fraction, message))


def test_the_bar_moves_while_the_rows_are_scored(spark: Any, tmp_path: Path) -> None:
    from pyspark.ml import Pipeline
    from pyspark.ml.feature import VectorAssembler
    from pyspark.ml.regression import LinearRegression

    rows = spark.range(0, 400, numPartitions=4).selectExpr("CAST(id AS DOUBLE) AS a", "CAST(id * 2 + 1 AS DOUBLE) AS y")
    data = tmp_path / "rows.parquet"
    rows.write.parquet(str(data))
    pipeline = Pipeline(stages=[VectorAssembler(inputCols=["a"], outputCol="features"), LinearRegression(labelCol="y")])
    pipeline.fit(rows).save(str(tmp_path / "model"))
    model = ModelRef(framework="spark_ml", uri=str(tmp_path / "model"),
                     card={"features": ["a"], "labels": ["y"], "label": "y", "task": "regression"})  # fmt: skip
    ds = ResolvedDataset(path=str(data), format="parquet", features=("a",), label="y", task="regression")
    ctx = Context(spark, tmp_path)
    try:
        outcome = evaluate(ctx, EvaluationPlan(model=model, dataset=ds, groups=("regression",)))  # type: ignore[arg-type]
    finally:
        spark.sparkContext.setJobGroup("", "")
    assert outcome.result is not None and outcome.result["rows"] == 400
    fractions = [f for f, _ in ctx.reported]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    scored = [f for f, m in ctx.reported if m and m.startswith("evaluating: ") and "Spark stages" in m]
    assert scored and all(0.05 <= f <= 0.95 for f in scored), ctx.reported

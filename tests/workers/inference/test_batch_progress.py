"""A batch prediction's bar moves with Spark's stages and tasks while the predictions are written, on a real
SparkSession: over 3 million rows the job said "0.05 predicting" until it ended, as an evaluation still does."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from workers.inference.batch import CHECKED, WRITTEN, _write


class Ctx:
    """The job context: its Spark jobs run in the job group named after it, as the runner's do."""

    def __init__(self, spark: Any) -> None:
        self.job_id, self.attempt, self.spark = "b" * 32, 1, spark
        self.reported: list[tuple[float, str | None]] = []
        spark.sparkContext.setJobGroup(self.job_id, "a test job")

    def warn(self, message: str) -> None:
        pass

    def check_cancelled(self) -> None:
        pass

    def progress(self, fraction: float, message: str | None = None) -> None:
        self.reported.append((fraction, message))


def test_the_bar_moves_with_the_write(spark: Any, tmp_path: Path) -> None:
    ctx = Ctx(spark)
    predictions = spark.range(0, 600, numPartitions=6).selectExpr("id AS key", "CAST(id AS DOUBLE) AS prediction")
    try:
        _write(ctx, SimpleNamespace(output_path=str(tmp_path / "out"), key="key"), predictions, 0)  # type: ignore[arg-type]
    finally:
        spark.sparkContext.setJobGroup("", "")
    fractions = [f for f, _ in ctx.reported]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    written = [(f, m) for f, m in ctx.reported if m and m.startswith("predicting: ")]
    assert written and all(CHECKED <= f <= WRITTEN for f, _ in written), ctx.reported
    assert written[-1][1] == "predicting: 1/1 Spark stages, 6/6 tasks done"

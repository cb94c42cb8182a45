"""Validation metrics of a fitted Spark ML or xgboost.spark model, from its ``prediction`` column in one pass."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def validation_metrics(task: str, label_col: str, predictions: DataFrame) -> dict[str, float]:
    """Regression: rmse, mae, r2, mse from one aggregation; classification: accuracy and (weighted) f1."""
    from pyspark.sql import functions as F

    y, p = F.col(label_col).cast("double"), F.col("prediction").cast("double")
    if task == "regression":
        row = predictions.agg(
            F.count(F.lit(1)).alias("n"),
            F.sum((y - p) ** 2).alias("sse"),
            F.sum(F.abs(y - p)).alias("sae"),
            F.sum(y).alias("sy"),
            F.sum(y * y).alias("syy"),
        ).first()
        assert row is not None
        n = max(int(row["n"]), 1)
        mse = float(row["sse"] or 0.0) / n
        ss_tot = float(row["syy"] or 0.0) - float(row["sy"] or 0.0) ** 2 / n
        return {
            "rmse": mse**0.5,
            "mae": float(row["sae"] or 0.0) / n,
            "r2": 1.0 - float(row["sse"] or 0.0) / ss_tot if ss_tot > 0 else 0.0,
            "mse": mse,
        }
    from pyspark.ml.evaluation import MulticlassClassificationEvaluator

    scored = predictions.select(y.alias("_y"), p.alias("_p")).cache()
    try:
        return {
            name: float(MulticlassClassificationEvaluator(labelCol="_y", predictionCol="_p", metricName=name)
                        .evaluate(scored))
            for name in ("accuracy", "f1")
        }  # fmt: skip
    finally:
        scored.unpersist()

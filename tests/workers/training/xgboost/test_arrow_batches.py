"""The Arrow batch size of an xgboost job, on a real local[2] SparkSession: xgboost.spark's fit gets batches of
whole partitions, and nothing else does. The validation's ``model.transform`` (a scalar pandas UDF) ran with the
fit's 10,000,000 rows per batch, which Spark 4.3 allocates on the executor's heap up front (~1 GB): every xgboost
job killed executors with the default 1g heap (exit code 52) after training (walkthrough on a standalone cluster,
2026-12-07; ``tests/cluster/test_executor_loss.py`` runs it there)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.workers.training.xgboost.test_driver import Context, _plan
from workers.training.xgboost.driver import BATCH_KEY, BATCH_ROWS, train


def _pandas_udf_batches(spark: Any, after: int) -> list[str | None]:
    """The Arrow batch size each SQL execution after the one numbered ``after`` ran its scalar pandas UDFs with
    (None: Spark's default), from Spark's SQL status store (the session settings an execution ran with)."""
    found = []
    for execution in _executions(spark):
        if execution.executionId() > after and "ArrowEvalPython" in str(execution.physicalPlanDescription()):
            size = execution.modifiedConfigs().get(BATCH_KEY)
            found.append(str(size.get()) if size.isDefined() else None)
    return found


def _executions(spark: Any) -> list[Any]:
    listed = spark._jsparkSession.sharedState().statusStore().executionsList()
    return [listed.apply(i) for i in range(listed.size())]


def _last_execution(spark: Any) -> int:
    return max((int(e.executionId()) for e in _executions(spark)), default=-1)


def test_the_validation_predictions_run_with_the_sessions_batch_size(spark: Any, tmp_path: Path) -> None:
    since = _last_execution(spark)
    ctx = Context(spark, tmp_path, "xgb-arrow-batches")
    outcome = train(ctx, _plan(2))  # type: ignore[arg-type]
    assert outcome.result["validation"]["rmse"] < 3.0
    batches = _pandas_udf_batches(spark, since)
    assert batches, "the validation predictions ran as a scalar pandas UDF"
    assert str(BATCH_ROWS) not in batches, batches
    assert spark.conf.get(BATCH_KEY) == "10000", "the driver's session keeps Spark's default"

"""Spark ML training: assemble features, optionally cross-validate a grid, evaluate, save the best pipeline.

Everything here runs on the driver; Spark ML ships its own JVM code to the executors.
"""

from __future__ import annotations

import importlib
import itertools
from typing import TYPE_CHECKING, Any

from workers import storage
from workers.context import JobContext, JobFailure, JobOutcome, MetricPoint, ModelArtifact
from workers.data.clean import clean, clean_holdout
from workers.data.spec import read_dataframe
from workers.inference.examples import example_rows
from workers.inference.mlflow_format import write_mlflow_files
from workers.inference.signature import build_signature
from workers.spark_progress import StageProgress
from workers.training.spark_ml.spec import SparkMLPlan, SparkMLSpec
from workers.training.validation import validation_metrics

if TYPE_CHECKING:
    from pyspark.ml import Estimator
    from pyspark.sql import DataFrame

FEATURES_COL = "features"
LABEL_INDEX_COL = "_label_index"
SPLIT_COL = "_split"


def train(ctx: JobContext, plan: SparkMLPlan) -> JobOutcome:
    from pyspark.sql import functions as F

    spec, ds = plan.spec, plan.train
    ctx.progress(0.0, "reading data")
    source = read_dataframe(ctx.spark, ds, malformed=True)
    if plan.validation is not None:
        train_df, rows, dropped = clean(ctx, source, ds)
        validation = read_dataframe(ctx.spark, plan.validation, malformed=True)
        val_df, val_rows, val_dropped = clean(ctx, validation, plan.validation)
        dropped += val_dropped
    else:
        fraction = ds.validation_fraction or spec.validation_fraction
        frame, rows, val_rows, dropped = clean_holdout(ctx, source, ds, fraction, SPLIT_COL)
        train_df = frame.where(F.col(SPLIT_COL) == 0).drop(SPLIT_COL)
        val_df = frame.where(F.col(SPLIT_COL) == 1).drop(SPLIT_COL)
        ctx.log(f"no validation set given: {val_rows} of {rows + val_rows} rows held out ({fraction:.0%})")
    if rows == 0:
        raise JobFailure("EMPTY_DATASET", f"{ds.path} has no usable rows")
    ctx.log(f"training on {rows} rows with {len(ds.features)} features, validating on {val_rows}")
    train_df = train_df.cache()
    try:
        return _fit(ctx, plan, train_df, val_df, {"train": rows, "validation": val_rows}, dropped)
    finally:
        train_df.unpersist()


def _fit(
    ctx: JobContext, plan: SparkMLPlan, train_df: DataFrame, val_df: DataFrame, rows: dict[str, int], dropped: int
) -> JobOutcome:
    from pyspark.ml import Pipeline
    from pyspark.ml.feature import StandardScaler, StringIndexer, VectorAssembler

    spec, ds = plan.spec, plan.train
    assert ds.label is not None
    label_col, labels = ds.label, None
    stages: list[Any] = []
    if spec.task == "classification" and dict(train_df.dtypes)[ds.label] == "string":
        # The label mapping is applied to the data, not saved in the pipeline: the saved model must predict on
        # rows that have no label. The labels are stored with the version (params.labels).
        indexer = StringIndexer(inputCol=ds.label, outputCol=LABEL_INDEX_COL, handleInvalid="error")
        indexer_model = indexer.fit(train_df)
        labels = list(indexer_model.labels)
        train_df, val_df = indexer_model.transform(train_df), indexer_model.transform(val_df)
        label_col = LABEL_INDEX_COL
    raw = "_features_raw" if spec.standardize else FEATURES_COL
    stages.append(VectorAssembler(inputCols=list(ds.features), outputCol=raw, handleInvalid="error"))
    if spec.standardize:
        stages.append(StandardScaler(inputCol=raw, outputCol=FEATURES_COL, withStd=True, withMean=False))
    estimator = _estimator(spec, label_col, ds.weight)
    pipeline = Pipeline(stages=[*stages, estimator])

    cv_table: list[dict[str, Any]] = []
    best_params: dict[str, Any] = dict(spec.params)
    if spec.cross_validated:
        model, cv_table, best_params = _cross_validate(ctx, spec, pipeline, estimator, label_col, train_df)
    else:
        ctx.progress(0.1, "fitting")
        with StageProgress(ctx, low=0.1, high=0.9, label="fitting"):
            model = pipeline.fit(train_df)
    ctx.check_cancelled()

    ctx.progress(0.92, "evaluating on the validation data")
    predictions = model.transform(val_df).cache()
    try:
        val_metrics = validation_metrics(spec.task, label_col, predictions)
    finally:
        predictions.unpersist()
    total_steps = max(1, len(cv_table))
    ctx.metrics(MetricPoint(f"validation_{k}", v, step=total_steps) for k, v in val_metrics.items())

    params = {
        "algorithm": spec.algorithm,
        "task": spec.task,
        "features": list(ds.features),
        "label": ds.label,
        "best_params": best_params,
        "labels": [ds.label],
        "class_labels": labels,
        "num_classes": len(labels) if labels else ds.num_classes,
        "spec": spec.to_dict(),
    }
    params["signature"] = build_signature(params, ds.column_types, "spark_ml")
    params["input_example"] = example_rows(ctx.spark, ds)
    ctx.progress(0.97, "saving the model")
    local = ctx.work_dir / "model"
    model.write().overwrite().save(str(local))
    write_mlflow_files(local, "spark_ml", params)
    uri = local.as_uri()
    if ctx.store:
        uri = storage.publish_dir(local, storage.join(ctx.store, "jobs", ctx.job_id, "model"))
    result: dict[str, Any] = {
        "algorithm": spec.algorithm,
        "task": spec.task,
        "rows": rows,
        "validation": val_metrics,
        "best_params": best_params,
        "metric": spec.metric,
    }
    if cv_table:
        result["cross_validation"] = {"num_folds": spec.num_folds, "grid": cv_table}
    if dropped or ds.bad_rows == "skip":
        result["bad_rows"] = dropped
    ctx.progress(1.0, "done")
    return JobOutcome(
        result=result,
        model=ModelArtifact(framework="spark_ml", uri=uri, metrics=val_metrics, params=params),
    )


def _estimator(spec: SparkMLSpec, label_col: str, weight: str | None) -> Estimator[Any]:
    module, _, cls = spec.estimator_class.rpartition(".")
    estimator = getattr(importlib.import_module(module), cls)(featuresCol=FEATURES_COL, labelCol=label_col)
    if weight is not None:
        estimator.setWeightCol(weight)
    if estimator.hasParam("seed"):
        estimator.setSeed(spec.seed)
    for name, value in spec.params.items():
        estimator.set(estimator.getParam(name), value)
    return estimator


def _cross_validate(
    ctx: JobContext,
    spec: SparkMLSpec,
    pipeline: Any,
    estimator: Any,
    label_col: str,
    train_df: DataFrame,
) -> tuple[Any, list[dict[str, Any]], dict[str, Any]]:
    from pyspark.ml.tuning import CrossValidator, ParamGridBuilder

    names = list(spec.grid)
    builder = ParamGridBuilder()
    for name in names:
        builder = builder.addGrid(estimator.getParam(name), list(spec.grid[name]))
    param_maps = builder.build()
    assert spec.num_folds is not None
    total = spec.num_folds * len(param_maps)
    ctx.log(f"cross-validating {len(param_maps)} parameter combinations x {spec.num_folds} folds = {total} fits")
    evaluator = _ProgressEvaluator(_evaluator(spec, label_col, spec.metric), ctx, total)
    cv = CrossValidator(
        estimator=pipeline,
        estimatorParamMaps=param_maps,
        evaluator=evaluator,
        numFolds=spec.num_folds,
        seed=spec.seed,
        parallelism=1,
    )
    cv_model = cv.fit(train_df)
    combos = [{name: pm[estimator.getParam(name)] for name in names} for pm in param_maps]
    table = [
        {"params": combo, spec.metric: float(m), "std": float(s)}
        for combo, m, s in itertools.zip_longest(combos, cv_model.avgMetrics, cv_model.stdMetrics)
    ]
    scores = [float(m) for m in cv_model.avgMetrics]
    best = scores.index(max(scores) if evaluator.isLargerBetter() else min(scores))
    return cv_model.bestModel, table, {**spec.params, **combos[best]}


def _evaluator(spec: SparkMLSpec, label_col: str, metric: str) -> Any:
    from pyspark.ml.evaluation import MulticlassClassificationEvaluator, RegressionEvaluator

    cls: Any = RegressionEvaluator if spec.task == "regression" else MulticlassClassificationEvaluator
    return cls(labelCol=label_col, predictionCol="prediction", metricName=metric)


class _ProgressEvaluator:
    """Wraps the selection evaluator: CrossValidator calls it once per (fold, parameter map), which is exactly
    the progress we want to report, and the place to stop between fits when the job is cancelled."""

    def __new__(cls, inner: Any, ctx: JobContext, total: int) -> Any:
        from pyspark.ml.evaluation import Evaluator

        class ProgressEvaluator(Evaluator):
            def __init__(self) -> None:
                super().__init__()
                self.done = 0

            def _evaluate(self, dataset: DataFrame) -> float:
                ctx.check_cancelled()
                value = float(inner.evaluate(dataset))
                self.done += 1
                ctx.metrics([MetricPoint(f"cv_{inner.getMetricName()}", value, step=self.done)])
                ctx.progress(0.05 + 0.85 * self.done / total, f"cross-validation fit {self.done} of {total}")
                return value

            def isLargerBetter(self) -> bool:  # noqa: N802 (pyspark API)
                return bool(inner.isLargerBetter())

        return ProgressEvaluator()

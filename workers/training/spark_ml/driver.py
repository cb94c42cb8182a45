"""Spark ML training: assemble features, optionally cross-validate a grid, evaluate, save the best pipeline.

Everything here runs on the driver; Spark ML ships its own JVM code to the executors.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from workers import storage
from workers.context import JobContext, JobFailure, JobOutcome, MetricPoint, ModelArtifact
from workers.data.clean import clean, clean_holdout
from workers.data.one_hot import Encoded, one_hot
from workers.data.spec import read_dataframe
from workers.errors import SpecError
from workers.inference.examples import example_rows
from workers.inference.mlflow_format import write_mlflow_files
from workers.inference.signature import build_signature
from workers.spark_progress import StageProgress
from workers.training.labels import drop_or_refuse_unknown
from workers.training.spark_ml.spec import SparkMLPlan, SparkMLSpec
from workers.training.spark_ml.stages import EVALUATION_STAGES, expected_stages
from workers.training.validation import validation_metrics

if TYPE_CHECKING:
    from pyspark.ml import Estimator
    from pyspark.sql import DataFrame

READ_SHARE = 0.05
"""The share of the progress bar that reading and checking the data takes; the fits share the rest up to 0.9."""
FEATURES_COL = "features"
LABEL_INDEX_COL = "_label_index"
SPLIT_COL = "_split"


def train(ctx: JobContext, plan: SparkMLPlan) -> JobOutcome:
    from pyspark.sql import functions as F

    spec, ds = plan.spec, plan.train
    for warning in plan.warnings:
        ctx.warn(warning)
    ctx.progress(0.0, "reading data")
    both = " and the validation data" if plan.validation is not None else ""
    ctx.log(f"reading the training data{both}: counting and checking the rows (Spark jobs; the first on a new "
            "session take longest)")  # fmt: skip
    with StageProgress(ctx, low=0.0, high=READ_SHARE, label="reading data"):  # the bar moves with Spark's stages
        source = read_dataframe(ctx.spark, ds, malformed=True)
        if plan.validation is not None:
            train_df, rows, dropped = clean(ctx, source, ds)
            fit_on = train_df
            validation = read_dataframe(ctx.spark, plan.validation, malformed=True)
            val_df, val_rows, val_dropped = clean(ctx, validation, plan.validation)
            dropped += val_dropped
        else:
            fraction = ds.validation_fraction or spec.validation_fraction
            frame, rows, val_rows, dropped = clean_holdout(ctx, source, ds, fraction, SPLIT_COL)
            fit_on = frame  # every row: the categories do not follow the split
            train_df = frame.where(F.col(SPLIT_COL) == 0).drop(SPLIT_COL)
            val_df = frame.where(F.col(SPLIT_COL) == 1).drop(SPLIT_COL)
            ctx.log(f"no validation set given: {val_rows} of {rows + val_rows} rows held out ({fraction:.0%})")
        if rows == 0:
            raise JobFailure("EMPTY_DATASET", f"{ds.path} has no usable rows")
        encoded = one_hot(ctx, ds, (train_df, val_df), fit_on)
    ds, (train_df, val_df) = encoded.dataset, encoded.frames
    ctx.log(f"training on {rows} rows with {len(ds.features)} features, validating on {val_rows}")
    train_df = train_df.cache()
    try:
        return _fit(ctx, replace(plan, train=ds), train_df, val_df, {"train": rows, "validation": val_rows}, dropped,
                    given=encoded, labelled=fit_on)  # fmt: skip
    finally:
        train_df.unpersist()


def _fit(
    ctx: JobContext,
    plan: SparkMLPlan,
    train_df: DataFrame,
    val_df: DataFrame,
    rows: dict[str, int],
    dropped: int,
    *,
    given: Encoded,
    labelled: DataFrame,
) -> JobOutcome:
    """``labelled``: the training data's rows, held-out ones too, that string class labels are read from."""
    from pyspark.ml import Pipeline
    from pyspark.ml.feature import StandardScaler, StringIndexerModel, VectorAssembler

    spec, ds = plan.spec, plan.train
    assert ds.label is not None
    label_col, labels = ds.label, None
    stages: list[Any] = []
    if spec.task == "classification" and dict(train_df.dtypes)[ds.label] == "string":
        # The label mapping is applied to the data, not saved in the pipeline: the saved model must predict on
        # rows that have no label. The labels are stored with the version (params.class_labels).
        labels = _class_labels(labelled, ds.label)
        indexer = StringIndexerModel.from_labels(labels, ds.label, LABEL_INDEX_COL, handleInvalid="error")
        if plan.validation is not None:  # a held-out share's labels are classes: they were read from its rows too
            val_df = drop_or_refuse_unknown(ctx, val_df, ds.label, labels, where=plan.validation.path,
                                            bad_rows=plan.validation.bad_rows)  # fmt: skip
        train_df, val_df = indexer.transform(train_df), indexer.transform(val_df)
        label_col = LABEL_INDEX_COL
    if spec.task == "classification" and "binomial" in spec.searched("family", "auto")[1]:
        _check_binomial(spec, train_df, label_col, labels)
    raw = "_features_raw" if spec.standardize else FEATURES_COL
    stages.append(VectorAssembler(inputCols=list(ds.features), outputCol=raw, handleInvalid="error"))
    if spec.standardize:
        stages.append(StandardScaler(inputCol=raw, outputCol=FEATURES_COL, withStd=True, withMean=False))
    estimator = _estimator(spec, label_col, ds.weight)
    pipeline = Pipeline(stages=[*stages, estimator])

    cv_table: list[dict[str, Any]] = []
    best_params: dict[str, Any] = dict(spec.params)
    if spec.cross_validated:
        model, cv_table, best_params = _cross_validate(ctx, plan, pipeline, estimator, label_col, train_df)
    else:
        ctx.progress(0.1, "fitting")
        with StageProgress(ctx, low=0.1, high=0.9, label="fitting", expected_stages=expected_stages(spec)):
            model = pipeline.fit(train_df)
    ctx.check_cancelled()

    ctx.progress(0.92, "evaluating on the validation data")
    predictions = model.transform(val_df).cache()
    try:
        val_metrics = validation_metrics(spec.task, label_col, predictions)
    finally:
        predictions.unpersist()
    # The step of the last fit: the model fitted on all the training rows after the cross-validation's fits.
    final_fit = spec.cv_fits + 1
    ctx.metrics(MetricPoint(f"validation_{k}", v, step=final_fit) for k, v in val_metrics.items())

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
    if given.categories is not None:
        params["categorical"] = given.card()
    params["signature"] = build_signature(params, given.column_types(), "spark_ml")
    params["input_example"] = example_rows(ctx.spark, given.source)
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


def _class_labels(df: DataFrame, label: str) -> list[str]:
    """The distinct string labels of ``df`` in sorted order, as every family indexes them (docs/datasets.md; Spark's
    StringIndexer would order them by frequency, which changes with the data)."""
    from pyspark.sql import functions as F

    rows = df.select(label).where(F.col(label).isNotNull()).distinct().collect()
    return sorted(str(r[0]) for r in rows)


def _check_binomial(spec: SparkMLSpec, df: DataFrame, label_col: str, labels: list[str] | None) -> None:
    """A binomial logistic regression of more than 2 classes, which planning could not count: refused before Spark
    fails the fit with "Binomial family only supports 1 or 2 outcome classes"."""
    from pyspark.sql import functions as F

    if labels is not None:
        classes = len(labels)
    else:  # Spark counts integer labels 0..k-1 as the largest + 1
        top = df.agg(F.max(label_col)).first()
        classes = 0 if top is None or top[0] is None else int(top[0]) + 1
    try:
        spec.check_classes(classes)
    except SpecError as exc:
        raise JobFailure("INVALID_REQUEST", f"params.family: {exc.message}") from exc


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
    plan: SparkMLPlan,
    pipeline: Any,
    estimator: Any,
    label_col: str,
    train_df: DataFrame,
) -> tuple[Any, list[dict[str, Any]], dict[str, Any]]:
    """Spark ML's CrossValidator, one (fold, parameter map) fit at a time with a checkpoint after each: the same
    folds (``CrossValidator._kFold``, seeded), fits, metrics and best model as ``CrossValidator.fit`` with
    ``parallelism=1``, but a retry after a lost driver continues after the fits already done instead of
    starting again."""
    from pyspark.ml.tuning import CrossValidator, ParamGridBuilder

    spec = plan.spec
    names = list(spec.grid)
    builder = ParamGridBuilder()
    for name in names:
        builder = builder.addGrid(estimator.getParam(name), list(spec.grid[name]))
    param_maps = builder.build()
    assert spec.num_folds is not None
    folds, total = spec.num_folds, spec.cv_fits
    evaluator = _evaluator(spec, label_col, spec.metric)
    metrics = _resumed_metrics(ctx, plan, len(param_maps))
    done = sum(m is not None for row in metrics for m in row)
    resumed = f"; {done} done before, continuing from checkpoint {plan.resume.checkpoint_id}" if plan.resume else ""
    ctx.log(f"cross-validating {len(param_maps)} parameter combinations x {folds} folds = {total} fits{resumed}")
    combos = [{name: pm[estimator.getParam(name)] for name in names} for pm in param_maps]
    share = (0.9 - READ_SHARE) / total
    if not names and plan.resume is None:  # a retry's first attempt said so already
        ctx.warn(f"num_folds without a grid: cross-validates the one configuration ({total} fits) and trains it once "
                 "more on all rows")  # fmt: skip
    splits = CrossValidator(
        estimator=pipeline, estimatorParamMaps=param_maps, evaluator=evaluator, numFolds=folds, seed=spec.seed
    )._kFold(train_df)
    for i, (train_split, validation_split) in enumerate(splits):
        todo = [j for j, m in enumerate(metrics[i]) if m is None]
        if not todo:
            continue
        fold_train, fold_validation = train_split.cache(), validation_split.cache()
        try:
            for j in todo:
                ctx.check_cancelled()
                low = READ_SHARE + share * done
                # "cross-validation fit N of T" says that N fits are done (tests/e2e/test_driver_lost_kinds.py waits
                # for it): the message while the next one runs starts so too
                running = f"fit {done + 1} running (fold {i + 1} of {folds})"
                label = (
                    f"cross-validation fit {done} of {total} done, {running}"
                    if done
                    else f"cross-validating: {running}"
                )
                ctx.progress(low, label)
                fit_stages = expected_stages(spec, combos[j])
                expected = None if fit_stages is None else fit_stages + EVALUATION_STAGES
                with StageProgress(ctx, low=low, high=low + share, label=label, expected_stages=expected):
                    model = pipeline.fit(fold_train, param_maps[j])
                    value = float(evaluator.evaluate(model.transform(fold_validation, param_maps[j])))
                metrics[i][j] = value
                done += 1
                ctx.metrics([MetricPoint(f"cv_{spec.metric}", value, step=done)])
                shown = ", ".join(f"{name}={combos[j][name]}" for name in names) or "the one configuration"
                ctx.log(f"fit {done} of {total}: fold {i + 1} of {folds}, {shown}: {spec.metric} {value:.6g}")
                _save_cv_checkpoint(ctx, metrics, done)
                ctx.progress(READ_SHARE + share * done, f"cross-validation fit {done} of {total}")
        finally:
            fold_train.unpersist()
            fold_validation.unpersist()
    matrix = np.array(metrics, dtype=np.float64)
    means, stds = matrix.mean(axis=0), matrix.std(axis=0)
    best = int(np.argmax(means) if evaluator.isLargerBetter() else np.argmin(means))
    table = [
        {"params": combo, spec.metric: float(m), "std": float(s)}
        for combo, m, s in zip(combos, means, stds, strict=True)
    ]
    ctx.check_cancelled()
    label = "fitting the best parameters on all the training data"
    ctx.progress(0.9, label)
    ctx.log(f"best of the grid: {', '.join(f'{k}={v}' for k, v in combos[best].items()) or 'the one configuration'} "
            f"({spec.metric} {means[best]:.6g} over {folds} folds); {label}")  # fmt: skip
    with StageProgress(ctx, low=0.9, high=0.92, label=label, expected_stages=expected_stages(spec, combos[best])):
        model = pipeline.fit(train_df, param_maps[best])
    return model, table, {**spec.params, **combos[best]}


CV_FILE = "cv.json"


def _checkpoint_dir(ctx: JobContext) -> str:
    if ctx.store:
        return storage.join(ctx.store, "jobs", ctx.job_id, "checkpoints")
    return str(ctx.work_dir / "checkpoints")


def _save_cv_checkpoint(ctx: JobContext, metrics: list[list[float | None]], done: int) -> None:
    """The metrics of the fits done so far, complete or not at all, registered as the checkpoint for ``done``."""
    body = json.dumps({"fits": done, "metrics": metrics}).encode()
    uri = storage.publish_files(_checkpoint_dir(ctx), f"cv-{done}", {CV_FILE: body})
    ctx.checkpoint(done, done, uri, {"fits": done})


def _resumed_metrics(ctx: JobContext, plan: SparkMLPlan, maps: int) -> list[list[float | None]]:
    """[fold][parameter map] metrics: those of the checkpoint this attempt continues from, the rest None."""
    assert plan.spec.num_folds is not None
    metrics: list[list[float | None]] = [[None] * maps for _ in range(plan.spec.num_folds)]
    if plan.resume is None:
        return metrics
    saved = json.loads((storage.fetch_dir(plan.resume.uri) / CV_FILE).read_text())
    stored = saved["metrics"]
    if len(stored) != len(metrics) or any(len(row) != maps for row in stored):
        raise JobFailure("BAD_CHECKPOINT", f"checkpoint {plan.resume.checkpoint_id} holds a {len(stored)}-fold grid "
                         f"that is not this job's ({len(metrics)} folds x {maps} parameter maps)")  # fmt: skip
    return [[None if m is None else float(m) for m in row] for row in stored]


def _evaluator(spec: SparkMLSpec, label_col: str, metric: str) -> Any:
    from pyspark.ml.evaluation import MulticlassClassificationEvaluator, RegressionEvaluator

    cls: Any = RegressionEvaluator if spec.task == "regression" else MulticlassClassificationEvaluator
    return cls(labelCol=label_col, predictionCol="prediction", metricName=metric)

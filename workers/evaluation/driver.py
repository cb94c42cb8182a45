"""An evaluation job (``POST /evaluate``): every requested metric group in one pass over the data.

Each partition turns its rows into predictions and updates mergeable metric states (counts, confusion
matrices, ROC tallies, regression sums); the driver merges the partitions' states exactly (DL4J's
``doEvaluation``). For torch models the pass also counts bad rows, so the data is read once; Spark ML models
check bad rows in a pass of their own first (their pipeline refuses null features).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workers import storage
from workers.context import JobContext, JobFailure, JobOutcome
from workers.data.clean import bad_examples, clean, read_as_numbers
from workers.data.one_hot import expand
from workers.data.spec import read_dataframe
from workers.evaluation.remote import STATE_SCHEMA, model_states, sequence_states, spark_ml_states
from workers.inference.batch import check_model_files
from workers.inference.spec import EvaluationPlan, ModelRef
from workers.numbers import have, n_rows, were
from workers.spark_progress import StageProgress

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def _state_options(plan: EvaluationPlan) -> dict[str, Any]:
    model = plan.model
    return {
        "groups": list(plan.groups),
        "task": model.task,
        "num_classes": model.card.get("num_classes"),
        "label_columns": list(model.labels),
        "roc_steps": plan.roc_steps,
        "exact_auc": plan.exact_auc,
        "top_k": list(plan.top_k),
    }


def _bounded(df: DataFrame, eval_workers: int | None, ctx: JobContext) -> DataFrame:
    """At most ``eval_workers`` model copies per executor at once (DL4J's evalNumWorkers): fewer partitions."""
    if not eval_workers:
        return df
    from workers.cluster import executors

    listed = executors(ctx.spark)
    workers = [e for e in listed if e["id"] != "driver"] or listed
    limit = eval_workers * max(1, len(workers))
    return df.coalesce(limit) if df.rdd.getNumPartitions() > limit else df


def evaluate(ctx: JobContext, plan: EvaluationPlan) -> JobOutcome:
    model, ds = plan.model, plan.dataset
    check_model_files(model)  # on the driver: a version whose files are gone failed on the executors, a traceback
    options = _state_options(plan)
    ctx.progress(0.05, "evaluating")
    source = read_dataframe(ctx.spark, ds)
    dropped, parsed = 0, False
    with StageProgress(ctx, low=0.05, high=0.95, label="evaluating"):  # the bar moves with the tasks
        if ds.sequence is not None:
            from workers.inference.sequence_frame import sequence_frame
            from workers.inference.sequences import spec_of

            sequences, dropped = sequence_frame(ctx, ds, spec_of(ds.sequence, labelled=True), labelled=True)
            frame = _bounded(sequences, plan.eval_workers, ctx)
            states = sequence_states(model, ds.sequence, options, plan.batch_size)
            collected = frame.mapInArrow(states, STATE_SCHEMA).collect()
        elif model.framework in ("torch", "xgboost"):
            columns, parsed = read_as_numbers(source, ds, (*model.inputs, *model.labels))
            selected = source.select(*columns)
            if model.categories is not None:  # a null category makes its one-hot columns null: a bad row, counted
                selected = expand(model.categories, selected).select(*model.features, *model.labels)
            frame = _bounded(selected, plan.eval_workers, ctx)
            collected = frame.mapInArrow(model_states(model, options, plan.batch_size), STATE_SCHEMA).collect()
        elif model.framework == "spark_ml":
            frame, dropped = _spark_ml_predictions(ctx, model, source, ds)
            collected = frame.mapInArrow(spark_ml_states(model, options), STATE_SCHEMA).collect()
        else:
            raise JobFailure("UNSUPPORTED", f"evaluation of {model.framework} models is not available yet")
    from workers.evaluation.metrics import merge_states, results

    seen = sum(int(r["rows"]) for r in collected)
    unscored = sum(int(r["bad"]) for r in collected)  # rows the tasks found bad (spark_ml: after `dropped`)
    bad = unscored + dropped
    if bad and ds.bad_rows == "fail":
        # text classes are not 0..k-1: the labels the model does not know are counted by the tasks, not shown here
        reading = model.reading(ds, num_classes=None) if model.class_labels else model.reading(ds)
        shown = bad_examples(source, reading) if ds.sequence is None and model.framework != "spark_ml" else ""
        raise JobFailure(
            "BAD_ROWS",
            f"{bad} of {n_rows(seen)} of {ds.path} {have(bad)} {'a value that is not a number, ' if parsed else ''}a "
            "null, NaN or infinite feature or label, or a label the model does not know"
            + (f"; first ones: {shown}" if shown else "")
            + '; fix the data or set dataset.bad_rows to "skip"',
        )
    if bad and ds.sequence is None:  # bad sequences were reported as they were dropped
        ctx.warn(f"{n_rows(bad)} of {ds.path} {were(bad)} skipped as bad rows (bad_rows=skip)")
    merged = merge_states([r["states"] for r in collected]) if collected else {}
    result: dict[str, Any] = dict(results(merged)) if merged else {}
    result["rows"] = seen if ds.sequence is not None else seen - unscored
    result["bad_rows"] = bad
    if model.class_labels and "classification" in result:  # what each per-class position and matrix row is
        result["classification"]["class_labels"] = [str(label) for label in model.class_labels]
    ctx.progress(1.0, "done")
    return JobOutcome(result=result)


def _spark_ml_predictions(ctx: JobContext, model: ModelRef, source: DataFrame, ds: Any) -> tuple[DataFrame, int]:

    from pyspark.ml import PipelineModel
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    categories = model.categories
    checked = model.reading(ds, label=model.labels[0], task=model.task, num_classes=None)
    cleaned, _rows, dropped = clean(ctx, source, checked)
    if categories is not None:
        cleaned = expand(categories, cleaned)
    predicted = PipelineModel.load(str(storage.fetch_dir(model.uri))).transform(cleaned)
    if model.task == "classification":
        probability = vector_to_array(F.col("probability")).alias("_probability")
        columns: list[Any] = [*model.labels, probability, "prediction"]
        return predicted.select(*columns), dropped
    return predicted.select(*model.labels, "prediction"), dropped

"""XGBoost training: ``xgboost.spark`` estimators with ``num_workers`` barrier tasks, on CPU or CUDA executors;
a one-worker CPU job trains in one Spark task with xgboost's own API (remote.py), which is much faster.

Runs on the driver; xgboost.spark ships its own training function to the executors. The fitted booster is
saved in xgboost's JSON format (loadable with plain xgboost) next to a card with the columns, the task and
the class labels; evaluation and prediction load that pair (workers/inference/xgboost_model.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from workers import storage
from workers.cluster import SlotWatch, slots_watched
from workers.context import JobContext, JobFailure, JobOutcome, MetricPoint, ModelArtifact
from workers.data.clean import clean, clean_holdout
from workers.data.spec import read_dataframe
from workers.environment.driver import check_executors
from workers.inference.examples import example_rows
from workers.inference.mlflow_format import write_mlflow_files
from workers.inference.signature import build_signature
from workers.inference.xgboost_model import CARD_FILE, MODEL_FILE
from workers.training.labels import drop_or_refuse_unknown
from workers.training.validation import validation_metrics
from workers.training.xgboost.checkpoints import CheckpointTarget, RoundCheckpoints, encode, resumed_rounds
from workers.training.xgboost.remote import ReportTarget, accuracy_key
from workers.training.xgboost.rounds import RoundReports
from workers.training.xgboost.spec import LABEL_DOMAINS, XGBoostPlan, label_problem

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

LABEL_INDEX_COL = "_label_index"
VALIDATION_COL = "_is_validation"
SPLIT_COL = "_split"
FEATURES_COL = "_features"
IMPORTANCE_TYPES = ("gain", "weight", "cover")


def train(ctx: JobContext, plan: XGBoostPlan) -> JobOutcome:
    with slots_watched(ctx, plan.num_workers) as slots:  # says when a stage waits for other jobs' tasks, and why
        return _train(ctx, plan, slots)


def _train(ctx: JobContext, plan: XGBoostPlan, slots: SlotWatch) -> JobOutcome:
    spec, ds = plan.spec, plan.train
    for warning in plan.warnings:
        ctx.warn(warning)
    slots.phase("checking the executors")
    check_executors(ctx, ("xgboost", "numpy", "pyarrow"), plan.num_workers)
    slots.phase("reading data")
    started = time.perf_counter()
    # String classes are checked by their mapping (below), not as numbers 0..k-1.
    checked = replace(ds, num_classes=None) if plan.class_labels else ds
    session = _training_session(ctx)
    source = read_dataframe(session, ds, malformed=True)
    if plan.validation is not None:
        train_df, rows, dropped = clean(ctx, source, checked)
        fit_on = train_df
        val_checked = replace(plan.validation, num_classes=None) if plan.class_labels else plan.validation
        validation = read_dataframe(session, plan.validation, malformed=True)
        val_df, val_rows, val_dropped = clean(ctx, validation, val_checked)
        dropped += val_dropped
    else:
        fraction = ds.validation_fraction or spec.validation_fraction
        frame, rows, val_rows, dropped = clean_holdout(ctx, source, checked, fraction, SPLIT_COL)
        fit_on = frame  # every row: the categories do not follow the split
        train_df = frame.where(frame[SPLIT_COL] == 0).drop(SPLIT_COL)
        val_df = frame.where(frame[SPLIT_COL] == 1).drop(SPLIT_COL)
        ctx.log(f"no validation set given: {val_rows} of {rows + val_rows} rows held out ({fraction:.0%})")
    if rows == 0:
        raise JobFailure("EMPTY_DATASET", f"{ds.path} has no usable rows")
    label_col = ds.label
    assert label_col is not None
    if spec.objective in LABEL_DOMAINS:  # xgboost would fail the fit on the first label out of range
        from pyspark.sql import functions as F

        bounds = train_df.agg(F.min(label_col), F.max(label_col)).first()
        problem = label_problem(spec.objective, float(bounds[0]), float(bounds[1])) if bounds and rows else None
        if problem is not None:
            raise JobFailure("INVALID_REQUEST", problem)
    if plan.class_labels:
        if plan.validation is not None:  # held-out rows come from the file the classes were read from
            val_df = drop_or_refuse_unknown(ctx, val_df, label_col, plan.class_labels, where=plan.validation.path,
                                            bad_rows=plan.validation.bad_rows)  # fmt: skip
        train_df, val_df = (
            _index_labels(train_df, label_col, plan.class_labels),
            _index_labels(val_df, label_col, plan.class_labels),
        )
        label_col = LABEL_INDEX_COL
    encoded = encode(ctx, plan, (train_df, val_df), fit_on)
    if encoded.categories is not None:
        ds, (train_df, val_df) = encoded.dataset, encoded.frames
        plan = replace(plan, train=ds, validation=replace(plan.validation, features=ds.features, categorical=())
                       if plan.validation is not None else None)  # fmt: skip
    workers = f"{plan.num_workers} worker" + ("s" if plan.num_workers != 1 else "")
    ctx.log(
        f"xgboost {spec.objective}: {spec.num_round} rounds on {workers} ({plan.device}"
        f"{f', {plan.threads} thread{_s(plan.threads)} each' if plan.threads else ''}), "
        f"{rows} training and {val_rows} validation rows, {len(ds.features)} features; "
        f"data read and checked in {time.perf_counter() - started:.1f} s"
    )
    slots.phase("training", said_again=False)  # its rounds say how far it is
    fit_started = time.perf_counter()
    done = resumed_rounds(ctx, plan)
    if ds.weight and ds.weight not in val_df.columns:  # weights concern training; validation rows count once
        val_df = val_df.withColumn(ds.weight, _lit(1.0).cast(dict(train_df.dtypes)[ds.weight]))
    columnar = _columnar_fits(rows + val_rows, val_rows, plan.num_workers)
    if not columnar:
        train_df, val_df = _with_features(train_df, ds.features), _with_features(val_df, ds.features)
    data = train_df.withColumn(VALIDATION_COL, _lit(False)).unionByName(val_df.withColumn(VALIDATION_COL, _lit(True)))
    single = plan.num_workers == 1 and plan.device == "cpu"
    card = _card(plan)  # what the model (and each checkpoint: a job that continues it) was trained on
    if encoded.categories is not None:
        card["categorical"] = encoded.card()
    with (
        RoundCheckpoints(ctx, plan, card) as checkpoints,
        RoundReports(ctx, _driver_host(ctx), num_round=spec.num_round, resumed=done, low=0.05, high=0.85) as reports,
    ):
        if single:
            booster, histories, val_metrics = _fit_single(plan, data, label_col, checkpoints.target, reports.target)
        else:
            booster, histories, val_metrics = _fit_distributed(plan, data, val_df, label_col, columnar,
                                                               checkpoints.target, reports.target, slots)  # fmt: skip
    ctx.check_cancelled()
    ctx.log(f"trained in {time.perf_counter() - fit_started:.1f} s ({'one task' if single else 'xgboost.spark'})")

    best = _best_iteration(booster)
    rounds = booster.num_boosted_rounds()
    if best is not None and best + 1 < rounds:
        ctx.log(f"early stopping: best round {best + 1} of {rounds}; keeping {best + 1} rounds")
        booster = booster[: best + 1]
    importance = _importance(booster, ds.features)
    per_round = _round_metrics(histories, offset=done)
    ctx.metrics(reports.missing(per_round))  # the rounds whose report did not arrive while the fit ran
    kept = booster.num_boosted_rounds()
    # xgboost's own value for that round stays the one shown (an earlier attempt's, for a round before `done`)
    recorded = {(p.key, p.step if kept > done else kept) for p in per_round}
    final = [MetricPoint(f"validation_{k}", v, step=kept) for k, v in val_metrics.items()]
    ctx.metrics(p for p in reports.missing(final) if (p.key, p.step) not in recorded)

    ctx.progress(0.95, "saving the model")
    card["signature"] = build_signature(card, encoded.column_types(), "xgboost")
    card["input_example"] = example_rows(session, encoded.source)
    local = ctx.work_dir / "model"
    local.mkdir(parents=True, exist_ok=True)
    booster.feature_names = list(ds.features)  # plain xgboost users then see names (and DMatrix checks them)
    booster.save_model(str(local / MODEL_FILE))
    (local / CARD_FILE).write_text(json.dumps(card, indent=1))
    write_mlflow_files(local, "xgboost", card)
    uri = local.as_uri()
    if ctx.store:
        uri = storage.publish_dir(local, storage.join(ctx.store, "jobs", ctx.job_id, "model"))
    result: dict[str, Any] = {
        "task": spec.task,
        "objective": spec.objective,
        "device": plan.device,
        "num_workers": plan.num_workers,
        "rows": {"train": rows, "validation": val_rows},
        "rounds": {"requested": spec.num_round, "trained": rounds, "kept": kept, "resumed_from": done},
        "best_iteration": best,
        "validation": val_metrics,
        "feature_importance": importance,
        "history": _kept_history(histories, kept, done, plan),
    }
    if plan.started_from is not None:  # training.resume_from
        origin = plan.started_from
        result["started_from"] = {"checkpoint_id": origin.checkpoint_id, "job_id": origin.job_id,
                                  "rounds": origin.rounds}  # fmt: skip
    if dropped or ds.bad_rows == "skip":
        result["bad_rows"] = dropped
    ctx.progress(1.0, "done")
    return JobOutcome(
        result=result,
        model=ModelArtifact(framework="xgboost", uri=uri, metrics=val_metrics, params=card),
    )


def _s(count: int) -> str:
    return "" if count == 1 else "s"


def _lit(value: Any) -> Any:
    from pyspark.sql import functions as F

    return F.lit(value)


def _with_features(df: DataFrame, features: tuple[str, ...]) -> DataFrame:
    from pyspark.sql import functions as F

    return df.withColumn(FEATURES_COL, F.array(*[F.col(c).cast("float") for c in features]))


def _index_labels(df: DataFrame, label: str, names: tuple[str, ...]) -> DataFrame:
    """String classes -> their index in the (sorted) names. The classes come from the training data, and rows of
    the validation data with another label were dropped or refused before (workers/training/labels.py)."""
    from pyspark.sql import functions as F

    index = F.array_position(F.array(*[F.lit(n) for n in names]), F.col(label).cast("string")) - 1
    return df.withColumn(LABEL_INDEX_COL, index.cast("double"))


BATCH_ROWS = 10_000_000
"""Arrow batch rows while xgboost.spark fits: a partition up to this size is one pandas batch."""
BATCH_KEY = "spark.sql.execution.arrow.maxRecordsPerBatch"


def _training_session(ctx: JobContext) -> SparkSession:
    """A session of the driver's SparkContext for this job, whose Arrow batch size the fit changes
    (:func:`_whole_partitions`) without touching other jobs'."""
    return ctx.spark.newSession()


@contextmanager
def _whole_partitions(session: SparkSession) -> Iterator[None]:
    """Arrow batches of whole partitions while xgboost.spark fits: with feature columns (its fast input) it fails on a
    pandas batch with no training or no validation rows (KeyError 'values' in xgboost/spark/data.py append_m), and a
    partition after the shuffle has both. Its ``mapInPandas`` fills a batch row by row, but a scalar pandas UDF (the
    validation's ``model.transform``) allocates a whole batch up front, ~1 GB at 10,000,000 rows: executors with the
    default 1g heap died (exit code 52) after every fit. So nothing else runs with it."""
    before = session.conf.get(BATCH_KEY, None)
    session.conf.set(BATCH_KEY, str(BATCH_ROWS))
    try:
        yield
    finally:
        if before is None:
            session.conf.unset(BATCH_KEY)
        else:
            session.conf.set(BATCH_KEY, before)


def _columnar_fits(total_rows: int, validation_rows: int, workers: int) -> bool:
    """Feature columns when every partition is one batch holding validation rows; else one array column."""
    return total_rows / workers <= BATCH_ROWS / 2 and validation_rows >= 100 * workers


def _driver_host(ctx: JobContext) -> str:
    """Where the executors reach this process (rank 0's round reports)."""
    return ctx.spark.sparkContext.getConf().get("spark.driver.host", "127.0.0.1") or "127.0.0.1"


def _estimator(
    plan: XGBoostPlan, label_col: str, columnar: bool, checkpoints: CheckpointTarget, reports: ReportTarget
) -> Any:
    from xgboost.spark import SparkXGBClassifier, SparkXGBRegressor

    from workers.training.xgboost.remote import (
        checkpoint_callback,
        continued_early_stopping,
        initial_history,
        round_callback,
        starting_booster,
    )

    spec, ds = plan.spec, plan.train
    resume_uri = plan.resume.uri if plan.resume else None
    start = starting_booster(resume_uri, plan.resume.keep_best if plan.resume else True)
    kwargs: dict[str, Any] = {
        "features_col": list(ds.features) if columnar else FEATURES_COL,
        "label_col": label_col,
        "num_workers": plan.num_workers,
        "device": plan.device,
        "validation_indicator_col": VALIDATION_COL,
        "n_estimators": spec.num_round - (plan.resume.rounds if plan.resume else 0),
        "random_state": spec.seed,
        # A union of training and validation rows may have exactly num_workers partitions, which xgboost.spark
        # then trains on as they are, and a barrier stage refuses a union (SPARK-24820): always shuffle.
        "force_repartition": True,
        "verbose": False,  # no per-round lines on the executors' stderr: they are stored as job metrics
        **spec.params,
    }
    if ds.weight:
        kwargs["weight_col"] = ds.weight
    if start is not None:  # without names: a one-worker fit's have them, xgboost.spark's array column has none
        start.feature_names, start.feature_types = None, None
        kwargs["xgb_model"] = start
    # early stopping continued from a checkpoint's best round: its two callbacks come first and last
    stopping = () if spec.early_stopping_rounds is None else continued_early_stopping(spec.early_stopping_rounds)
    kwargs["callbacks"] = [*stopping[:1], round_callback(reports)]
    if checkpoints is not None:
        kwargs["callbacks"].append(checkpoint_callback(*checkpoints, earlier=initial_history(resume_uri)))
    kwargs["callbacks"].extend(stopping[1:])
    metrics = spec.fit_eval_metrics()
    if metrics:
        kwargs["eval_metric"] = list(metrics) if len(metrics) > 1 else metrics[0]
    cls: Any = SparkXGBRegressor if spec.task == "regression" else SparkXGBClassifier
    if spec.task == "regression":
        kwargs["objective"] = spec.objective
    if plan.threads is not None:
        cls = _threaded(cls, plan.threads)
    return cls(**kwargs)


def _threaded(cls: Any, threads: int) -> Any:
    """The estimator with ``threads`` xgboost threads per worker. xgboost.spark ties them to spark.task.cpus, which
    a long-lived driver cannot change per job; on one machine one worker with every core beats several
    single-threaded workers that synchronise each tree level over sockets (bench.xgboost)."""

    class Threaded(cls):
        def _get_xgb_parameters(self, dataset: Any) -> Any:
            booster, train_kwargs, dmatrix = super()._get_xgb_parameters(dataset)
            booster["nthread"] = dmatrix["nthread"] = threads
            return booster, train_kwargs, dmatrix

    Threaded.__name__ = f"Threaded{cls.__name__}"
    return Threaded


def _best_iteration(booster: Any) -> int | None:
    value = booster.attr("best_iteration")
    return int(value) if value is not None else None


def _fit_distributed(
    plan: XGBoostPlan,
    data: DataFrame,
    val_df: DataFrame,
    label_col: str,
    columnar: bool,
    checkpoints: CheckpointTarget,
    reports: ReportTarget,
    slots: SlotWatch,
) -> tuple[Any, dict[str, list[float]], dict[str, float]]:
    """xgboost.spark: ``num_workers`` barrier tasks (CUDA ones included)."""
    with _whole_partitions(data.sparkSession):
        model = _estimator(plan, label_col, columnar, checkpoints, reports).fit(data)
    slots.phase("validating", 0.9)  # after the rounds (0.05 to 0.85)
    features = list(plan.train.features) if columnar else [FEATURES_COL]
    predictions = model.transform(val_df.select(*features, label_col))
    return model.get_booster(), _histories(model), validation_metrics(plan.spec.task, label_col, predictions)


def _fit_single(
    plan: XGBoostPlan, data: DataFrame, label_col: str, checkpoints: CheckpointTarget, reports: ReportTarget
) -> tuple[Any, dict[str, list[float]], dict[str, float]]:
    """One worker: every row to one task, trained with xgboost's own API (workers/training/xgboost/remote.py)."""
    import xgboost

    from workers.training.xgboost.remote import TRAIN_SCHEMA, single_worker

    spec, ds = plan.spec, plan.train
    params: dict[str, Any] = {**spec.params, "objective": spec.objective, "seed": spec.seed}
    if spec.objective == "multi:softprob":
        params["num_class"] = plan.train.num_classes
    if spec.fit_eval_metrics():
        params["eval_metric"] = list(spec.fit_eval_metrics())
    threads = plan.threads or 1
    resume = plan.resume
    rounds = spec.num_round - (resume.rounds if resume else 0)
    train = single_worker(list(ds.features), label_col, ds.weight, VALIDATION_COL, spec.task, params, rounds,
                          spec.early_stopping_rounds, threads, checkpoints, resume.uri if resume else None,
                          reports, keep_best=resume.keep_best if resume else True)  # fmt: skip
    columns = [*ds.features, label_col, *([ds.weight] if ds.weight else []), VALIDATION_COL]
    rows = data.select(*columns).coalesce(1).mapInArrow(train, TRAIN_SCHEMA).collect()
    if not rows:
        raise JobFailure("EMPTY_DATASET", "no rows reached the training task")
    booster = xgboost.Booster(model_file=bytearray(rows[0]["model"]))
    history = json.loads(rows[0]["history"])
    histories = {f"validation_{metric}": [float(v) for v in values]
                 for metric, values in history.get("validation", {}).items()}  # fmt: skip
    return booster, histories, json.loads(rows[0]["validation"])


def _histories(model: Any) -> dict[str, list[float]]:
    """Per-round metrics xgboost recorded: ``train_<metric>`` and ``validation_<metric>``."""
    summary = getattr(model, "training_summary", None)
    if summary is None:
        return {}
    out: dict[str, list[float]] = {}
    for prefix, history in (("train", summary.train_objective_history),
                            ("validation", summary.validation_objective_history)):  # fmt: skip
        for metric, values in (history or {}).items():
            out[f"{prefix}_{metric}"] = [float(v) for v in values]
    return out


def _kept_history(histories: dict[str, list[float]], kept: int, done: int, plan: XGBoostPlan) -> dict[str, float]:
    """Each metric at the kept round (after early stopping, not the last one trained). ``histories`` hold the rounds
    after the ``done`` ones of the checkpoint the fit continued from; a kept round among those is read from the
    checkpoint's history (left out when it has none)."""
    if kept > done:
        return {k: v[kept - 1 - done] for k, v in histories.items() if len(v) > kept - 1 - done}
    from workers.training.xgboost.remote import EVAL_PREFIXES, initial_history

    earlier = initial_history(plan.resume.uri if plan.resume else None)
    out = {}
    for name, by_metric in earlier.items():
        for metric, values in by_metric.items() if name in EVAL_PREFIXES else ():
            if f"{EVAL_PREFIXES[name]}_{metric}" in histories and len(values) >= kept:
                out[f"{EVAL_PREFIXES[name]}_{metric}"] = float(values[kept - 1])
    return out


def _round_metrics(histories: dict[str, list[float]], offset: int = 0) -> list[MetricPoint]:
    """Every round of xgboost's history, with the accuracy of each round's classification error, as the round
    reports have them (remote.py ``round_metrics``)."""
    points = []
    for key, values in histories.items():
        accuracy = accuracy_key(key)
        for round_, value in enumerate(values):
            points.append(MetricPoint(key, value, step=offset + round_ + 1))
            if accuracy is not None:
                points.append(MetricPoint(accuracy, 1.0 - value, step=offset + round_ + 1))
    return points


def _importance(booster: Any, features: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """Per feature, for each importance type, normalised to sum to 1 (features never split on are 0)."""
    out: dict[str, dict[str, float]] = {}
    for kind in IMPORTANCE_TYPES:
        scores = booster.get_score(importance_type=kind)
        by_name = {_feature_name(key, features): float(value) for key, value in scores.items()}
        total = sum(by_name.values()) or 1.0
        ranked = sorted(features, key=lambda f: -by_name.get(f, 0.0))
        out[kind] = {name: by_name.get(name, 0.0) / total for name in ranked}
    return out


def _feature_name(key: str, features: tuple[str, ...]) -> str:
    if key in features:
        return key
    if key.startswith("f") and key[1:].isdigit() and int(key[1:]) < len(features):
        return features[int(key[1:])]
    return key


def _card(plan: XGBoostPlan) -> dict[str, Any]:
    """What feeding the model needs (stored with the version as its params, and next to the booster)."""
    ds, spec = plan.train, plan.spec
    num_classes = len(plan.class_labels) if plan.class_labels else ds.num_classes
    return {
        "task": spec.task,
        "features": list(ds.features),
        "label": ds.label,
        "labels": [ds.label],
        "num_classes": num_classes if spec.task == "classification" else None,
        "class_labels": list(plan.class_labels) if plan.class_labels else None,
        "objective": spec.objective,
        "array_column": False,
        "spec": spec.to_dict(),
    }

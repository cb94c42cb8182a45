"""A torch training job on the driver: prepare the data, run one barrier stage for all epochs, collect.

The training and validation rows travel together (a ``_split`` column) into ``num_workers`` equal partitions,
each sorted by a stable row id, and every barrier task runs :func:`workers.training.torch.remote
.barrier_partition` on its partition for all epochs. Workers stream step metrics, epoch results and
checkpoints to a :class:`~workers.training.torch.monitor.Monitor` on the driver while the stage runs.
"""

from __future__ import annotations

import hashlib
import json
import math
import socket
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workers import storage
from workers.context import JobCancelled, JobContext, JobFailure, JobOutcome, ModelArtifact
from workers.data.clean import clean
from workers.data.normalize import Normalizer
from workers.data.normalize import fit as fit_normalizer
from workers.data.spec import ResolvedDataset, read_dataframe
from workers.environment.driver import check_executors
from workers.training.torch.config import DataLayout, TorchPlan, TrainerConfig
from workers.training.torch.monitor import Monitor

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

SPLIT, ROW = "_split", "_row"
RESULT_SCHEMA = "rank int, result string"


def shipped_function(cfg: dict[str, Any]) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The function Spark ships to the barrier tasks: it closes over the plain config dict only and imports the
    executor-side module inside (DESIGN.md §2)."""

    def train_partition(batches: Iterator[Any]) -> Iterator[Any]:
        from workers.training.torch.remote import barrier_partition

        return barrier_partition(batches, cfg)

    return train_partition


def _index_labels(df: DataFrame, plan: TorchPlan) -> DataFrame:
    """String class labels -> their index in ``plan.class_labels``; an unknown label becomes -1, a bad row."""
    from pyspark.sql import functions as F

    if plan.class_labels is None or plan.train.label is None:
        return df
    labels = F.array(*[F.lit(v) for v in plan.class_labels])
    return df.withColumn(plan.train.label, (F.array_position(labels, F.col(plan.train.label)) - 1).cast("int"))


def _sequences(ctx: JobContext, ds: ResolvedDataset, num_classes: int | None) -> tuple[DataFrame, int, int]:
    """Sequence rows -> one row per sequence (``_x``, ``_y``, ``_len``), bad sequences failed or skipped."""
    from workers.data.sequences import SequenceSpec, check_sequences, to_sequence_frame

    assert ds.sequence is not None
    spec = SequenceSpec.from_dict({**ds.sequence, "num_classes": num_classes})
    labels = read_dataframe(ctx.spark, replace(ds, path=ds.labels_path)) if ds.labels_path else None
    frame = to_sequence_frame(read_dataframe(ctx.spark, ds), spec, labels)
    good, report = check_sequences(frame, spec, bad_rows=ds.bad_rows, source=ds.path)
    if report.bad:
        ctx.warn(report.describe())
    return good, report.usable, report.bad


def _prepare_sequences(ctx: JobContext, plan: TorchPlan) -> tuple[DataFrame, dict[str, int], None]:
    from pyspark.sql import functions as F

    num_classes = plan.train.num_classes
    train, rows, dropped = _sequences(ctx, plan.train, num_classes)
    if plan.validation is not None:
        val, val_rows, val_dropped = _sequences(ctx, plan.validation, num_classes)
        frame = train.withColumn(SPLIT, F.lit(0)).unionByName(val.withColumn(SPLIT, F.lit(1)))
    else:
        fraction = plan.train.validation_fraction or plan.validation_fraction
        frame = train.withColumn(SPLIT, (F.rand(plan.train.split_seed) < fraction).cast("int"))
        counts = {int(r[SPLIT]): int(r["count"]) for r in frame.groupBy(SPLIT).count().collect()}
        rows, val_rows, val_dropped = counts.get(0, 0), counts.get(1, 0), 0
    _check_rows(plan, rows)
    frame = (
        frame.withColumn(ROW, F.monotonically_increasing_id()).repartition(plan.num_workers).sortWithinPartitions(ROW)
    )
    return frame, {"train": rows, "validation": val_rows, "bad_rows": dropped + val_dropped}, None


def _check_rows(plan: TorchPlan, rows: int) -> None:
    needed = plan.num_workers * plan.batch_size
    if rows < needed:
        raise JobFailure(
            "EMPTY_PARTITION",
            f"{rows} training rows cannot give {plan.num_workers} workers a batch of {plan.batch_size} each "
            f"(needs {needed}); use fewer workers, a smaller batch_size_per_worker or more data",
        )


def _prepare(ctx: JobContext, plan: TorchPlan) -> tuple[DataFrame, dict[str, int], Normalizer | None]:
    from pyspark.sql import functions as F

    if plan.train.sequence is not None:
        return _prepare_sequences(ctx, plan)
    length = math.prod(plan.input_shape) if plan.array_column else None
    train_raw = _index_labels(read_dataframe(ctx.spark, plan.train), plan)
    if plan.validation is not None:
        train, rows, dropped = clean(ctx, train_raw, plan.train, array_length=length)
        val_raw = _index_labels(read_dataframe(ctx.spark, plan.validation), plan)
        val, val_rows, val_dropped = clean(ctx, val_raw, plan.validation, array_length=length)
        frame = train.withColumn(SPLIT, F.lit(0)).unionByName(val.withColumn(SPLIT, F.lit(1)), allowMissingColumns=True)
    else:
        fraction = plan.train.validation_fraction or plan.validation_fraction
        marked = train_raw.withColumn(SPLIT, (F.rand(plan.train.split_seed) < fraction).cast("int"))
        frame, total, dropped = clean(ctx, marked, plan.train, array_length=length, extra_columns=(SPLIT,))
        val_dropped = 0
        counts = {int(r[SPLIT]): int(r["count"]) for r in frame.groupBy(SPLIT).count().collect()}
        rows, val_rows = counts.get(0, 0), counts.get(1, 0)
        held = f"{val_rows} of {total} rows held out ({fraction:.0%}, seed {plan.train.split_seed})"
        ctx.log(f"no validation set given: {held}")
    _check_rows(plan, rows)
    normalizer = None
    if plan.train.normalize is not None:
        normalizer = fit_normalizer(
            frame.where(F.col(SPLIT) == 0), plan.train.features, plan.train.normalize, array_column=plan.array_column
        )
        ctx.log(f"{plan.train.normalize} normalizer fitted on {normalizer.count} training rows")
    frame = (
        frame.withColumn(ROW, F.monotonically_increasing_id()).repartition(plan.num_workers).sortWithinPartitions(ROW)
    )
    return frame, {"train": rows, "validation": val_rows, "bad_rows": dropped + val_dropped}, normalizer


def _monitor_host(ctx: JobContext) -> str:
    host = ctx.spark.sparkContext.getConf().get("spark.driver.host", "127.0.0.1") or "127.0.0.1"
    try:
        return socket.gethostbyname(host)
    except OSError:
        return "127.0.0.1"


def model_card(plan: TorchPlan, normalizer: Normalizer | None) -> dict[str, Any]:
    """Everything besides the weights that using the model needs; stored in spec.json and the version's params."""
    return {
        "input_shape": list(plan.input_shape),
        "features": list(plan.train.features),
        "array_column": plan.array_column,
        "labels": list(plan.train.label_columns),
        "task": plan.train.task,
        "num_classes": plan.train.num_classes,
        "class_labels": list(plan.class_labels) if plan.class_labels else None,
        "normalizer": normalizer.to_dict() if normalizer else None,
        # How the rows form sequences (a SequenceSpec as a dict): evaluation and prediction read data the same way.
        "sequence": {**plan.train.sequence, "num_classes": plan.train.num_classes} if plan.train.sequence else None,
    }


def _config(ctx: JobContext, plan: TorchPlan, normalizer: Normalizer | None) -> TrainerConfig:
    threads = int(ctx.spark.sparkContext.getConf().get("spark.task.cpus", "1"))
    return TrainerConfig(
        job_id=ctx.job_id,
        network=plan.network,
        optimizer=plan.optimizer,
        mode=plan.mode,
        sharing=plan.sharing,
        averaging_frequency=plan.averaging_frequency,
        epochs=plan.epochs,
        batch_size=plan.batch_size,
        num_workers=plan.num_workers,
        seed=plan.seed,
        device=plan.device,
        data=DataLayout(
            features=plan.train.features,
            array_column=plan.array_column,
            labels=plan.train.label_columns,
            task=plan.train.task or "regression",
            num_classes=plan.train.num_classes,
            input_shape=plan.input_shape,
            split_column=SPLIT,
            order_column=ROW,
            weight=plan.train.weight,
            normalizer=normalizer.to_dict() if normalizer else None,
            sequence={**plan.train.sequence, "num_classes": plan.train.num_classes} if plan.train.sequence else None,
        ),
        checkpoint_dir=str(ctx.work_dir / "checkpoints"),
        model_dir=str(ctx.work_dir / "model"),
        resume_dir=plan.resume.path if plan.resume else None,
        start_epoch=plan.resume.epoch if plan.resume else 0,
        threads=threads,
        run_id=uuid.uuid4().hex[:12],
        model_card=model_card(plan, normalizer),
        store=ctx.store,
    )


EXPORT_VERSION = 1


def _files(path: str) -> list[tuple[str, int, int]] | None:
    """(name, size, mtime) of the files behind a local dataset path; None for remote URIs."""
    if "://" in path and not path.startswith("file:"):
        return None
    root = Path(path.removeprefix("file://"))
    found = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    return [(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in found]


def export_key(plan: TorchPlan) -> str | None:
    """What the exported tensors depend on: the data files, how they are read and split, the workers."""
    fingerprint: list[Any] = [EXPORT_VERSION]
    for ds in (plan.train, plan.validation):
        if ds is None:
            fingerprint.append(None)
            continue
        files = _files(ds.path)
        if files is None:
            return None
        fingerprint.append([ds.to_dict(), files])
    fingerprint.append([plan.num_workers, list(plan.input_shape), plan.array_column, plan.class_labels,
                        plan.validation_fraction])  # fmt: skip
    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True, default=str).encode()).hexdigest()[:24]


def _data(ctx: JobContext, plan: TorchPlan) -> tuple[DataFrame, dict[str, int], Normalizer | None, Path | None, Any]:
    """The barrier stage's input: prepared rows (direct, or export-and-write), or placeholders when an export of
    the same data already exists (read)."""
    key = export_key(plan) if plan.data_path == "export" and plan.export_root else None
    export_dir = Path(plan.export_root or "") / key if key else None
    manifest = export_dir / "manifest.json" if export_dir else None
    if manifest is not None and manifest.exists():
        saved = json.loads(manifest.read_text())
        ctx.log(f"training from exported tensors {key} (made by job {saved['job_id']})")
        normalizer = Normalizer.from_dict(saved["normalizer"]) if saved["normalizer"] else None
        placeholders = ctx.spark.range(plan.num_workers).repartition(plan.num_workers)
        return placeholders, saved["rows"], normalizer, export_dir, "read"
    frame, rows, normalizer = _prepare(ctx, plan)
    return frame, rows, normalizer, export_dir, "write" if export_dir else None


def train(ctx: JobContext, plan: TorchPlan) -> JobOutcome:
    ctx.progress(0.0, "checking the executors")
    check_executors(ctx, ("torch", "numpy", "pyarrow"), plan.num_workers, cuda=plan.device != "cpu")
    ctx.progress(0.0, "preparing the data")
    frame, rows, normalizer, export_dir, export_mode = _data(ctx, plan)
    cfg = replace(
        _config(ctx, plan, normalizer),
        export_dir=str(export_dir) if export_dir else None,
        export_mode=export_mode,
    )
    if plan.resume:
        ctx.log(
            f"resuming from checkpoint {plan.resume.checkpoint_id} (epoch {plan.resume.epoch} of job "
            f"{plan.resume.job_id})"
        )
    ctx.log(
        f"{plan.mode} on {plan.num_workers} workers, {plan.epochs} epochs, batch {plan.batch_size} per worker, "
        f"{rows['train']} training and {rows['validation']} validation rows"
    )
    ctx.check_cancelled()
    with Monitor(ctx, host=_monitor_host(ctx), on_checkpoint=ctx.checkpoint) as monitor:
        cfg = replace(cfg, monitor=(monitor.address[0], monitor.address[1], monitor.token))
        collected = frame.mapInArrow(shipped_function(cfg.to_dict()), RESULT_SCHEMA, barrier=True).collect()
    results = sorted((json.loads(r["result"]) for r in collected), key=lambda r: r["rank"])
    for r in results:
        if "error" in r:
            raise JobFailure(r["error"]["reason"], r["error"]["message"])
    if export_mode == "write" and export_dir is not None:
        manifest = {"rows": rows, "normalizer": normalizer.to_dict() if normalizer else None, "job_id": ctx.job_id}
        (export_dir / "manifest.json").write_text(json.dumps(manifest))
        ctx.log(f"exported the prepared tensors to {export_dir} for later jobs")
    if any(r.get("stopped") for r in results):
        raise JobCancelled(ctx.job_id)
    summary = summarize(results, plan, rows)
    if not summary["replicas_identical"]:
        ctx.warn("the workers' final parameters differ: the replicas drifted apart (please report this)")
    linear = _linear_model(ctx, plan, cfg.model_card)
    if linear is not None:
        summary["linear_model"] = linear
    ctx.progress(1.0, "done")
    params = {"network": plan.network, **cfg.model_card, "mode": plan.mode, "epochs": plan.epochs}
    return JobOutcome(
        result=summary,
        model=ModelArtifact(framework="torch", uri=_model_uri(ctx), metrics=summary["validation"], params=params),
    )


def _linear_model(ctx: JobContext, plan: TorchPlan, card: dict[str, Any]) -> dict[str, Any] | None:
    """A linear regression's weights and bias in raw feature units (and their error against a shipped truth)."""
    from workers.training.torch import linear

    if not linear.is_linear(plan.network, card):
        return None
    try:
        found = linear.report(plan.network, card, linear.load_tensors(_model_uri(ctx)), plan.train.path)
    except (OSError, ValueError) as exc:
        ctx.warn(f"no linear-model report: {exc}")
        return None
    if found is not None and "error" in found:
        err = found["error"]
        ctx.log(
            f"linear model vs {linear.TRUTH_FILE}: weights off by at most {err['weights_max_abs']:.4g} "
            f"(rmse {err['weights_rmse']:.4g}), bias by {err['bias_abs']:.4g}"
        )
    return found


def _model_uri(ctx: JobContext) -> str:
    if ctx.store:
        return storage.join(ctx.store, "jobs", ctx.job_id, "model")
    return (ctx.work_dir / "model").as_uri()


def summarize(results: list[dict[str, Any]], plan: TorchPlan, rows: dict[str, int]) -> dict[str, Any]:
    """The job's result: final validation, throughput and what crossed the wire, per worker and overall."""
    dense = results[0]["dense_bytes_per_step"]
    steps = max(1, sum(r["steps"] for r in results))
    sent = sum(r["bytes_sent"] for r in results)
    after = sum(r["bytes_after_first_epoch"] for r in results)
    steps_after = sum(r["steps_after_first_epoch"] for r in results)
    per_step = sent / steps
    train_s = max(r["train_s"] for r in results)
    out: dict[str, Any] = {
        "mode": plan.mode,
        "workers": len(results),
        "rows": rows,
        "epochs": plan.epochs,
        "steps_per_worker": results[0]["steps"],
        "validation": results[0]["validation"],
        "replicas_identical": all(r["replicas_identical"] for r in results),
        "samples_per_s": sum(r["samples"] for r in results) / train_s if train_s else None,
        "train_s": train_s,
        "bytes_per_step": per_step,
        "dense_bytes_per_step": dense,
        "compression": dense / per_step if per_step else None,
        "compression_after_first_epoch": (dense / (after / steps_after)) if after and steps_after else None,
        "bitmap_byte_share": sum(r["bitmap_bytes"] for r in results) / sent if sent else 0.0,
        "device": results[0]["device"],
        "per_worker": [
            {
                k: r.get(k)
                for k in (
                    "rank",
                    "rows",
                    "steps",
                    "bytes_sent",
                    "samples",
                    "train_s",
                    "encode_s",
                    "exchange_s",
                    "threshold",
                )
            }
            for r in results
        ],
    }
    if rows.get("bad_rows"):
        out["bad_rows"] = rows["bad_rows"]
    return out

"""A torch training job on the driver: prepare the data, run one barrier stage for all epochs, collect.

The training and validation rows travel together (a ``_split`` column) into ``num_workers`` equal partitions,
each sorted by a stable row id, and every barrier task runs :func:`workers.training.torch.remote
.barrier_partition` on its partition for all epochs. Workers stream step metrics, epoch results and
checkpoints to a :class:`~workers.training.torch.monitor.Monitor` on the driver while the stage runs.
"""

from __future__ import annotations

import json
import math
import socket
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from workers.context import JobCancelled, JobContext, JobFailure, JobOutcome, ModelArtifact
from workers.data.clean import clean
from workers.data.normalize import Normalizer
from workers.data.normalize import fit as fit_normalizer
from workers.data.spec import read_dataframe
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


def _prepare(ctx: JobContext, plan: TorchPlan) -> tuple[DataFrame, dict[str, int], Normalizer | None]:
    from pyspark.sql import functions as F

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
    needed = plan.num_workers * plan.batch_size
    if rows < needed:
        raise JobFailure(
            "EMPTY_PARTITION",
            f"{rows} training rows cannot give {plan.num_workers} workers a batch of {plan.batch_size} each "
            f"(needs {needed}); use fewer workers, a smaller batch_size_per_worker or more data",
        )
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
        ),
        checkpoint_dir=str(ctx.work_dir / "checkpoints"),
        model_dir=str(ctx.work_dir / "model"),
        resume_dir=plan.resume.path if plan.resume else None,
        start_epoch=plan.resume.epoch if plan.resume else 0,
        threads=threads,
        model_card=model_card(plan, normalizer),
    )


def train(ctx: JobContext, plan: TorchPlan) -> JobOutcome:
    ctx.progress(0.0, "preparing the data")
    frame, rows, normalizer = _prepare(ctx, plan)
    cfg = _config(ctx, plan, normalizer)
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
    if any(r.get("stopped") for r in results):
        raise JobCancelled(ctx.job_id)
    summary = summarize(results, plan, rows)
    if not summary["replicas_identical"]:
        ctx.warn("the workers' final parameters differ: the replicas drifted apart (please report this)")
    ctx.progress(1.0, "done")
    params = {"network": plan.network, **cfg.model_card, "mode": plan.mode, "epochs": plan.epochs}
    return JobOutcome(
        result=summary,
        model=ModelArtifact(
            framework="torch",
            uri=(ctx.work_dir / "model").as_uri(),
            metrics=summary["validation"],
            params=params,
        ),
    )


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

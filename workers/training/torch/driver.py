"""A torch training job on the driver: one barrier stage for all epochs, and the job's result.

The rows come prepared (:mod:`workers.training.torch.prepare`, or the export cache of
:mod:`workers.training.torch.export`): training and validation rows together (a ``_split`` column) in
``num_workers`` equal partitions, each sorted by a stable row id. Every barrier task runs
:func:`workers.training.torch.remote.barrier_partition` on its partition for all epochs, through
:func:`shipped_function`. Workers stream step metrics, epoch results and checkpoints to a
:class:`~workers.training.torch.monitor.Monitor` on the driver while the stage runs.
"""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from workers import storage
from workers.cluster import SlotWatch, slots_watched
from workers.context import JobCancelled, JobContext, JobFailure, JobOutcome, ModelArtifact
from workers.data.normalize import Normalizer
from workers.environment.driver import check_executors
from workers.inference.examples import example_rows
from workers.inference.signature import build_signature
from workers.training.torch.comm import open_store
from workers.training.torch.config import DataLayout, TorchPlan, TrainerConfig
from workers.training.torch.export import stage_input, write_manifest
from workers.training.torch.monitor import Monitor
from workers.training.torch.prepare import ROW, SPLIT

RESULT_SCHEMA = "rank int, result string"
CANCEL_GRACE_S = 5.0
"""A cancelled job's workers stop at their next step (the monitor tells them); its Spark job group is cancelled
only if the stage still runs this long after. A stage that ends by itself ends in well under a second and keeps its
Python workers for the next job; a killed one costs Spark's kill timeout and a fresh worker (and torch import)."""


def shipped_function(cfg: dict[str, Any]) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The function Spark ships to the barrier tasks (docs/architecture.md). It closes over the plain config dict only;
    on the executor it is the one place that reads Spark's ``BarrierTaskContext``: rank, world size, rank 0's
    host, the task's CPUs and GPU addresses and ``allGather`` go to the executor-side module as plain values and
    a callable, so that module knows nothing of Spark."""

    def train_partition(batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark import BarrierTaskContext

        from workers.training.torch.remote import barrier_partition

        task = BarrierTaskContext.get()
        infos = task.getTaskInfos()
        gpus = task.resources().get("gpu")
        return barrier_partition(
            batches,
            cfg,
            rank=task.partitionId(),
            world_size=len(infos),
            host=infos[0].address.rsplit(":", 1)[0],
            cpus=task.cpus(),
            gpu_addresses=list(gpus.addresses) if gpus else [],
            all_gather=task.allGather,
        )

    return train_partition


@contextmanager
def rendezvous(host: str, cfg: TrainerConfig) -> Iterator[tuple[str, int]]:
    """The job's TCPStore, open on the driver while the stage runs: every rank joins it for the process group and
    the data check, so the tasks make no Spark ``allGather`` (which waits in whole seconds: about one second per
    job, ``bench.data``). Like the event sink, it needs executors that can connect to the driver. It holds no
    secret and lives for one attempt; a store of rank 0's had the same exposure before."""
    store = open_store(host, cfg.num_workers, cfg.collective_timeout_s)
    try:
        yield host, int(store.port)
    finally:
        del store  # the server stops with its last reference


def _monitor_host(ctx: JobContext) -> str:
    host = ctx.spark.sparkContext.getConf().get("spark.driver.host", "127.0.0.1") or "127.0.0.1"
    try:
        return socket.gethostbyname(host)
    except OSError:
        return "127.0.0.1"


def model_card(plan: TorchPlan, normalizer: Normalizer | None) -> dict[str, Any]:
    """Everything besides the weights that using the model needs; stored in spec.json and the version's params,
    with the signature (the feature columns' types as planned) that predict requests are checked against."""
    card = {
        "input_shape": list(plan.input_shape),
        "features": list(plan.features),
        "array_column": plan.array_column,
        "labels": list(plan.train.label_columns),
        "task": plan.train.task,
        "num_classes": plan.train.num_classes,
        "class_labels": list(plan.class_labels) if plan.class_labels else None,
        "normalizer": normalizer.to_dict() if normalizer else None,
        # How the rows form sequences (a SequenceSpec as a dict): evaluation and prediction read data the same way.
        "sequence": {**plan.train.sequence, "num_classes": plan.train.num_classes} if plan.train.sequence else None,
    }
    types = plan.train.column_types
    if plan.categorical:  # the one-hot columns are floats; what /predict takes is the request's columns
        card["categorical"] = plan.categorical
        types = {name: types.get(name, "float") for name in plan.features}
    return {**card, "signature": build_signature(card, types)}


def trainer_config(
    ctx: JobContext, plan: TorchPlan, normalizer: Normalizer | None, source: dict[str, Any] | None = None
) -> TrainerConfig:
    """What every barrier task is told, less the export and the monitor (set once those are known)."""
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
            features=plan.features,
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
            source=source,
        ),
        checkpoint_dir=str(ctx.work_dir / "checkpoints"),
        model_dir=str(ctx.work_dir / "model"),
        resume_dir=plan.resume.path if plan.resume else None,
        init_dir=plan.init.uri if plan.init and not plan.resume else None,
        init_fresh=plan.init.fresh if plan.init else (),
        start_epoch=plan.resume.epoch if plan.resume else 0,
        threads=threads,
        run_id=uuid.uuid4().hex[:12],
        model_card=model_card(plan, normalizer),
        store=ctx.store,
        early_stopping=plan.early_stopping,
    )


def train(ctx: JobContext, plan: TorchPlan) -> JobOutcome:
    with slots_watched(ctx, plan.num_workers) as slots:  # says when a stage waits for other jobs' tasks, and why
        return _train(ctx, plan, slots)


def _train(ctx: JobContext, plan: TorchPlan, slots: SlotWatch) -> JobOutcome:
    for warning in plan.warnings:
        ctx.warn(warning)
    if plan.init and not plan.resume:  # a resumed job starts from its checkpoint, not these
        _check_init_files(plan)
    slots.phase("checking the executors")
    check_executors(ctx, ("torch", "numpy", "pyarrow"), plan.num_workers, cuda=plan.device != "cpu")
    categories = plan.categories
    if categories is not None:  # read when the request was planned (app/services/planning/categories.py)
        counted = ", ".join(f"{c} ({len(v)} categories)" for c, v in categories.levels.items())
        ctx.log(f"one-hot encoded {counted}: {len(categories.names)} features")
    slots.phase("preparing the data")
    data = stage_input(ctx, plan)
    rows = data.rows
    cfg = replace(
        trainer_config(ctx, plan, data.normalizer, data.source),
        export_dir=str(data.export_dir) if data.export_dir else None,
        export_mode=data.export_mode,
    )
    example = data.input_example if data.input_example is not None else example_rows(ctx.spark, plan.train)
    cfg = replace(cfg, model_card={**cfg.model_card, "input_example": example})
    if plan.resume:
        ctx.log(
            f"resuming from checkpoint {plan.resume.checkpoint_id} (epoch {plan.resume.epoch} of job "
            f"{plan.resume.job_id})"
        )
    elif plan.init:
        fresh = f"; {len(plan.init.fresh)} start fresh: {', '.join(plan.init.fresh)}" if plan.init.fresh else ""
        ctx.log(f"starting from the weights of {plan.init.name} version {plan.init.version} "
                f"({plan.init.copied} tensors{fresh})")  # fmt: skip
    counted = (
        f"{rows['train']} training and {rows['validation']} validation rows" if rows else "rows counted by the tasks"
    )
    shape = (f"{plan.num_workers} worker{'s' if plan.num_workers != 1 else ''}, {plan.epochs} "
             f"epoch{'s' if plan.epochs != 1 else ''}, batch {plan.batch_size} per worker")  # fmt: skip
    ctx.log(f"{plan.mode} on {shape}, {counted}")
    if plan.early_stopping and rows is not None and not rows.get("validation"):
        metric = plan.early_stopping["metric"]
        raise JobFailure("INVALID_REQUEST", f"early stopping on {metric} needs validation rows, and there are none")
    ctx.check_cancelled()
    slots.phase("training", said_again=False)  # the barrier stage's epochs say how far it is
    host = _monitor_host(ctx)
    with (
        Monitor(ctx, host=host, on_checkpoint=ctx.checkpoint) as monitor,
        rendezvous(host, cfg) as address,
        ctx.cancel_grace(CANCEL_GRACE_S),
    ):
        cfg = replace(cfg, monitor=(monitor.address[0], monitor.address[1], monitor.token), rendezvous=address)
        collected = data.frame.mapInArrow(shipped_function(cfg.to_dict()), RESULT_SCHEMA, barrier=True).collect()
    results = sorted((json.loads(r["result"]) for r in collected), key=lambda r: r["rank"])
    for r in results:
        if "error" in r:
            raise JobFailure(r["error"]["reason"], r["error"]["message"])
    if rows is None:  # the tasks checked and counted their rows (workers/data/arrow_read.py)
        rows = results[0]["rows"]
        data = replace(data, rows=rows)
        ctx.log(f"{rows['train']} training and {rows['validation']} validation rows, no bad row (counted by the tasks)")
    export_errors = [r["export_error"] for r in results if r.get("export_error")]
    if data.export_mode == "write" and export_errors:
        ctx.warn(f"the prepared tensors were not exported ({export_errors[0]}); a later job prepares them again")
    elif data.export_mode == "write":
        write_manifest(data, ctx.job_id, example)
        ctx.log(f"exported the prepared tensors to {data.export_dir} for later jobs")
    if any(r.get("stopped") for r in results):
        raise JobCancelled(ctx.job_id)
    summary = summarize(results, plan, rows)
    if "early_stopping" in summary:
        ctx.log(describe_stop(summary["early_stopping"]))
    if plan.init:
        summary["initialized_from"] = {"name": plan.init.name, "version": plan.init.version,
                                       "tensors": plan.init.copied, "fresh": list(plan.init.fresh)}  # fmt: skip
    linear = _linear_model(ctx, plan, cfg.model_card)
    if linear is not None:
        summary["linear_model"] = linear
    ctx.progress(1.0, "done")
    params = {"network": plan.network, **cfg.model_card, "mode": plan.mode, "epochs": plan.epochs}
    return JobOutcome(
        result=summary,
        model=ModelArtifact(framework="torch", uri=_model_uri(ctx), metrics=summary["validation"], params=params),
    )


def _check_init_files(plan: TorchPlan) -> None:
    """The weights ``training.init_from`` names, looked for before Spark runs: a version deleted (or its files moved)
    after the job was planned failed on every rank with a missing-file SPARK_ERROR."""
    from workers.inference.batch import missing_model_files

    init = plan.init
    assert init is not None
    missing, where = missing_model_files(init.uri, "torch")
    if missing:
        raise JobFailure("MODEL_FILES_MISSING", f"the weights of {init.name} version {init.version} "
                         f"(training.init_from) are gone: {where} (the version was deleted or its files moved "
                         "after this job was accepted): start from another version")  # fmt: skip


def _linear_model(ctx: JobContext, plan: TorchPlan, card: dict[str, Any]) -> dict[str, Any] | None:
    """A linear regression's weights and bias in raw feature units (:mod:`workers.training.torch.linear`)."""
    from workers.training.torch import linear

    if not linear.is_linear(plan.network, card):
        return None
    try:
        return linear.linear_model(plan.network, card, linear.load_tensors(_model_uri(ctx)))
    except (OSError, ValueError) as exc:
        ctx.warn(f"no linear-model report: {exc}")
        return None


def _model_uri(ctx: JobContext) -> str:
    if ctx.store:
        return storage.join(ctx.store, "jobs", ctx.job_id, "model")
    return (ctx.work_dir / "model").as_uri()


def describe_stop(stopping: dict[str, Any]) -> str:
    """One log line: why the job stopped and which epoch's weights were registered."""
    why = {"patience": f"no improvement of {stopping['metric']} in {stopping['patience']} epochs",
           "max_minutes": f"{stopping['max_minutes']} minutes of training passed",
           "epochs": "every epoch ran"}[stopping["stop_reason"]]  # fmt: skip
    best = f"best epoch {stopping['best_epoch']} ({stopping['metric']} {stopping['best_score']})"
    return (
        f"early stopping: {why} after epoch {stopping['epochs_run']}; {best}; registered the weights of epoch "
        f"{stopping['registered_epoch']}"
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
        "wire_compression": _wire_compression(results),
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
                    "wire_bytes_per_step",
                    "wire_bytes_total",
                    "wire_compression",
                    "codec_compression",
                    "clipped_mass",
                    "dense_steps",
                    "threshold",
                    "codec",
                )
            }
            for r in results
        ],
    }
    if rows.get("bad_rows"):
        out["bad_rows"] = rows["bad_rows"]
    stopping = results[0].get("early_stopping")
    if stopping is not None:
        out["early_stopping"] = stopping
        out["stopped_early"], out["best_epoch"] = stopping["stopped_early"], stopping["best_epoch"]
        out["best_score"] = {stopping["metric"]: stopping["best_score"]}
    return out


def _wire_compression(results: list[dict[str, Any]]) -> float | None:
    """Over all workers and steps: what dense ring all-reduce steps would have put on the wire over what the steps
    put there (``compression`` is the codec's ratio, messages against 4 bytes a parameter)."""
    dense = sum((r.get("dense_wire_bytes_per_step") or 0) * r["steps"] for r in results)
    wire = sum(r.get("wire_bytes") or 0 for r in results)
    return dense / wire if dense and wire else None

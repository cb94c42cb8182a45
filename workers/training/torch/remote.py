"""The training loop each barrier task runs (docs/torch-trainer.md), and the entry point Spark calls.

Nothing here knows Spark. :func:`run_training` takes rank, world size and the rendezvous address as arguments,
so the GPU check runs it under plain ``torch.multiprocessing``. :func:`barrier_partition` is what
``mapInArrow(..., barrier=True)`` runs through the driver's shipped function, which reads rank, world size, the
task's GPUs and ``allGather`` from ``BarrierTaskContext`` and passes them in; it turns the partition into tensors
and calls :func:`run_training`.

Executor-side: stdlib, numpy, pyarrow, torch, safetensors and this package's executor modules only.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from workers import storage
from workers.codecs import native
from workers.training.torch import checkpoint as ckpt
from workers.training.torch import heap, warm_start
from workers.training.torch.bookkeeping import Counters, diverged, kept, non_finite_message, replica_checksum, totals
from workers.training.torch.comm import Comm
from workers.training.torch.config import TrainerConfig
from workers.training.torch.data import Split
from workers.training.torch.early_stopping import META_KEY, EarlyStopping
from workers.training.torch.modes import GradientSharing, NonFiniteUpdate, flatten_parameters, make_strategy
from workers.training.torch.network import build_network, make_loss, predict_transform
from workers.training.torch.optim import build_optimizer, build_scheduler
from workers.training.torch.rendezvous import task_rendezvous
from workers.training.torch.report import NullReporter, Reporter
from workers.training.torch.snapshots import Checkpoints, agree, published, resume, tried
from workers.training.torch.spec import NetworkSpec, parse_network, parse_optimizer, spec_to_dict


class DeviceError(RuntimeError):
    """The requested device cannot be used here; the message says why and what to change."""


def select_device(requested: str, gpu_addresses: Sequence[str]) -> tuple[torch.device, str | None]:
    """The task's device and, when falling back, a warning. A task Spark gave a GPU trains on ``cuda:<addr>``;
    ``cuda`` without a usable GPU is an error, never a silent CPU run."""
    if gpu_addresses:
        if torch.cuda.is_available():
            return torch.device(f"cuda:{int(gpu_addresses[0])}"), None
        problem = (
            f"Spark gave this task GPU {list(gpu_addresses)}, but torch {torch.__version__} here has no usable CUDA"
        )
        if requested == "cuda":
            raise DeviceError(f"{problem}; install a CUDA build of torch on the executors")
        return torch.device("cpu"), f"{problem}: training on CPU (device auto)"
    if requested == "cuda":
        if torch.cuda.is_available():
            return torch.device("cuda:0"), None
        raise DeviceError(
            "device is cuda but this task has no GPU: give executors GPUs (spark.executor.resource.gpu.amount, "
            "spark.task.resource.gpu.amount and a discovery script) or use device auto/cpu"
        )
    return torch.device("cpu"), None


def _loss(loss_fn: Any, out: torch.Tensor, y: torch.Tensor, mask: torch.Tensor | None,
          weight: torch.Tensor | None) -> torch.Tensor:  # fmt: skip
    """Per-step outputs (batch, time, units) are scored step by step where a label exists (``mask``)."""
    if out.dim() == 3:
        steps = out.shape[1]
        flat_mask = mask.reshape(-1) if mask is not None else None
        flat_weight = weight.repeat_interleave(steps) if weight is not None else None
        return loss_fn(out.reshape(-1, out.shape[2]), y.reshape(-1), mask=flat_mask, weight=flat_weight)
    return loss_fn(out, y, mask=None, weight=weight)


def _evaluate(
    model: torch.nn.Module,
    spec: NetworkSpec,
    split: Split,
    comm: Comm,
    device: torch.device,
    loss_fn: Any,
    classification: bool,
) -> dict[str, float]:
    """Validation loss and accuracy (classification) or RMSE (regression), summed over all ranks' shards."""
    totals = torch.zeros(3, dtype=torch.float64)
    model.eval()
    with torch.no_grad():
        for start in range(0, len(split), 1024):
            x = split.x[start : start + 1024].to(device)
            y = split.y[start : start + 1024].to(device)
            lengths = split.lengths[start : start + 1024] if split.lengths is not None else None
            mask = split.mask[start : start + 1024].to(device) if split.mask is not None else None
            out = model(x, lengths=lengths)
            if out.dim() == 3:  # per-step outputs: score the labelled steps only
                keep = (
                    mask.reshape(-1) if mask is not None else torch.ones(out.shape[0] * out.shape[1], dtype=torch.bool)
                )
                out, y = out.reshape(-1, out.shape[2])[keep], y.reshape(-1)[keep]
            if len(out) == 0:
                continue
            totals[0] += float(loss_fn(out, y)) * len(out)
            totals[1] += len(out)
            pred = predict_transform(spec.loss, out)
            if classification:
                labels = (pred.reshape(-1) > 0.5).long() if pred.shape[-1] == 1 else pred.argmax(dim=1)
                totals[2] += float((labels == y.reshape(-1)).sum())
            else:
                totals[2] += float(((pred - y.reshape(pred.shape)) ** 2).sum())
    model.train()
    comm.sum_(totals)
    n = float(totals[1])
    if n == 0:
        return {}
    metrics = {"loss": float(totals[0]) / n}
    if classification:
        metrics["accuracy"] = float(totals[2]) / n
    else:
        metrics["rmse"] = math.sqrt(float(totals[2]) / (n * max(1, int(spec.output_units))))
    return metrics


def run_training(
    cfg: TrainerConfig,
    *,
    rank: int,
    world_size: int,
    host: str,
    port: int | None,
    train: Split,
    val: Split,
    reporter: Reporter | None = None,
    share_port: Callable[[int], int] | None = None,
    gpu_addresses: Sequence[str] = (),
    comm_device: torch.device | None = None,
    store: Any = None,
) -> dict[str, Any]:
    """Train this rank's shard for the configured epochs; returns this rank's summary.

    ``comm_device`` overrides where collectives run (CPU/gloo while computing on CUDA when several ranks
    share one GPU, which NCCL refuses)."""
    reporter = reporter or NullReporter()
    torch.set_num_threads(max(1, cfg.threads))
    device, warning = select_device(cfg.device, gpu_addresses)
    comm = Comm(
        rank=rank,
        world_size=world_size,
        host=host,
        port=port,
        device=comm_device or device,
        timeout_s=cfg.collective_timeout_s,
        share_port=share_port,
        store=store,
    )
    try:
        # heap.kept(): large tensors reuse freed memory, not a fresh mmap each step (heap.py)
        with heap.kept(), Checkpoints(cfg, rank, comm, reporter) as checkpoints:
            if warning and rank == 0:
                reporter.send({"t": "warn", "msg": warning})
            return _train(cfg, rank, comm, device, train, val, reporter, checkpoints)
    finally:
        comm.close()


def _failed(base: dict[str, Any], reason: str, message: str) -> dict[str, Any]:
    """A failure every rank agrees on: returned, not raised, so the stage ends cleanly and the job says why."""
    return {**base, "error": {"reason": reason, "message": message}}


def _train(
    cfg: TrainerConfig,
    rank: int,
    comm: Comm,
    device: torch.device,
    train: Split,
    val: Split,
    reporter: Reporter,
    checkpoints: Checkpoints,
) -> dict[str, Any]:
    spec = parse_network(cfg.network, input_shape=cfg.data.input_shape)
    opt_spec = parse_optimizer(cfg.optimizer)
    model = build_network(spec, seed=cfg.seed)
    if cfg.init_dir and not cfg.resume_dir:  # every rank reads the same weights: the replicas start equal
        warm_start.load(storage.fetch_dir(cfg.init_dir), model, cfg.init_fresh)
    model = model.to(device)
    flat = flatten_parameters(model)
    optimizer = build_optimizer(opt_spec, model, l2=spec.l2)
    scheduler = build_scheduler(opt_spec, optimizer)
    loss_fn = make_loss(spec)
    strategy = make_strategy(
        cfg.mode, model, flat, optimizer, comm, sharing=cfg.sharing, averaging_frequency=cfg.averaging_frequency
    )
    if device.type == "cpu" and not getattr(strategy, "exact", True):
        native.library()  # the C codec's one build (per machine) before the clock runs: it was step 1's encode_s
    classification = cfg.data.task == "classification"
    global_step = resume(cfg, rank, comm, model, optimizer, scheduler, strategy, reporter) if cfg.resume_dir else 0
    stopping = EarlyStopping.start(cfg, rank, model)

    batch = cfg.batch_size
    steps_per_epoch = comm.min_int(len(train) // batch)
    base = {"rank": rank, "world_size": comm.world_size, "device": str(device), "rows": len(train)}
    if steps_per_epoch == 0:
        too_few = f"a worker has fewer than batch_size_per_worker={batch} training rows"
        return _failed(base, "EMPTY_PARTITION", f"{too_few}; use fewer workers, a smaller batch or more data")
    tau0 = strategy.plan(steps_per_epoch * cfg.epochs)  # None on a resumed run: tau comes from the checkpoint
    if rank == 0:
        reporter.send(
            {
                "t": "plan",
                "initial_threshold": tau0,
                "steps_per_epoch": steps_per_epoch,
                "start_step": global_step,
                "start_epoch": cfg.start_epoch,
                "epochs": cfg.epochs,
                "parameters": flat.numel(),
                "exact": bool(getattr(strategy, "exact", False)),
                "exact_below_bytes": cfg.sharing.exact_below_bytes,
            }
        )
    c = Counters(dense_bytes_per_step=flat.numel() * 4)
    sent_at = -math.inf
    for epoch in range(cfg.start_epoch, cfg.epochs):
        if stopping is not None and stopping.should_stop(comm):
            break
        seed = cfg.seed * 1_000_003 + epoch * 10_007 + rank
        order = torch.randperm(len(train), generator=torch.Generator().manual_seed(seed))
        torch.manual_seed(seed + 1)  # dropout
        model.train()
        for s in range(steps_per_epoch):
            t0 = time.perf_counter()
            wire_before = comm.wire_bytes
            idx = order[s * batch : (s + 1) * batch]
            x, y = train.x[idx].to(device), train.y[idx].to(device)
            weight = train.w[idx].to(device) if train.w is not None else None
            lengths = train.lengths[idx] if train.lengths is not None else None
            mask = train.mask[idx].to(device) if train.mask is not None else None
            t_data = time.perf_counter()
            optimizer.zero_grad(set_to_none=False)
            loss = _loss(loss_fn, model(x, lengths=lengths), y, mask, weight)
            loss.backward()
            loss_value = float(loss.detach())  # waits for the device: the compute phase ends here
            t_compute = time.perf_counter()
            try:
                stop, nan, stats = strategy.flagged_step(
                    global_step, stop=reporter.stop_requested, nan_loss=not math.isfinite(loss_value)
                )
            except NonFiniteUpdate as exc:
                return _failed(base, "NON_FINITE_UPDATE", non_finite_message(exc, epoch, kept(cfg, epoch)))
            if nan:
                value = loss_value if not math.isfinite(loss_value) else "non-finite on another worker"
                where = f"step {global_step + 1} (epoch {epoch + 1})"
                advice = "lower the learning rate or look for extreme values in the data"
                return _failed(base, "NAN_LOSS", f"the loss became {value} at {where}; {kept(cfg, epoch)}; {advice}")
            if stop or stats is None:
                return {**base, "stopped": True, "step": global_step}
            wire = comm.wire_bytes - wire_before
            if scheduler is not None:
                scheduler.step()
            global_step += 1
            dt = time.perf_counter() - t0
            c.steps, c.samples, c.train_s = c.steps + 1, c.samples + len(idx), c.train_s + dt
            c.bytes_sent += stats.bytes_sent
            c.wire_bytes += wire
            c.clipped_mass += stats.clipped_mass
            c.dense_steps += stats.collective or 0
            c.bitmap_bytes += stats.bytes_sent if stats.bitmap else 0
            if epoch > 0:
                c.bytes_after_first_epoch += stats.bytes_sent
                c.steps_after_first_epoch += 1
            now = time.perf_counter()
            edge = s == 0 or s == steps_per_epoch - 1
            if global_step % cfg.metrics_every == 0 and (edge or now - sent_at >= cfg.metrics_interval_s):
                sent_at = now
                event = {
                    "t": "step",
                    "rank": rank,
                    "epoch": epoch + 1,
                    "step": global_step,
                    "loss": loss_value,
                    "samples_per_s": len(idx) / dt,
                    "bytes": stats.bytes_sent,
                    "wire_bytes": wire,
                    "wire_bytes_sent": c.wire_bytes,
                    "dense_bytes": stats.dense_bytes,
                }
                if stats.tau is not None:
                    event.update(
                        tau=stats.tau,
                        sparsity=stats.sparsity,
                        residual_norm=strategy.residual_norm(),
                        bitmap=stats.bitmap,
                        clipped_mass=stats.clipped_mass,
                        collective=stats.collective,
                    )
                if stats.debug:
                    event["debug"] = stats.debug
                event["phase_data_ms"], event["phase_compute_ms"] = (t_data - t0) * 1e3, (t_compute - t_data) * 1e3
                for phase, ms in (stats.phases or {}).items():
                    event[f"phase_{phase}_ms"] = ms
                reporter.send(event)
        wire_before = comm.wire_bytes
        sent = strategy.end_epoch()  # parameter averaging's epoch-end average: part of its exchange, as are buffers
        c.bytes_sent, c.wire_bytes = c.bytes_sent + sent, c.wire_bytes + comm.wire_bytes - wire_before
        c.bytes_after_first_epoch += sent if epoch > 0 else 0
        c.last_validation = _evaluate(model, spec, val, comm, device, loss_fn, classification)
        if stopping is not None:
            stopping.update(epoch + 1, c.last_validation, model)
        differs = diverged(comm, model, f"after epoch {epoch + 1} (step {global_step})")
        if differs is not None:
            return _failed(base, "REPLICAS_DIVERGED", differs)
        extra = {META_KEY: stopping.state()} if stopping is not None else None
        if rank == 0:
            reporter.send(
                {
                    "t": "epoch",
                    "epoch": epoch + 1,
                    "step": global_step,
                    "validation": c.last_validation,
                    "replicas_identical": True,
                }
            )
        # Written in the background; rank 0 reports it once every rank's part is on disk (snapshots.Checkpoints).
        failure = checkpoints.take(
            epoch + 1, global_step, model, optimizer, scheduler, strategy, metrics=c.last_validation, extra=extra,
            keep_epoch=stopping.pinned_epoch() if stopping is not None and rank == 0 else None,
        )  # fmt: skip
        if failure is not None:  # every rank has it
            return _failed(base, failure.reason, failure.detail)
    failure = checkpoints.finish()  # the last epoch's checkpoint is published before the model
    if failure is not None:
        return _failed(base, failure.reason, failure.detail)
    restored = stopping.restore(model) if stopping is not None else False
    checksum = replica_checksum(model)
    differs = diverged(comm, model, "at the end of training", checksum)
    if differs is not None:
        return _failed(base, "REPLICAS_DIVERGED", differs)

    def save_model() -> None:
        ckpt.save_model(Path(cfg.model_dir), model, {"network": spec_to_dict(spec), **cfg.model_card})
        if cfg.store:
            storage.publish_dir(Path(cfg.model_dir), published(cfg, "model"))

    failure = agree(comm, tried("writing the model", cfg.model_dir, save_model) if rank == 0 else None)
    if failure is not None:
        return _failed(base, failure.reason, failure.detail)
    counted = totals(c, comm, cfg.mode)
    counted["step_events_dropped"] = getattr(reporter, "dropped", 0)
    reporter.send({"t": "totals", "rank": rank, "step": global_step, **counted})
    result = {
        **base,
        "steps": c.steps,
        "global_step": global_step,
        "steps_per_epoch": steps_per_epoch,
        "samples": c.samples,
        "train_s": c.train_s,
        "bytes_sent": c.bytes_sent,
        "bitmap_bytes": c.bitmap_bytes,
        "bytes_after_first_epoch": c.bytes_after_first_epoch,
        "steps_after_first_epoch": c.steps_after_first_epoch,
        "dense_bytes_per_step": c.dense_bytes_per_step,
        "validation": c.last_validation,
        "checksum": checksum,
        "replicas_identical": True,
        **counted,
    }
    if stopping is not None:
        result.update(stopping.result(c.last_validation, restored))
    if isinstance(strategy, GradientSharing):
        result.update(
            encode_s=strategy.encode_s,
            exchange_s=strategy.exchange_s,
            threshold=strategy.algorithm.state_dict(),
            codec=native.engine() if device.type == "cpu" else "torch",
        )
    return result


def barrier_partition(
    batches: Iterator[Any],
    cfg_dict: dict[str, Any],
    *,
    rank: int,
    world_size: int,
    host: str,
    cpus: int,
    gpu_addresses: Sequence[str],
    all_gather: Callable[[str], list[str]],
) -> Iterator[Any]:
    """What each barrier task runs (``DataFrame.mapInArrow(..., barrier=True)``): one output row per rank.

    The task's place in the stage comes in as plain values (rank, world size, rank 0's host, its CPUs and GPU
    addresses) and ``all_gather``, every task's string in rank order, which hands rank 0's port to the others:
    :func:`workers.training.torch.driver.shipped_function` reads them from Spark."""
    import pyarrow as pa

    from workers.data.arrow_read import DataFailure
    from workers.training.torch.data import ExportWriter, checked_splits, load_splits
    from workers.training.torch.report import SocketReporter

    cfg = TrainerConfig.from_dict(cfg_dict)
    store, gather, share_port = task_rendezvous(cfg, rank, world_size, host, all_gather)
    rows = None
    if cfg.export_mode == "read":
        for _ in batches:  # a placeholder partition: the rows come from the export
            pass
        train, val = load_splits(Path(cfg.export_dir or ""), rank)
    else:
        try:  # tasks that check their own rows share the counts (and fail alike): workers/data/arrow_read.py
            train, val, rows = checked_splits(batches, cfg.data, rank, gather)
        except DataFailure as exc:
            failed = _failed({"rank": rank}, exc.reason, exc.message)
            yield pa.RecordBatch.from_arrays(
                [pa.array([rank], pa.int32()), pa.array([json.dumps(failed)], pa.string())], names=["rank", "result"]
            )
            return
    # The export is written while the rank trains (it reads the tensors, training never writes them), so a job that
    # exports starts training as soon as one that does not; a failed write costs the export, not the job.
    export = ExportWriter(Path(cfg.export_dir or ""), rank, train, val) if cfg.export_mode == "write" else None

    reporter: Reporter = NullReporter()
    if cfg.monitor is not None:
        reporter = SocketReporter(cfg.monitor[0], cfg.monitor[1], cfg.monitor[2], rank)
    try:
        result = run_training(
            cfg.replace_threads(cpus),
            rank=rank,
            world_size=world_size,
            host=host,
            port=None,
            train=train,
            val=val,
            reporter=reporter,
            share_port=share_port,
            gpu_addresses=gpu_addresses,
            store=store,
        )
    finally:
        reporter.close()
        failure = export.join() if export is not None else None
    if failure is not None:
        result["export_error"] = failure
    if rows is not None:
        result["rows"] = rows
    yield pa.RecordBatch.from_arrays(
        [pa.array([rank], pa.int32()), pa.array([json.dumps(result)], pa.string())], names=["rank", "result"]
    )

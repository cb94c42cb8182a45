"""Checkpoints that all ranks take, and resume from, together (files: :mod:`workers.training.torch.checkpoint`).

Saving (:class:`Checkpoints`): at the end of an epoch every rank copies its state and goes on training while a
thread of its own writes it: rank 0 the meta and the weights into the run's partial directory, every rank its
own optimizer and mode state; rank 0 publishes the directory (and copies it to the store) once all are done,
and only then reports it to the driver. The ranks agree on the outcome through the job's rendezvous store. A full
or unwritable store fails the checkpoint on every rank with the same :class:`~workers.storage.StorageError` (the
partial directory removed), so the training ends with that reason on every rank, not with the other ranks'
broken connections. :func:`agree` does the same for writes on the training thread (the final model). Resuming:
every rank loads the weights and, when the checkpoint was written by as many ranks, its own optimizer, scheduler
and mode state (in ``allreduce`` mode rank 0's optimizer state, which the other modes keep per worker); an
optimizer whose settings changed since the checkpoint starts fresh, with a warning (:func:`optimizer_change`).

Executor-side: stdlib, torch, safetensors and this package's executor modules only.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from workers import storage
from workers.storage import StorageError
from workers.training.torch import checkpoint as ckpt
from workers.training.torch.comm import Comm
from workers.training.torch.config import TrainerConfig
from workers.training.torch.modes import Strategy
from workers.training.torch.report import Reporter


class Checkpoints:
    """The epoch checkpoints of one training run, written on a thread of their own while the ranks train on.

    :meth:`take` copies this rank's state at the end of an epoch (tensors to host memory, the rest serialized)
    and starts a writer thread: rank 0 writes the meta and the weights into the run's partial directory, every
    rank its own optimizer and mode state. Then the ranks agree through the job's rendezvous store, not a
    collective (the training thread is running collectives of its own): each writer posts its outcome, rank 0's
    waits for all of them, publishes the directory (or discards it when any write failed) and posts the verdict,
    which every rank's writer reads. The training thread waits for a write only when it takes the next checkpoint
    and at the end of training (:meth:`finish`), so at most one is in flight and the epoch-end barriers of a
    synchronous write are gone. A full or unwritable store is the same :class:`StorageError` on every rank there.

    Leaving the ``with`` block waits for a write still in flight (a stopped or failed run keeps the checkpoint it
    took last) unless an exception is on its way: then nothing waits, as a lost peer would hold the verdict up
    to the store's timeout."""

    def __init__(self, cfg: TrainerConfig, rank: int, comm: Comm, reporter: Reporter) -> None:
        self.cfg, self.rank, self.world_size, self.reporter = cfg, rank, comm.world_size, reporter
        self._store = comm.store
        self._thread: threading.Thread | None = None
        self._outcome: StorageError | BaseException | None = None

    def __enter__(self) -> Checkpoints:
        return self

    def __exit__(self, kind: object, *_: object) -> None:
        if kind is None:
            self.finish()

    def take(
        self,
        epoch: int,
        global_step: int,
        model: torch.nn.Module,
        optimizer: Any,
        scheduler: Any,
        strategy: Strategy,
        *,
        metrics: dict[str, float],
        extra: dict[str, Any] | None = None,
        keep_epoch: int | None = None,
    ) -> StorageError | None:
        """Wait for the previous checkpoint (its failure, if any, is returned and nothing new starts), then copy
        this rank's state after ``epoch`` and write it in the background. ``extra`` goes into ``meta.json`` too."""
        failure = self.finish()
        if failure is not None:
            return failure
        cfg = self.cfg
        opt_tensors, opt_rest = ckpt.split_optimizer_state(optimizer.state_dict())
        mode_tensors, mode_rest = strategy.state()
        rest = {"optimizer": opt_rest, "scheduler": scheduler.state_dict() if scheduler else None, **mode_rest}
        snapshot = _Snapshot(
            epoch=epoch,
            tensors=_copied({**opt_tensors, **mode_tensors}),
            rest=json.loads(json.dumps(rest)),  # frozen now: training goes on changing the live state
        )
        if self.rank == 0:
            snapshot.weights = _copied(ckpt.model_tensors(model))
            snapshot.meta = {
                "epoch": epoch,
                "global_step": global_step,
                "world_size": self.world_size,
                "mode": cfg.mode,
                "network": cfg.network,
                "optimizer": cfg.optimizer,
                **(
                    {
                        "threshold_algorithm": cfg.sharing.threshold_algorithm,
                        "threshold_planned": cfg.sharing.planned_initial_threshold,
                    }
                    if cfg.mode == "gradient_sharing"
                    else {}
                ),
                "seed": cfg.seed,
                "job_id": cfg.job_id,
                "model_card": cfg.model_card,
                **(extra or {}),
            }
            target = ckpt.final_dir(cfg.checkpoint_dir, epoch)
            where = published(cfg, f"checkpoints/epoch-{epoch}") if cfg.store else str(target)
            snapshot.event = {"t": "checkpoint", "epoch": epoch, "step": global_step, "path": where,
                              "metrics": metrics, "keep_epoch": keep_epoch}  # fmt: skip
        self._outcome = None
        self._thread = threading.Thread(target=self._run, args=(snapshot,), name="checkpoint-writer", daemon=True)
        self._thread.start()
        return None

    def finish(self) -> StorageError | None:
        """Wait for the checkpoint in flight; the verdict every rank agreed on (None: published)."""
        if self._thread is None:
            return None
        self._thread.join()
        self._thread, outcome, self._outcome = None, self._outcome, None
        if isinstance(outcome, StorageError) or outcome is None:
            return outcome
        raise outcome

    def _run(self, snapshot: _Snapshot) -> None:
        try:
            self._outcome = self._write(snapshot)
        except BaseException as exc:  # handed to the training thread by finish()
            self._outcome = exc

    def _write(self, snapshot: _Snapshot) -> StorageError | None:
        cfg, epoch = self.cfg, snapshot.epoch
        partial = ckpt.partial_dir(cfg.checkpoint_dir, epoch, cfg.run_id)
        target = ckpt.final_dir(cfg.checkpoint_dir, epoch)
        key = f"checkpoint/{cfg.run_id}/{epoch}"

        def files() -> None:
            if snapshot.meta is not None and snapshot.weights is not None:
                ckpt.write_meta(partial, snapshot.meta)
                ckpt.save_weight_tensors(partial, snapshot.weights)
            ckpt.save_rank_state(partial, self.rank, snapshot.tensors, snapshot.rest)

        mine = f"{CHECKPOINT_FAILED}: rank {self.rank} could not write its part of {target}"
        try:
            failure = tried("writing checkpoint", str(target), files)
            mine = str(failure) if failure is not None else OK
        finally:
            self._store.set(f"{key}/rank-{self.rank}", mine)
            if self.rank == 0:
                self._decide(snapshot, key, partial, target)
        return _verdict(self._store.get(f"{key}/verdict").decode())

    def _decide(self, snapshot: _Snapshot, key: str, partial: Path, target: Path) -> None:
        """Rank 0: every rank's outcome, then publish or discard, then the verdict for all."""
        cfg = self.cfg
        outcomes = [self._store.get(f"{key}/rank-{r}").decode() for r in range(self.world_size)]
        verdict = next((o for o in outcomes if o != OK), OK)
        if verdict == OK:

            def publish() -> None:
                ckpt.publish(cfg.checkpoint_dir, snapshot.epoch, cfg.run_id)
                if cfg.store:
                    storage.publish_dir(target, published(cfg, f"checkpoints/epoch-{snapshot.epoch}"))

            failure = tried("writing checkpoint", str(target), publish)
            verdict = str(failure) if failure is not None else OK
        if verdict != OK:
            with contextlib.suppress(OSError):
                storage.discard_dir(partial)
        elif snapshot.event is not None:
            self.reporter.send(snapshot.event)
        self._store.set(f"{key}/verdict", verdict)


OK = "ok"
CHECKPOINT_FAILED = "CHECKPOINT_FAILED"


@dataclass
class _Snapshot:
    epoch: int
    tensors: dict[str, torch.Tensor]
    rest: dict[str, Any]
    weights: dict[str, torch.Tensor] | None = None
    meta: dict[str, Any] | None = None
    event: dict[str, Any] | None = None


def _copied(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Host copies, taken on the training thread, of tensors that training goes on changing."""
    return {k: v.detach().to("cpu", copy=True) for k, v in tensors.items()}


def _verdict(text: str) -> StorageError | None:
    return None if text == OK else _parsed(text)


def _parsed(text: str) -> StorageError:
    """A StorageError back from its ``str()`` (``"REASON: detail"``), as another rank wrote it."""
    reason, _, detail = text.partition(": ")
    return StorageError(reason, detail)


def tried(what: str, uri: str, step: Callable[[], None]) -> StorageError | None:
    """Run one write; a failure of the store (full, read-only, unreachable) is returned as a StorageError, to be
    agreed on by every rank (:func:`agree`). Any other error is raised."""
    try:
        with storage.guarded(what, uri):
            step()
    except StorageError as exc:
        return exc
    return None


def agree(comm: Comm, failure: StorageError | None) -> StorageError | None:
    """Every rank learns whether a write failed on any rank, with the first failing rank's error, so the ranks
    stop together and all report one reason. One all-gather of the lengths when nothing failed (a barrier)."""
    text = str(failure).encode() if failure is not None else b""
    sizes, _ = comm.exchange_lengths(len(text))
    if not any(sizes):
        return None
    mine = torch.frombuffer(bytearray(text), dtype=torch.uint8) if text else torch.zeros(0, dtype=torch.uint8)
    gathered = comm.all_gather_padded(mine, sizes)
    first = next(bytes(m.cpu().tolist()).decode(errors="replace") for m, n in zip(gathered, sizes, strict=True) if n)
    return _parsed(first)


def published(cfg: TrainerConfig, what: str) -> str:
    """Where a job's files go on the store: ``<store>/jobs/<job_id>/<what>``."""
    return storage.join(cfg.store or "", "jobs", cfg.job_id, what)


def resume(
    cfg: TrainerConfig,
    rank: int,
    comm: Comm,
    model: torch.nn.Module,
    optimizer: Any,
    scheduler: Any,
    strategy: Strategy,
    reporter: Reporter,
) -> int:
    """Load a checkpoint; returns the global step it was taken at."""
    assert cfg.resume_dir is not None
    directory = storage.fetch_dir(cfg.resume_dir)
    meta = ckpt.read_meta(directory)
    ckpt.load_weights(directory, model)
    state = ckpt.load_rank_state(directory, rank) if meta["world_size"] == comm.world_size else None
    if state is None:
        if rank == 0:
            reporter.send(
                {
                    "t": "warn",
                    "msg": f"the checkpoint was written by {meta['world_size']} workers, this run "
                    f"has {comm.world_size}: weights resumed, optimizer and residual state start fresh",
                }
            )
        return int(meta["global_step"])
    tensors, extra = state
    if cfg.mode == "allreduce" and rank != 0 and meta.get("mode", "allreduce") != "allreduce":
        # The other modes keep an optimizer state per worker; all-reduce steps identical replicas from one state.
        shared = ckpt.load_rank_state(directory, 0)
        assert shared is not None  # rank 0's files are written like every rank's
        tensors, extra = shared  # all-reduce keeps no state of its own (no residual)
    notes = sharing_change(meta, cfg, tensors, extra)  # drops the threshold's state when it no longer applies
    changed = optimizer_change(meta.get("optimizer"), cfg.optimizer, extra["optimizer"]["param_groups"], optimizer)
    if changed is None:
        optimizer.load_state_dict(ckpt.join_optimizer_state(tensors, extra["optimizer"]))
        if scheduler is not None and extra.get("scheduler") is not None:
            scheduler.load_state_dict(extra["scheduler"])
    else:
        fresh = "the optimizer (and its learning-rate schedule) starts fresh with this request's settings"
        tau = (extra.get("threshold") or {}).get("threshold")
        kept = (f"; the threshold goes on from the checkpoint's {tau:.3g} (set threshold_algorithm.initial_threshold "
                "to start it elsewhere)") if tau and cfg.mode == "gradient_sharing" else ""  # fmt: skip
        notes.insert(0, f"{changed} since the checkpoint: weights and residuals resumed, {fresh}{kept}")
    if rank == 0:
        for note in notes:
            reporter.send({"t": "warn", "msg": note})
    strategy.load_state(tensors, extra)
    return int(meta["global_step"])


_FIRST_THRESHOLD = ("initial_threshold", "threshold")


def sharing_change(
    meta: dict[str, Any], cfg: TrainerConfig, tensors: dict[str, Any], extra: dict[str, Any]
) -> list[str]:
    """What of a checkpoint's gradient-sharing state this run cannot continue, in words; the threshold's state is
    dropped from ``extra`` when the run starts its own (another algorithm: its state failed the load on every
    executor; a first threshold the request sets: it was ignored). The same on every rank: it reads only the
    checkpoint and the request."""
    saved_mode = meta.get("mode")
    if cfg.mode != "gradient_sharing":
        if saved_mode == "gradient_sharing" and "residual" in tensors:
            return [f"the checkpoint's residuals (updates its workers had not sent yet) are dropped: mode {cfg.mode} "
                    "keeps none"]  # fmt: skip
        return []
    saved = extra.get("threshold")
    if not isinstance(saved, dict):
        return []
    mine = cfg.sharing.threshold_algorithm
    if saved.get("type") != mine.get("type"):
        del extra["threshold"]
        return [f"the threshold algorithm changed from {saved.get('type')} to {mine.get('type')} since the checkpoint: "
                "residuals resumed, the threshold starts again from this request's settings"]  # fmt: skip
    spec = meta.get("threshold_algorithm")
    if cfg.sharing.planned_initial_threshold or not isinstance(spec, dict):
        return []  # left out: a resumed run keeps its checkpoint's threshold
    given = {k: mine[k] for k in _FIRST_THRESHOLD if k in mine}
    before = {k: spec[k] for k in _FIRST_THRESHOLD if k in spec}
    if given == before and not meta.get("threshold_planned"):
        return []
    del extra["threshold"]
    said = ", ".join(f"{k} {v:g}" for k, v in given.items())
    return [f"the threshold starts again at {said}, as the request sets it (the checkpoint's continued otherwise)"]


_NOT_SETTINGS = frozenset({"params", "lr", "initial_lr", "fused", "foreach", "capturable", "differentiable"})
"""Entries of a torch optimizer's param group that are not the request's settings: the parameters, the learning
rate a schedule moves (compared through the request's optimizer instead), and how the step is implemented."""


def optimizer_change(
    saved_spec: dict[str, Any] | None, spec: dict[str, Any], saved_groups: list[dict[str, Any]], optimizer: Any
) -> str | None:
    """What differs between the optimizer a checkpoint was trained with and this run's, in words; None when they
    are the same. Torch's ``load_state_dict`` would otherwise keep the checkpoint's hyperparameters (a new learning
    rate or weight decay silently ignored) or, for another optimizer type, fail at the first step."""
    saved_spec, spec = json.loads(json.dumps(saved_spec)), json.loads(json.dumps(spec))  # tuples as the file has them
    if saved_spec is not None and saved_spec.get("type") != spec.get("type"):
        return f"the optimizer changed from {saved_spec.get('type')} to {spec.get('type')}"
    if saved_spec is not None and saved_spec != spec:
        keys = sorted(k for k in {*saved_spec, *spec} if saved_spec.get(k) != spec.get(k))
        return f"the optimizer's {', '.join(keys)} changed"

    def settings(groups: list[dict[str, Any]]) -> Any:
        return json.loads(json.dumps([{k: v for k, v in g.items() if k not in _NOT_SETTINGS} for g in groups]))

    if settings(saved_groups) != settings(optimizer.param_groups):
        return "the optimizer's settings (weight decay, momentum, ...) changed"
    return None

"""Early stopping in the trainer (``training.early_stopping``; the settings: :mod:`.spec.early_stopping`).

The trainer calls :class:`EarlyStopping` at two points of its epoch loop, on every rank:

* :meth:`EarlyStopping.update` after validation: the validation metrics are sums over all ranks, so every rank
  sees the same score and keeps the same counters (best score and epoch, epochs without improvement) and, on an
  improvement, the same copy of the weights (on the CPU; the checkpoint of that epoch holds the very same bytes);
* :meth:`EarlyStopping.should_stop` before an epoch starts: rank 0 decides (patience, or training time past
  ``max_minutes`` by its own clock) and the decision travels to every rank with one ``any_flags`` collective.

The counters go into every checkpoint (:meth:`state`, in ``meta.json``), so a resumed job goes on counting (and a
job resumed past its patience stops at once). With ``restore_best`` the weights registered at the end are the best
epoch's (:meth:`restore`); when the best epoch came before a resume, they are read back from its checkpoint.

Executor-side: stdlib, torch, safetensors and this package's executor modules only.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
from safetensors.torch import load_file

from workers import storage
from workers.training.torch import checkpoint as ckpt
from workers.training.torch.comm import Comm
from workers.training.torch.config import TrainerConfig
from workers.training.torch.snapshots import published

META_KEY = "early_stopping"


class EarlyStopping:
    def __init__(self, cfg: TrainerConfig, rank: int) -> None:
        assert cfg.early_stopping is not None
        self.settings = dict(cfg.early_stopping)
        self.key = self.settings["metric"].removeprefix("val_")
        self.rank = rank
        self.cfg = cfg
        self.started = time.monotonic()
        self.elapsed_before = 0.0
        self.best_score: float | None = None
        self.best_epoch: int | None = None
        self.best_metrics: dict[str, float] = {}
        self.bad_epochs = 0
        self.last_epoch = cfg.start_epoch
        self.reason: str | None = None
        self.note: str | None = None
        self._best_weights: dict[str, torch.Tensor] | None = None

    @classmethod
    def start(cls, cfg: TrainerConfig, rank: int, model: torch.nn.Module) -> EarlyStopping | None:
        """The tracker for this run (None without ``training.early_stopping``), with the counters of the checkpoint
        it resumes from."""
        if cfg.early_stopping is None:
            return None
        tracker = cls(cfg, rank)
        if cfg.resume_dir:
            meta = ckpt.read_meta(storage.fetch_dir(cfg.resume_dir))
            tracker._resume(meta.get(META_KEY) or {}, model)
        return tracker

    def _resume(self, saved: dict[str, Any], model: torch.nn.Module) -> None:
        if saved.get("metric") not in (None, self.settings["metric"]):
            return  # counted on another metric: start afresh
        self.elapsed_before = float(saved.get("elapsed_s") or 0.0)
        self.best_score = saved.get("best_score")
        self.best_epoch = saved.get("best_epoch")
        self.best_metrics = dict(saved.get("best_metrics") or {})
        self.bad_epochs = int(saved.get("bad_epochs") or 0)
        if not (self.settings["restore_best"] and self.best_epoch is not None):
            return
        if self.best_epoch == self.cfg.start_epoch:
            self._best_weights = _copy(model)  # the weights just resumed are the best ones
            return
        try:
            directory = storage.fetch_dir(str(saved["best_checkpoint"]))
            own = ckpt.model_tensors(model)
            self._best_weights = {k: v for k, v in load_file(str(directory / ckpt.WEIGHTS)).items() if k in own}
        except (OSError, KeyError, ValueError) as exc:
            self.note = f"the best epoch's checkpoint cannot be read ({exc}); the last epoch's weights are registered"

    def _better(self, value: float) -> bool:
        if self.best_score is None:
            return True
        delta = float(self.settings["min_delta"])
        if self.settings["mode"] == "max":
            return value > self.best_score + delta
        return value < self.best_score - delta

    def update(self, epoch: int, metrics: dict[str, float], model: torch.nn.Module) -> None:
        """After epoch ``epoch`` (1-based) was validated: an improvement or one more epoch without one."""
        self.last_epoch = epoch
        value = metrics.get(self.key)
        if value is not None and math.isfinite(value) and self._better(value):
            self.best_score, self.best_epoch, self.best_metrics = float(value), epoch, dict(metrics)
            self.bad_epochs = 0
            if self.settings["restore_best"]:
                self._best_weights = _copy(model)
        else:
            self.bad_epochs += 1

    def elapsed_s(self) -> float:
        return self.elapsed_before + (time.monotonic() - self.started)

    def _reason(self) -> str | None:
        if self.last_epoch == 0:
            return None  # a job trains at least one epoch
        if self.bad_epochs >= int(self.settings["patience"]):
            return "patience"
        limit = self.settings.get("max_minutes")
        if limit is not None and self.elapsed_s() >= float(limit) * 60:
            return "max_minutes"
        return None

    def should_stop(self, comm: Comm) -> bool:
        """Before an epoch: whether to stop now. Rank 0's decision, which every rank gets."""
        mine = self._reason() if self.rank == 0 else None
        (stop,) = comm.any_flags(mine is not None)
        if stop:
            self.reason = self._reason() or "max_minutes"  # the time ran out on rank 0's clock
        return stop

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps (JSON), so that a resumed job goes on counting."""
        best = None
        if self.best_epoch is not None:
            name = f"checkpoints/epoch-{self.best_epoch}"
            best = published(self.cfg, name) if self.cfg.store else str(ckpt.final_dir(self.cfg.checkpoint_dir,
                                                                                         self.best_epoch))  # fmt: skip
        return {
            "metric": self.settings["metric"],
            "best_score": self.best_score,
            "best_epoch": self.best_epoch,
            "best_metrics": self.best_metrics,
            "bad_epochs": self.bad_epochs,
            "elapsed_s": self.elapsed_s(),
            "best_checkpoint": best,
        }

    def pinned_epoch(self) -> int | None:
        """The epoch whose checkpoint must outlive the checkpoint retention: the best one, when ``restore_best``
        may have to read its weights back after a resume."""
        return self.best_epoch if self.settings["restore_best"] else None

    def restore(self, model: torch.nn.Module) -> bool:
        """Put the best epoch's weights back (``restore_best``); whether the model now holds them."""
        if not self.settings["restore_best"] or self._best_weights is None:
            return False
        with torch.no_grad():
            for name, target in ckpt.model_tensors(model).items():
                target.copy_(self._best_weights[name].to(target.device))
        return True

    def result(self, last_validation: dict[str, float], restored: bool) -> dict[str, Any]:
        """The job result's part: ``early_stopping`` (why it stopped, the best epoch and score, what was registered)
        and ``validation``, the metrics of the registered weights."""
        summary = {
            **self.settings,
            "stopped_early": self.reason is not None and self.last_epoch < self.cfg.epochs,
            "stop_reason": self.reason or "epochs",
            "epochs_run": self.last_epoch,
            "best_epoch": self.best_epoch,
            "best_score": self.best_score,
            "epochs_without_improvement": self.bad_epochs,
            "restored_best": restored,
            "registered_epoch": self.best_epoch if restored else self.last_epoch,
            "last_validation": last_validation,
            "training_minutes": self.elapsed_s() / 60,
        }
        if self.note:
            summary["note"] = self.note
        return {"early_stopping": summary, "validation": self.best_metrics if restored else last_validation}


def _copy(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: t.detach().to("cpu", copy=True) for name, t in ckpt.model_tensors(model).items()}

"""The driver's side of xgboost checkpoints: while the fit runs, register every checkpoint the training task writes.

The task (remote.py) writes the booster every ``checkpoint_rounds`` rounds as ``round-<n>-<run>`` under the job's
checkpoint directory (on the store when there is one, else under the job's work directory), complete or not at all.
:class:`RoundCheckpoints` watches that directory and registers each new one of its own run as the job's checkpoint
for round ``n`` (``ctx.checkpoint``: one per job and round; a replayed round replaces the row). Directories left by
a run of the job that died (partial writes, rounds past the one this attempt continues from) are removed first.

Driver side (no pyspark needed here): stdlib and workers.storage.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from types import TracebackType

from workers import storage
from workers.context import JobCancelled, JobContext
from workers.training.xgboost.remote import parse_checkpoint_name
from workers.training.xgboost.spec import XGBoostPlan

log = logging.getLogger(__name__)
CheckpointTarget = tuple[str, int, str] | None
"""(directory, every, run) handed to the training task; None: no checkpoints."""
POLL_S = 0.5


def checkpoint_dir(ctx: JobContext) -> str:
    if ctx.store:
        return storage.join(ctx.store, "jobs", ctx.job_id, "checkpoints")
    return str(ctx.work_dir / "checkpoints")


def resumed_rounds(ctx: JobContext, plan: XGBoostPlan) -> int:
    """Rounds the job's checkpoint already holds (0 without one), said in the job's log."""
    if plan.resume is None:
        return 0
    ctx.log(f"continuing from checkpoint {plan.resume.checkpoint_id} after {plan.resume.rounds} of "
            f"{plan.spec.num_round} rounds")  # fmt: skip
    return plan.resume.rounds


class RoundCheckpoints:
    def __init__(self, ctx: JobContext, plan: XGBoostPlan) -> None:
        self._ctx = ctx
        self._every = plan.spec.checkpoint_rounds
        self._kept = plan.resume.rounds if plan.resume else 0
        self._directory = checkpoint_dir(ctx)
        self._run = uuid.uuid4().hex[:12]
        self._seen: set[str] = set()
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=f"xgb-checkpoints-{ctx.job_id[:8]}", daemon=True)

    @property
    def target(self) -> CheckpointTarget:
        return (self._directory, self._every, self._run) if self._every > 0 else None

    def __enter__(self) -> RoundCheckpoints:
        if self._every > 0:
            self._clear_dead_runs()
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._every <= 0:
            return
        self._halt.set()
        self._thread.join(timeout=30)
        with contextlib.suppress(JobCancelled):
            self._register_new()  # the last ones, also after a failed fit: the next attempt continues from them

    def _clear_dead_runs(self) -> None:
        """Partial writes, and rounds past the resume point, of runs that are not this one."""
        for name in storage.list_dir(self._directory):
            parsed = parse_checkpoint_name(name)
            if parsed is None or parsed[0] > self._kept:
                with contextlib.suppress(OSError):
                    storage.remove_dir(storage.join(self._directory, name))

    def _watch(self) -> None:
        while not self._halt.wait(POLL_S):
            try:
                self._register_new()
            except JobCancelled:
                return
            except Exception as exc:  # the database or the store is away: the next poll tries again
                log.warning("job %s: registering checkpoints failed (%s: %s)", self._ctx.job_id, type(exc).__name__,
                            exc)  # fmt: skip

    def _register_new(self) -> None:
        for name in storage.list_dir(self._directory):
            parsed = parse_checkpoint_name(name)
            if parsed is None or parsed[1] != self._run or name in self._seen:
                continue
            rounds = parsed[0]
            self._ctx.checkpoint(rounds, rounds, storage.join(self._directory, name), {"rounds": rounds})
            self._seen.add(name)

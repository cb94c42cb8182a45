"""The torch driver on a real local[2] SparkSession says what it does for its whole run, as the xgboost driver
does: checking the executors, preparing the data, training (then its epochs); and when another job's tasks hold
the slots it needs while it prepares its data, it says it waits for them, and goes on saying what it does once they
are free. It watched the slots only around its barrier stage: a job whose preparation waited sat at "preparing the
data" with no word of why (walkthrough on a standalone cluster, 2026-12-07)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pandas as pd

from app.core.settings import Settings
from app.schemas.train import TrainRequest
from app.services.planning.training import plan_training
from tests.job_context import QuietContext
from tests.workers.test_slot_watch import _hold, _until
from workers.cluster import slot_count
from workers.training.torch.config import TorchPlan
from workers.training.torch.driver import train

WAITING = ("waiting for task slots: 2 of 2 are running other jobs' tasks, and this job needs 2 at once; it goes on "
           "when they are free")  # fmt: skip


class Context(QuietContext):
    """A JobContext that keeps what the driver said, in order (no database). When the job says it prepares its
    data, another job's two tasks take both slots; they end when the job says it waits for them."""

    def __init__(self, spark: Any, work_dir: Path, job_id: str) -> None:
        self.spark, self.work_dir, self.job_id = spark, work_dir, job_id
        self.said: list[tuple[str, str]] = []
        self.released = work_dir / "released"
        self.other: threading.Thread | None = None

    def progress(self, fraction: float, message: str | None = None) -> None:
        if message is None:
            return
        self.said.append(("progress", message))
        if message == "preparing the data" and self.other is None:
            self.other = threading.Thread(target=self._other_job)
            self.other.start()
            _until("the other job holds both slots", lambda: slot_count(self.spark).busy == 2)
        elif message == WAITING:
            self.released.touch()

    def _other_job(self) -> None:
        sc = self.spark.sparkContext
        sc.setJobGroup("another-job", "held tasks")
        sc.parallelize(range(2), 2).foreach(_hold(str(self.released)))

    def log(self, message: str, level: str = "INFO") -> None:
        self.said.append(("log", message))


def _plan(spark: Any, root: Path) -> TorchPlan:
    frame = pd.DataFrame({"a": [float(i % 7) for i in range(64)], "b": [float(i % 5) for i in range(64)]})
    frame["y"] = 2 * frame["a"] - frame["b"]
    frame.to_parquet(root / "rows.parquet")
    output = {"type": "output", "units": 1, "activation": "identity", "loss": "mse"}
    body = {"name": "phases", "framework": "torch", "network": {"layers": [output]},
            "training": {"num_workers": 2, "epochs": 1, "batch_size_per_worker": 16},
            "dataset": {"uri": "rows.parquet", "features": ["a", "b"], "label": "y", "task": "regression"}}  # fmt: skip
    plan = plan_training(request=TrainRequest.model_validate(body), settings=Settings(data_roots=[root]), spark=spark)
    assert isinstance(plan, TorchPlan)
    return plan


def test_a_torch_job_says_its_phases_and_when_its_data_preparation_waits(spark: Any, tmp_path: Path) -> None:
    plan = _plan(spark, tmp_path)
    ctx = Context(spark, tmp_path / "work", "torch-phases")
    ctx.work_dir.mkdir()
    spark.sparkContext.setJobGroup(ctx.job_id, "the torch job")
    try:
        outcome = train(ctx, plan)  # type: ignore[arg-type]
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
        ctx.released.touch()
        if ctx.other is not None:
            ctx.other.join(60)
    assert outcome.model is not None
    shown = [message for kind, message in ctx.said if kind == "progress"]
    phases = [m for m in shown if m in ("checking the executors", "preparing the data", "training")]
    assert phases[0] == "checking the executors" and phases[-1] == "training", shown
    assert "preparing the data" in phases, shown
    at = shown.index("preparing the data")
    assert shown[at + 1] == WAITING, shown  # said at once, before its preparation submits anything
    assert ("log", WAITING) in ctx.said, ctx.said
    after = shown[at + 2 :]
    assert "training" in after and any(m.startswith("epoch 1 of 1") for m in after), shown
    assert shown.index("training", at) < next(i for i, m in enumerate(shown) if m.startswith("epoch 1 of 1")), shown
    assert shown[-1] == "done", shown

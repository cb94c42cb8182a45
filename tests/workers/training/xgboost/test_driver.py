"""The xgboost driver on a real local[2] SparkSession, one task and xgboost.spark alike: the job's progress moves
with the boosting rounds, and a fit continued from a checkpoint (as a retried job is) counts the checkpoint's
rounds as done from its start rather than starting again at 0."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import TAXI_FEATURES
from tests.job_context import QuietContext
from workers.context import MetricPoint
from workers.data.spec import ResolvedDataset
from workers.training.xgboost.driver import train
from workers.training.xgboost.spec import XGBoostPlan, XGBoostResume, parse_xgboost_params

REPO = Path(__file__).resolve().parents[4]
LOW, HIGH = 0.05, 0.85
"""The fit's share of the progress bar."""


class Context(QuietContext):
    """A JobContext that keeps what the driver reports in lists (no database)."""

    def __init__(self, spark: Any, work_dir: Path, job_id: str) -> None:
        self.spark, self.work_dir, self.job_id = spark, work_dir, job_id
        self.shown: list[tuple[float, str | None]] = []
        self.points: list[MetricPoint] = []
        self.checkpoints: dict[int, str] = {}
        self.cancelled = False

    def progress(self, fraction: float, message: str | None = None) -> None:
        self.shown.append((fraction, message))

    def metrics(self, points: Iterable[MetricPoint]) -> None:
        self.points.extend(points)

    def checkpoint(self, epoch: int, step: int, uri: str, metrics: dict[str, Any], **_: Any) -> str:
        self.checkpoints[epoch] = uri
        return f"{epoch:032d}"

    def rounds_shown(self) -> list[tuple[int, float]]:
        """(rounds done, progress) of every "training: round N of M" the driver showed, in order."""
        out = []
        for fraction, message in self.shown:
            if message is not None and message.startswith("training: round "):
                out.append((int(message.split()[2]), fraction))
        return out


def _plan(workers: int, resume: XGBoostResume | None = None) -> XGBoostPlan:
    def taxi(part: str) -> ResolvedDataset:
        return ResolvedDataset(path=str(REPO / "datasets" / "taxi" / f"{part}.parquet"), format="parquet",
                               features=tuple(TAXI_FEATURES), label="fare_amount", task="regression")  # fmt: skip

    spec = parse_xgboost_params({"max_depth": 4, "num_round": 30, "checkpoint_rounds": 10}, task="regression")
    return XGBoostPlan(train=taxi("train"), validation=taxi("eval"), spec=spec, num_workers=workers, device="cpu",
                       resume=resume)  # fmt: skip


def _assert_moves_forward(ctx: Context) -> None:
    fractions = [fraction for fraction, _ in ctx.shown]
    assert fractions == sorted(fractions), ctx.shown
    for done, fraction in ctx.rounds_shown():
        assert fraction == pytest.approx(LOW + (HIGH - LOW) * done / 30), (done, fraction)
    assert ctx.rounds_shown()[-1] == (30, pytest.approx(HIGH))
    assert ctx.shown[-1] == (1.0, "done")


@pytest.mark.parametrize("workers", [1, 2], ids=["one-task", "xgboost-spark"])
def test_progress_counts_the_rounds_of_the_checkpoint_a_fit_continues_from(
    spark: Any, tmp_path: Path, workers: int
) -> None:
    first = Context(spark, tmp_path, f"xgb-progress-{workers}")
    assert train(first, _plan(workers)).result["rounds"]["trained"] == 30  # type: ignore[arg-type]
    _assert_moves_forward(first)
    assert first.rounds_shown()[0] == (0, pytest.approx(LOW)), "a fit from scratch starts at round 0"
    assert sorted(first.checkpoints) == [10, 20, 30]

    resume = XGBoostResume(checkpoint_id=f"{20:032d}", uri=first.checkpoints[20], rounds=20, job_id=first.job_id)
    second = Context(spark, tmp_path, first.job_id)  # the job's next attempt, from its checkpoint of round 20
    outcome = train(second, _plan(workers, resume))  # type: ignore[arg-type]
    assert outcome.result["rounds"] == {"requested": 30, "trained": 30, "kept": 30, "resumed_from": 20}
    _assert_moves_forward(second)
    shown = second.rounds_shown()
    assert shown[0] == (20, pytest.approx(LOW + (HIGH - LOW) * 20 / 30)), "the checkpoint's 20 rounds are done"
    assert all(done >= 20 for done, _ in shown), shown
    assert sorted(p.step for p in second.points if p.key == "validation_rmse") == list(range(21, 31))

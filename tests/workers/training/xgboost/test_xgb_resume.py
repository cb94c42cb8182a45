"""A retried xgboost job that continues from a checkpoint with early stopping (the driver on a real local[2]
SparkSession, one task: xgboost.spark's shuffle makes two fits of the same data differ slightly): it stops where
the uninterrupted job stopped and keeps the same rounds, and its result's history is the kept round's even when an
earlier attempt trained that round."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers import TAXI_FEATURES
from tests.workers.training.xgboost.test_driver import REPO, Context
from workers.data.spec import ResolvedDataset
from workers.training.xgboost.driver import train
from workers.training.xgboost.spec import XGBoostPlan, XGBoostResume, parse_xgboost_params

EARLY = 10


def _plan(workers: int, num_round: int, resume: XGBoostResume | None = None) -> XGBoostPlan:
    def taxi(part: str) -> ResolvedDataset:
        return ResolvedDataset(path=str(REPO / "datasets" / "taxi" / f"{part}.parquet"), format="parquet",
                               features=tuple(TAXI_FEATURES), label="fare_amount", task="regression")  # fmt: skip

    params = {"learning_rate": 0.6, "max_depth": 8, "num_round": num_round, "early_stopping_rounds": EARLY,
              "checkpoint_rounds": 5}  # fmt: skip
    spec = parse_xgboost_params(params, task="regression")
    return XGBoostPlan(train=taxi("train"), validation=taxi("eval"), spec=spec, num_workers=workers, device="cpu",
                       threads=1, resume=resume)  # fmt: skip


def test_early_stopping_goes_on_from_the_checkpoints_best_round(spark: Any, tmp_path: Path) -> None:
    workers = 1
    whole = train(Context(spark, tmp_path / "whole", "xgb-whole"), _plan(workers, 400)).result  # type: ignore[arg-type]
    best, trained = whole["best_iteration"], whole["rounds"]["trained"]
    assert trained == best + 1 + EARLY < 400, "a learning rate of 0.6 overfits long before 400 rounds"

    # the first attempt is lost a few rounds before early stopping would have stopped it
    first = Context(spark, tmp_path / "job", "xgb-resumed")
    train(first, _plan(workers, trained - 3))  # type: ignore[arg-type]
    done = max(r for r in first.checkpoints if r > best + 1)
    resume = XGBoostResume(checkpoint_id=f"{done:032d}", uri=first.checkpoints[done], rounds=done,
                           job_id=first.job_id)  # fmt: skip
    second = Context(spark, tmp_path / "job", first.job_id)
    result = train(second, _plan(workers, 400, resume)).result  # type: ignore[arg-type]
    assert result["rounds"] == {"requested": 400, "trained": trained, "kept": best + 1, "resumed_from": done}
    assert result["best_iteration"] == best
    assert result["history"] == pytest.approx(whole["history"]), "the kept round's metrics, trained by the first"
    assert result["validation"] == pytest.approx(whole["validation"], rel=1e-6)

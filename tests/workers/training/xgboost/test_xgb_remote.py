"""The one-worker xgboost task (workers/training/xgboost/remote.py ``single_worker``) without Spark: the Arrow
batches its Spark task receives, in, the booster, history and validation metrics, out. Any ``max_bin`` and the
approx tree method train; a fit continued from a checkpoint goes on with the checkpoint's early-stopping state, so
that it stops where the uninterrupted fit stopped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers import TAXI_FEATURES
from workers.training.xgboost.remote import HISTORY_FILE, MODEL_FILE, parse_checkpoint_name, single_worker

REPO = Path(__file__).resolve().parents[4]
VALID = "_is_validation"


def _taxi(rows: int = 3000) -> pa.RecordBatch:
    train = pq.read_table(REPO / "datasets" / "taxi" / "train.parquet").slice(0, rows)
    valid = pq.read_table(REPO / "datasets" / "taxi" / "eval.parquet").slice(0, rows // 3)
    columns = [*TAXI_FEATURES, "fare_amount"]
    table = pa.concat_tables([train.select(columns), valid.select(columns)])
    flags = np.r_[np.zeros(train.num_rows, bool), np.ones(valid.num_rows, bool)]
    return table.append_column(VALID, pa.array(flags)).combine_chunks().to_batches()[0]


def _fit(params: dict[str, Any], rounds: int, early: int | None = None, checkpoints: Any = None,
         resume: str | None = None) -> tuple[Any, dict[str, Any], dict[str, float]]:  # fmt: skip
    import xgboost

    train = single_worker(list(TAXI_FEATURES), "fare_amount", None, VALID, "regression",
                          {"objective": "reg:squarederror", "seed": 0, **params}, rounds, early, 2, checkpoints,
                          resume)  # fmt: skip
    (out,) = list(train(iter([_taxi()])))
    booster = xgboost.Booster(model_file=bytearray(out.column("model")[0].as_py()))
    return booster, json.loads(out.column("history")[0].as_py()), json.loads(out.column("validation")[0].as_py())


@pytest.mark.parametrize("params", [{"max_bin": 64}, {"max_bin": 2}, {"tree_method": "approx"},
                                    {"tree_method": "approx", "max_bin": 32}, {"tree_method": "hist", "max_bin": 300}],
                         ids=["max_bin-64", "max_bin-2", "approx", "approx-max_bin", "hist-max_bin-300"])  # fmt: skip
def test_any_max_bin_and_the_approx_tree_method_train(params: dict[str, Any]) -> None:
    booster, history, validation = _fit(params, 5)
    assert booster.num_boosted_rounds() == 5
    assert len(history["validation"]["rmse"]) == 5 and validation["rmse"] > 0
    config = json.loads(booster.save_config())["learner"]["gradient_booster"]["gbtree_model_param"]
    assert int(config["num_trees"]) == 5


def test_max_bin_changes_the_model() -> None:
    coarse = _fit({"max_bin": 2, "max_depth": 3}, 3)[2]["rmse"]
    fine = _fit({"max_bin": 256, "max_depth": 3}, 3)[2]["rmse"]
    assert coarse != fine, "max_bin 2 must bin the features coarser than 256"


def _checkpoints(directory: Path) -> dict[int, str]:
    found = {}
    for path in directory.iterdir():
        parsed = parse_checkpoint_name(path.name)
        if parsed is not None:
            found[parsed[0]] = path.as_uri()
    return found


def test_a_fit_continued_from_a_checkpoint_stops_where_the_uninterrupted_fit_stopped(tmp_path: Path) -> None:
    params = {"learning_rate": 0.6, "max_depth": 8}
    early, total = 12, 400
    whole, whole_history, whole_validation = _fit(params, total, early)
    best = int(whole.attr("best_iteration"))
    trained = whole.num_boosted_rounds()
    assert trained == best + 1 + early < total, "a learning rate of 0.6 overfits long before 400 rounds"

    # the first attempt dies a few rounds before early stopping would stop it (it trained `killed` rounds)
    killed, every = trained - 3, 5
    first = _fit(params, killed, early, (str(tmp_path), every, "first"))[0]
    assert first.num_boosted_rounds() == killed
    saved = _checkpoints(tmp_path)
    resume_at = max(r for r in saved if r > best + 1)
    stored = json.loads((Path(saved[resume_at][len("file://") :]) / HISTORY_FILE).read_text())
    assert stored["validation"]["rmse"] == pytest.approx(whole_history["validation"]["rmse"][:resume_at])
    checkpoint = json.loads((Path(saved[resume_at][len("file://") :]) / MODEL_FILE).read_text())
    assert checkpoint["learner"]["attributes"]["best_iteration"] == str(best), "the checkpoint carries the best round"

    resumed, history, validation = _fit(params, total - resume_at, early, (str(tmp_path), every, "second"),
                                        saved[resume_at])  # fmt: skip
    assert resumed.num_boosted_rounds() == trained, "early stopping went on from the checkpoint's best round"
    assert int(resumed.attr("best_iteration")) == best
    assert history["validation"]["rmse"] == pytest.approx(whole_history["validation"]["rmse"][resume_at:])
    assert validation == pytest.approx(whole_validation), "the kept trees are the uninterrupted fit's"
    later = _checkpoints(tmp_path)  # the continued fit's checkpoints hold the history of every round
    if (after := max(later)) > resume_at:
        path = Path(later[after][len("file://") :]) / HISTORY_FILE
        assert json.loads(path.read_text())["validation"]["rmse"] == pytest.approx(
            whole_history["validation"]["rmse"][:after]
        )

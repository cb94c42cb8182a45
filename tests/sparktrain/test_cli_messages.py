"""What the CLI prints about a file of rows and a finished tune: pandas' unnamed index column is named as such
(it showed as nothing before a comma: ``not sent (the model does not take them): , fare_amount``), and ``submit
--wait`` on a tune ends with its best trial, as a training's ends with its validation metrics."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console

from sparktrain._csv import model_columns, read_rows
from sparktrain._outcome import report


def test_pandas_index_column_is_named_not_left_blank(tmp_path: Path) -> None:
    path = tmp_path / "rows.csv"
    pd.DataFrame({"distance": [1.5, 2.5], "fare": [7.0, 9.5]}).to_csv(path)  # the index too: pandas' default
    columns, rows = read_rows(path)
    assert columns == ["", "distance", "fare"]
    kept, sent, dropped = model_columns(columns, rows, ["distance"])
    assert kept == ["distance"] and sent == [["1.5"], ["2.5"]]
    assert dropped == ["the unnamed first column (pandas' index? to_csv(..., index=False) leaves it out)", "fare"]
    assert model_columns(["a", "", "b"], [[1, 2, 3]], ["a", "b"])[2] == ["the unnamed column 2"]


def _printed(job: dict[str, object]) -> list[str]:
    buffer = io.StringIO()
    code = report(job, Console(file=buffer, width=200, color_system=None))
    assert code == 0
    return buffer.getvalue().splitlines()


def test_a_finished_tune_reports_its_best_trial() -> None:
    job = {
        "id": "7" * 32,
        "status": "SUCCEEDED",
        "model": {"name": "digits-tuned", "version": 4},
        "result": {  # the shape of a tune's result (app/services/tuning/report.py)
            "metric": "accuracy", "mode": "max", "trials": 20, "trials_requested": 20, "timed_out": False,
            "states": {"COMPLETE": 7, "PRUNED": 13}, "leaderboard": [],
            "best": {"trial": 5, "metric": float(np.float64(0.969444)), "job_id": "5" * 32,
                     "params": {"training.optimizer.learning_rate": 0.013312, "network.layers.0.units": 80,
                                "network.layers": [{"type": "dense"}]},
                     "model": {"name": "digits-tuned", "version": 4}},
            "importances": None,
        },
    }  # fmt: skip
    assert _printed(job) == [
        f"SUCCEEDED job {'7' * 32}",
        "model digits-tuned version 4",
        "best: accuracy 0.9694 (trial 5 of 20: training.optimizer.learning_rate 0.01331, network.layers.0.units 80, "
        'network.layers [{"type":"dense"}])',
    ]


def test_a_training_job_reports_no_best_line() -> None:
    job = {"id": "8" * 32, "status": "SUCCEEDED", "model": {"name": "taxi-fare-rf", "version": 1},
           "result": {"validation": {"rmse": 1.903, "r2": 0.985}}}  # fmt: skip
    assert _printed(job)[-1] == "validation: rmse 1.903, r2 0.985"

"""The synthetic linear-regression data: deterministic, shipped as generated, and true to its truth.json."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from datasets import linear

SHIPPED = Path(__file__).resolve().parents[2] / "datasets" / "linear"


def test_the_shipped_files_are_what_the_generator_writes() -> None:
    pd.testing.assert_frame_equal(pd.read_parquet(SHIPPED / "train.parquet"), linear.generate(4000, 0))
    pd.testing.assert_frame_equal(pd.read_parquet(SHIPPED / "eval.parquet"), linear.generate(1000, 1))
    assert json.loads((SHIPPED / "truth.json").read_text()) == linear.truth(0)
    assert sum(p.stat().st_size for p in SHIPPED.iterdir()) < 300_000


def test_least_squares_on_the_data_finds_the_truth(tmp_path: Path) -> None:
    linear.write(str(tmp_path), 3000, 10, seed=5, noise_std=0.2)
    truth = json.loads((tmp_path / "truth.json").read_text())
    assert truth["seed"] == 5 and truth["noise_std"] == 0.2
    frame = pd.read_parquet(tmp_path / "train.parquet")
    x = np.c_[frame[list(linear.FEATURES)].to_numpy(np.float64), np.ones(len(frame))]
    coef = np.linalg.lstsq(x, frame[linear.LABEL].to_numpy(np.float64), rcond=None)[0]
    np.testing.assert_allclose(coef[:-1], list(truth["weights"].values()), atol=0.02)
    assert abs(coef[-1] - truth["bias"]) < 0.05
    residual = frame[linear.LABEL].to_numpy(np.float64) - x @ coef
    assert 0.18 < residual.std() < 0.22


def write_truth(directory: Path, **extra: object) -> Path:
    truth = {"weights": {"a": 1.0, "b": 2.0, "c": 3.0}, "bias": -4.0, "noise_std": 0.1, "seed": 0, **extra}
    (directory / "truth.json").write_text(json.dumps(truth))
    return directory / "truth.json"


def test_compare_a_fit_with_the_truth(tmp_path: Path) -> None:
    fitted = {"weights": {"a": 1.25, "b": 2.0, "c": 2.5}, "bias": -4.0625}
    error = linear.compare(fitted, write_truth(tmp_path, label="y"))
    assert error["weights_max_abs"] == pytest.approx(0.5)
    assert error["weights_rmse"] == pytest.approx(np.sqrt((0.25**2 + 0.5**2) / 3))
    assert error["bias_abs"] == pytest.approx(0.0625)
    assert linear.read_truth(tmp_path / "truth.json")["noise_std"] == 0.1


def test_compare_counts_absent_weights_as_zero(tmp_path: Path) -> None:
    fitted = {"weights": {"a": 1.0, "extra": 0.25}, "bias": 1.0}
    truth = tmp_path / "truth.json"
    truth.write_text(json.dumps({"weights": {"a": 1.0, "unused": -2.0}, "bias": 1.5}))
    error = linear.compare(fitted, truth)
    assert error["weights_max_abs"] == 2.0
    assert error["weights_rmse"] == pytest.approx(np.sqrt((0.25**2 + 2.0**2) / 3))
    assert error["bias_abs"] == 0.5


def test_a_broken_truth_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "truth.json").write_text('{"weights": [1, 2]}')
    with pytest.raises(ValueError, match="not a truth file"):
        linear.read_truth(tmp_path / "truth.json")

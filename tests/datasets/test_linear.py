"""The synthetic linear-regression data: deterministic, shipped as generated, and true to its truth.json."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

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

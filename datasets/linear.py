"""A deterministic synthetic linear-regression data set: the seed article's first job, ``y = Xw + b + noise``.

Six features on different scales (a standard normal, a uniform on [0, 10], a normal around 20, a uniform on
[-1, 1], an exponential and a 0/1 flag) with fixed weights of order 1, a fixed bias and Gaussian noise. The true
weights and bias are written next to the data as ``truth.json``, so a torch job trained on ``train.parquet``
reports how far its fitted weights and bias are from them (``result.linear_model.error``).

Features and label are stored as float32 (small files); the label is computed from the stored float32 features,
so ``truth.json`` is exact for the data as written.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

WEIGHTS = {"x1": 2.0, "x2": -3.4, "x3": 0.8, "x4": 1.5, "x5": -0.7, "x6": 1.2}
BIAS = 4.2
NOISE_STD = 0.1
LABEL = "y"
FEATURES = tuple(WEIGHTS)


def _features(rng: np.random.Generator, rows: int) -> pd.DataFrame:
    columns = {
        "x1": rng.normal(0.0, 1.0, rows),
        "x2": rng.uniform(0.0, 10.0, rows),
        "x3": rng.normal(20.0, 5.0, rows),
        "x4": rng.uniform(-1.0, 1.0, rows),
        "x5": rng.exponential(3.0, rows),
        "x6": (rng.random(rows) < 0.3).astype(np.float64),
    }
    return pd.DataFrame({name: values.astype(np.float32) for name, values in columns.items()})


def generate(rows: int, seed: int = 0, noise_std: float = NOISE_STD) -> pd.DataFrame:
    """``rows`` rows of ``x1..x6`` and ``y``; the same ``rows``, ``seed`` and ``noise_std`` give the same frame."""
    rng = np.random.default_rng(seed)
    frame = _features(rng, rows)
    x = frame.to_numpy(dtype=np.float64)
    y = x @ np.array(list(WEIGHTS.values())) + BIAS + rng.normal(0.0, noise_std, rows)
    frame[LABEL] = y.astype(np.float32)
    return frame


def truth(seed: int, noise_std: float = NOISE_STD) -> dict[str, object]:
    return {"weights": dict(WEIGHTS), "bias": BIAS, "noise_std": noise_std, "seed": seed, "label": LABEL}


def write(out_dir: str, train_rows: int, eval_rows: int, seed: int = 0, noise_std: float = NOISE_STD) -> None:
    """Write ``train.parquet``, ``eval.parquet`` (independent draws: seeds ``seed`` and ``seed + 1``) and
    ``truth.json``."""
    path = Path(out_dir)
    path.mkdir(parents=True, exist_ok=True)
    generate(train_rows, seed, noise_std).to_parquet(path / "train.parquet", index=False)
    generate(eval_rows, seed + 1, noise_std).to_parquet(path / "eval.parquet", index=False)
    (path / "truth.json").write_text(json.dumps(truth(seed, noise_std), indent=2) + "\n")

"""A deterministic synthetic linear-regression data set: the seed article's first job, ``y = Xw + b + noise``.

Six features on different scales (a standard normal, a uniform on [0, 10], a normal around 20, a uniform on
[-1, 1], an exponential and a 0/1 flag) with fixed weights of order 1, a fixed bias and Gaussian noise. The true
weights and bias are written next to the data as ``truth.json``. A torch job that trains a linear model on
``train.parquet`` reports its weights and bias in the data's units (``result.linear_model``), and :func:`compare`
says how far they are from the truth::

    compare(job["result"]["linear_model"], "datasets/linear/truth.json")
    # {"weights_max_abs": 0.0067, "weights_rmse": 0.0031, "bias_abs": 0.0043}

Features and label are stored as float32 (small files); the label is computed from the stored float32 features,
so ``truth.json`` is exact for the data as written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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


def read_truth(path: str | Path) -> dict[str, Any]:
    """A ``truth.json`` as :func:`write` writes it (``{"weights": {feature: w}, "bias": b, ...}``), weights and
    bias as floats. Raises ValueError when the file is not a truth."""
    try:
        data = json.loads(Path(path).read_text())
        weights = {str(k): float(v) for k, v in data["weights"].items()}
        return {**data, "weights": weights, "bias": float(data["bias"])}
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ValueError(f"{path} is not a truth file ({{'weights': {{feature: w}}, 'bias': b}}): {exc}") from exc


def compare(fitted: Mapping[str, Any], truth_path: str | Path) -> dict[str, float]:
    """How far a job's ``result.linear_model`` (``{"weights": {feature: w}, "bias": b}``) is from the truth in
    ``truth_path``: the largest and the root-mean-square difference of the weights, and the bias's. A feature the
    truth does not name has a true weight of 0, and a true feature the model was not given a fitted weight of 0."""
    truth = read_truth(truth_path)
    names = list(dict.fromkeys([*truth["weights"], *fitted["weights"]]))
    diff = np.array([fitted["weights"].get(n, 0.0) - truth["weights"].get(n, 0.0) for n in names], dtype=np.float64)
    return {
        "weights_max_abs": float(np.abs(diff).max()) if diff.size else 0.0,
        "weights_rmse": float(np.sqrt(np.mean(diff**2))) if diff.size else 0.0,
        "bias_abs": abs(float(fitted["bias"]) - float(truth["bias"])),
    }

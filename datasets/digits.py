"""scikit-learn's digits (1,797 8x8 images, 10 classes; shipped inside scikit-learn) as parquet.

``pixels`` is a list of 64 floats (0..16, row-major), ``label`` an int 0..9. The split is fixed (seed 0):
1,437 training rows and 360 test rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

TEST_ROWS = 360


def frames(seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    from sklearn.datasets import load_digits

    data = load_digits()
    order = np.random.default_rng(seed).permutation(len(data.target))
    x = data.data[order].astype(np.float32)
    y = data.target[order].astype(np.int32)
    frame = pd.DataFrame({"pixels": list(x), "label": y})
    return frame.iloc[TEST_ROWS:].reset_index(drop=True), frame.iloc[:TEST_ROWS].reset_index(drop=True)


def write(out_dir: str, seed: int = 0) -> None:
    path = Path(out_dir)
    path.mkdir(parents=True, exist_ok=True)
    train, test = frames(seed)
    train.to_parquet(path / "train.parquet", index=False)
    test.to_parquet(path / "test.parquet", index=False)

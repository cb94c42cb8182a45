"""A deterministic synthetic sequence-classification task in the "rows" layout (one row per time step).

Columns: ``sequence_id`` (int64), ``step`` (int32, 0-based), ``f0``, ``f1``, ``f2`` (float32) and ``label``
(int32 0..2, the same on every row of a sequence: a last-step, many-to-one label). Sequences have 5..20 steps and
the rows are shuffled, so a reader must group by ``sequence_id`` and order by ``step``.

The label is a function of the WHOLE sequence: the sum of ``f0`` over all steps (``f0`` is white noise, so no
single step or prefix tells) is below -2 (class 0), between -2 and 2 (class 1) or above 2 (class 2). Sequences
whose sum lies within 0.5 of a boundary are left out, so the classes are separable with a margin. ``f1`` is noise
and ``f2`` a noisy ramp over the steps; neither carries the label. The classes are balanced. The label is
computed from the stored (float32-rounded) values, so it is exact: a model that sums ``f0`` scores 100%.

``train.parquet``: 800 sequences (ids 0..799); ``test.parquet``: 200 sequences (ids 1,000,000..), drawn with
another seed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

FEATURES = ("f0", "f1", "f2")
LABEL = "label"
NUM_CLASSES = 3
MIN_STEPS, MAX_STEPS = 5, 20
BOUNDARY = 2.0
MARGIN = 0.5
TEST_ID_OFFSET = 1_000_000


def generate(sequences: int, seed: int = 0, first_id: int = 0) -> pd.DataFrame:
    """``sequences`` sequences as shuffled step rows; the same arguments always give the same frame."""
    rng = np.random.default_rng(seed)
    pool = 4 * sequences + 64  # enough candidates: about half fall in the margins or an over-full class
    lengths = rng.integers(MIN_STEPS, MAX_STEPS + 1, size=pool)
    total = int(lengths.sum())
    f0 = np.round(rng.normal(0.0, 1.0, total), 3).astype(np.float32)
    starts = np.cumsum(lengths) - lengths
    sums = np.add.reduceat(f0.astype(np.float64), starts)
    label = np.digitize(sums, [-BOUNDARY, BOUNDARY])
    clear = np.abs(np.abs(sums) - BOUNDARY) > MARGIN
    per_class = [sequences // NUM_CLASSES + (c < sequences % NUM_CLASSES) for c in range(NUM_CLASSES)]
    chosen = np.sort(np.concatenate([np.flatnonzero(clear & (label == c))[:k] for c, k in enumerate(per_class)]))
    if len(chosen) != sequences:
        raise RuntimeError("candidate pool too small")  # cannot happen with the pool above; kept as a guard
    chosen = rng.permutation(chosen)

    n_steps = lengths[chosen]
    rows = int(n_steps.sum())
    step = np.arange(rows) - np.repeat(np.cumsum(n_steps) - n_steps, n_steps)
    source = np.repeat(starts[chosen], n_steps) + step  # each chosen sequence's f0 values, in step order
    ids = np.repeat(np.arange(first_id, first_id + sequences, dtype=np.int64), n_steps)
    frame = pd.DataFrame(
        {
            "sequence_id": ids,
            "step": step.astype(np.int32),
            "f0": f0[source],
            "f1": np.round(rng.normal(0.0, 1.0, rows), 3).astype(np.float32),
            "f2": np.round(step / MAX_STEPS + rng.normal(0.0, 0.1, rows), 3).astype(np.float32),
            LABEL: np.repeat(label[chosen], n_steps).astype(np.int32),
        }
    )
    return frame.iloc[rng.permutation(rows)].reset_index(drop=True)


def frames(seed: int = 0, train: int = 800, test: int = 200) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(train, test) step rows: independent draws (seeds ``seed`` and ``seed + 1``) with disjoint ids."""
    return generate(train, seed), generate(test, seed + 1, first_id=TEST_ID_OFFSET)


def write(out_dir: str = "datasets/sequences", seed: int = 0, train: int = 800, test: int = 200) -> None:
    """Write ``train.parquet`` and ``test.parquet``."""
    path = Path(out_dir)
    path.mkdir(parents=True, exist_ok=True)
    train_frame, test_frame = frames(seed, train, test)
    train_frame.to_parquet(path / "train.parquet", index=False)
    test_frame.to_parquet(path / "test.parquet", index=False)

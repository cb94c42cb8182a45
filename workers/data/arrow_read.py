"""Local parquet read by the barrier tasks themselves: Arrow from the files into the tasks, no Spark shuffle.

When a torch job's training data is local parquet (a file or a flat directory of part files) and its bad-row pass
found no bad row, each barrier task reads its own equal share of the rows with pyarrow, in file order: rank ``r``
of ``n`` gets the global rows ``[r*T//n, (r+1)*T//n)``. A row's stable id is its global index; its split is
:func:`held_out` of that index, the same expression the Spark bad-row pass counts with
(:func:`workers.training.torch.prepare.split_column`), so
the counts the driver logged are the rows the tasks train on.

Executor-side: stdlib, numpy, pyarrow only (the Spark expression is built on the driver).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

SCALE = 1_000_000
"""The split compares ``pmod(hash, SCALE)`` with ``fraction * SCALE``."""
_M32 = np.uint64(0xFFFFFFFF)


def local_files(path: str) -> list[str] | None:
    """The parquet files of a local file or flat directory (no subdirectories, which may be partitions), in the
    order the tasks read them; None otherwise."""
    if "://" in path and not path.startswith("file://"):
        return None
    path = path.removeprefix("file://")
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        return None
    entries = sorted(e for e in os.listdir(path) if not e.startswith(("_", ".")))
    files = [os.path.join(path, e) for e in entries]
    if not files or any(os.path.isdir(f) for f in files):
        return None
    return [f for f in files if os.path.getsize(f)] or None


def file_rows(files: list[str]) -> list[int]:
    import pyarrow.parquet as pq

    return [pq.ParquetFile(f).metadata.num_rows for f in files]


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return ((x << np.uint64(r)) | (x >> np.uint64(32 - r))) & _M32


def _mix(h1: np.ndarray, k1: np.ndarray) -> np.ndarray:
    k1 = (_rotl((k1 * np.uint64(0xCC9E2D51)) & _M32, 15) * np.uint64(0x1B873593)) & _M32
    return (_rotl(h1 ^ k1, 13) * np.uint64(5) + np.uint64(0xE6546B64)) & _M32


def spark_hash(values: np.ndarray, seed: np.ndarray | int) -> np.ndarray:
    """Spark's Murmur3 ``hash`` of int64 ``values`` with a (per-value) 32-bit seed, as signed int32 in int64."""
    v = values.astype(np.int64).view(np.uint64)
    h1 = np.asarray(seed, dtype=np.int64).astype(np.uint64) & _M32
    h1 = _mix(_mix(h1, v & _M32), v >> np.uint64(32))
    h1 ^= np.uint64(8)
    h1 ^= h1 >> np.uint64(16)
    h1 = (h1 * np.uint64(0x85EBCA6B)) & _M32
    h1 ^= h1 >> np.uint64(13)
    h1 = (h1 * np.uint64(0xC2B2AE35)) & _M32
    h1 ^= h1 >> np.uint64(16)
    signed = h1.astype(np.int64)
    return np.where(signed >= 2**31, signed - 2**32, signed)


def held_out(index: np.ndarray, seed: int, fraction: float) -> np.ndarray:
    """Whether each global row index is held out for validation: Spark's
    ``pmod(hash(seed, index), SCALE) < fraction * SCALE``."""
    first = spark_hash(np.array([seed], np.int64), 42)[0]
    return (spark_hash(index, first) % SCALE) < round(fraction * SCALE)


def shares(total: int, workers: int) -> list[tuple[int, int]]:
    return [(r * total // workers, (r + 1) * total // workers) for r in range(workers)]


def read_share(spec: dict[str, Any], rank: int, split_name: str, row_name: str) -> pa.Table:
    """This rank's rows: the spec's columns, string class labels as their index, the split and the row id."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    start, end = spec["shares"][rank]
    pieces: list[pa.Table] = []
    offset = 0
    for name, count in zip(spec["files"], spec["rows"], strict=True):
        lo, hi = max(start, offset), min(end, offset + count)
        if lo < hi:
            pieces.extend(_rows(pq.ParquetFile(name), spec["columns"], lo - offset, hi - offset))
        offset += count
    table = pa.concat_tables(pieces) if pieces else pa.table({c: pa.array([], pa.float64()) for c in spec["columns"]})
    label, classes = spec.get("label"), spec.get("class_labels")
    if label is not None and classes is not None:
        index = pc.index_in(table.column(label), value_set=pa.array(classes, pa.string()))
        table = table.set_column(table.column_names.index(label), label, index.cast(pa.int64()))
    index = np.arange(start, end, dtype=np.int64)
    held = held_out(index, spec["seed"], spec["fraction"]).astype(np.int32)
    return table.append_column(split_name, pa.array(held)).append_column(row_name, pa.array(index))


def _rows(file: Any, columns: list[str], lo: int, hi: int) -> list[pa.Table]:
    """Rows ``[lo, hi)`` of one file, reading only the row groups they fall in."""
    out = []
    first = 0
    for group in range(file.metadata.num_row_groups):
        n = file.metadata.row_group(group).num_rows
        a, b = max(lo, first), min(hi, first + n)
        if a < b:
            out.append(file.read_row_group(group, columns=columns).slice(a - first, b - a))
        first += n
    return out

"""Checkpoint writes: direct I/O against safetensors' buffered ``save_file``, for the MLPs of ``bench.network``.

Run as ``python -m bench.checkpoint [--quick] [--dir D]``. For the 1.1M and 9.7M MLPs (Adam, after one step) it
writes what one gradient-sharing checkpoint holds (``checkpoint.save_weights``: the model; ``save_rank_state``:
Adam's two moments and the residual, 4 + 12 bytes per parameter) into a fresh directory, fsync and rename
included, as the trainer does, alternating the two ways (``SPARKTRAIN_DIRECT_IO`` 1 and 0) so that both see the
same machine, ``--repeats`` times each (default 8), with one writer and with two at once (two threads, as two
ranks of one host write theirs). ``kept``: every checkpoint stays on the disk until the end, as the trainer keeps
its checkpoints, so buffered writes grow the page cache; ``removed``: each is deleted before the next is written,
so the page cache reuses the pages just freed. Prints the median seconds and MB/s of each and the ratio, and saves
them to ``bench/results/checkpoint.json`` (not with ``--quick``: 3 repeats, the 1.1M MLP only). ``--dir``: where
to write (default: a temporary directory on the default temp filesystem).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch

from bench.trainer import wide_mlp
from workers.training.torch import checkpoint as ckpt
from workers.training.torch.network import build_network
from workers.training.torch.optim import build_optimizer
from workers.training.torch.spec import parse_network, parse_optimizer

RESULTS = Path(__file__).parent / "results" / "checkpoint.json"
MODELS = {"mlp_1m": 1024, "mlp_10m": 3072}


def _state(width: int) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    network = wide_mlp(width)
    model = build_network(parse_network(network, input_shape=(64,)), seed=7)
    optimizer = build_optimizer(parse_optimizer({"type": "adam", "learning_rate": 1e-3}), model, l2=0.0)
    model(torch.randn(32, 64)).sum().backward()
    optimizer.step()
    tensors, _ = ckpt.split_optimizer_state(optimizer.state_dict())
    residual = torch.randn(sum(p.numel() for p in model.parameters())) * 1e-4
    return model, {**tensors, "residual": residual}


def _write(directory: Path, rank: int, model: torch.nn.Module, rank_tensors: dict[str, torch.Tensor]) -> None:
    if rank == 0:
        ckpt.save_weights(directory, model)
    ckpt.save_rank_state(directory, rank, rank_tensors, {"optimizer": {}})


def _timed(root: Path, direct: bool, writers: int, model: torch.nn.Module, state: dict[str, torch.Tensor],
           keep: bool) -> float:  # fmt: skip
    os.environ["SPARKTRAIN_DIRECT_IO"] = "1" if direct else "0"
    directory = Path(tempfile.mkdtemp(dir=root))
    errors: list[BaseException] = []

    def one(rank: int) -> None:
        try:
            _write(directory, rank, model, state)
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=one, args=(r,)) for r in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if not keep:
        shutil.rmtree(directory)
    if errors:
        raise errors[0]
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    repeats = args.repeats or (3 if args.quick else 8)
    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix="bench-checkpoint-", dir=args.dir))
    out: dict[str, Any] = {"load_average_start": os.getloadavg(), "dir": str(root), "repeats": repeats}
    try:
        for name, width in list(MODELS.items())[: 1 if args.quick else None]:
            model, state = _state(width)
            weights_mb = sum(t.numel() * t.element_size() for t in ckpt.model_tensors(model).values()) / 1e6
            rank_mb = sum(t.numel() * t.element_size() for t in state.values()) / 1e6
            mb = weights_mb + rank_mb  # rank 0 writes both; every other rank its own state
            entry: dict[str, Any] = {"checkpoint_mb_rank0": round(mb, 1)}
            for writers, pattern in ((1, "kept"), (2, "kept"), (2, "removed")):
                keep = pattern == "kept"
                times: dict[str, list[float]] = {"direct": [], "buffered": []}
                for _ in range(repeats):
                    for way in ("direct", "buffered"):
                        times[way].append(_timed(root, way == "direct", writers, model, state, keep))
                median = {way: statistics.median(ts) for way, ts in times.items()}
                written = mb + (writers - 1) * rank_mb
                entry[f"writers_{writers}_{pattern}"] = {
                    "mb_written": round(written, 1),
                    **{f"{way}_s": round(s, 4) for way, s in median.items()},
                    **{f"{way}_mb_per_s": round(written / s) for way, s in median.items()},
                    "all_s": {way: [round(t, 4) for t in ts] for way, ts in times.items()},
                    "buffered_over_direct": round(median["buffered"] / median["direct"], 2),
                }
                d, b = median["direct"], median["buffered"]
                print(
                    f"{name:8} {writers} writer(s), {pattern:7} {written:7.1f} MB  direct {d:.3f} s "
                    f"({written / d:6.0f} MB/s)  buffered {b:.3f} s ({written / b:6.0f} MB/s)  "
                    f"buffered/direct {b / d:.2f}"
                )
            out[name] = entry
    finally:
        shutil.rmtree(root, ignore_errors=True)
        os.environ.pop("SPARKTRAIN_DIRECT_IO", None)
    out["load_average_end"] = os.getloadavg()
    print(json.dumps(out))
    if not args.quick:
        RESULTS.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()

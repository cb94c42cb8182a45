"""Threshold codec benchmark: message bytes and encode/decode time per coding, against dense fp32.

Run as ``python -m bench.codec [--quick]``. For every N and sparsity s it builds a residual with exactly
``round(s * N)`` elements at or above tau (random positions and signs, 1-3 tau) and the rest below it, then
encodes it with each coding forced (SPARSE_COMPACT, SPARSE_INT32, BITMAP) and decodes the message into a zero
buffer. The dense baseline is what plain fp32 sharing moves (4N bytes): "encode" is a copy of the update,
"decode" one ``add_``. ``*`` marks the coding the default encoder picks (compact below N/16, bitmap from there).
Times are medians over repeats on this machine's CPU threads (``--device cuda``: residual and decode buffer on
the GPU, synchronized, message bytes still built on the CPU).

Then the whole per-step codec cost of one gradient-sharing worker on ONE CPU thread (``torch.set_num_threads(1)``):
the update added to the residual, the encode, and the decode of W = 2 messages (its own and a peer's) applied to
the parameters as the trainer does (straight into them; consecutive bitmaps summed, in one pass), in ms per
million parameters, beside the floor, one plain
``torch.add`` over a buffer of the same size, and the ratio. The last line is one JSON object with every figure;
a CPU run without ``--quick`` also writes it to bench/results/codec.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from workers.codecs import native, threshold
from workers.codecs.threshold import (
    MessageKind,
    bitmap_min_count,
    decode_accumulate,
    encode_threshold,
)

RESULTS = Path(__file__).resolve().parent / "results" / "codec.json"
STEP_SIZES = (1_100_000, 10_000_000)
STEP_SPARSITIES = (1e-4, 1e-3, 1e-2, 0.1)
SIZES = (100_000, 1_000_000, 10_000_000)
QUICK_SIZES = (100_000, 1_000_000)
SPARSITIES = (1e-4, 1e-3, 1e-2, 0.1)
TAU = 1.0
HEADER = (
    f"{'N':>10} {'sparsity':>8} {'coding':<11} {'count':>9} {'bytes':>11} {'B/idx':>6} {'x fp32':>8} "
    f"{'enc ms':>8} {'dec ms':>8}"
)


def _residual(n: int, sparsity: float, rng: np.random.Generator, device: torch.device) -> tuple[torch.Tensor, int]:
    count = round(sparsity * n)
    values = rng.uniform(-0.9 * TAU, 0.9 * TAU, n).astype(np.float32)
    chosen = rng.choice(n, size=count, replace=False)
    values[chosen] = (rng.choice([-1.0, 1.0], count) * rng.uniform(1.0, 3.0, count) * TAU).astype(np.float32)
    return torch.from_numpy(values).to(device), count


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _median_ms(run: Callable[[], Any], prepare: Callable[[], Any], repeats: int, device: torch.device) -> float:
    return 1e3 * statistics.median(_times(run, prepare, repeats, device))


def _times(run: Callable[[], Any], prepare: Callable[[], Any], repeats: int, device: torch.device) -> list[float]:
    times = []
    for _ in range(repeats):
        prepare()
        _sync(device)
        start = time.perf_counter()
        run()
        _sync(device)
        times.append(time.perf_counter() - start)
    return times


def _codings(n: int) -> dict[str, dict[str, Any]]:
    # bitmap_ratio=1 forces sparse (a bitmap only if every element is sent); ratio n makes any count >= 2 a bitmap.
    return {
        "compact": {"index_coding": "compact", "bitmap_ratio": 1},
        "int32": {"index_coding": "int32", "bitmap_ratio": 1},
        "bitmap": {"index_coding": "compact", "bitmap_ratio": max(n, 1)},
    }


def _measure_case(
    n: int, sparsity: float, rng: np.random.Generator, repeats: int, device: torch.device
) -> list[dict[str, Any]]:
    base, count = _residual(n, sparsity, rng, device)
    work = torch.empty(n, device=device)
    out = torch.zeros(n, device=device)
    default = "bitmap" if count >= bitmap_min_count(n) else "compact"
    rows = []
    for coding, kwargs in _codings(n).items():
        encoded = encode_threshold(work.copy_(base), TAU, **kwargs)
        assert encoded.count == count
        assert (encoded.kind == MessageKind.BITMAP) == (coding == "bitmap")
        encode_ms = _median_ms(
            partial(encode_threshold, work, TAU, **kwargs), partial(work.copy_, base), repeats, device
        )
        decode_ms = _median_ms(partial(decode_accumulate, [encoded.message], out), out.zero_, repeats, device)
        rows.append(
            {
                "n": n,
                "sparsity": sparsity,
                "coding": coding,
                "default": coding == default,
                "count": count,
                "bytes": encoded.nbytes,
                "bytes_per_index": (encoded.nbytes - 16) / count if count else None,
                "ratio_vs_fp32": 4 * n / encoded.nbytes,
                "encode_ms": encode_ms,
                "decode_ms": decode_ms,
            }
        )
    rows.append(
        {
            "n": n,
            "sparsity": sparsity,
            "coding": "dense_fp32",
            "default": False,
            "count": n,
            "bytes": 4 * n,
            "bytes_per_index": 4.0,
            "ratio_vs_fp32": 1.0,
            "encode_ms": _median_ms(partial(work.copy_, base), lambda: None, repeats, device),
            "decode_ms": _median_ms(partial(out.add_, base), out.zero_, repeats, device),
        }
    )
    return rows


def run(
    sizes: tuple[int, ...],
    sparsities: tuple[float, ...],
    repeats: int,
    device: torch.device | str = "cpu",
    seed: int = 0,
) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    target = torch.device(device)
    return [row for n in sizes for sparsity in sparsities for row in _measure_case(n, sparsity, rng, repeats, target)]


def step_cost(n: int, sparsity: float, rng: np.random.Generator, repeats: int, workers: int = 2) -> dict[str, Any]:
    """One worker's codec work per step at ``sparsity`` (default coding) on one thread, and the ``torch.add`` floor."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        base, count = _residual(n, sparsity, rng, torch.device("cpu"))
        update = torch.from_numpy(rng.uniform(-1e-3, 1e-3, n).astype(np.float32))
        peers = [encode_threshold(base.clone(), TAU).message for _ in range(workers - 1)]
        residual, delta, flat = torch.empty(n), torch.zeros(n), torch.zeros(n)

        def one_step() -> None:
            residual.add_(update)
            encoded = encode_threshold(residual, TAU)
            # as the trainer does: every message straight into the parameters, its own from what the encoder kept
            decode_accumulate([encoded, *peers], flat, scale=-1.0, sum_bitmaps=True)

        cpu = torch.device("cpu")
        step_s = _times(one_step, partial(residual.copy_, base), repeats, cpu)
        add_s = _times(partial(torch.add, residual, update, out=delta), lambda: None, repeats, cpu)
        probe = encode_threshold(base.clone(), TAU)
        threshold._NATIVE = False  # the same step with numpy alone, as before the C loops
        numpy_s = _times(one_step, partial(residual.copy_, base), repeats, cpu)
    finally:
        threshold._NATIVE = True
        torch.set_num_threads(threads)
    per_million = 1e3 * 1e6 / n
    return {
        "n": n,
        "sparsity": sparsity,
        "workers": workers,
        "count": count,
        "coding": "bitmap" if probe.kind == MessageKind.BITMAP else "compact",
        "step_ms": 1e3 * statistics.median(step_s),
        "step_ms_per_million": statistics.median(step_s) * per_million,
        "add_ms_per_million": statistics.median(add_s) * per_million,
        "ratio_to_add": statistics.median(step_s) / statistics.median(add_s),
        # The fastest repeat: on a shared machine the median carries other processes' load.
        "best_step_ms_per_million": min(step_s) * per_million,
        "best_add_ms_per_million": min(add_s) * per_million,
        "best_ratio_to_add": min(step_s) / min(add_s),
        "native": native.library() is not None,
        "numpy_step_ms_per_million": statistics.median(numpy_s) * per_million,
        "numpy_best_step_ms_per_million": min(numpy_s) * per_million,
    }


def _step_table(rows: list[dict[str, Any]]) -> str:
    header = (
        f"{'N':>10} {'sparsity':>8} {'coding':<8} {'step ms':>8} {'ms/M':>7} {'add ms/M':>9} {'x add':>6} "
        f"{'best ms/M':>9} {'best add':>9} {'x add':>6} {'numpy ms/M':>10} {'best':>6}"
        "   (1 thread; median, then fastest repeat; numpy: the same step without the C loops)"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(
            f"{row['n']:>10} {row['sparsity']:>8g} {row['coding']:<8} {row['step_ms']:>8.2f} "
            f"{row['step_ms_per_million']:>7.2f} {row['add_ms_per_million']:>9.3f} {row['ratio_to_add']:>6.1f} "
            f"{row['best_step_ms_per_million']:>9.2f} {row['best_add_ms_per_million']:>9.3f} "
            f"{row['best_ratio_to_add']:>6.1f} {row['numpy_step_ms_per_million']:>10.2f} "
            f"{row['numpy_best_step_ms_per_million']:>6.2f}"
        )
    return "\n".join(lines)


def _table(rows: list[dict[str, Any]]) -> str:
    lines = [HEADER, "-" * len(HEADER)]
    for row in rows:
        per_index = "" if row["bytes_per_index"] is None else f"{row['bytes_per_index']:.2f}"
        coding = row["coding"] + ("*" if row["default"] else "")
        lines.append(
            f"{row['n']:>10} {row['sparsity']:>8g} {coding:<11} {row['count']:>9} {row['bytes']:>11} {per_index:>6} "
            f"{row['ratio_vs_fp32']:>8.1f} {row['encode_ms']:>8.2f} {row['decode_ms']:>8.2f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.codec", description="Threshold codec benchmark.")
    parser.add_argument("--quick", action="store_true", help="N up to 1e6 only (well under a minute)")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per figure (default 7, quick 5)")
    parser.add_argument("--device", default="cpu", help="where the residual and decode buffer live (cpu, cuda)")
    args = parser.parse_args(argv)
    sizes = QUICK_SIZES if args.quick else SIZES
    repeats = args.repeats or (5 if args.quick else 7)
    started = time.perf_counter()
    rows = run(sizes, SPARSITIES, repeats, args.device)
    print(_table(rows))
    step_rng = np.random.default_rng(1)
    step_sizes = STEP_SIZES[:1] if args.quick else STEP_SIZES
    steps = [step_cost(n, s, step_rng, max(repeats, 9)) for n in step_sizes for s in STEP_SPARSITIES]
    print()
    print(_step_table(steps))
    summary = {
        "benchmark": "codec",
        "quick": args.quick,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "device": args.device,
        "repeats": repeats,
        "tau": TAU,
        "seconds": round(time.perf_counter() - started, 2),
        "results": rows,
        "step": steps,
    }
    if not args.quick and args.device == "cpu":
        RESULTS.write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, separators=(",", ":")))


if __name__ == "__main__":
    main()

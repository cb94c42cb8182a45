"""The GPU check (docs/testing.md, "GPU checks"): the executor-side trainer and the codec on CUDA, CPU beside.

Runs where there is CUDA torch but no pyspark or xgboost: the trainer runs through
``workers.training.torch.local.run_local`` (rank, world size and rendezvous address passed in, as a barrier
task would get them from Spark). Writes one JSON file of results; prints a table.

- codec: encode/decode times for N in {1e6, 1e7} at several sparsities on CPU and CUDA, and that decoding a
  CUDA-encoded message gives bitwise the CPU result;
- trainer: digits CNN, the 1.1M-parameter MLP and an LSTM on the shipped sequences (variable lengths: cuDNN's
  recurrent kernels with masks), gradient_sharing and allreduce, 2 processes:
  on CPU (gloo), on the GPU with NCCL when there are 2 GPUs, else computing on the one GPU with collectives
  over gloo (NCCL refuses two ranks on one device), plus 1 process with NCCL to exercise that backend.

Usage: ``scripts/gpu_check.sh`` (or ``python scripts/gpu_check.py --out DIR [--cpu-only] [--epochs N]``).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.splits import LSTM, layout, splits_for  # noqa: E402
from bench.trainer import CNN, WIDE  # noqa: E402
from workers.codecs.threshold import decode, encode_threshold  # noqa: E402
from workers.training.torch.config import TrainerConfig, parse_sharing  # noqa: E402
from workers.training.torch.local import run_local  # noqa: E402
from workers.training.torch.spec import parse_optimizer  # noqa: E402


def codec(devices: list[str]) -> list[dict[str, Any]]:
    rows = []
    for n in (1_000_000, 10_000_000):
        base = torch.randn(n, generator=torch.Generator().manual_seed(0)) * 0.01
        for sparsity in (1e-4, 1e-3, 1e-2):
            tau = float(torch.quantile(base[:1_000_000].abs(), 1 - sparsity))
            reference = None
            for device in devices:
                r = base.to(device)
                for _ in range(2):  # warm-up
                    encode_threshold(r.clone(), tau)
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                reps = 5
                for _ in range(reps):
                    enc = encode_threshold(r.clone(), tau)
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                enc_ms = (time.perf_counter() - t0) / reps * 1000
                t0 = time.perf_counter()
                for _ in range(reps):
                    out = decode(enc.message, n, device=torch.device(device))
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                dec_ms = (time.perf_counter() - t0) / reps * 1000
                decoded = out.cpu()
                same = None if reference is None else bool(torch.equal(decoded, reference))
                reference = decoded if reference is None else reference
                rows.append(
                    {
                        "n": n,
                        "sparsity": sparsity,
                        "device": device,
                        "count": enc.count,
                        "bytes": enc.nbytes,
                        "encode_ms": round(enc_ms, 3),
                        "decode_ms": round(dec_ms, 3),
                        "equal_to_cpu": same,
                    }
                )
    return rows


def trainer_run(
    network: dict[str, Any],
    lr: float,
    mode: str,
    epochs: int,
    world: int,
    device: str,
    gpus: list[list[str]] | None,
    comm_device: str | None,
    sharing: dict[str, Any] | None = None,
) -> dict[str, Any]:
    splits = splits_for(network, world)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = TrainerConfig(
            job_id="gpu-check",
            network=network,
            optimizer={"type": "adam", "learning_rate": lr},
            mode=mode,
            sharing=parse_sharing(sharing, parse_optimizer({"type": "adam", "learning_rate": lr})),
            averaging_frequency=5,
            epochs=epochs,
            batch_size=32,
            num_workers=world,
            seed=7,
            device=device,  # type: ignore[arg-type]
            data=layout(network),
            checkpoint_dir=f"{tmp}/checkpoints",
            model_dir=f"{tmp}/model",
            collective_timeout_s=300,
        )
        t0 = time.perf_counter()
        results = run_local(cfg, splits, gpus=gpus, comm_device=comm_device)
        wall = time.perf_counter() - t0
    failed = [r for r in results if "exception" in r or "error" in r]
    if failed:
        return {"failed": failed[0].get("exception") or failed[0].get("error"), "wall_s": wall}
    r0 = results[0]
    return {
        "accuracy": r0["validation"]["accuracy"],
        "device": r0["device"],
        "wall_s": round(wall, 2),
        "train_s": round(max(r["train_s"] for r in results), 3),
        "samples_per_s": round(sum(r["samples"] for r in results) / max(r["train_s"] for r in results), 1),
        "bytes_per_step": r0["bytes_sent"] / max(1, r0["steps"]),
        "replicas_identical": r0["replicas_identical"],
        # which codec each worker ran ("c", "numpy (why)", "torch" for CUDA tensors) and the wire-true accounting
        "codec": [r.get("codec") for r in results],
        "wire_bytes_per_step": r0.get("wire_bytes_per_step"),
        "wire_compression": r0.get("wire_compression"),
        "codec_compression": r0.get("codec_compression"),
        "dense_steps": r0.get("dense_steps"),
        "steps": r0["steps"],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(REPO / "bench/results"))
    parser.add_argument("--cpu-only", action="store_true", help="dry run of the script on a machine without CUDA")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument(
        "--models",
        default="cnn,wide_mlp,lstm,lstm_thresholded",
        help="comma-separated: cnn, wide_mlp, lstm, lstm_thresholded",
    )
    args = parser.parse_args()
    cuda = torch.cuda.is_available() and not args.cpu_only
    gpus = torch.cuda.device_count() if cuda else 0
    report: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpus": [torch.cuda.get_device_name(i) for i in range(gpus)],
    }
    devices = ["cpu"] + (["cuda:0"] if cuda else [])
    from workers.codecs import native

    report["cpu_codec"] = native.engine()  # "c" when the C codec built on that machine, else why not
    report["codec"] = codec(devices)
    runs = []
    # lstm_thresholded: the LSTM is small enough to be exchanged exactly by default; this one forces the
    # threshold codec on it (exact_below_bytes 0), the case the README's accuracy gap was measured on
    models: dict[str, tuple[dict[str, Any], float, dict[str, Any] | None, tuple[str, ...]]] = {
        "cnn": (CNN, 3e-3, None, ("gradient_sharing", "allreduce")),
        "wide_mlp": (WIDE, 1e-3, None, ("gradient_sharing", "allreduce")),
        "lstm": (LSTM, 1e-2, None, ("gradient_sharing", "allreduce")),
        "lstm_thresholded": (LSTM, 1e-2, {"exact_below_bytes": 0}, ("gradient_sharing",)),
    }
    for model, (network, lr, sharing, modes) in models.items():
        if model not in args.models.split(","):
            continue
        for mode in modes:
            setups: list[tuple[str, int, str, list[list[str]] | None, str | None]] = [
                ("cpu-gloo-2", 2, "cpu", None, None)
            ]
            if model == "lstm_thresholded" and cuda:  # 1 process exchanges nothing: only the 2-process setups
                setups.append(("cuda-compute-gloo-2", 2, "cuda", [["0"], ["0"]], "cpu"))
            elif cuda and gpus >= 2:
                setups.append(("cuda-nccl-2", 2, "cuda", [["0"], ["1"]], None))
            elif cuda:
                setups.append(("cuda-compute-gloo-2", 2, "cuda", [["0"], ["0"]], "cpu"))
                setups.append(("cuda-nccl-1", 1, "cuda", [["0"]], None))
            for name, world, device, gpu_list, comm in setups:
                row = {
                    "model": model,
                    "mode": mode,
                    "setup": name,
                    **trainer_run(network, lr, mode, args.epochs, world, device, gpu_list, comm, sharing),
                }
                runs.append(row)
                print(json.dumps(row), flush=True)
    report["trainer"] = runs
    print(f"{'model':<17} {'mode':<17} {'setup':<20} {'acc':>6} {'train s':>8} {'samples/s':>10} {'B/step':>10} "
          f"{'wire B/step':>12} {'wire x':>7} {'codec'}")  # fmt: skip
    for r in runs:
        if "failed" in r:
            print(f"{r['model']:<17} {r['mode']:<17} {r['setup']:<20} FAILED: {r['failed']}")
            continue
        wire_x = f"{r['wire_compression']:.1f}" if r.get("wire_compression") else "-"
        print(
            f"{r['model']:<17} {r['mode']:<17} {r['setup']:<20} {r['accuracy']:>6.3f} {r['train_s']:>8.2f} "
            f"{r['samples_per_s']:>10.0f} {r['bytes_per_step']:>10.0f} {r.get('wire_bytes_per_step') or 0:>12.0f} "
            f"{wire_x:>7} {','.join(str(c) for c in r['codec'])}"
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = "gpu_check.json" if cuda else "gpu_check_cpu_dry_run.json"
    (out / name).write_text(json.dumps(report, indent=1))
    print(json.dumps({"written": str(out / name), "cuda": cuda}))


if __name__ == "__main__":
    main()

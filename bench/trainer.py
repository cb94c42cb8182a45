"""The gradient-sharing trainer against its peers, on the same work, in one run.

Models: the digits CNN (9,930 parameters) and a wide MLP (64-1024-1024-10, 1,126,410 parameters), 2 workers,
same seed, Adam. For each: sparktrain's ``gradient_sharing`` (compact index coding, and plain 4-byte indices),
``parameter_averaging`` and ``allreduce`` run as sparktrain runs them (the torch family's job driver: data
preparation, one Spark barrier stage, the event monitor); pyspark's ``TorchDistributor`` running an equivalent
DDP loop; and plain single-process torch.

``gradient_sharing_export`` is the same job on the Export data path, measured on a later job that finds the
tensor shards an earlier job wrote (the Direct path prepares the rows in every job). A warm-up stage runs
first and is not measured (a long-lived driver starts its executors' Python workers once).

Reported per run: final validation accuracy, wall time (for sparktrain, data preparation + stage; for
TorchDistributor, ``run()``), samples/s over that wall time, bytes each worker sends per step, compression vs
dense fp32 over the full run, without epoch 1, and the share of bytes sent as bitmaps (an empty message
counts its 16-byte header).

Run: ``python -m bench.trainer [--quick] [--master local[2]]``; prints a table and, last, one JSON object whose
keys ``gradient_sharing``, ``parameter_averaging``, ``allreduce``, ``torch_distributor``, ``single_process``
hold the CNN's figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench.common import save_results

REPO = Path(__file__).resolve().parents[1]
TRAIN, TEST = str(REPO / "datasets/digits/train.parquet"), str(REPO / "datasets/digits/test.parquet")
CNN = {
    "input_shape": [1, 8, 8],
    "layers": [
        {"type": "conv2d", "filters": 16, "kernel_size": 3, "padding": 1, "activation": "relu"},
        {"type": "max_pool2d", "kernel_size": 2},
        {"type": "conv2d", "filters": 32, "kernel_size": 3, "padding": 1, "activation": "relu"},
        {"type": "flatten"},
        {"type": "output", "units": 10, "activation": "softmax", "loss": "cross_entropy"},
    ],
}


def wide_mlp(units: int) -> dict[str, Any]:
    """64 → units → units → 10 on the digits: 1,024 units make 1.1M parameters, 3,072 make 9.7M."""
    hidden = {"type": "dense", "units": units, "activation": "relu"}
    output = {"type": "output", "units": 10, "activation": "softmax", "loss": "cross_entropy"}
    return {"input_shape": [64], "layers": [hidden, dict(hidden), output]}


WIDE = wide_mlp(1024)
MODELS = {"cnn": (CNN, 3e-3), "wide_mlp": (WIDE, 1e-3)}
WORKERS, BATCH, SEED = 2, 32, 7


class BenchContext:
    """A JobContext without a database: the benchmark drives the torch family's job driver directly."""

    def __init__(self, spark: Any, work_dir: Path) -> None:
        self.job_id, self.attempt, self.spark, self.work_dir = uuid.uuid4().hex, 1, spark, work_dir
        self.store: str | None = None
        self.points: list[Any] = []
        self.warnings: list[str] = []

    def progress(self, fraction: float, message: str | None = None) -> None:
        return None

    def metrics(self, points: Iterable[Any]) -> None:
        self.points.extend(points)

    def log(self, message: str, level: str = "INFO") -> None:
        if os.environ.get("BENCH_TRACE"):  # the job's log lines, timed, to see where a run's time goes
            print(f"    [{time.strftime('%H:%M:%S')} {time.perf_counter():.2f}] {message[:200]}", flush=True)

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def checkpoint(
        self, epoch: int, step: int, uri: str, metrics: dict[str, Any], *, keep_epoch: int | None = None
    ) -> str:
        return uuid.uuid4().hex

    @property
    def cancelled(self) -> bool:
        return False

    def check_cancelled(self) -> None:
        return None

    def cancel_grace(self, seconds: float) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


def _request(
    network: dict[str, Any],
    lr: float,
    epochs: int,
    mode: str,
    coding: str,
    data_path: str,
    workers: int = WORKERS,
    sharing: dict[str, Any] | None = None,
) -> Any:
    from app.schemas.train import TrainRequest

    return TrainRequest.model_validate(
        {
            "name": "bench",
            "framework": "torch",
            "dataset": {
                "uri": TRAIN,
                "features": ["pixels"],
                "label": "label",
                "task": "classification",
                "num_classes": 10,
            },
            "validation": {"uri": TEST},
            "network": network,
            "training": {
                "epochs": epochs,
                "batch_size_per_worker": BATCH,
                "num_workers": workers,
                "seed": SEED,
                "optimizer": {"type": "adam", "learning_rate": lr},
                "mode": mode,
                "gradient_sharing": {"index_coding": coding, **(sharing or {})},
                "data_path": data_path,
            },
        }
    )


def run_sparktrain(
    spark: Any,
    settings: Any,
    network: dict[str, Any],
    lr: float,
    epochs: int,
    mode: str,
    coding: str = "compact",
    data_path: str = "direct",
    workers: int = WORKERS,
    sharing: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One job as the service runs it; ``sharing`` adds to the request's ``training.gradient_sharing``."""
    from app.services.planning.training import plan_training
    from workers.training.torch.driver import train

    with tempfile.TemporaryDirectory() as tmp:
        ctx = BenchContext(spark, Path(tmp))
        t0 = time.perf_counter()
        request = _request(network, lr, epochs, mode, coding, data_path, workers, sharing)
        plan = plan_training(request=request, settings=settings, spark=spark)
        result = train(ctx, plan).result
        wall = time.perf_counter() - t0
    return {
        "accuracy": result["validation"]["accuracy"],
        "wall_s": wall,
        "samples_per_s": sum(w["samples"] for w in result["per_worker"]) / wall,
        "bytes_per_step": result["bytes_per_step"],
        "compression": result["compression"],
        "compression_after_epoch_1": result["compression_after_first_epoch"],
        "bitmap_byte_share": result["bitmap_byte_share"],
        "steps_per_worker": result["steps_per_worker"],
        "replicas_identical": result["replicas_identical"],
        "wire_compression": result.get("wire_compression"),
        "wire_bytes_total": sum(w.get("wire_bytes_total") or 0 for w in result["per_worker"]),
        "train_s": max(w["train_s"] for w in result["per_worker"]),
    }


def run_torch_distributor(network: dict[str, Any], lr: float, epochs: int, workers: int = WORKERS) -> dict[str, Any]:
    from pyspark import cloudpickle
    from pyspark.ml.torch.distributor import TorchDistributor

    from bench import ddp_baseline

    cloudpickle.register_pickle_by_value(ddp_baseline)  # executors cannot import bench/
    t0 = time.perf_counter()
    out = TorchDistributor(num_processes=workers, local_mode=False, use_gpu=False).run(
        ddp_baseline.ddp_train, network, lr, epochs, BATCH, SEED, TRAIN, TEST
    )
    assert out is not None, "TorchDistributor returned no result"
    wall = time.perf_counter() - t0
    dense = _parameters(network) * 4
    return {
        "accuracy": out["accuracy"],
        "wall_s": wall,
        "samples_per_s": out["samples"] / wall,
        "bytes_per_step": dense,
        "compression": 1.0,
        "steps_per_worker": out["steps"],
        "train_s": out["train_s"],
    }


def run_single(network: dict[str, Any], lr: float, epochs: int) -> dict[str, Any]:
    from bench.ddp_baseline import single_process

    t0 = time.perf_counter()
    out = single_process(network, lr, epochs, BATCH, SEED, TRAIN, TEST)
    wall = time.perf_counter() - t0
    return {
        "accuracy": out["accuracy"],
        "wall_s": wall,
        "samples_per_s": out["samples"] / wall,
        "bytes_per_step": 0,
        "compression": None,
        "steps_per_worker": out["steps"],
    }


def _parameters(network: dict[str, Any]) -> int:
    from workers.training.torch.spec import parameter_count, parse_network

    return parameter_count(parse_network(network, input_shape=(64,)))


def warm_session(master: str) -> tuple[Any, Any]:
    """A SparkSession and its settings (the UI off, the shipped datasets readable), after one unmeasured stage: the
    first barrier stage of a session starts the executors' Python workers and imports torch there; the service
    pays that once per driver, so it is left out of every measured run."""
    from app.core.settings import Settings
    from app.spark.session import build_spark_session

    settings = Settings(
        var_dir=Path(tempfile.mkdtemp()),
        spark_master=master,
        spark_conf={"spark.ui.enabled": "false"},
        data_roots=[REPO / "datasets"],
    )
    spark = build_spark_session(settings)
    run_sparktrain(spark, settings, CNN, 3e-3, 1, "allreduce")
    return spark, settings


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.trainer")
    parser.add_argument("--quick", action="store_true", help="14 epochs (308 steps per worker), fewer wide runs")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    epochs = 14 if args.quick else 30

    spark, settings = warm_session(args.master)
    runs: dict[str, dict[str, dict[str, Any]]] = {}
    for model, (network, lr) in MODELS.items():
        plan = [
            "gradient_sharing",
            "gradient_sharing_int32",
            "gradient_sharing_export",
            "parameter_averaging",
            "allreduce",
            "torch_distributor",
            "single_process",
        ]
        if args.quick and model == "wide_mlp":
            plan = ["gradient_sharing", "allreduce", "single_process"]
        runs[model] = {}
        for name in plan:
            if name == "torch_distributor":
                runs[model][name] = run_torch_distributor(network, lr, epochs)
            elif name == "single_process":
                runs[model][name] = run_single(network, lr, epochs)
            elif name == "gradient_sharing_export":
                # the Export data path: one job writes the tensor shards, the measured later job reads them
                run_sparktrain(spark, settings, network, lr, 1, "gradient_sharing", data_path="export")
                runs[model][name] = run_sparktrain(spark, settings, network, lr, epochs, "gradient_sharing",
                                                   data_path="export")  # fmt: skip
            else:
                mode = name.removesuffix("_int32")
                coding = "int32" if name.endswith("_int32") else "compact"
                runs[model][name] = run_sparktrain(spark, settings, network, lr, epochs, mode, coding)
            r = runs[model][name]
            print(f"  {model:<9} {name:<23} acc {r['accuracy']:.4f}  wall {r['wall_s']:6.1f} s", flush=True)
    spark.stop()

    print(f"\n{WORKERS} workers, batch {BATCH} per worker, {epochs} epochs, master {args.master}")
    head = f"{'model':<9} {'run':<23} {'accuracy':>8} {'wall s':>7} {'samples/s':>10} {'B/step':>10} "
    print(head + f"{'compr.':>8} {'w/o ep1':>8} {'bitmap %':>9}")
    for model, table in runs.items():
        for name, r in table.items():
            compression = f"{r['compression']:.0f}x" if r.get("compression") else "-"
            after = f"{r['compression_after_epoch_1']:.0f}x" if r.get("compression_after_epoch_1") else "-"
            bitmap = f"{100 * r['bitmap_byte_share']:.0f}" if "bitmap_byte_share" in r else "-"
            print(
                f"{model:<9} {name:<23} {r['accuracy']:>8.4f} {r['wall_s']:>7.1f} {r['samples_per_s']:>10.0f} "
                f"{r['bytes_per_step']:>10.0f} {compression:>8} {after:>8} {bitmap:>9}"
            )
    cnn = runs["cnn"]
    keys = ("accuracy", "wall_s", "samples_per_s", "bytes_per_step", "compression")
    summary = {
        name: {k: cnn[name].get(k) for k in keys}
        for name in ("gradient_sharing", "parameter_averaging", "allreduce", "torch_distributor", "single_process")
    }
    summary["epochs"] = epochs  # type: ignore[assignment]
    summary["all_runs"] = runs  # type: ignore[assignment]
    print(json.dumps(summary))
    save_results("trainer", {**summary, "master": args.master}, quick=args.quick)


if __name__ == "__main__":
    main()

"""Rows per second from a parquet data set to ready torch tensors on the executors, against a plain
single-process pyarrow -> numpy -> torch read of the same file, in the same run.

The sparktrain path is the torch family's own data preparation (read, bad-row check with its counts and the seeded
split in one Spark pass; then each barrier task reads its share of the file, or, for data that needs it, the rows
are dealt to the workers in one shuffle) followed by one barrier stage whose tasks turn their rows into tensors
exactly as training does (``workers.training.torch.data.checked_splits``) and stop there. The Export path is measured
too: the first job writes per-worker shards, a later job reads them. Every Spark job is printed with its duration.

Also measured first: how long ``POST /train``'s planning takes on CSV, JSON-lines and partitioned parquet copies of
the data while a barrier stage holds every task slot, and whether a Spark job ran.

Data: the synthetic taxi generator (11 numeric features), written once to a temporary parquet file.
The direct path, the Export path's first job and the pyarrow read are measured nine times each, interleaved, after
one warm-up of each; the medians are reported. A first Export job writes its shards while its ranks train; with no
training here, the tasks wait for the write after their tensors are ready, and that tail is printed, not counted.

Run: ``python -m bench.data [--quick] [--rows N]``; prints a table and, last, one JSON object, which a full run
(2,000,000 rows) also writes to bench/results/data.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import settle

REPO = Path(__file__).resolve().parents[1]
FEATURES = (
    "passenger_count", "trip_distance", "pickup_longitude", "pickup_latitude", "rate_code", "dropoff_longitude",
    "dropoff_latitude", "hour", "day_of_week", "is_weekend", "h_distance",
)  # fmt: skip
WORKERS = 2
REPEATS = 9


def single_process(path: Path) -> float:
    """Seconds for pyarrow -> numpy -> torch of the whole file in one process."""
    import numpy as np
    import pyarrow.parquet as pq
    import torch

    t0 = time.perf_counter()
    table = pq.read_table(path, columns=[*FEATURES, "fare_amount"])
    x = np.stack([table.column(c).to_numpy().astype(np.float32) for c in FEATURES], axis=1)
    y = table.column("fare_amount").to_numpy().astype(np.float32)
    torch.from_numpy(x), torch.from_numpy(y)
    return time.perf_counter() - t0


def _tensors_only(cfg: dict[str, Any]) -> Any:
    def convert(batches: Any) -> Any:
        import time as clock

        import pyarrow as pa

        from workers.training.torch.comm import StoreGather, join_store
        from workers.training.torch.config import TrainerConfig
        from workers.training.torch.data import ExportWriter, checked_splits, load_splits

        config = TrainerConfig.from_dict(cfg)
        from pyspark import BarrierTaskContext

        task = BarrierTaskContext.get()
        rank, world_size = task.partitionId(), len(task.getTaskInfos())
        t0 = clock.perf_counter()
        assert config.rendezvous is not None  # the driver's store, as a job's tasks join it (remote.py)
        store = join_store(config.rendezvous[0], config.rendezvous[1], world_size, config.collective_timeout_s)
        if config.export_mode == "read":
            for _ in batches:
                pass
            train, val = load_splits(Path(config.export_dir or ""), rank)
        else:
            train, val, _counts = checked_splits(batches, config.data, rank, StoreGather(store, rank, world_size))
        ready, ready_at = clock.perf_counter(), clock.time()
        if config.export_mode == "write":  # as the trainer does: written on a thread while the rank trains; with
            # nothing to train here, the task then waits for it: that wait is the write's tail, reported apart
            error = ExportWriter(Path(config.export_dir or ""), rank, train, val).join()
            assert error is None, error
        rows = len(train) + len(val)
        yield pa.RecordBatch.from_arrays(
            [pa.array([rows], pa.int64()), pa.array([ready - t0], pa.float64()),
             pa.array([clock.perf_counter() - ready], pa.float64()), pa.array([ready_at], pa.float64()),
             pa.array([clock.time()], pa.float64())],
            names=["rows", "s", "write_s", "ready_at", "done_at"],
        )  # fmt: skip

    return convert


def spark_jobs(spark: Any, after: int) -> list[tuple[int, str, float]]:
    """(job id, description, seconds) of every Spark job with an id above ``after``, from the driver's status store
    (what the Spark UI shows; it is kept with the UI disabled too)."""
    store = spark.sparkContext._jsc.sc().statusStore()
    jobs = store.jobsList(None)
    out = []
    for i in range(jobs.size()):
        job = jobs.apply(i)
        if job.jobId() <= after or job.submissionTime().isEmpty() or job.completionTime().isEmpty():
            continue
        seconds = (job.completionTime().get().getTime() - job.submissionTime().get().getTime()) / 1000
        out.append((int(job.jobId()), str(job.name())[:70], seconds))
    return sorted(out)


def last_job(spark: Any) -> int:
    ids = [int(i) for i in spark.sparkContext.statusTracker().getJobIdsForGroup(None)]
    store = spark.sparkContext._jsc.sc().statusStore().jobsList(None)
    ids += [int(store.apply(i).jobId()) for i in range(store.size())]
    return max(ids, default=-1)


def sparktrain(spark: Any, settings: Any, path: Path, data_path: str, export_root: Path | None = None
               ) -> tuple[float, int]:  # fmt: skip
    """Seconds from a planned job to tensors on every worker (ready to train), and the rows that arrived; prints each
    Spark job. An Export path's first job writes its shards while its ranks train: here the tasks wait for the write
    after their tensors are ready, and that tail (the slowest rank's) is not counted in the seconds; it is printed."""
    from dataclasses import replace

    from app.schemas.train import TrainRequest
    from app.services.planning.training import plan_training
    from bench.trainer import BenchContext
    from workers.training.torch.driver import rendezvous, trainer_config
    from workers.training.torch.export import stage_input, write_manifest

    request = TrainRequest.model_validate(
        {
            "name": "bench-data",
            "framework": "torch",
            "dataset": {"uri": str(path), "features": list(FEATURES), "label": "fare_amount", "task": "regression"},
            "network": {"layers": [{"type": "output", "units": 1, "activation": "identity", "loss": "mse"}]},
            "training": {"num_workers": WORKERS, "batch_size_per_worker": 64, "data_path": data_path},
        }
    )
    plan = plan_training(request=request, settings=settings, spark=spark)
    if export_root is not None:
        plan = replace(plan, export_root=str(export_root))
    before = last_job(spark)
    with tempfile.TemporaryDirectory() as tmp:
        ctx = BenchContext(spark, Path(tmp))
        t0 = time.perf_counter()
        data = stage_input(ctx, plan)
        prepared = time.perf_counter() - t0
        cfg = replace(
            trainer_config(ctx, plan, data.normalizer, data.source),
            export_dir=str(data.export_dir) if data.export_dir else None,
            export_mode=data.export_mode,
        )
        t1 = time.perf_counter()
        with rendezvous("127.0.0.1", cfg) as address:
            shipped = _tensors_only(replace(cfg, rendezvous=address).to_dict())
            schema = "rows long, s double, write_s double, ready_at double, done_at double"
            out = data.frame.mapInArrow(shipped, schema, barrier=True).collect()
        # from the moment every rank had its tensors (when training would start) to the last task's end; the tasks
        # share this machine's clock
        write_tail = max(float(r["done_at"]) for r in out) - max(float(r["ready_at"]) for r in out)
        staged = time.perf_counter() - t1 - write_tail
        if data.export_mode == "write":
            write_manifest(data, "b")
        seconds = time.perf_counter() - t0 - write_tail
    read = "tasks read the files" if data.source else "rows through Spark"
    print(f"  {data_path} ({data.export_mode or 'direct'}, {read}): {seconds:.2f} s = preparation {prepared:.2f} s "
          f"+ barrier stage {staged:.2f} s + rest {seconds - prepared - staged:.2f} s; Spark jobs:")  # fmt: skip
    for job_id, name, job_s in spark_jobs(spark, before):
        print(f"    job {job_id:>3} {job_s:6.2f} s  {name}")
    print("    task times to tensors:", [round(float(r["s"]), 3) for r in out],
          *(["then writing the export (while training, in a job):", [round(float(r["write_s"]), 3) for r in out]]
            if data.export_mode == "write" else []))  # fmt: skip
    return seconds, sum(int(r["rows"]) for r in out)


def hold_every_slot(spark: Any, release: Path) -> Any:
    """A barrier job with one task per slot, each waiting until ``release`` exists (as a training job holds them),
    started in a thread; returns the thread once every task runs (tests/e2e/test_request_without_spark.py too)."""
    import threading

    sc = spark.sparkContext
    slots, path = sc.defaultParallelism, str(release)

    def wait(_rows: Any) -> Any:
        import os
        import time as clock

        while not os.path.exists(path):
            clock.sleep(0.05)
        yield 1

    def run() -> None:
        sc.setJobGroup("hold-every-slot", "holds the slots while requests are answered")
        sc.parallelize(range(slots), slots).barrier().mapPartitions(wait).collect()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    tracker = sc.statusTracker()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
        if sum(s.numActiveTasks for s in stages if s is not None) >= slots:
            return thread
        time.sleep(0.05)
    release.touch()
    raise RuntimeError("the barrier stage holding every slot did not start")


def _request(dataset: dict[str, Any]) -> Any:
    from app.schemas.train import TrainRequest

    return TrainRequest.model_validate(
        {
            "name": "bench-request",
            "framework": "torch",
            "dataset": dataset,
            "network": {"layers": [{"type": "output", "units": 1, "activation": "identity", "loss": "mse"}]},
            "training": {"num_workers": WORKERS},
        }
    )


def request_latency(spark: Any, settings: Any, tmp: Path, path: Path) -> dict[str, float]:
    """Seconds to plan a torch job (what ``POST /train`` does with the data) on CSV, JSON lines and partitioned
    parquet copies of the data while a barrier stage holds every task slot, and whether a Spark job ran."""
    import pandas as pd

    from app.services.planning.training import plan_training

    frame = pd.read_parquet(path).head(200_000)
    frame.to_csv(tmp / "taxi.csv", index=False)
    frame.to_json(tmp / "taxi.json", orient="records", lines=True)
    frame.to_parquet(tmp / "parts", partition_cols=["is_weekend"])
    warm = {"uri": str(path), "features": list(FEATURES), "label": "fare_amount", "task": "regression"}
    plan_training(request=_request(warm), settings=settings, spark=spark)  # imports, as a running service has them
    release = tmp / "release"
    holder = hold_every_slot(spark, release)
    out: dict[str, float] = {}
    try:
        for name in ("taxi.csv", "taxi.json", "parts"):
            features = [f for f in FEATURES if f != "is_weekend"]
            request = _request(
                {"uri": str(tmp / name), "features": features, "label": "fare_amount", "task": "regression"}
            )
            before = last_job(spark)
            t0 = time.perf_counter()
            plan_training(request=request, settings=settings, spark=spark)
            out[name] = time.perf_counter() - t0
            ran = last_job(spark) != before
            print(f"  request plan on {name} (200,000 rows) with every slot held: {out[name] * 1000:.0f} ms, "
                  f"Spark job ran: {ran}")  # fmt: skip
    finally:
        release.touch()
        holder.join()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.data")
    parser.add_argument("--quick", action="store_true", help="200,000 rows")
    parser.add_argument("--rows", type=int, default=None)
    args = parser.parse_args()
    rows = args.rows or (200_000 if args.quick else 2_000_000)

    from app.core.settings import Settings
    from app.spark.session import build_spark_session
    from datasets.taxi import generate

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"  # beside the var dir and the artifacts: a data root may hold neither
        data.mkdir()
        path = data / "taxi.parquet"
        generate(rows, seed=11).to_parquet(path, index=False)
        settings = Settings(
            var_dir=Path(tmp) / "var", spark_master=f"local[{WORKERS}]", data_roots=[data],
            artifact_root=Path(tmp) / "artifacts", spark_conf={"spark.ui.enabled": "false"},
        )  # fmt: skip
        spark = build_spark_session(settings)
        latency = request_latency(spark, settings, data, path)
        sparktrain(spark, settings, path, "direct")  # warm-up: Python workers, JIT
        sparktrain(spark, settings, path, "export", Path(tmp) / "exports-warm-up")  # and the export's writer
        single_process(path)  # and the same for pyarrow (the file in the page cache for both)
        # interleaved, so that a machine that speeds up or slows down meanwhile moves both alike; medians of nine
        # and the Export path's first job (on an export root of its own each time) in the same rounds
        baselines, runs, firsts = [], [], []
        writeback: list[float] = []
        for i in range(REPEATS):  # the two sparktrain paths in turn first (whichever follows another run is warmer)
            baselines.append(single_process(path))
            settle()
            for which in ("direct", "export") if i % 2 == 0 else ("export", "direct"):
                if which == "direct":
                    runs.append(sparktrain(spark, settings, path, "direct"))
                else:
                    firsts.append(sparktrain(spark, settings, path, "export", Path(tmp) / f"exports-{i}")[0])
                    # the shards are in the page cache; flushed to disk here, untimed (in a job, training overlaps
                    # it), and the time printed
                    t = time.perf_counter()
                    os.sync()
                    writeback.append(time.perf_counter() - t)
                settle()
        baseline = statistics.median(baselines)
        direct, got = statistics.median(s for s, _ in runs), runs[0][1]
        export_write = statistics.median(firsts)  # then a later job, on the last first job's export
        export_read, got_read = sparktrain(spark, settings, path, "export", Path(tmp) / f"exports-{REPEATS - 1}")
        spark.stop()
    assert got == got_read == rows, (got, got_read, rows)
    table = {
        "single_process_pyarrow": baseline,
        "sparktrain_direct": direct,
        "sparktrain_export_first_job": export_write,
        "sparktrain_export_later_job": export_read,
    }
    print(f"{rows:,} rows x {len(FEATURES)} features, {WORKERS} workers (local[{WORKERS}])")
    print(f"{'path':<30} {'seconds':>8} {'rows/s':>12} {'vs pyarrow':>11}")
    for name, seconds in table.items():
        print(f"{name:<30} {seconds:>8.2f} {rows / seconds:>12,.0f} {baseline / seconds:>10.2f}x")
    flushed = statistics.median(writeback)
    print(f"the export's shards flushed to disk after each first job (untimed): median {flushed:.2f} s")
    figures = {k: {"s": round(v, 3), "rows_per_s": round(rows / v)} for k, v in table.items()}
    held = {k: round(v, 3) for k, v in latency.items()}
    load = [round(x, 2) for x in os.getloadavg()]  # the machine is shared: how busy it was (1, 5, 15 min)
    out = {"rows": rows, **figures, "direct_runs_s": [round(s, 3) for s, _ in runs],
           "pyarrow_runs_s": [round(s, 3) for s in baselines], "export_first_runs_s": [round(s, 3) for s in firsts],
           "sync_after_export_first_s": [round(s, 3) for s in writeback],
           "request_s_with_every_slot_held": held, "load_average": load}  # fmt: skip
    if not args.quick and args.rows is None:
        (REPO / "bench" / "results" / "data.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out))


if __name__ == "__main__":
    main()

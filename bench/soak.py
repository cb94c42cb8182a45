"""Soak: one driver process runs N small jobs of every kind one after another; its memory must stay flat.

Starts ``python -m app`` (embedded default: SQLite database and broker in a temporary directory, Spark
``local[2]``, the Spark UI on as in production; the JVM with native memory tracking) and submits, in a fixed cycle
of 8, a torch training on ``datasets/digits`` (2 epochs), an xgboost training on ``datasets/taxi`` (20 rounds), a
Spark ML linear regression, evaluations and keyed batch predictions of those models, waiting for each; after
every job, 12 online predictions of the three models. Every training registers a new version, so the driver's
model cache turns over all the time.

After every job it samples, from outside the driver (``/proc``, ``jcmd`` and the UI's REST API):

- ``py_rss_mb``: the driver's Python process (``VmRSS``);
- the JVM (the driver's ``java`` child): ``jvm_rss_mb``, then, right after a full GC the soak asks for
  (``jcmd GC.class_histogram``; Spark's ContextCleaner asks for one every ``spark.cleaner.periodicGC.interval``),
  ``jvm_heap_live_mb`` (what the heap really retains), ``jvm_rss_after_gc_mb``, and native memory tracking's
  committed memory by kind: ``jvm_heap_committed_mb``, ``jvm_code_mb`` (JIT-compiled code), ``jvm_metaspace_mb``
  and ``jvm_classes``, and ``jvm_native_mb`` = everything else the JVM committed (metaspace, thread stacks, GC
  structures, symbols, direct buffers, ...; not the JIT's transient scratch arenas); ``jvm_untracked_mb`` = RSS
  minus all the JVM committed: mostly C heap that native code freed but the allocator kept
  (``-XX:TrimNativeHeapInterval`` in ``spark-defaults.conf`` hands it back);
- ``workers_pss_mb`` / ``workers``: the Python worker processes under the JVM (``pyspark.daemon`` and the workers
  it forks; proportional set size, so pages shared after fork count once) and their peak address space;
- threads and file descriptors of both processes; what Spark's status store retains (jobs, stages, SQL
  executions), cached RDDs, the blocks Spark's memory store holds (``memory_store_entries``, from the class
  histogram), the driver's storage memory as the UI reports it (``storage_memory_used_mb``: it grows by ~1 MB
  per job while the memory store holds the same few blocks, so it is the status store's count, not memory),
  and the size of ``spark.local.dir``.
At the end it waits 75 s idle and samples again (Spark ends idle Python workers and pool threads after 60 s).

Verdict. Memory is compared from a warm-up on: the later of job ``--warmup`` (20) and the job after which the
status store holds its caps of jobs, stages and SQL executions (it fills up to them by design, ~20 jobs with the
production caps). Before that the JVM is still loading classes, generating reflection accessors and compiling
hot methods (its native memory settles after ~30 jobs). ``warmup`` = median of the 5 samples around it, ``end`` =
median of the last 5, ``slope`` = least squares in MB per job over the second half of the run (and after the
warm-up). A metric is *flat* when ``slope`` < 0.5 MB/job and ``end - warmup`` < 40 MB (workers: 1 MB/job and
100 MB, for 6 processes). A leak of 0.5 MB/job is 5 GB after 10,000 jobs: it would take the driver down within
weeks, and it is well above the soak's resolution (single samples vary by 2-5 MB; over 50 samples the slope's
error is ~0.05 MB/job); smaller leaks need a longer soak. The growth bound lets one-off sizing steps pass.
The metrics judged are the driver's Python RSS, the JVM's live heap, the JVM's native memory and the workers'
memory. The JVM's RSS is reported but not judged: it also holds the committed heap, which G1 grows toward
``spark.driver.memory`` and keeps, and JIT-compiled code, which grows toward ``ReservedCodeCacheSize`` (240 MB)
for a long while as more methods get hot; both are bounded by flags, the table shows how much each moved.

Run ``python -m bench.soak [--jobs N] [--quick]`` (``--quick``: 40 jobs, the status store caps scaled down so
that the store is full after a few jobs); prints one line per job, a summary and, last, one JSON object. The
results with the whole curve go to ``bench/results/soak.json`` (``--quick``: ``bench/results/tmp/``, not kept).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from bench.common import free_port, run_job, stop, wait_ready
from workers.storage import tree_bytes

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
TAXI = [
    "passenger_count", "trip_distance", "pickup_longitude", "pickup_latitude", "rate_code", "dropoff_longitude",
    "dropoff_latitude", "hour", "day_of_week", "is_weekend", "h_distance",
]  # fmt: skip
MLP = {"layers": [{"type": "dense", "units": 32, "activation": "relu"},
                  {"type": "output", "units": 10, "activation": "softmax", "loss": "cross_entropy"}]}  # fmt: skip

# metric -> (slope bound MB/job, growth bound MB): see the module docstring
BOUNDS: dict[str, tuple[float, float]] = {
    "py_rss_mb": (0.5, 40.0),
    "jvm_heap_live_mb": (0.5, 40.0),
    "jvm_native_mb": (0.5, 40.0),
    "workers_pss_mb": (1.0, 100.0),
}
REPORTED = ("jvm_rss_after_gc_mb", "jvm_heap_committed_mb", "jvm_code_mb", "jvm_metaspace_mb", "jvm_classes",
            "jvm_untracked_mb", "jvm_threads", "storage_memory_used_mb")  # fmt: skip
"""Reported with the same numbers, not judged (see the module docstring)."""
CAP_KEYS = {"spark.ui.retainedJobs": "jobs", "spark.ui.retainedStages": "stages",
            "spark.sql.ui.retainedExecutions": "sql"}  # fmt: skip
QUICK_CAPS = {"spark.ui.retainedJobs": "40", "spark.ui.retainedStages": "60", "spark.sql.ui.retainedExecutions": "20"}
"""--quick: the status store's production caps take ~20 jobs to fill; scaled down, it is full after a few jobs."""
HYGIENE_KEYS = (
    *CAP_KEYS, "spark.ui.retainedTasks", "spark.ui.retainedDeadExecutors", "spark.ui.dagGraph.retainedRootRDDs",
    "spark.executor.pyspark.memory", "spark.python.worker.reuse",
    "spark.cleaner.periodicGC.interval", "spark.driver.extraJavaOptions", "jvm flags",
)  # fmt: skip
JVM_OPTIONS = {"spark.driver.extraJavaOptions": "-XX:NativeMemoryTracking=summary"}
MEMORY_ENTRIES = ("org.apache.spark.storage.memory.SerializedMemoryEntry",
                  "org.apache.spark.storage.memory.DeserializedMemoryEntry")  # fmt: skip
"""The blocks (cached partitions, broadcast pieces) Spark's memory store really holds."""
IDLE_S = 75.0
END_COUNTS = ("workers", "daemons", "jvm_threads", "py_threads", "jvm_fds", "py_fds", "retained_jobs",
              "retained_stages", "retained_sql", "cached_rdds", "memory_store_entries", "storage_memory_used_mb",
              "spark_local_dir_mb")  # fmt: skip


# --- the jobs --------------------------------------------------------------------------------------------------


def _train_torch() -> dict[str, Any]:
    return {
        "name": "soak-digits",
        "framework": "torch",
        "dataset": {"uri": "datasets/digits/train.parquet", "features": ["pixels"], "label": "label",
                    "task": "classification", "num_classes": 10, "normalize": "image"},
        "validation": {"uri": "datasets/digits/test.parquet"},
        "network": MLP,
        "training": {"epochs": 2, "batch_size_per_worker": 64, "num_workers": 2,
                     "optimizer": {"type": "adam", "learning_rate": 0.003}},
    }  # fmt: skip


def taxi_job(name: str, framework: str, params: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "framework": framework,
        "dataset": {"uri": "datasets/taxi/train.parquet", "features": TAXI, "label": "fare_amount",
                    "task": "regression"},
        "validation": {"uri": "datasets/taxi/eval.parquet"},
        "params": params,
    }  # fmt: skip


def job_cycle(data: Path, out: Path) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(kind, path, body) for ever: every kind once per cycle of 8, trainings first."""
    digits, taxi = str(data / "digits-keyed.parquet"), str(data / "taxi-keyed.parquet")
    n = 0
    while True:
        n += 1
        yield "train_torch", "/train", _train_torch()
        yield "train_xgboost", "/train", taxi_job("soak-xgb", "xgboost", {"num_round": 20, "max_depth": 4,
                                                                       "num_workers": 2})  # fmt: skip
        yield "train_spark_ml", "/train", taxi_job("soak-lr", "spark_ml", {"algorithm": "linear_regression"})
        yield "evaluate_torch", "/evaluate", {"model": {"name": "soak-digits"}, "dataset": {"uri": digits}}
        yield "predict_torch", "/predict", {"model": {"name": "soak-digits"}, "dataset": {"uri": digits, "key": "id"},
                                            "output_uri": str(out / f"digits-{n}.parquet")}  # fmt: skip
        yield "evaluate_xgboost", "/evaluate", {"model": {"name": "soak-xgb"}, "dataset": {"uri": taxi}}
        yield "predict_xgboost", "/predict", {"model": {"name": "soak-xgb"}, "dataset": {"uri": taxi, "key": "trip_id"},
                                              "output_uri": str(out / f"xgb-{n}.parquet")}  # fmt: skip
        yield "predict_spark_ml", "/predict", {"model": {"name": "soak-lr"},
                                               "dataset": {"uri": taxi, "key": "trip_id"},
                                               "output_uri": str(out / f"lr-{n}.parquet")}  # fmt: skip


def write_data(data: Path) -> tuple[list[list[float]], list[dict[str, Any]]]:
    """Keyed copies of the test sets (batch predictions need a key column); rows for online predictions."""
    import numpy as np
    import pandas as pd

    data.mkdir(parents=True, exist_ok=True)
    digits = pd.read_parquet(REPO / "datasets/digits/test.parquet")
    digits.assign(id=np.arange(len(digits))).to_parquet(data / "digits-keyed.parquet")
    taxi = pd.read_parquet(REPO / "datasets/taxi/eval.parquet")
    taxi.assign(trip_id=np.arange(len(taxi))).to_parquet(data / "taxi-keyed.parquet")
    pixels = [list(map(float, p)) for p in digits["pixels"].head(8)]
    return pixels, taxi[TAXI].head(8).to_dict(orient="records")


def online_predictions(client: httpx.Client, pixels: list[list[float]], taxi: list[dict[str, Any]]) -> int:
    """A few inline predictions of each model that exists yet; returns how many were answered."""
    bodies = [
        {"model": {"name": "soak-digits"}, "instances": pixels},
        {"model": {"name": "soak-digits"}, "dataframe_records": [{"pixels": p} for p in pixels[:2]]},
        {"model": {"name": "soak-xgb"}, "dataframe_records": taxi},
        {"model": {"name": "soak-lr"}, "dataframe_records": taxi[:2]},
    ]
    answered = 0
    for body in bodies * 3:
        response = client.post("/predict", json=body)
        if response.status_code == 200:
            answered += 1
        elif response.status_code != 404:  # a model not trained yet
            raise RuntimeError(f"online /predict: {response.status_code} {response.text[:500]}")
    return answered


# --- measuring the driver from outside --------------------------------------------------------------------------


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process we may read."""
    table: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        table[int(entry)] = (ppid, cmdline)
    return table


def _descendants(root: int, table: dict[int, tuple[int, str]]) -> list[int]:
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, (ppid, _) in table.items() if ppid == parent]
        found += children
        frontier += children
    return found


def _status_kb(pid: int, field: str) -> int:
    match = re.search(rf"^{field}:\s+(\d+)", Path(f"/proc/{pid}/status").read_text(), re.MULTILINE)
    return int(match.group(1)) if match else 0


def _pss_kb(pid: int) -> int:
    match = re.search(r"^Pss:\s+(\d+) kB", Path(f"/proc/{pid}/smaps_rollup").read_text(), re.MULTILINE)
    return int(match.group(1)) if match else 0


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _jcmd(pid: int, *command: str) -> str:
    return subprocess.run(["jcmd", str(pid), *command], capture_output=True, text=True, timeout=120, check=True).stdout


def _heap_used_mb(pid: int) -> float:
    match = re.search(r"heap\s+total \d+K, used (\d+)K", _jcmd(pid, "GC.heap_info"))
    if match is None:
        raise RuntimeError("jcmd GC.heap_info printed no 'used'")
    return int(match.group(1)) / 1024


def native_memory(pid: int) -> dict[str, float]:
    """Committed MB by kind from native memory tracking (``-XX:NativeMemoryTracking=summary``)."""
    out = _jcmd(pid, "VM.native_memory", "summary")
    kinds = {
        m[1].strip(): int(m[2]) / 1024
        for m in re.finditer(r"^-\s+(.+?) \(reserved=\d+KB, committed=(\d+)KB", out, re.M)
    }
    total = re.search(r"Total: reserved=\d+KB, committed=(\d+)KB", out)
    classes = re.search(r"\(classes #(\d+)\)", out)
    if total is None or classes is None or "Java Heap" not in kinds:
        raise RuntimeError(f"jcmd VM.native_memory summary: no native memory tracking?\n{out[:500]}")
    # judged apart: the heap (live heap), JIT code (bounded), NMT's own books, the JIT's scratch arenas (transient)
    apart = ("Java Heap", "Code", "Native Memory Tracking", "Arena Chunk")
    return {
        "jvm_heap_committed_mb": kinds["Java Heap"],
        "jvm_code_mb": kinds.get("Code", 0.0),
        "jvm_metaspace_mb": kinds.get("Metaspace", 0.0),
        "jvm_classes": int(classes.group(1)),
        "jvm_native_mb": int(total.group(1)) / 1024 - sum(kinds.get(k, 0.0) for k in apart),
        "jvm_committed_mb": int(total.group(1)) / 1024,
    }


def class_histogram(pid: int) -> dict[str, tuple[int, int]]:
    """Live objects per class (``jcmd GC.class_histogram`` runs a full GC first): class -> (instances, bytes)."""
    rows: dict[str, tuple[int, int]] = {}
    for line in _jcmd(pid, "GC.class_histogram").splitlines()[2:]:
        parts = line.split()
        if len(parts) >= 4 and parts[0].endswith(":"):
            rows[parts[3]] = (int(parts[1]), int(parts[2]))
    return rows


def histogram_growth(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> list[dict[str, Any]]:
    """The classes whose live bytes grew most between two histograms."""
    grown: list[dict[str, Any]] = []
    for name, (instances, size) in after.items():
        was_instances, was_size = before.get(name, (0, 0))
        grown.append({"class": name, "instances": instances - was_instances, "kb": round((size - was_size) / 1024)})
    return sorted(grown, key=lambda row: -row["kb"])[:15]


class DriverProbe:
    """Samples the driver process, its JVM and the JVM's Python workers."""

    def __init__(self, driver_pid: int, ui_url: str) -> None:
        self.driver_pid, self.ui_url = driver_pid, ui_url
        children = _descendants(driver_pid, _processes())
        javas = [pid for pid in children if Path(f"/proc/{pid}/comm").read_text().strip() == "java"]
        if len(javas) != 1:
            raise RuntimeError(f"expected one JVM under the driver {driver_pid}, found {javas}")
        self.jvm_pid = javas[0]
        self.app_id = httpx.get(f"{ui_url}/api/v1/applications", timeout=10).json()[0]["id"]
        self.histogram: dict[str, tuple[int, int]] = {}

    def spark_properties(self) -> dict[str, str]:
        """The running application's Spark settings (the UI's Environment tab)."""
        environment = httpx.get(f"{self.ui_url}/api/v1/applications/{self.app_id}/environment", timeout=30).json()
        return {str(k): str(v) for k, v in environment["sparkProperties"]}

    def _retained(self) -> dict[str, Any]:
        base = f"{self.ui_url}/api/v1/applications/{self.app_id}"
        out = {}
        for key, path in (("jobs", "jobs"), ("stages", "stages"), ("sql", "sql?details=false&length=100000")):
            out[f"retained_{key}"] = len(httpx.get(f"{base}/{path}", timeout=60).json())
        out["cached_rdds"] = len(httpx.get(f"{base}/storage/rdd", timeout=30).json())
        driver = next(e for e in httpx.get(f"{base}/executors", timeout=30).json() if e["id"] == "driver")
        out["storage_memory_used_mb"] = driver["memoryUsed"] / 2**20
        return out

    def sample(self) -> dict[str, Any]:
        table = _processes()
        workers = [pid for pid in _descendants(self.jvm_pid, table) if "pyspark" in table[pid][1]]
        workers_pss = peak_vm = peak_rss = 0
        for pid in workers:
            try:
                workers_pss += _pss_kb(pid)
                peak_vm = max(peak_vm, _status_kb(pid, "VmPeak"))
                peak_rss = max(peak_rss, _status_kb(pid, "VmHWM"))
            except OSError:  # an idle worker exited while we looked
                continue
        row: dict[str, Any] = {
            "py_rss_mb": _status_kb(self.driver_pid, "VmRSS") / 1024,
            "py_threads": _status_kb(self.driver_pid, "Threads"),
            "py_fds": _fds(self.driver_pid),
            "jvm_rss_mb": _status_kb(self.jvm_pid, "VmRSS") / 1024,
            "jvm_threads": _status_kb(self.jvm_pid, "Threads"),
            "jvm_fds": _fds(self.jvm_pid),
            "workers": len(workers),
            "daemons": sum(1 for pid in workers if table[pid][0] == self.jvm_pid),
            "workers_pss_mb": workers_pss / 1024,
            "worker_peak_vm_mb": peak_vm / 1024,
            "worker_peak_rss_mb": peak_rss / 1024,
            "jvm_heap_used_mb": _heap_used_mb(self.jvm_pid),
        }
        self.histogram = class_histogram(self.jvm_pid)
        row["memory_store_entries"] = sum(n for name, (n, _) in self.histogram.items() if name in MEMORY_ENTRIES)
        row["jvm_heap_live_mb"] = _heap_used_mb(self.jvm_pid)
        row["jvm_rss_after_gc_mb"] = _status_kb(self.jvm_pid, "VmRSS") / 1024
        row.update(native_memory(self.jvm_pid))
        row["jvm_untracked_mb"] = row["jvm_rss_after_gc_mb"] - row.pop("jvm_committed_mb")
        row.update(self._retained())
        return {k: round(v, 1) if isinstance(v, float) else v for k, v in row.items()}


# --- the verdict ---------------------------------------------------------------------------------------------------


def slope(ys: list[float]) -> float:
    """Least-squares slope of ys against their index (per job)."""
    n = len(ys)
    if n < 2:
        return 0.0
    mx, my = (n - 1) / 2, statistics.fmean(ys)
    return sum((i - mx) * (y - my) for i, y in enumerate(ys)) / sum((i - mx) ** 2 for i in range(n))


def judge(samples: list[dict[str, Any]], warmup: int) -> dict[str, dict[str, Any]]:
    """Per metric: warm-up and end levels, slope over the second half (and after the warm-up), growth, and for
    the judged metrics whether that is flat."""
    verdicts: dict[str, dict[str, Any]] = {}
    for metric in (*BOUNDS, *REPORTED):
        ys = [float(s[metric]) for s in samples]
        w = min(max(warmup, 1), len(ys)) - 1
        at_warmup = statistics.median(ys[max(0, w - 2) : w + 3])
        at_end = statistics.median(ys[-5:])
        per_job = slope(ys[max(w + 1, len(ys) // 2) :])
        verdicts[metric] = {
            "warmup": round(at_warmup, 1),
            "end": round(at_end, 1),
            "growth": round(at_end - at_warmup, 1),
            "slope_per_job": round(per_job, 3),
        }
        if metric in BOUNDS:
            max_slope, max_growth = BOUNDS[metric]
            verdicts[metric]["bounds"] = {"slope_per_job": max_slope, "growth": max_growth}
            verdicts[metric]["flat"] = per_job < max_slope and at_end - at_warmup < max_growth
    return verdicts


# --- the run ---------------------------------------------------------------------------------------------------


def start_driver(work: Path, port: int, ui_port: int, conf: dict[str, str]) -> subprocess.Popen[bytes]:
    """``python -m app`` on the embedded default under ``work``: Spark local[2], the UI on (as in production)."""
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARKTRAIN_VAR_DIR": str(work / "var"),
        "SPARKTRAIN_ARTIFACT_ROOT": str(work / "artifacts"),
        "SPARKTRAIN_DATA_ROOTS": f"{REPO / 'datasets'},{work / 'data'}",
        "SPARKTRAIN_SPARK_MASTER": "local[2]",
        "SPARKTRAIN_SPARK_CONF": json.dumps(
            {"spark.ui.port": str(ui_port), "spark.local.dir": str(work / "spark-local"), **conf}
        ),
        "SPARKTRAIN_LOG_LEVEL": "WARNING",
    }
    log = (work / "driver.log").open("wb")
    return subprocess.Popen([sys.executable, "-m", "app", "--port", str(port)], cwd=REPO, env=env, stdout=log,
                            stderr=subprocess.STDOUT)  # fmt: skip


def _du_mb(path: Path) -> float:
    return tree_bytes(path) / 2**20


def store_full_at(samples: list[dict[str, Any]], caps: dict[str, int]) -> int | None:
    """The first job after which the status store held close to its caps of jobs, stages and SQL executions
    (Spark trims each to 90 % of its cap when it passes it); None if it never did."""
    for row in samples:
        if all(row[f"retained_{key}"] >= 0.85 * cap for key, cap in caps.items()):
            return int(row["job"])
    return None


def soak(jobs: int, work: Path, conf: dict[str, str]) -> dict[str, Any]:
    pixels, taxi_rows = write_data(work / "data")
    (work / "data" / "out").mkdir()
    port, ui_port = free_port(), free_port()
    driver = start_driver(work, port, ui_port, conf)
    url = f"http://127.0.0.1:{port}"
    samples: list[dict[str, Any]] = []
    try:
        wait_ready(f"{url}/readyz", driver)
        probe = DriverProbe(driver.pid, f"http://127.0.0.1:{ui_port}")
        settings = probe.spark_properties()
        settings["jvm flags"] = _jcmd(probe.jvm_pid, "VM.flags").strip().splitlines()[-1]
        start = {"job": 0, "kind": "start", "seconds": 0.0, **probe.sample()}
        print(json.dumps(start), flush=True)
        half: dict[str, tuple[int, int]] = {}
        cycle = job_cycle(work / "data", work / "data" / "out")
        with httpx.Client(base_url=url, timeout=120) as client:
            for number in range(1, jobs + 1):
                kind, path, body = next(cycle)
                _, seconds = run_job(client, path, body)
                answered = online_predictions(client, pixels, taxi_rows)
                row = {"job": number, "kind": kind, "seconds": round(seconds, 2), "online": answered, **probe.sample()}
                row["spark_local_dir_mb"] = round(_du_mb(work / "spark-local"), 1)
                samples.append(row)
                print(json.dumps(row), flush=True)
                if number == jobs // 2:
                    half = probe.histogram
        growth = histogram_growth(half, probe.histogram)
        time.sleep(IDLE_S)  # Spark ends idle Python workers and pool threads after a minute without work
        idle = {"job": jobs, "kind": f"idle {IDLE_S:.0f} s", **probe.sample()}
        print(json.dumps(idle), flush=True)
        return {
            "start": start,
            "samples": samples,
            "idle": idle,
            "jvm_class_growth": growth,
            "spark_properties": settings,
        }
    except Exception:
        sys.stderr.write((work / "driver.log").read_text(errors="replace")[-5000:])
        raise
    finally:
        stop(driver)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.soak")
    parser.add_argument("--jobs", type=int, default=100, help="jobs to run (default 100)")
    parser.add_argument("--warmup", type=int, default=20, help="the earliest job that may be the baseline")
    parser.add_argument("--quick", action="store_true", help="40 jobs, status store caps scaled down")
    args = parser.parse_args()
    jobs = 40 if args.quick else args.jobs
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp:
        run = soak(jobs, Path(tmp), {**JVM_OPTIONS, **(QUICK_CAPS if args.quick else {})})
    samples, properties = run["samples"], run["spark_properties"]
    caps = {name: int(properties[key]) for key, name in CAP_KEYS.items()}
    full_at = store_full_at(samples, caps)
    warmup = min(max(args.warmup, full_at or 0), jobs // 2)
    verdicts = judge(samples, warmup)
    flat = all(v.get("flat", True) for v in verdicts.values())

    print(f"\n{jobs} jobs in {time.monotonic() - t0:.0f} s on {os.cpu_count()} cores; status store caps {caps} "
          f"reached after job {full_at}; warm-up = job {warmup}")  # fmt: skip
    print(f"{'metric':<22}{'start':>8}{'warm-up':>9}{'end':>8}{'growth':>8}{'slope/job':>11}  bounds (slope, growth)")
    for metric, v in verdicts.items():
        judged = f"< {v['bounds']['slope_per_job']}, < {v['bounds']['growth']}" if "bounds" in v else "(not judged)"
        mark = ("flat" if v["flat"] else "GROWS") if "flat" in v else ""
        print(f"{metric:<22}{run['start'][metric]:>8.0f}{v['warmup']:>9.0f}{v['end']:>8.0f}{v['growth']:>8.0f}"
              f"{v['slope_per_job']:>11.3f}  {judged:<16}{mark}")  # fmt: skip
    last = samples[-1]
    peak_vm = max(s["worker_peak_vm_mb"] for s in samples)
    print(f"end: {last['workers']} Python worker processes ({last['daemons']} daemons, peak VM of one {peak_vm:.0f} "
          f"MB), JVM {last['jvm_threads']} threads, driver {last['py_threads']} threads, Spark local dir "
          f"{last['spark_local_dir_mb']:.0f} MB; status store keeps {last['retained_jobs']} jobs, "
          f"{last['retained_stages']} stages, {last['retained_sql']} SQL executions; {last['cached_rdds']} cached "
          f"RDDs, {last['memory_store_entries']} blocks in the memory store")  # fmt: skip
    print("JVM classes grown most over the second half (live KB):",
          ", ".join(f"{g['class']} {g['kb']:+d}" for g in run["jvm_class_growth"][:6]))  # fmt: skip
    idle = run["idle"]
    print(f"after {IDLE_S:.0f} s idle: {idle['workers']} Python worker processes ({idle['workers_pss_mb']:.0f} MB), "
          f"JVM {idle['jvm_threads']} threads, driver RSS {idle['py_rss_mb']:.0f} MB, JVM RSS "
          f"{idle['jvm_rss_mb']:.0f} MB")  # fmt: skip
    growing = [metric for metric, v in verdicts.items() if not v.get("flat", True)]
    verdict = "FLAT: no sustained growth" if flat else f"GROWS: {', '.join(growing)}"
    print(f"verdict: {verdict}")
    result = {
        "jobs": jobs,
        "quick": args.quick,
        "warmup_job": warmup,
        "status_store_caps": caps,
        "status_store_full_at_job": full_at,
        "flat": flat,
        "verdicts": verdicts,
        "seconds": round(time.monotonic() - t0, 1),
        "median_job_s": round(statistics.median(s["seconds"] for s in samples), 2),
        "end": {k: last[k] for k in END_COUNTS},
        "hygiene_settings": {k: properties.get(k) for k in HYGIENE_KEYS},
        "jvm_class_growth": run["jvm_class_growth"],
        "start": run["start"],
        "idle": idle,
        "curve": samples,
    }
    target = RESULTS / "tmp" / "soak-quick.json" if args.quick else RESULTS / "soak.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(result, indent=1) + "\n")
    summary = {
        k: v for k, v in result.items() if k not in ("curve", "jvm_class_growth", "start", "idle", "hygiene_settings")
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()

"""How long a training job takes through the warm service vs a cold ``spark-submit`` of the same work.

Starts ``python -m app`` (embedded default, Spark local[*]) in a temporary directory, submits the same random
forest several times and records, per job, the time from ``POST /train`` to RUNNING and to SUCCEEDED (polled
every 20 ms). Then runs the same forest as a plain PySpark script through pyspark's own ``spark-submit``,
which pays JVM and SparkSession start-up on every run. Same machine, same data, same run.

Run: ``python -m bench.service [--quick]``; prints a table and, last, one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import free_port, save_results

REPO = Path(__file__).resolve().parents[1]
FEATURES = [
    "passenger_count", "trip_distance", "pickup_longitude", "pickup_latitude", "rate_code", "dropoff_longitude",
    "dropoff_latitude", "hour", "day_of_week", "is_weekend", "h_distance",
]  # fmt: skip
NUM_TREES, MAX_DEPTH = 20, 8


def _body() -> dict[str, Any]:
    return {
        "name": "bench-rf",
        "framework": "spark_ml",
        "dataset": {"uri": "datasets/taxi/train.parquet", "features": FEATURES, "label": "fare_amount",
                    "task": "regression"},
        "validation": {"uri": "datasets/taxi/eval.parquet"},
        "params": {"algorithm": "random_forest", "numTrees": NUM_TREES, "maxDepth": MAX_DEPTH},
    }  # fmt: skip


def _timed_job(client: httpx.Client) -> dict[str, float]:
    t0 = time.perf_counter()
    response = client.post("/train", json=_body())
    posted = time.perf_counter() - t0
    response.raise_for_status()
    job_id = response.json()["id"]
    to_running = None
    while True:
        job = client.get(f"/jobs/{job_id}").json()
        now = time.perf_counter() - t0
        if to_running is None and job["status"] in ("RUNNING", "SUCCEEDED"):
            to_running = now
        if job["status"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
            break
        time.sleep(0.02)
    if job["status"] != "SUCCEEDED":
        raise RuntimeError(f"job failed: {job['error']}")
    return {
        "post_s": posted,
        "to_running_s": float(to_running or now),
        "to_succeeded_s": now,
        "rmse": job["result"]["validation"]["rmse"],
    }


def run_service(jobs: int, tmp: Path) -> tuple[float, list[dict[str, float]]]:
    port = free_port()
    env = {
        **os.environ,
        "SPARKTRAIN_VAR_DIR": str(tmp / "var"),
        "SPARKTRAIN_SPARK_CONF": '{"spark.ui.enabled":"false"}',
    }
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "--port", str(port)], cwd=REPO, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError("the service exited during start-up")
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        startup = time.perf_counter() - t0
        with httpx.Client(base_url=url, timeout=120) as client:
            return startup, [_timed_job(client) for _ in range(jobs)]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


def run_submit(runs: int) -> list[dict[str, float]]:
    import pyspark

    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    env = {**os.environ, "SPARK_CONF_DIR": str(REPO / "spark-conf"), "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}  # fmt: skip
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        done = subprocess.run(
            [str(submit), "--master", "local[*]", "--conf", "spark.ui.enabled=false", str(REPO / "bench/rf_submit.py"),
             str(REPO / "datasets/taxi/train.parquet"), str(REPO / "datasets/taxi/eval.parquet"), str(NUM_TREES),
             str(MAX_DEPTH)],
            cwd=REPO, env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        wall = time.perf_counter() - t0
        inner = json.loads(done.stdout.strip().splitlines()[-1])
        out.append({"wall_s": wall, "rmse": inner["rmse"], "session_s": inner["session_s"]})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.service")
    parser.add_argument("--quick", action="store_true", help="3 service jobs, 1 spark-submit")
    args = parser.parse_args()
    jobs, submits = (3, 1) if args.quick else (6, 3)
    with tempfile.TemporaryDirectory() as tmp:
        startup, service_jobs = run_service(jobs, Path(tmp))
    submit_runs = run_submit(submits)

    warm = service_jobs[1:]
    med = {k: statistics.median(j[k] for j in warm) for k in ("post_s", "to_running_s", "to_succeeded_s")}
    submit_wall = statistics.median(r["wall_s"] for r in submit_runs)
    print(f"random forest ({NUM_TREES} trees, depth {MAX_DEPTH}) on datasets/taxi (8,000 rows), {os.cpu_count()} cores")
    print(f"{'run':<34}{'POST s':>9}{'to RUNNING s':>14}{'to SUCCEEDED s':>16}{'RMSE':>8}")
    print(f"{'service start-up (to /readyz 200)':<34}{'':>9}{'':>14}{startup:>16.2f}")
    for i, j in enumerate(service_jobs, 1):
        label = "service job 1 (first on the JVM)" if i == 1 else f"service job {i} (warm)"
        print(f"{label:<34}{j['post_s']:>9.2f}{j['to_running_s']:>14.2f}{j['to_succeeded_s']:>16.2f}{j['rmse']:>8.3f}")
    for i, r in enumerate(submit_runs, 1):
        print(f"{f'cold spark-submit {i}':<34}{'':>9}{'':>14}{r['wall_s']:>16.2f}{r['rmse']:>8.3f}")
    ratio = submit_wall / med["to_succeeded_s"]
    print(f"warm service job is {ratio:.1f}x faster than a cold spark-submit of the same forest (median)")
    results = {
        "service_startup_s": round(startup, 2),
        "first_job": {k: round(v, 3) for k, v in service_jobs[0].items()},
        "warm_job_median": {k: round(v, 3) for k, v in med.items()},
        "spark_submit_median_s": round(submit_wall, 2),
        "spark_submit_session_s": round(statistics.median(r["session_s"] for r in submit_runs), 2),
        "ratio_submit_over_warm": round(ratio, 2),
        "jobs": jobs,
        "submits": submits,
    }
    print(json.dumps(results))
    save_results("service", results, quick=args.quick)


if __name__ == "__main__":
    main()

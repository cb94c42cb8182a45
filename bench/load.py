"""Load: 50 concurrent users on the API of one driver for 60 s, on the embedded default (SQLite database, SQLite
broker) and on PostgreSQL (with a Redis broker of its own), while two training jobs run.

For each database it starts ``python -m app`` (Spark ``local[2]``), trains a small xgboost model on the taxi fares
(the one users predict with) and starts two torch training jobs long enough to run through the whole load. Then
``locust`` (headless, ``bench/load_users.py``) runs ``--users`` users (default 50, all started within 5 s) for
``--seconds`` (60): each user polls jobs (``GET /jobs/{id}``, the most frequent request), lists jobs, reads step
metrics and log lines, predicts inline (MLflow ``dataframe_records``) and through the V2 protocol, and now and then
submits an evaluation, with 0.1..0.5 s of think time between requests. Latencies are measured by locust on the
client side, so they include the client's own time on the same 2-core machine.

Printed per database: requests, requests/s, answers by status class (a 5xx is a failure), each request's median,
p95 and p99 in ms, the driver log's "database is locked" lines, the two training jobs' state at the end, and the
machine's load average (the machine is shared; say so with the figures). Targets: zero 5xx and no "database is
locked" on both, and a p99 of ``GET /jobs/{id}`` under 50 ms on PostgreSQL.

Run: ``python -m bench.load [--quick] [--training-jobs N]`` (``--quick``: 20 users for 20 s; ``--training-jobs 0``:
the API alone, no training competing for the same cores; ``--databases postgresql --job-driver``: the load's driver
takes no jobs and a second driver on the same database and broker runs the trainings and the evaluations); the last
line is one JSON object; a full run is written to bench/results/load.json (``load-0-training-jobs.json`` with
``--training-jobs 0``, ``load-job-driver.json`` with ``--job-driver``).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.chaos import digits_job
from bench.common import REPO
from bench.processes import Driver, RedisServer, driver_env, pg_database
from bench.soak import TAXI, taxi_job, write_data

TARGET_P99_MS = 50.0


@contextlib.contextmanager
def _database(kind: str, work: Path) -> Iterator[dict[str, str]]:
    """The settings of a driver on ``kind``: the embedded default, or PostgreSQL with Redis."""
    if kind == "sqlite":
        yield {}
        return
    with RedisServer(work / "redis") as redis, pg_database() as url:
        yield {"database_url": url, "broker_url": redis.url}


def _percentiles(stats_csv: Path) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    with stats_csv.open() as f:
        for row in csv.DictReader(f):
            name = row["Name"]
            out[name] = {
                "requests": int(row["Request Count"]),
                "failures": int(row["Failure Count"]),
                "median_ms": float(row["50%"]),
                "p95_ms": float(row["95%"]),
                "p99_ms": float(row["99%"]),
                "rps": round(float(row["Requests/s"]), 1),
            }
    return out


def run_one(
    kind: str,
    work: Path,
    users: int,
    seconds: int,
    training_jobs: int = 2,
    nice: int | None = None,
    extra: dict[str, str] | None = None,
    job_driver: bool = False,
) -> dict[str, Any]:
    data = work / "data"
    _, rows = write_data(data)
    with _database(kind, work) as database:
        settings = {**database, **({"spark_local_nice": str(nice)} if nice is not None else {}), **(extra or {})}
        env = driver_env(work, log_level="WARNING", data_roots=f"{REPO / 'datasets'},{data}", **settings)
        drivers: list[Driver] = []
        with contextlib.ExitStack() as running:
            if job_driver:
                # The API driver takes no jobs from the queue; a second driver on the same database, broker and
                # artifact root runs them all (the trainings, the evaluations the load submits), in its own process.
                runner = Driver({**env, "SPARKTRAIN_VAR_DIR": str(work / "var-jobs")}, work / f"jobs-{kind}.log")
                drivers.append(runner.start())
                running.callback(runner.stop)
                env = {**env, "SPARKTRAIN_IN_PROCESS_CONSUMER": "false"}
            driver = Driver(env, work / f"driver-{kind}.log").start()
            drivers.append(driver)
            running.callback(driver.stop)
            client = driver.client
            model = driver.wait_job(client.post("/train", json=taxi_job("load-xgb", "xgboost", {
                "num_round": 30, "max_depth": 4})).json()["id"])  # fmt: skip
            assert model["status"] == "SUCCEEDED", model["error"]
            training = []
            for i in range(1, training_jobs + 1):
                submitted = client.post("/train", json=digits_job(f"load-{i}", epochs=1000, units=64, batch=16,
                                                                  seed=i, workers=1))  # fmt: skip
                assert submitted.status_code == 202, submitted.text
                training.append(submitted.json()["id"])
            for job_id in training:
                driver.wait_job(job_id, statuses=("RUNNING",))
            evaluate = {"model": {"name": "load-xgb"}, "dataset": {"uri": str(data / "taxi-keyed.parquet")},
                        "metrics": ["regression"]}  # fmt: skip
            load_before = os.getloadavg()
            served_before = _served(client)
            figures = _locust(driver.client.base_url, work / kind, users, seconds, {
                "LOAD_JOB_IDS": ",".join([model["id"], *training]), "LOAD_MODEL": "load-xgb",
                "LOAD_ROWS": json.dumps([{k: r[k] for k in TAXI} for r in rows]),
                "LOAD_EVALUATE": json.dumps(evaluate)})  # fmt: skip
            figures["server_side"] = _server_side(served_before, _served(client))
            figures["load_average_before"] = [round(x, 1) for x in load_before]
            figures["load_average_after"] = [round(x, 1) for x in os.getloadavg()]
            states = [client.get(f"/jobs/{job_id}").json() for job_id in training]
            figures["training_jobs"] = [{"status": j["status"], "progress": round(j["progress"], 3)} for j in states]
            queued = client.get("/jobs", params={"status": "QUEUED", "limit": 500}).json()["items"]
            for job in queued + states:  # the submitted evaluations and the training jobs have served their purpose
                client.post(f"/jobs/{job['id']}/cancel")
        figures["database_is_locked"] = sum(
            d.log.read_text(errors="replace").count("database is locked") for d in drivers
        )
        figures["job_driver"] = job_driver
    return figures


SERVED_ROUTES = {"GET /jobs/{id}": ("GET", "/jobs/{job_id}"), "GET /jobs": ("GET", "/jobs")}


def _served(client: Any) -> dict[tuple[str, str], dict[float, float]]:
    """The service's own request-duration histogram (``GET /metrics``): cumulative counts per bucket bound, per
    (method, route), summed over statuses."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[tuple[str, str], dict[float, float]] = {}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        if family.name != "sparktrain_http_request_duration_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                key = (sample.labels["method"], sample.labels["route"])
                bound = float(sample.labels["le"])
                out.setdefault(key, {})[bound] = out.get(key, {}).get(bound, 0.0) + sample.value
    return out


def _server_side(before: dict[Any, dict[float, float]], after: dict[Any, dict[float, float]]) -> dict[str, Any]:
    """Per request of :data:`SERVED_ROUTES`, during the load: the share answered within 50 ms as the service measures
    it (from its middleware's start to the response's end: no time in the socket's backlog or in the client), and
    the bucket bounds that hold its p50 and p99. Against the client's figures this says where the time went."""
    figures: dict[str, Any] = {}
    for name, key in SERVED_ROUTES.items():
        buckets = {b: after.get(key, {}).get(b, 0.0) - before.get(key, {}).get(b, 0.0) for b in after.get(key, {})}
        total = buckets.get(float("inf"), 0.0)
        if not total:
            continue
        bounds = sorted(buckets)

        def bound_of(q: float, bounds: list[float] = bounds, buckets: dict[float, float] = buckets,
                     total: float = total) -> float:  # fmt: skip
            return next(b for b in bounds if buckets[b] >= q * total)

        figures[name] = {"requests": int(total), "within_50ms": round(buckets.get(0.05, 0.0) / total, 4),
                         "p50_at_most_ms": 1e3 * bound_of(0.5), "p99_at_most_ms": 1e3 * bound_of(0.99)}  # fmt: skip
    return figures


def _locust(url: Any, prefix: Path, users: int, seconds: int, env: dict[str, str]) -> dict[str, Any]:
    status_file = prefix.with_suffix(".status.json")
    command = [sys.executable, "-m", "locust", "-f", str(REPO / "bench" / "load_users.py"), "--headless",
               "--users", str(users), "--spawn-rate", str(max(1, users // 5)), "--run-time", f"{seconds}s",
               "--host", str(url), "--csv", str(prefix), "--only-summary", "--loglevel", "WARNING"]  # fmt: skip
    started = time.monotonic()
    subprocess.run(command, cwd=REPO, env={**os.environ, **env, "LOAD_STATUS_FILE": str(status_file)},
                   check=False, capture_output=True, timeout=seconds + 120)  # fmt: skip
    statuses: dict[str, dict[str, int]] = json.loads(status_file.read_text())
    requests = _percentiles(prefix.with_name(prefix.name + "_stats.csv"))
    total = requests.pop("Aggregated", {})
    classes: dict[str, int] = {}
    for codes in statuses.values():
        for code, n in codes.items():
            label = f"{str(code)[0]}xx" if int(code) else "no answer"
            classes[label] = classes.get(label, 0) + n
    return {"users": users, "seconds": seconds, "wall_s": round(time.monotonic() - started, 1),
            "requests": total.get("requests", 0), "rps": total.get("rps", 0.0), "answers": classes,
            "server_errors": sum(n for label, n in classes.items() if label == "5xx"), "by_request": requests,
            "statuses": statuses}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.load")
    parser.add_argument("--quick", action="store_true", help="20 users for 20 s")
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--databases", nargs="+", default=["sqlite", "postgresql"], choices=["sqlite", "postgresql"])
    parser.add_argument(
        "--training-jobs",
        type=int,
        default=2,
        help="torch jobs training on the same machine during the load (0: the API alone)",
    )
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a driver setting (SPARKTRAIN_NAME), for A/B runs; repeatable",
    )
    parser.add_argument(
        "--spark-local-nice",
        type=int,
        default=None,
        help="the driver's SPARKTRAIN_SPARK_LOCAL_NICE (default: the service's own default, 10)",
    )
    parser.add_argument(
        "--job-driver",
        action="store_true",
        help="PostgreSQL only: the load's driver takes no jobs (SPARKTRAIN_IN_PROCESS_CONSUMER=false); a second "
        "driver on the same database and broker runs the trainings and the evaluations",
    )
    args = parser.parse_args()
    if args.job_driver and "sqlite" in args.databases:
        parser.error("--job-driver needs --databases postgresql (two drivers share PostgreSQL and Redis)")
    users, seconds = (20, 20) if args.quick else (args.users, args.seconds)
    result: dict[str, Any] = {"cpus": os.cpu_count(), "target_p99_ms_get_job_postgresql": TARGET_P99_MS}
    for kind in args.databases:
        work = Path(tempfile.mkdtemp(prefix=f"bench-load-{kind}-"))
        extra = dict(item.split("=", 1) for item in args.setting)
        figures = run_one(kind, work, users, seconds, args.training_jobs, args.spark_local_nice, extra, args.job_driver)
        figures["settings"] = extra
        figures["training_jobs_running"] = args.training_jobs
        result[kind] = figures
        poll = figures["by_request"].get("GET /jobs/{id}", {})
        print(f"{kind}: {figures['requests']} requests in {figures['seconds']} s ({figures['rps']}/s) from {users} "
              f"users; answers {figures['answers']}; GET /jobs/{{id}} p50 {poll.get('median_ms')} ms, p99 "
              f"{poll.get('p99_ms')} ms; 'database is locked' {figures['database_is_locked']} times; training "
              f"jobs {figures['training_jobs']}; load average {figures['load_average_before']} -> "
              f"{figures['load_average_after']}", flush=True)  # fmt: skip
        for name, row in figures["server_side"].items():
            print(f"  served (the service's own histogram) {name}: {row['within_50ms']:.1%} within 50 ms, p50 <= "
                  f"{row['p50_at_most_ms']:g} ms, p99 <= {row['p99_at_most_ms']:g} ms", flush=True)  # fmt: skip
        for name, row in sorted(figures["by_request"].items()):
            print(f"  {name:28s} {row['requests']:6d} requests  p50 {row['median_ms']:6.0f}  p95 {row['p95_ms']:6.0f}"
                  f"  p99 {row['p99_ms']:6.0f} ms", flush=True)  # fmt: skip
    if "postgresql" in result:
        p99 = result["postgresql"]["by_request"].get("GET /jobs/{id}", {}).get("p99_ms")
        result["postgresql_get_job_p99_over_target"] = round(p99 / TARGET_P99_MS, 2) if p99 else None
    if args.job_driver and not args.quick and not args.setting:
        (REPO / "bench" / "results" / "load-job-driver.json").write_text(json.dumps(result, indent=1) + "\n")
    elif not args.quick and not args.setting and set(args.databases) == {"sqlite", "postgresql"}:
        name = "load.json" if args.training_jobs == 2 else f"load-{args.training_jobs}-training-jobs.json"
        (REPO / "bench" / "results" / name).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()

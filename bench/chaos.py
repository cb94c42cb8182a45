"""Chaos: training jobs while the driver process is killed (SIGKILL) at random moments and started again.

Starts a Redis server of its own (AOF, ``appendfsync always``) on a free port and a fresh PostgreSQL database
on the local server (``BENCH_PG``, default ``postgresql://postgres@127.0.0.1:5432``; dropped at the end), then
``python -m app`` on them with Spark ``local[2]``. It submits N small torch jobs on ``datasets/digits`` (two
barrier workers, 10 epochs, a checkpoint every epoch) and, while jobs remain unfinished, kills the driver
process with SIGKILL after a random 10..40 s of uptime (a fresh driver needs ~25 s to its first checkpoint here)
and starts a new one on the same database and broker, at most N/2 times; then a last driver finishes the rest.
Each new driver's reconciler fails the lost attempts with DRIVER_LOST and queues every job that has a
checkpoint and attempts left again, from its newest checkpoint.

Counted per job, from the database through the API once everything has settled:

- ``submitted``: accepted with 202;  ``finished``: reached SUCCEEDED, FAILED or CANCELLED;
- ``succeeded``: SUCCEEDED; ``failed``: FAILED, by reason (a kill before a job's first checkpoint leaves nothing
  to resume from, so DRIVER_LOST there is the designed outcome, as is running out of attempts);
- ``lost``: submitted but not finished once the last driver had ``--settle`` seconds (default 900) for the rest:
  a job the service forgot, or one stuck QUEUED or RUNNING;
- ``run_twice``: a job that did its work twice: an attempt number started more than once (a duplicate delivery
  that was not dropped), a later attempt that started before the driver running the earlier attempt was killed
  (two attempts at once), more attempts started than the job counts, or more than one model version
  registered by the job. Re-training the steps between the newest checkpoint and a kill is not "twice": that
  is what resuming from a checkpoint means, and it is reported as ``resumed``.

Run: ``python -m bench.chaos [--jobs N] [--quick]`` (default N=20; ``--quick`` = 5 jobs); the last line is one
JSON object. Without ``--quick`` it is also written to bench/results/chaos.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import re
import shutil
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench.common import REPO
from bench.processes import (  # noqa: F401 (tests import these from here)
    FINAL,
    Driver,
    RedisServer,
    alive,
    busiest,
    descendants,
    driver_env,
    pg_database,
    python_workers,
)

STARTED = re.compile(r"^attempt (\d+) started on (\S+)")


# --- the jobs --------------------------------------------------------------------------------------------


def digits_job(
    name: str, *, epochs: int = 5, units: int = 32, seed: int = 7, batch: int = 64, workers: int = 2
) -> dict[str, Any]:
    """A small torch job on the shipped digits: two barrier workers, a checkpoint after every epoch."""
    return {
        "name": name,
        "framework": "torch",
        "dataset": {"uri": "datasets/digits/train.parquet", "features": ["pixels"], "label": "label",
                    "task": "classification", "num_classes": 10},
        "validation": {"uri": "datasets/digits/test.parquet"},
        "network": {"layers": [{"type": "dense", "units": units, "activation": "relu"},
                               {"type": "output", "units": 10, "activation": "softmax", "loss": "cross_entropy"}]},
        "training": {"epochs": epochs, "batch_size_per_worker": batch, "num_workers": workers, "seed": seed,
                     "optimizer": {"type": "adam", "learning_rate": 0.003}},
    }  # fmt: skip


def _time(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def starts(client: httpx.Client, job_id: str) -> list[tuple[int, str, float]]:
    """(attempt, driver, time) of every "attempt N started on DRIVER" line of the job's log."""
    lines = client.get(f"/jobs/{job_id}/logs", params={"limit": 5000}).json()["lines"]
    return [
        (int(m.group(1)), m.group(2), _time(line["time"]))
        for line in lines
        if (m := STARTED.match(line["message"])) is not None
    ]


def ran_twice(job: dict[str, Any], started: list[tuple[int, str, float]], kills: dict[str, float],
              versions: int) -> list[str]:  # fmt: skip
    """Why the job counts as run twice (empty: it did not); see the module's docstring. ``kills`` maps a
    driver's pid to when it was killed."""
    why: list[str] = []
    numbers = [a for a, _, _ in started]
    if len(numbers) != len(set(numbers)):
        why.append(f"an attempt started more than once: {numbers}")
    if len(set(numbers)) > job["attempt"]:
        why.append(f"{len(set(numbers))} attempts started, the job counts {job['attempt']}")
    lost = {e.get("attempt") for e in job.get("attempts") or [] if e.get("error_reason") == "DRIVER_LOST"}
    for (a, driver, _), (b, _, t_next) in itertools.pairwise(sorted(started, key=lambda s: s[2])):
        killed = kills.get(driver.split(":")[1])
        if a in lost and killed is not None and t_next < killed:
            why.append(f"attempt {b} started while attempt {a} still ran on {driver}")
    if versions > 1:
        why.append(f"{versions} model versions registered")
    return why


def _unfinished(driver: Driver, ids: list[str]) -> int:
    page = driver.client.get("/jobs", params={"limit": 500}).json()["items"]
    return sum(j["status"] not in FINAL for j in page if j["id"] in ids)


def run(
    jobs: int, work: Path, *, kill_after: tuple[float, float], seed: int, max_kills: int, settle_s: float
) -> dict[str, Any]:
    """Submit, then kill and restart the driver while jobs remain unfinished (at most ``max_kills`` times), then
    let a last driver finish what is left (up to ``settle_s``) and count."""
    rng = random.Random(seed)
    t0 = time.monotonic()
    with RedisServer(work / "redis") as redis, pg_database() as db_url:
        env = driver_env(work, database_url=db_url, broker_url=redis.url, heartbeat_stale_s="4",
                         reconcile_interval_s="2", log_level="WARNING")  # fmt: skip
        drivers = 0

        def new_driver() -> Driver:
            nonlocal drivers
            drivers += 1
            return Driver(env, work / f"driver-{drivers}.log").start()

        driver = new_driver()
        ids: list[str] = []
        for i in range(jobs):
            response = driver.client.post("/train", json=chaos_job(f"chaos-{i}", i + 1))
            if response.status_code == 202:
                ids.append(response.json()["id"])
        print(f"{len(ids)} of {jobs} jobs submitted", flush=True)
        kills: dict[str, float] = {}
        while len(kills) < max_kills:
            up_until = time.monotonic() + rng.uniform(*kill_after)
            while (left := _unfinished(driver, ids)) and time.monotonic() < up_until:
                time.sleep(0.5)
            if not left:
                break
            kills[str(driver.pid)] = driver.kill()
            print(f"{time.monotonic() - t0:.0f} s: killed driver {len(kills)} (pid {driver.pid}) with {left} of "
                  f"{len(ids)} jobs unfinished", flush=True)  # fmt: skip
            driver = new_driver()
        try:
            deadline = time.monotonic() + settle_s
            while _unfinished(driver, ids) and time.monotonic() < deadline:
                time.sleep(1)
            return _count(driver, ids, kills, jobs, time.monotonic() - t0)
        finally:
            driver.stop()


def chaos_job(name: str, seed: int) -> dict[str, Any]:
    """10 epochs of a 128-unit MLP (~10 s once the driver is warm): most kills land after a checkpoint."""
    return digits_job(name, epochs=10, units=128, batch=16, seed=seed)


def _count(driver: Driver, ids: list[str], kills: dict[str, float], jobs: int, wall: float) -> dict[str, Any]:
    client = driver.client
    versions: dict[str, int] = {}
    for model in client.get("/models").json()["items"]:
        for version in model["versions"]:
            versions[version["job_id"]] = versions.get(version["job_id"], 0) + 1
    out: dict[str, Any] = {"submitted": len(ids), "succeeded": 0, "failed": {}, "lost": 0, "run_twice": 0}
    resumed = 0
    twice: dict[str, list[str]] = {}
    errors: list[str] = []
    for job_id in ids:
        job = client.get(f"/jobs/{job_id}").json()
        if job["status"] == "SUCCEEDED":
            out["succeeded"] += 1
        elif job["status"] in FINAL:
            reason = (job["error"] or {}).get("reason", job["status"])
            out["failed"][reason] = out["failed"].get(reason, 0) + 1
            errors.append(
                f"{job_id} attempt {job['attempt']}: {reason}: {(job['error'] or {}).get('message', '')[:300]}"
            )
        else:
            out["lost"] += 1
        resumed += job["attempt"] > 1
        why = ran_twice(job, starts(client, job_id), kills, versions.get(job_id, 0))
        if why:
            twice[job_id] = why
    out["run_twice"] = len(twice)
    out.update(finished=out["succeeded"] + sum(out["failed"].values()), resumed=resumed, kills=len(kills),
               jobs_requested=jobs, wall_s=round(wall, 1))  # fmt: skip
    if twice:
        out["run_twice_why"] = twice
    for line in errors:
        print(f"failed: {line}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos")
    parser.add_argument("--jobs", type=int, default=20, help="training jobs to submit (default 20)")
    parser.add_argument("--quick", action="store_true", help="5 jobs")
    parser.add_argument("--seed", type=int, default=1, help="seed of the kill times")
    parser.add_argument("--kill-after", type=float, nargs=2, default=(10.0, 40.0), metavar=("MIN_S", "MAX_S"),
                        help="a driver is killed after a random uptime in this range (default 10 40)")  # fmt: skip
    parser.add_argument("--max-kills", type=int, help="stop killing after this many kills (default: half the jobs)")
    parser.add_argument("--settle", type=float, default=900, help="seconds the last driver gets to finish the rest")
    args = parser.parse_args()
    jobs = 5 if args.quick else args.jobs
    if shutil.which("redis-server") is None:
        raise SystemExit("bench.chaos needs redis-server on the PATH (it starts its own on a free port)")
    work = Path(tempfile.mkdtemp(prefix="bench-chaos-"))
    try:
        result = run(jobs, work, kill_after=tuple(args.kill_after), seed=args.seed,
                     max_kills=args.max_kills or max(1, jobs // 2), settle_s=args.settle)  # fmt: skip
    except BaseException:
        print(f"logs kept in {work}", file=sys.stderr)
        raise
    shutil.rmtree(work, ignore_errors=True)
    print(f"{result['submitted']} submitted, {result['finished']} finished ({result['succeeded']} succeeded, "
          f"failed {result['failed'] or 0}), {result['lost']} lost, {result['run_twice']} run twice; "
          f"{result['kills']} driver kills, {result['resumed']} jobs resumed, {result['wall_s']} s")  # fmt: skip
    if not args.quick and args.jobs == 20:
        (REPO / "bench" / "results" / "chaos.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()

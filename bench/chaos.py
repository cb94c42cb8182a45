"""Chaos: a mix of jobs of every kind while driver processes are killed (SIGKILL) at random moments.

Starts a Redis server of its own (AOF, ``appendfsync always``) on a free port and a fresh PostgreSQL database
on the local server (``BENCH_PG``, default ``postgresql://postgres@127.0.0.1:5432``; dropped at the end), then
``--drivers`` (1 or 2) ``python -m app`` processes on them, each with Spark ``local[2]``. A seed xgboost model is
trained first (not counted). Then it submits N jobs (default 20) cycling through the families: torch training on
``datasets/digits`` (two barrier workers, 10 epochs, a checkpoint every epoch), xgboost training on taxi fares (300
rounds, a checkpoint every 30), a Spark ML random forest with a small grid, an evaluation and a keyed batch
prediction of the seed model. While jobs remain unfinished it kills a driver chosen at random with SIGKILL after a
random 10..40 s, and starts a new one in its place, at most ``--max-kills`` times (default 6); then the drivers
finish the rest. With one driver, the next driver's reconciler takes the lost attempts over; with two, the other
driver's does, within ``SPARKTRAIN_HEARTBEAT_STALE_S`` (4 s here) + one reconcile interval (2 s). Every kind is
retried: a job with a checkpoint continues from it, any other starts again from scratch.

Counted per job, from the database through the API once everything has settled:

- ``submitted``: accepted with 202;  ``finished``: reached SUCCEEDED, FAILED or CANCELLED;
- ``succeeded``: SUCCEEDED; ``failed``: FAILED, by reason (running out of attempts would be one);
- ``lost``: submitted but not finished once the drivers had ``--settle`` seconds (default 900) for the rest:
  a job the service forgot, or one stuck QUEUED or RUNNING;
- ``run_twice``: a job that did its work twice: an attempt number started more than once (a duplicate delivery
  that was not dropped), a later attempt that started before the driver running the earlier attempt was killed
  (two attempts at once), more attempts started than the job counts, or more than one model version
  registered by the job. Re-training the steps between the newest checkpoint and a kill is not "twice": that
  is what resuming from a checkpoint means, and it is reported as ``resumed`` (jobs a retry of which continued
  from a checkpoint), per family with ``free_retries`` (retries after an attempt that saved progress, which cost
  no attempt) and ``most_attempts``;
- ``bad_outputs``: a batch prediction whose output does not hold exactly one row per input key (a mix of two
  attempts' files, or a half-written one);
- ``takeover_s``: per lost attempt, from the dead driver's last heartbeat to a reconciler ending the attempt. With
  two drivers that is the other driver's reconciler, and the bound is the heartbeat limit + one reconcile interval
  (6 s); with one it is the replacement driver's first pass, so it includes that driver's start-up.

Run: ``python -m bench.chaos [--jobs N] [--drivers 2] [--quick]`` (``--quick`` = 5 jobs); the last line is one
JSON object. A full run of 20 jobs is also written to bench/results/chaos.json (one driver) or
bench/results/chaos-2drivers.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import re
import shutil
import statistics
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
from bench.soak import taxi_job, write_data

STARTED = re.compile(r"^attempt (\d+) started on (\S+)")
QUEUED_AGAIN = re.compile(r"^attempt \d+ queued")


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


def _unfinished(client: httpx.Client, ids: list[str]) -> int:
    page = client.get("/jobs", params={"limit": 500}).json()["items"]
    return sum(j["status"] not in FINAL for j in page if j["id"] in ids)


KINDS = ("torch", "xgboost", "spark_ml", "evaluate", "predict")
SEED_MODEL = "chaos-seed"


def mix_job(kind: str, i: int, data: Path, out: Path) -> tuple[str, dict[str, Any]]:
    """(path, body) of the ``i``-th job, of family ``kind``: each takes seconds to a minute here."""
    taxi = str(data / "taxi-keyed.parquet")
    if kind == "torch":
        return "/train", digits_job(f"chaos-{i}", epochs=10, units=128, batch=16, seed=i)
    if kind == "xgboost":
        return "/train", taxi_job(f"chaos-{i}", "xgboost", {"num_round": 300, "max_depth": 6, "checkpoint_rounds": 30,
                                                         "seed": i})  # fmt: skip
    if kind == "spark_ml":
        return "/train", taxi_job(f"chaos-{i}", "spark_ml", {"algorithm": "random_forest", "num_folds": 2,
                                                          "grid": {"maxDepth": [3, 5], "numTrees": [10]}})  # fmt: skip
    if kind == "evaluate":
        return "/evaluate", {"model": {"name": SEED_MODEL}, "dataset": {"uri": taxi}, "metrics": ["regression"]}
    return "/predict", {"model": {"name": SEED_MODEL}, "dataset": {"uri": taxi, "key": "trip_id"},
                        "output_uri": str(out / f"chaos-{i}.parquet")}  # fmt: skip


class Fleet:
    """``size`` drivers on one database and broker; a killed one is replaced by a new process."""

    def __init__(self, size: int, env: dict[str, str], work: Path) -> None:
        self.env, self.work, self.started = env, work, 0
        self.drivers: list[Driver] = [self._new(slot) for slot in range(size)]

    def _new(self, slot: int) -> Driver:
        self.started += 1
        env = {**self.env, "SPARKTRAIN_VAR_DIR": str(self.work / f"var-{slot}")}
        return Driver(env, self.work / f"driver-{self.started}.log").start()

    @property
    def client(self) -> httpx.Client:
        return self.drivers[0].client

    def kill(self, slot: int) -> tuple[int, float]:
        """SIGKILL the driver in ``slot`` and start a new one there; returns (pid, time of the kill)."""
        victim = self.drivers[slot]
        when = victim.kill()
        self.drivers[slot] = self._new(slot)
        return victim.pid, when

    def stop(self) -> None:
        for driver in self.drivers:
            driver.stop()


def run(
    jobs: int, work: Path, *, drivers: int, kill_after: tuple[float, float], seed: int, max_kills: int,
    settle_s: float,
) -> dict[str, Any]:  # fmt: skip
    """Submit, then kill drivers at random while jobs remain unfinished (at most ``max_kills`` times), then let
    the drivers finish what is left (up to ``settle_s``) and count."""
    rng = random.Random(seed)
    t0 = time.monotonic()
    data, out = work / "data", work / "out"
    write_data(data)
    out.mkdir(parents=True, exist_ok=True)
    with RedisServer(work / "redis") as redis, pg_database() as db_url:
        env = driver_env(work, database_url=db_url, broker_url=redis.url, heartbeat_stale_s="4",
                         reconcile_interval_s="2", log_level="WARNING",
                         data_roots=f"{REPO / 'datasets'},{data},{out}")  # fmt: skip
        fleet = Fleet(drivers, env, work)
        try:
            seeded = fleet.drivers[0].wait_job(fleet.client.post("/train", json=taxi_job(
                SEED_MODEL, "xgboost", {"num_round": 20, "max_depth": 4})).json()["id"])  # fmt: skip
            assert seeded["status"] == "SUCCEEDED", seeded["error"]
            ids, kinds = _submit(fleet.client, jobs, data, out)
            print(f"{len(ids)} of {jobs} jobs submitted on {drivers} driver(s)", flush=True)
            kills: dict[str, float] = {}
            while len(kills) < max_kills:
                up_until = time.monotonic() + rng.uniform(*kill_after)
                while (left := _unfinished(fleet.client, ids)) and time.monotonic() < up_until:
                    time.sleep(0.5)
                if not left:
                    break
                pid, when = fleet.kill(rng.randrange(drivers))
                kills[str(pid)] = when
                print(f"{time.monotonic() - t0:.0f} s: killed driver pid {pid} ({len(kills)} kills) with {left} of "
                      f"{len(ids)} jobs unfinished", flush=True)  # fmt: skip
            deadline = time.monotonic() + settle_s
            while _unfinished(fleet.client, ids) and time.monotonic() < deadline:
                time.sleep(1)
            result = _count(fleet.client, ids, kinds, kills, out)
            result.update(drivers=drivers, jobs_requested=jobs, wall_s=round(time.monotonic() - t0, 1))
            return result
        finally:
            fleet.stop()


def _submit(client: httpx.Client, jobs: int, data: Path, out: Path) -> tuple[list[str], dict[str, str]]:
    ids, kinds = [], {}
    for i in range(jobs):
        kind = KINDS[i % len(KINDS)]
        path, body = mix_job(kind, i, data, out)
        response = client.post(path, json=body)
        if response.status_code == 202:
            ids.append(response.json()["id"])
            kinds[ids[-1]] = kind
        else:
            print(f"job {i} ({kind}) refused: {response.status_code} {response.text[:300]}", flush=True)
    return ids, kinds


def _takeover_s(job: dict[str, Any]) -> list[float]:
    """Seconds from the dead driver's last heartbeat to the end of each of the job's lost attempts."""
    out = []
    for entry in job.get("attempts") or []:
        beat = re.search(r"last at (\S+?)\)", entry.get("error_message") or "")
        if entry.get("error_reason") == "DRIVER_LOST" and beat and entry.get("ended_at"):
            out.append(_time(entry["ended_at"]) - _time(beat.group(1)))
    return out


def _bad_output(job: dict[str, Any], keys: int) -> str | None:
    """Why a finished batch prediction's output is not exactly one row per input key (None: it is)."""
    import pyarrow.parquet as pq

    path = Path(job["result"]["output_uri"])
    leftovers = [p.name for p in path.parent.iterdir() if p.name.startswith(f".{path.name}.partial")]
    table = pq.read_table(path, columns=["trip_id"])
    unique = len(set(table.column("trip_id").to_pylist()))
    if table.num_rows != keys or unique != keys or leftovers:
        return f"{table.num_rows} rows, {unique} keys of {keys}; partial directories left: {leftovers}"
    return None


def _count(
    client: httpx.Client, ids: list[str], kinds: dict[str, str], kills: dict[str, float], out: Path
) -> dict[str, Any]:
    import pyarrow.parquet as pq

    keys = pq.read_metadata(out.parent / "data" / "taxi-keyed.parquet").num_rows
    versions: dict[str, int] = {}
    for model in client.get("/models").json()["items"]:
        for version in model["versions"]:
            versions[version["job_id"]] = versions.get(version["job_id"], 0) + 1
    result: dict[str, Any] = {"submitted": len(ids), "succeeded": 0, "failed": {}, "lost": 0, "run_twice": 0,
                              "bad_outputs": 0}  # fmt: skip
    by_kind = {kind: {"submitted": 0, "succeeded": 0, "retried": 0, "resumed": 0, "free_retries": 0, "most_attempts": 0}
               for kind in KINDS}  # fmt: skip
    resumed, twice, problems, takeovers = 0, {}, [], []
    for job_id in ids:
        job = client.get(f"/jobs/{job_id}").json()
        kind = by_kind[kinds[job_id]]
        kind["submitted"] += 1
        kind["retried"] += job["attempt"] > 1
        takeovers += _takeover_s(job)
        if job["status"] == "SUCCEEDED":
            result["succeeded"] += 1
            kind["succeeded"] += 1
            if kinds[job_id] == "predict" and (bad := _bad_output(job, keys)):
                result["bad_outputs"] += 1
                problems.append(f"{job_id} output: {bad}")
        elif job["status"] in FINAL:
            reason = (job["error"] or {}).get("reason", job["status"])
            result["failed"][reason] = result["failed"].get(reason, 0) + 1
            problems.append(
                f"{job_id} attempt {job['attempt']}: {reason}: {(job['error'] or {}).get('message', '')[:300]}"
            )
        else:
            result["lost"] += 1
            problems.append(f"{job_id} ({kinds[job_id]}) unfinished: {job['status']}, attempt {job['attempt']}, "
                            f"progress {job['progress']:.2f}, waiting for {job.get('waiting_for')}")  # fmt: skip
        lines = _log(client, job_id)
        queued = [line for line in lines if QUEUED_AGAIN.match(line)]
        resumed += (resumes := any(": resumes from checkpoint " in line for line in queued))
        kind["resumed"] += resumes
        kind["free_retries"] += sum(line.endswith("costs no attempt)") for line in queued)
        kind["most_attempts"] = max(kind["most_attempts"], job["attempt"])
        why = ran_twice(job, starts(client, job_id), kills, versions.get(job_id, 0))
        if why:
            twice[job_id] = why
    result["run_twice"] = len(twice)
    result.update(finished=result["succeeded"] + sum(result["failed"].values()), kills=len(kills),
                  resumed_from_checkpoint=resumed, by_kind=by_kind)  # fmt: skip
    if takeovers:
        result["takeover_s"] = {"max": round(max(takeovers), 2), "median": round(statistics.median(takeovers), 2),
                                "count": len(takeovers), "bound": 4 + 2}  # fmt: skip
    if twice:
        result["run_twice_why"] = twice
    for line in problems:
        print(f"problem: {line}", flush=True)
    return result


def _log(client: httpx.Client, job_id: str) -> list[str]:
    return [line["message"] for line in client.get(f"/jobs/{job_id}/logs", params={"limit": 5000}).json()["lines"]]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos")
    parser.add_argument("--jobs", type=int, default=20, help="jobs to submit (default 20)")
    parser.add_argument("--drivers", type=int, choices=(1, 2), default=1, help="drivers sharing the work (default 1)")
    parser.add_argument("--quick", action="store_true", help="5 jobs")
    parser.add_argument("--seed", type=int, default=1, help="seed of the kill times")
    parser.add_argument("--kill-after", type=float, nargs=2, default=(10.0, 40.0), metavar=("MIN_S", "MAX_S"),
                        help="a driver is killed after a random uptime in this range (default 10 40)")  # fmt: skip
    parser.add_argument("--max-kills", type=int, default=6, help="stop killing after this many kills (default 6)")
    parser.add_argument("--settle", type=float, default=900, help="seconds the last driver gets to finish the rest")
    args = parser.parse_args()
    jobs = 5 if args.quick else args.jobs
    if shutil.which("redis-server") is None:
        raise SystemExit("bench.chaos needs redis-server on the PATH (it starts its own on a free port)")
    work = Path(tempfile.mkdtemp(prefix="bench-chaos-"))
    try:
        result = run(jobs, work, drivers=args.drivers, kill_after=tuple(args.kill_after), seed=args.seed,
                     max_kills=args.max_kills, settle_s=args.settle)  # fmt: skip
    except BaseException:
        print(f"logs kept in {work}", file=sys.stderr)
        raise
    shutil.rmtree(work, ignore_errors=True)
    print(f"{result['submitted']} submitted on {args.drivers} driver(s), {result['finished']} finished "
          f"({result['succeeded']} succeeded, failed {result['failed'] or 0}), {result['lost']} lost, "
          f"{result['run_twice']} run twice, {result['bad_outputs']} bad outputs; {result['kills']} driver kills, "
          f"{result['resumed_from_checkpoint']} resumed from a checkpoint, {result['wall_s']} s")  # fmt: skip
    if not args.quick and args.jobs == 20:
        name = "chaos.json" if args.drivers == 1 else "chaos-2drivers.json"
        (REPO / "bench" / "results" / name).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()

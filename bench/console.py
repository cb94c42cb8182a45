"""The user's view under load: event latency, 200 SSE clients during training, and a /metrics scrape at 10,000 jobs.

1. Latency from a metric point written (``jobs.add_metrics`` in a committed transaction, as the trainer's job context
   writes it) to the ``metrics`` event received by SSE clients of ``GET /jobs/{id}/events``, with 1 and with 200
   clients (p50/p99).
2. A torch training job's samples/s (as the trainer measures it, summed over its workers, median over steps) with no
   SSE client against the same job with 200 clients following it, alternated.
3. ``GET /metrics`` with 10,000 jobs in the database (p50/p99 of the scrape), against the 50 ms target.

The service runs as ``python -m app`` (a subprocess, embedded SQLite unless --database-url); clients are raw
sockets in this process. Run: ``python -m bench.console [--quick] [--database-url URL]``; the last line is JSON,
also saved to bench/results/console.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx

from bench.chaos import digits_job
from bench.common import REPO, free_port, start_service, stop, wait_ready


async def _sse_client(port: int, path: str, received: list[tuple[float, bytes]], ready: asyncio.Event) -> None:
    """A minimal SSE reader: raw socket, records (time, data line) of every ``metrics`` event."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n".encode())
    await writer.drain()
    ready.set()
    kind = b""
    try:
        while line := await reader.readline():
            if line.startswith(b"event: "):
                kind = line[7:].strip()
            elif line.startswith(b"data: ") and kind == b"metrics":
                received.append((time.time(), line))
            elif line.startswith(b"data: ") and kind == b"end":
                break
    finally:
        writer.close()


async def _clients(port: int, path: str, n: int) -> tuple[list[asyncio.Task[None]], list[list[tuple[float, bytes]]]]:
    inboxes: list[list[tuple[float, bytes]]] = [[] for _ in range(n)]
    tasks = []
    for inbox in inboxes:
        ready = asyncio.Event()
        tasks.append(asyncio.create_task(_sse_client(port, path, inbox, ready)))
        await ready.wait()
    return tasks, inboxes


def _db(url: str) -> Any:
    from app.db.session import create_db_engine, create_sessionmaker

    return create_sessionmaker(create_db_engine(url))


async def measure_latency(port: int, db_url: str, clients: int, points: int) -> dict[str, float]:
    """Write ``points`` metric points, 0.1 s apart, each carrying its write time; every client's receipt time minus
    that is one latency sample."""
    from app.core.jobstates import JobStatus
    from app.db.base import utcnow
    from app.db.session import transaction
    from app.services import jobs

    db = _db(db_url)
    with transaction(db) as s:
        job, _ = jobs.create_job(session=s, job_type="train", request={}, framework="torch", name="latency")
        job.status, job.started_at, job.heartbeat_at = JobStatus.RUNNING.value, utcnow(), utcnow()
        job_id = job.id
    tasks, inboxes = await _clients(port, f"/jobs/{job_id}/events", clients)
    await asyncio.sleep(1.0)
    loop = asyncio.get_running_loop()
    for step in range(points):

        def write(step: int = step) -> None:
            with transaction(db) as s:
                jobs.add_metrics(session=s, job_id=job_id, points=[{"key": "t", "step": step, "value": time.time()}])

        await loop.run_in_executor(None, write)
        await asyncio.sleep(0.1)
    await asyncio.sleep(2.0)
    with transaction(db) as s:
        jobs.transition(session=s, job_id=job_id, sources=[JobStatus.RUNNING], target=JobStatus.SUCCEEDED,
                        finished_at=utcnow())  # fmt: skip
    await asyncio.wait_for(asyncio.gather(*tasks), 60)
    samples = []
    for inbox in inboxes:
        for received_at, line in inbox:
            for point in json.loads(line[6:])["points"]:
                samples.append(received_at - point["value"])
    expected = clients * points
    return {
        "clients": clients,
        "points": points,
        "received": len(samples),
        "expected": expected,
        "p50_ms": round(1000 * statistics.median(samples), 1),
        "p99_ms": round(1000 * statistics.quantiles(samples, n=100)[98], 1),
    }


def _poll(client: httpx.Client, path: str) -> Any:
    """GET ``path``; once more on a dropped keep-alive connection (the 200 clients' event loop can keep this client
    idle past uvicorn's 5 s keep-alive, and the server then closes the connection it would reuse)."""
    try:
        return client.get(path).json()
    except httpx.RemoteProtocolError:
        return client.get(path).json()


async def train_with_clients(port: int, client: httpx.Client, clients: int, epochs: int, tag: str) -> dict[str, Any]:
    body = digits_job(f"bench-console-{tag}", epochs=epochs, workers=2, batch=32)
    job = client.post("/train", json=body).json()
    tasks, _ = await _clients(port, f"/jobs/{job['id']}/events", clients) if clients else ([], [])
    started = time.perf_counter()
    while (job := _poll(client, f"/jobs/{job['id']}"))["status"] not in ("SUCCEEDED", "FAILED", "CANCELLED"):
        await asyncio.sleep(0.5)
    wall = time.perf_counter() - started
    if job["status"] != "SUCCEEDED":
        raise RuntimeError(f"training job {job['id']}: {job['status']} {job['error']}")
    if tasks:
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
    points = client.get(f"/jobs/{job['id']}/metrics", params={"key": "samples_per_s", "limit": 100000}).json()
    by_step: dict[int, float] = {}
    for p in points["metrics"]:
        by_step[p["step"]] = by_step.get(p["step"], 0.0) + p["value"]
    steady = sorted(by_step.items())[len(by_step) // 10 :]  # the first tenth warms up
    return {
        "clients": clients,
        "samples_per_s": round(statistics.median(v for _, v in steady), 1),
        "steps": len(by_step),
        "wall_s": round(wall, 1),
    }


def seed_jobs(db_url: str, n: int) -> None:
    """``n`` jobs of every type, family and state, with durations, and two running torch jobs with recent points."""
    from sqlalchemy import insert

    from app.db.base import utcnow
    from app.db.models import Job, JobMetric

    rng = random.Random(16)
    now = utcnow()
    kinds = [("train", "torch"), ("train", "xgboost"), ("train", "spark_ml"), ("evaluate", None), ("predict", None)]
    states = ["QUEUED", "SUCCEEDED", "SUCCEEDED", "SUCCEEDED", "FAILED", "CANCELLED", "RUNNING"]
    rows: list[dict[str, Any]] = []
    points: list[dict[str, Any]] = []
    for i in range(n):
        job_type, framework = kinds[i % len(kinds)]
        status = "RUNNING" if i < 2 else rng.choice(states[:-1])
        if i < 2:
            job_type, framework = "train", "torch"
        created = now - timedelta(seconds=n - i)
        started = None if status == "QUEUED" else created
        finished = started + timedelta(seconds=rng.expovariate(1 / 300)) if started and status != "RUNNING" else None
        job_id = f"{i:032x}"
        rows.append({"id": job_id, "type": job_type, "framework": framework, "name": f"bench-{i}", "status": status,
                     "progress": 1.0, "attempt": 1, "max_attempts": 3, "request": {}, "warnings": [], "attempts": [],
                     "owner": "anonymous", "created_at": created, "started_at": started, "finished_at": finished,
                     "heartbeat_at": now if status == "RUNNING" else None})  # fmt: skip
        if status == "RUNNING":
            for step in range(1, 401):
                for worker in (0, 1):
                    for key, value in (
                        ("samples_per_s", 900.0),
                        ("tau", 1e-3),
                        ("sparsity", 2e-3),
                        ("wire_bytes", 4e3),
                    ):
                        at = now - timedelta(seconds=(400 - step) * 0.05)
                        points.append({"job_id": job_id, "key": key, "step": step, "epoch": 1, "value": value,
                                       "worker": worker, "time": at})  # fmt: skip
    db = _db(db_url)
    with db() as s:
        s.execute(insert(Job), rows)
        s.execute(insert(JobMetric), points)
        s.commit()


def measure_floors(client: httpx.Client, db_url: str, runs: int) -> dict[str, float]:
    """Peers of the scrape in the same run: an HTTP round trip that does nothing (GET /healthz), and the bare
    GROUP BY of the jobs table from this process (what any count of jobs by state costs on this machine now)."""
    from sqlalchemy import text

    health, group_by = [], []
    db = _db(db_url)
    with db() as s:
        for _ in range(runs):
            started = time.perf_counter()
            client.get("/healthz").raise_for_status()
            health.append(time.perf_counter() - started)
            started = time.perf_counter()
            s.execute(text("SELECT type, framework, status, count(*) FROM jobs GROUP BY 1, 2, 3")).all()
            group_by.append(time.perf_counter() - started)
    return {
        "healthz_p50_ms": round(1000 * statistics.median(health), 1),
        "group_by_p50_ms": round(1000 * statistics.median(group_by), 1),
    }


def measure_scrape(client: httpx.Client, scrapes: int) -> dict[str, float]:
    times = []
    for _ in range(scrapes):
        started = time.perf_counter()
        answer = client.get("/metrics")
        times.append(time.perf_counter() - started)
        answer.raise_for_status()
    return {
        "scrapes": scrapes,
        "p50_ms": round(1000 * statistics.median(times), 1),
        "p99_ms": round(1000 * statistics.quantiles(times, n=100)[98], 1),
        "bytes": len(answer.content),
    }


async def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    port = free_port()
    db_url = args.database_url or f"sqlite:///{work / 'var' / 'sparktrain.db'}"
    env = {"SPARKTRAIN_DATABASE_URL": db_url, "SPARKTRAIN_ARTIFACT_ROOT": str(work / "artifacts")}
    proc = start_service(work, port, **env)
    url = f"http://127.0.0.1:{port}"
    out: dict[str, Any] = {"load": os.getloadavg(), "cores": os.cpu_count(), "database": db_url.split(":")[0]}
    try:
        wait_ready(url + "/readyz", proc, timeout=600)  # a loaded machine starts Spark slowly
        with httpx.Client(base_url=url, timeout=120) as client:
            points = 50 if args.quick else 150
            out["latency"] = [await measure_latency(port, db_url, n, points) for n in (1, args.clients)]
            for line in out["latency"]:
                print(f"metric write -> SSE client, {line['clients']:>3} clients: p50 {line['p50_ms']} ms, "
                      f"p99 {line['p99_ms']} ms ({line['received']}/{line['expected']} received)")  # fmt: skip
            rounds = 0 if args.skip_training else args.rounds or (1 if args.quick else 3)
            epochs = 2 if args.quick else 4
            training = []
            for r in range(rounds):
                for n in (0, args.clients) if r % 2 == 0 else (args.clients, 0):  # alternated: load drifts
                    training.append(await train_with_clients(port, client, n, epochs, f"{r}-{n}"))
                    print(f"training with {n:>3} SSE clients: {training[-1]}")
            if training:
                base = statistics.median(t["samples_per_s"] for t in training if t["clients"] == 0)
                loaded = statistics.median(t["samples_per_s"] for t in training if t["clients"] == args.clients)
                out["training"] = {"runs": training, "ratio_with_clients": round(loaded / base, 3)}
                print(f"samples/s with {args.clients} clients / without: {loaded / base:.3f} (target >= 0.95)")
            seed_jobs(db_url, args.jobs)
            measure_scrape(client, 3)  # warm: the first scrape builds the cluster figures
            scrapes = 20 if args.quick else 100
            out["scrape"] = {
                "jobs": args.jobs,
                **measure_scrape(client, scrapes),
                **measure_floors(client, db_url, scrapes),
            }
            scrape = out["scrape"]
            print(
                f"/metrics at {args.jobs} jobs: p50 {scrape['p50_ms']} ms, p99 {scrape['p99_ms']} ms (target < 50 ms); "
                f"peers now: GET /healthz {scrape['healthz_p50_ms']} ms, a bare GROUP BY of the jobs "
                f"{scrape['group_by_p50_ms']} ms; load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
            )
    finally:
        stop(proc)
    out["load_after"] = os.getloadavg()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.console")
    parser.add_argument("--quick", action="store_true", help="fewer points, one training round of 2 epochs")
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--database-url", help="default: the embedded SQLite file")
    parser.add_argument("--skip-training", action="store_true", help="only the event latency and the scrape")
    parser.add_argument("--rounds", type=int, help="training rounds (each: without and with clients); 1 quick, 3 full")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = asyncio.run(run(args, Path(tmp)))
    result["quick"] = args.quick
    line = json.dumps(result)
    (REPO / "bench" / "results").mkdir(exist_ok=True)
    name = "console" if not args.database_url else "console-" + args.database_url.split(":")[0].split("+")[0]
    (REPO / "bench" / "results" / f"{name}.json").write_text(line + "\n")
    print(line)


if __name__ == "__main__":
    main()

"""Which server-less Celery broker should the embedded default use? Measures, for kombu's SQLAlchemy
transport on SQLite, its filesystem transport and (as the reference) Redis:

- round-trip latency of one task (send -> the consumer runs it), p50 / p99;
- a burst of N tasks sent from 2 threads to a 2-thread consumer: wall time, lost and duplicated tasks;
- a crash: a consumer process takes a message (acks_late) and is killed with SIGKILL; does a new consumer
  get the message again, and after how long? (For SQLite the new consumer first runs the start-up restore
  of sparktrain's driver, ``app.jobs.celery_app.restore_unacked_embedded``; the filesystem transport deletes a
  message file when a consumer takes it, so nothing is left to restore.)

Run: ``python -m bench.broker [--quick]``; the last line is one JSON object.
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
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from celery import Celery

from bench.common import save_results

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")
CRASH_WAIT_S = 20.0


def make_app(kind: str, folder: Path, queue: str) -> Celery:
    conf: dict[str, Any] = {
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_ignore_result": True,
        "worker_hijack_root_logger": False,
        "worker_enable_remote_control": False,
        "task_default_queue": queue,
        "broker_connection_retry_on_startup": True,
    }
    if kind == "sqlite":
        from kombu.transport import sqlalchemy as sqla

        sqla.Transport.polling_interval = 0.05
        conf["broker_url"] = f"sqla+sqlite:///{folder / 'broker.db'}"
    elif kind == "filesystem":
        (folder / "fs").mkdir(parents=True, exist_ok=True)
        conf["broker_url"] = "filesystem://"
        conf["broker_transport_options"] = {
            "data_folder_in": str(folder / "fs"),
            "data_folder_out": str(folder / "fs"),
            "control_folder": str(folder / "control"),  # kombu's default is ./control
            "polling_interval": 0.05,
        }
    else:
        conf["broker_url"] = REDIS_URL
        conf["broker_transport_options"] = {
            "visibility_timeout": 5,
            "unacked_restore_interval": 1,
            "unacked_restore_throttle": 1,
        }
    app = Celery("bench", set_as_current=False)
    app.conf.update(conf)
    return app


def start_consumer(app: Celery, queue: str) -> Any:
    from app.jobs.consumer import InProcessConsumer

    consumer = InProcessConsumer(app, concurrency=2, queue=queue, name="bench")
    consumer.start()
    return consumer


def measure_in_process(kind: str, folder: Path, tasks: int, pings: int) -> dict[str, Any]:
    queue = f"bench-{kind}-{os.getpid()}"
    app = make_app(kind, folder, queue)
    seen: Counter[int] = Counter()
    events: dict[int, threading.Event] = {}
    lock = threading.Lock()

    @app.task(name="bench.mark", shared=False)
    def mark(i: int) -> None:
        with lock:
            seen[i] += 1
            event = events.get(i)
        if event is not None:
            event.set()

    consumer = start_consumer(app, queue)
    try:
        latencies = []
        for i in range(pings):
            events[-1 - i] = threading.Event()
            t0 = time.perf_counter()
            app.send_task("bench.mark", args=[-1 - i], queue=queue)
            if not events[-1 - i].wait(10):
                raise RuntimeError(f"{kind}: a ping was not delivered within 10 s")
            latencies.append(time.perf_counter() - t0)

        def produce(start: int) -> None:
            for i in range(start, tasks, 2):
                app.send_task("bench.mark", args=[i], queue=queue)

        t0 = time.perf_counter()
        producers = [threading.Thread(target=produce, args=(k,)) for k in (0, 1)]
        for p in producers:
            p.start()
        for p in producers:
            p.join()
        deadline = time.monotonic() + 120
        while sum(1 for i in range(tasks) if seen[i]) < tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        burst = time.perf_counter() - t0
        time.sleep(1.0)  # let any duplicate arrive
    finally:
        consumer.stop(10)
        app.close()
    lat = sorted(latencies)
    return {
        "latency_p50_ms": round(statistics.median(lat) * 1000, 1),
        "latency_p99_ms": round(lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1000, 1),
        "burst_tasks": tasks,
        "burst_s": round(burst, 2),
        "burst_tasks_per_s": round(tasks / burst, 1),
        "lost": sum(1 for i in range(tasks) if seen[i] == 0),
        "duplicated": sum(1 for i in range(tasks) if seen[i] > 1),
    }


CHILD = r"""
import sys, time, pathlib
sys.path.insert(0, {repo!r})
from bench.broker import make_app, start_consumer
kind, folder, queue, marker, mode = sys.argv[1:6]
app = make_app(kind, pathlib.Path(folder), queue)

@app.task(name="bench.crash", shared=False)
def crash(i):
    pathlib.Path(marker).write_text(mode)
    if mode == "hang":
        time.sleep(600)

if mode == "quick" and kind == "sqlite":
    from app.jobs.celery_app import restore_unacked_embedded
    restore_unacked_embedded(app.conf.broker_url)  # what the sparktrain driver does at start-up
start_consumer(app, queue)
time.sleep(600)
"""


def measure_crash(kind: str, folder: Path) -> dict[str, Any]:
    """SIGKILL a consumer holding an unacked message, start another: is the message delivered again?"""
    queue = f"crash-{kind}-{os.getpid()}"
    repo = str(Path(__file__).resolve().parents[1])
    script = folder / "child.py"
    script.write_text(CHILD.format(repo=repo))
    marker = folder / f"marker-{kind}"
    app = make_app(kind, folder, queue)
    app.send_task("bench.crash", args=[1], queue=queue)
    first = subprocess.Popen([sys.executable, str(script), kind, str(folder), queue, str(marker), "hang"])
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{kind}: the first consumer never ran the task")
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.wait()
    finally:
        if first.poll() is None:
            first.kill()
    marker.unlink()
    t0 = time.monotonic()
    second = subprocess.Popen([sys.executable, str(script), kind, str(folder), queue, str(marker), "quick"])
    try:
        while not marker.exists() and time.monotonic() - t0 < CRASH_WAIT_S:
            time.sleep(0.05)
        redelivered = marker.exists()
    finally:
        second.kill()
        second.wait()
        app.close()
    return {
        "redelivered_after_kill": redelivered,
        "redelivery_s": round(time.monotonic() - t0, 1) if redelivered else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.broker")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    tasks, pings = (200, 20) if args.quick else (2000, 100)
    results: dict[str, Any] = {}
    for kind in ("sqlite", "filesystem", "redis"):
        with tempfile.TemporaryDirectory() as tmp:
            try:
                results[kind] = measure_in_process(kind, Path(tmp), tasks, pings)
                results[kind].update(measure_crash(kind, Path(tmp)))
            except Exception as exc:
                results[kind] = {"error": f"{type(exc).__name__}: {exc}"}
    cols = ["latency_p50_ms", "latency_p99_ms", "burst_tasks_per_s", "lost", "duplicated", "redelivered_after_kill"]
    print(f"{'broker':<12}" + "".join(f"{c:>24}" for c in cols))
    for kind, r in results.items():
        print(f"{kind:<12}" + "".join(f"{r.get(c, r.get('error', '-'))!s:>24}" for c in cols))
    print(json.dumps(results))
    save_results("broker", results, quick=args.quick)


if __name__ == "__main__":
    main()

"""Helpers shared by the tests: the service over real HTTP and request bodies."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def tmpfs(mount: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``mount``'s ``-o size=``) mounted at ``mount`` (made here), unmounted afterwards; the
    test is skipped where it cannot be mounted (not root, no mount)."""
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True,
                          check=False)  # fmt: skip
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode()[:200]}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@contextmanager
def pg_database(server: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database on ``server`` (a SQLAlchemy URL without a database), dropped afterwards."""
    import psycopg

    name = f"sparktrain_t_{uuid.uuid4().hex[:12]}"
    admin = server.replace("postgresql+psycopg", "postgresql") + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{server}/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass
class Service:
    url: str
    client: httpx.Client
    app: Any

    @property
    def runtime(self) -> Any:
        return self.app.state.runtime

    def wait(self, job_id: str, statuses: set[str], timeout: float = 240.0) -> dict[str, Any]:
        """Poll the job until its status is one of ``statuses``."""
        deadline = time.monotonic() + timeout
        job: dict[str, Any] = {}
        while time.monotonic() < deadline:
            job = self.client.get(f"/jobs/{job_id}").json()
            if job["status"] in statuses:
                return job
            time.sleep(0.2)
        raise AssertionError(f"job {job_id} did not reach {statuses} in {timeout:.0f} s; last: {job}")

    def done(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST a job (``/train``, ``/evaluate``, batch ``/predict``) and wait until it SUCCEEDED."""
        response = self.client.post(path, json=body)
        assert response.status_code == 202, response.text
        job = self.wait(response.json()["id"], {"SUCCEEDED", "FAILED"}, timeout=600)
        assert job["status"] == "SUCCEEDED", job["error"]
        return job

    def train(self, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        response = self.client.post("/train", json=body, **kwargs)
        assert response.status_code == 202, response.text
        return dict(response.json())


@contextmanager
def running_service(spark: Any, tmp_path: Path, **overrides: Any) -> Iterator[Service]:
    """The real app under uvicorn on a free port, sharing the test session's SparkSession."""
    import uvicorn

    from app.core.settings import Settings
    from app.main import create_app

    values: dict[str, Any] = {
        "var_dir": tmp_path / "var",
        "artifact_root": tmp_path / "artifacts",
        "queue": f"sparktrain-test-{uuid.uuid4().hex[:8]}",
        "spark_master": "local[2]",
        "heartbeat_interval_s": 0.3,
    }
    values.update(overrides)
    settings = Settings(**values)
    app = create_app(settings, spark=spark)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the service did not start")
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            yield Service(url=url, client=client, app=app)
    finally:
        server.should_exit = True
        thread.join(60)


TAXI_FEATURES = [
    "passenger_count",
    "trip_distance",
    "pickup_longitude",
    "pickup_latitude",
    "rate_code",
    "dropoff_longitude",
    "dropoff_latitude",
    "hour",
    "day_of_week",
    "is_weekend",
    "h_distance",
]


def problem(response: httpx.Response, status: int) -> dict[str, Any]:
    """The RFC 9457 problem of a refused request, checked: the status, the media type and the members."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json"), response.headers
    body = dict(response.json())
    assert {"type", "title", "status", "detail"} <= set(body) and body["status"] == status, body
    return body


def taxi_request(name: str = "taxi-fare", **params: Any) -> dict[str, Any]:
    return {
        "name": name,
        "framework": "spark_ml",
        "dataset": {
            "uri": "datasets/taxi/train.parquet",
            "features": TAXI_FEATURES,
            "label": "fare_amount",
            "task": "regression",
        },
        "validation": {"uri": "datasets/taxi/eval.parquet"},
        "params": params or {"algorithm": "linear_regression"},
    }


LINEAR_ROWS = "x1,x2,y,id\n" + "".join(
    f"{i % 7},{(i * 3) % 5},{2 * (i % 7) + (i * 3) % 5 + 0.5},{i}\n" for i in range(40)
)
"""40 rows of a linear relation (``y`` from ``x1`` and ``x2``) with an ``id`` key: the owner and security tests'."""


def linear_train_body(name: str, uri: str = "rows.csv") -> dict[str, Any]:
    """A Spark ML linear regression of ``y`` on ``x1`` and ``x2``: the quickest training job there is."""
    return {
        "name": name,
        "framework": "spark_ml",
        "dataset": {"uri": uri, "features": ["x1", "x2"], "label": "y", "task": "regression"},
        "params": {"algorithm": "linear_regression"},
    }


OWNER_KEYS = {"alice": "alice-0123456789abcdef", "bob": "bob-0123456789abcdef00", "root": "root-0123456789abcdef0"}
"""The owner tests' keys: alice and bob of their own, root an admin."""
OWNER_KEYS_SETTING = ", ".join(
    f"{key}:{owner}" + (":admin" if owner == "root" else "") for owner, key in OWNER_KEYS.items()
)
ENDED = {"SUCCEEDED", "FAILED", "CANCELLED"}


@contextmanager
def owner_clients(svc: Service) -> Iterator[dict[str, httpx.Client]]:
    """A client per key of :data:`OWNER_KEYS`; ``svc.client`` takes root's (``Service.wait`` reads every owner's
    jobs)."""
    clients = {owner: httpx.Client(base_url=svc.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
               for owner, key in OWNER_KEYS.items()}  # fmt: skip
    svc.client.headers["Authorization"] = f"Bearer {OWNER_KEYS['root']}"
    try:
        yield clients
    finally:
        for client in clients.values():
            client.close()


def finished(svc: Service, response: httpx.Response) -> dict[str, Any]:
    """The job a 202 answered, once it ended; it must have SUCCEEDED."""
    assert response.status_code == 202, response.text
    job = svc.wait(response.json()["id"], ENDED)
    assert job["status"] == "SUCCEEDED", job["error"]
    return job


def small_xgboost(name: str) -> dict[str, Any]:
    """A 5-round xgboost regression on the shipped taxi sample, one worker: the quickest trained model a registry
    test can own."""
    return {
        "name": name,
        "framework": "xgboost",
        "dataset": {"uri": "datasets/taxi/train.parquet", "features": TAXI_FEATURES, "label": "fare_amount",
                    "task": "regression"},
        "params": {"num_round": 5, "max_depth": 2, "num_workers": 1},
    }  # fmt: skip


@contextmanager
def registry_world(spark: Any, base: Path, model: str) -> Iterator[dict[str, Any]]:
    """The service with the owners' keys (:data:`OWNER_KEYS`), a client for each, and alice's ``model`` version 1,
    trained (:func:`small_xgboost`): ``{"svc", "job", "alice", "bob", "root", ...}``."""
    with running_service(spark, base, api_keys=OWNER_KEYS_SETTING) as svc, owner_clients(svc) as clients:
        job = finished(svc, clients["alice"].post("/train", json=small_xgboost(model)))
        yield {"svc": svc, "job": job, **clients}


def spark_error(executor: str) -> BaseException:
    """What pyspark raises for a failed Spark job: an error with the py4j Java exception, whose innermost cause's
    toString is the text Spark gives an executor's Python failure."""

    class Java:
        def getCause(self) -> None:  # noqa: N802 - the Java method's name
            return None

        def toString(self) -> str:  # noqa: N802
            return executor

    error = RuntimeError("py4j")
    error.java_exception = Java()  # type: ignore[attr-defined]
    return error

"""The users of ``bench.load`` (a locustfile: ``locust -f bench/load_users.py``): each submits, polls, lists, reads
metrics and logs, and predicts inline (MLflow and V2 bodies) with a short think time between requests.

What a user needs comes in the environment from bench/load.py: ``LOAD_JOB_IDS`` (jobs to poll, comma-separated),
``LOAD_MODEL`` (an xgboost model on the taxi features), ``LOAD_ROWS`` (JSON rows to predict), ``LOAD_EVALUATE``
(an evaluation request to submit) and ``LOAD_STATUS_FILE``, where the answers' status codes per request name are
written at the end (locust's own statistics do not split failures by status). Imported by locust only: it
monkey-patches the process for gevent.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter, defaultdict
from typing import Any

from locust import HttpUser, between, events, task

JOB_IDS = [j for j in os.environ.get("LOAD_JOB_IDS", "").split(",") if j]
MODEL = os.environ.get("LOAD_MODEL", "load-xgb")
ROWS: list[dict[str, Any]] = json.loads(os.environ.get("LOAD_ROWS", "[]"))
EVALUATE: dict[str, Any] = json.loads(os.environ.get("LOAD_EVALUATE", "{}"))
STATUS: defaultdict[str, Counter[int]] = defaultdict(Counter)


@events.request.add_listener
def _count(name: str, response: Any, **_: Any) -> None:
    STATUS[name][getattr(response, "status_code", 0) or 0] += 1


@events.quitting.add_listener
def _write(**_: Any) -> None:
    path = os.environ.get("LOAD_STATUS_FILE")
    if path:
        with open(path, "w") as out:
            json.dump({name: dict(codes) for name, codes in STATUS.items()}, out)


class ApiUser(HttpUser):
    wait_time = between(0.1, 0.5)

    def _check(self, response: Any) -> None:
        if response.status_code >= 500:
            response.failure(f"{response.status_code}: {response.text[:200]}")
        else:
            response.success()

    @task(10)
    def poll(self) -> None:
        with self.client.get(f"/jobs/{random.choice(JOB_IDS)}", name="GET /jobs/{id}", catch_response=True) as r:
            self._check(r)

    @task(3)
    def list_jobs(self) -> None:
        with self.client.get("/jobs?limit=20", name="GET /jobs", catch_response=True) as r:
            self._check(r)

    @task(3)
    def metrics(self) -> None:
        path = f"/jobs/{random.choice(JOB_IDS)}/metrics?limit=200"
        with self.client.get(path, name="GET /jobs/{id}/metrics", catch_response=True) as r:
            self._check(r)

    @task(3)
    def logs(self) -> None:
        with self.client.get(f"/jobs/{random.choice(JOB_IDS)}/logs", name="GET /jobs/{id}/logs",
                             catch_response=True) as r:  # fmt: skip
            self._check(r)

    @task(5)
    def predict(self) -> None:
        body = {"model": {"name": MODEL}, "dataframe_records": random.sample(ROWS, 4)}
        with self.client.post("/predict", json=body, name="POST /predict (inline)", catch_response=True) as r:
            self._check(r)

    @task(5)
    def infer(self) -> None:
        rows = random.sample(ROWS, 4)
        names = list(rows[0])
        inputs = [{"name": n, "shape": [len(rows)], "datatype": "FP64", "data": [float(r[n]) for r in rows]}
                  for n in names]  # fmt: skip
        with self.client.post(f"/v2/models/{MODEL}/infer", json={"inputs": inputs}, name="POST /v2/.../infer",
                              catch_response=True) as r:  # fmt: skip
            self._check(r)

    @task(1)
    def submit(self) -> None:
        with self.client.post("/evaluate", json=EVALUATE, name="POST /evaluate", catch_response=True) as r:
            self._check(r)

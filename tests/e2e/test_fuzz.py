"""Fuzzing: schemathesis against the running service's own OpenAPI schema, over real HTTP, on PostgreSQL.

Every operation gets its examples, schemathesis' coverage cases (boundaries, wrong types, NUL bytes, missing
members) and a bounded number of generated cases, derandomized so that CI runs the same ones each time. No answer
may be a 5xx; every 4xx is problem+json with ``type``, ``title``, ``status`` and ``detail`` (a check of
``fuzz_hooks.py``); answers conform to the schema (status codes, content types, bodies, headers), and invalid
input is refused. The service holds a registered dataset, a trained model with an alias and its job, and the
fuzzer draws those names half the time, so that it gets past the 404s.

schemathesis runs as its CLI (its pytest plugin reaches into pytest internals that pytest 9.2 changed). A
failure prints each failing case with a curl command that replays it.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import Service, pg_database, running_service

pytestmark = pytest.mark.slow  # about a minute: the model it trains first, then some 2,500 requests

HOOKS = Path(__file__).with_name("fuzz_hooks.py")
MODEL = "fuzz-model"
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}
ROWS = "x1,x2,y,id\n" + "".join(f"{i % 7},{(i * 3) % 5},{2 * (i % 7) + (i * 3) % 5 + 0.5},{i}\n" for i in range(60))

# Deterministic: CI runs the same cases every time. Bodies that queue a job get fewer cases (the hooks cancel each
# job at once). positive_data_acceptance is off: a schema-valid body may name a dataset or model that does not
# exist, and a 404/422 is the right answer; the authentication checks are off: the service runs without API keys.
CONFIG = """
workers = 1
request-timeout = 60
hooks = "{hooks}"

[generation]
max-examples = 40
deterministic = true
database = "none"

[checks.positive_data_acceptance]
enabled = false

[checks.ignored_auth]
enabled = false

[checks.object_level_authorization]
enabled = false

[phases.stateful]
enabled = false

[dictionaries]
job_ids.values = ["{job_id}"]
dataset_ids.values = ["{dataset_id}"]
model_names.values = ["{model}"]
versions.values = ["1"]
aliases.values = ["champion"]
dataset_uris.values = ["fuzz.csv", "{dataset_id}"]

[parameters]
"path.job_id" = {{ dictionary = "job_ids", probability = 0.5 }}
"path.dataset_id" = {{ dictionary = "dataset_ids", probability = 0.5 }}
"path.name" = {{ dictionary = "model_names", probability = 0.5 }}
"path.version" = {{ dictionary = "versions", probability = 0.5 }}
"path.alias" = {{ dictionary = "aliases", probability = 0.5 }}
"body.model.name" = {{ dictionary = "model_names", probability = 0.5 }}
"body.dataset.uri" = {{ dictionary = "dataset_uris", probability = 0.5 }}

[[operations]]
include-method = "POST"
include-path-regex = "^/(train|evaluate|predict|recipes/gpu-smoke)$"
generation.max-examples = 15
"""


@pytest.fixture(scope="module")
def fuzzed(spark: Any, pg_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The service on PostgreSQL with its own data root, holding a dataset, a model (with an alias) and its job."""
    root = tmp_path_factory.mktemp("fuzz")
    data = root / "data"
    data.mkdir()
    (data / "fuzz.csv").write_text(ROWS)
    with pg_database(pg_server) as db_url, running_service(spark, root, database_url=db_url, data_roots=[data]) as svc:
        dataset = svc.client.post("/datasets", json={"uri": "fuzz.csv", "name": "fuzz"})
        assert dataset.status_code == 201, dataset.text
        job = svc.train(
            {
                "name": MODEL,
                "framework": "spark_ml",
                "dataset": {"uri": "fuzz.csv", "features": ["x1", "x2"], "label": "y", "task": "regression"},
                "params": {"algorithm": "linear_regression"},
            }
        )
        job = svc.wait(job["id"], TERMINAL)
        assert job["status"] == "SUCCEEDED", job["error"]
        alias = svc.client.put(f"/models/{MODEL}/aliases/champion", json={"version": 1})
        assert alias.status_code == 200, alias.text
        try:
            yield {"service": svc, "job_id": job["id"], "dataset_id": dataset.json()["id"]}
        finally:
            _cancel_all(svc)


def _cancel_all(svc: Service) -> None:
    """Leave the consumer idle: cancel every job that has not finished, and wait for them to end."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        items = svc.client.get("/jobs", params={"limit": 500}).json()["items"]
        running = [j for j in items if j["status"] not in TERMINAL]
        if not running:
            return
        for job in running:
            svc.client.post(f"/jobs/{job['id']}/cancel")
        time.sleep(0.5)
    raise AssertionError(f"jobs still running after the fuzz run: {running}")


def test_fuzz_the_openapi_schema(fuzzed: dict[str, Any], tmp_path: Path) -> None:
    svc: Service = fuzzed["service"]
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG.format(hooks=HOOKS, model=MODEL, job_id=fuzzed["job_id"], dataset_id=fuzzed["dataset_id"]))
    command = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "--no-color", "run"]
    started = time.monotonic()
    run = subprocess.run(
        [*command, f"{svc.url}/openapi.json", "--output-truncate", "true"],
        cwd=tmp_path,  # its .hypothesis/ and .schemathesis/ stay out of the repository
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    seconds = time.monotonic() - started
    report = run.stdout[run.stdout.find("=== FAILURES") :] if "=== FAILURES" in run.stdout else run.stdout
    assert run.returncode == 0, f"schemathesis failed ({seconds:.0f} s):\n{report[-20000:]}\n{run.stderr[-3000:]}"


# --- online prediction bodies ----------------------------------------------------------------------------------
# The schema cannot say what makes a row (``instances: list[Any]``, ``inputs: Any``, a tensor's ``data``), so the
# fuzzer above rarely gets past the 422s. These send the trained model every shape of row, derandomized.

_ODD = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from([2**63, 10**400, 1e39, 3.4028235e38, 1e308, -0.0]),
    st.floats(),  # NaN and infinities too
    st.text(max_size=3),
    st.lists(st.integers(-5, 5), max_size=2),
)
_NUMBER = st.one_of(st.integers(-5, 5), st.floats(-1e6, 1e6))
_FEATURE = st.one_of(*[_NUMBER] * 8, _ODD)  # mostly numbers, so that many bodies reach the model
_COLUMNS = st.sampled_from(["x1", "x2", "x3", ""])
_ROW_LISTS = st.one_of(st.lists(_FEATURE, min_size=2, max_size=2), st.lists(_FEATURE, max_size=3))
_ROW_DICTS = st.one_of(
    st.fixed_dictionaries({"x1": _FEATURE, "x2": _FEATURE}, optional={"x3": _FEATURE}),
    st.dictionaries(_COLUMNS, _FEATURE, max_size=3),
)
_ROWS = st.lists(st.one_of(_ROW_LISTS, _ROW_LISTS, _ROW_DICTS, _ODD), min_size=1, max_size=3) | st.just([])
_FORMS = {
    "instances": _ROWS,
    "dataframe_records": st.lists(_ROW_DICTS, min_size=1, max_size=3) | st.just([]),
    "dataframe_split": st.fixed_dictionaries(
        {"columns": st.one_of(st.just(["x1", "x2"]), st.lists(_COLUMNS, max_size=3)), "data": st.lists(_ROW_LISTS)}
    ),
    "inputs": st.one_of(
        st.dictionaries(_COLUMNS, st.one_of(st.lists(_FEATURE, max_size=3), _ODD), max_size=3),
        _ROWS,
    ),
}
_PREDICT_BODIES = st.sampled_from(sorted(_FORMS)).flatmap(
    lambda form: _FORMS[form].map(lambda rows: {"model": {"name": MODEL}, form: rows})
)
_SHAPES = st.lists(st.integers(-1, 3), max_size=3)
_DATATYPES = st.sampled_from(["FP32", "FP32", "FP32", "FP64", "INT64", "BOOL", "BYTES"])


@st.composite
def _infer_bodies(draw: st.DrawFn) -> dict[str, Any]:
    """One [n, 2] tensor, or one tensor per feature; mostly consistent, sometimes not."""
    n = draw(st.integers(1, 3) | st.just(0))
    if draw(st.booleans()):
        shape = draw(st.just([n, 2]) | st.just([n, 2]) | _SHAPES)
        data = draw(st.lists(_FEATURE, min_size=2 * n, max_size=2 * n + 1))
        return {"inputs": [{"name": "input", "shape": shape, "datatype": draw(_DATATYPES), "data": data}]}
    names = draw(st.sampled_from([["x1", "x2"], ["x2", "x1"], ["x1"], ["x1", "x2", "x3"]]))
    tensors = [
        {
            "name": name,
            "shape": draw(st.just([n]) | st.just([n, 1]) | _SHAPES),
            "datatype": draw(_DATATYPES),
            "data": draw(st.lists(_FEATURE, min_size=n, max_size=n + 1)),
        }
        for name in names
    ]
    return {"inputs": tensors}


_INFER_BODIES = _infer_bodies()
_SETTINGS = settings(
    max_examples=150, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck)
)


def _post(client: httpx.Client, url: str, body: Any) -> httpx.Response:
    """NaN and Infinity as Python's json writes them (and reads them: the service's parser takes them)."""
    return client.post(url, content=json.dumps(body), headers={"content-type": "application/json"})


def _answered(response: httpx.Response) -> Any:
    """No 5xx; a 4xx is problem+json; a 200 is returned (parsed)."""
    sent = response.request.content.decode()[:2000]
    assert response.status_code < 500, f"{response.request.url} {sent}\n-> {response.text}"
    if response.status_code >= 400:
        media = response.headers["content-type"].split(";")[0]
        assert media == "application/problem+json", f"{sent}\n-> {response.status_code} {media}"
        problem = response.json()
        assert {"type", "title", "status", "detail"} <= set(problem), f"{sent}\n-> {problem}"
        assert problem["status"] == response.status_code, f"{sent}\n-> {problem}"
        return None
    assert response.status_code == 200, f"{sent}\n-> {response.status_code} {response.text}"
    return response.json()


def test_fuzz_online_predictions(fuzzed: dict[str, Any]) -> None:
    client = fuzzed["service"].client

    @_SETTINGS
    @given(body=_PREDICT_BODIES)
    def predict(body: dict[str, Any]) -> None:
        answer = _answered(_post(client, "/predict", body))
        if answer is not None:  # every prediction is a number: a feature beyond float32 once came back as null
            assert all(isinstance(p, float) and math.isfinite(p) for p in answer["predictions"]), (body, answer)

    @_SETTINGS
    @given(body=_INFER_BODIES)
    def infer(body: dict[str, Any]) -> None:
        answer = _answered(_post(client, f"/v2/models/{MODEL}/infer", body))
        if answer is not None:
            (output,) = answer["outputs"]
            assert all(math.isfinite(p) for p in output["data"]), (body, answer)

    predict()
    infer()

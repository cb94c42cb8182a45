"""Health, readiness, cluster and the OpenAPI documentation."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.helpers import Service


def test_health_and_readiness(service: Service) -> None:
    assert service.client.get("/healthz").json() == {"status": "ok"}
    ready = service.client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"database": "ok", "broker": "ok", "spark": "ok", "consumer": "ok"}


def test_cluster(service: Service) -> None:
    cluster = service.client.get("/cluster").json()
    spark = service.runtime.spark.sparkContext
    assert cluster["master"] == "local[2]"
    assert cluster["app_id"] == spark.applicationId
    assert cluster["task_slots"] == 2
    assert cluster["executors"][0]["cores"] == 2
    assert cluster["executors"][0]["max_memory_bytes"] > 0
    assert cluster["versions"]["pyspark"] == "4.3.0"
    assert cluster["driver"]["in_process_consumer"] is True
    assert cluster["gpu_addresses"] == {}


def test_cluster_reports_rapids(service: Service) -> None:
    rapids = service.client.get("/cluster").json()["rapids"]
    assert rapids["plugin"] == "com.nvidia.spark.SQLPlugin"
    assert rapids["configured"] is False and rapids["active"] is False and rapids["class_loaded"] is False
    assert rapids["sql_enabled"] is True  # RAPIDS' default; it matters once the plugin is loaded
    assert rapids["profile"] is None
    # the test session has no profile and no jar: the reason says both, and how to enable the plugin
    assert rapids["reason"].startswith("the RAPIDS plugin is not configured: no jar found at ")
    assert "SPARKTRAIN_SPARK_PROFILE=gpu" in rapids["reason"]


def test_openapi_documents_examples(service: Service) -> None:
    schema = service.client.get("/openapi.json").json()
    paths = schema["paths"]
    for path in [
        "/train",
        "/jobs",
        "/jobs/{job_id}",
        "/jobs/{job_id}/metrics",
        "/jobs/{job_id}/logs",
        "/jobs/{job_id}/cancel",
        "/models",
        "/models/{name}/versions/{version}",
        "/healthz",
        "/readyz",
        "/cluster",
    ]:
        assert path in paths, path
    examples = paths["/train"]["post"]["requestBody"]["content"]["application/json"]["examples"]
    assert "random_forest_cv" in examples
    docs = service.client.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


def test_openapi_documents_errors_as_problem_json(service: Service) -> None:
    # FastAPI documents a 422 with its own HTTPValidationError under application/json; we send problem+json.
    schema = service.client.get("/openapi.json").json()
    definitions = schema["components"]["schemas"]
    assert {"type", "title", "status", "detail"} <= set(definitions["Problem"]["required"])
    assert "HTTPValidationError" not in definitions and "ValidationError" not in definitions
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            responses = operation["responses"]
            assert {"4XX", "5XX"} <= set(responses), (method, path)
            for code, response in responses.items():
                if code[0] in "45":  # with an example of each kind (tests/app/api/test_openapi_problems.py)
                    assert set(response["content"]) == {"application/problem+json"}, (method, path, code)
                    media = response["content"]["application/problem+json"]
                    assert media["schema"] == {"$ref": "#/components/schemas/Problem"}, (method, path, code)
    refs = set(re.findall(r'"\$ref": ?"([^"]+)"', json.dumps(schema)))
    for ref in refs:  # schemas, and the examples of problems that operations share (components.examples)
        target: Any = schema
        for part in ref.removeprefix("#/").split("/"):
            assert isinstance(target, dict) and part in target, f"unresolvable reference {ref}"
            target = target[part]

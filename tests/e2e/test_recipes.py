"""Recipes through the real service (HTTP, Celery, the database, the test session's local[2] SparkSession):
the GPU smoke test on a CPU machine runs on the CPU, counts exactly and says why."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import Service

PATH = "/recipes/gpu-smoke"


def _recipe_jobs(service: Service) -> list[dict[str, Any]]:
    return list(service.client.get("/jobs", params={"type": "recipe", "limit": 200}).json()["items"])


def test_gpu_smoke_runs_on_cpu_and_says_why(service: Service) -> None:
    response = service.client.post(PATH, json={"rows": 20_000, "partitions": 4, "device": "auto"})
    assert response.status_code == 202, response.text
    job = response.json()
    assert response.headers["location"] == f"/jobs/{job['id']}"
    assert (job["type"], job["name"], job["status"]) == ("recipe", "gpu-smoke", "QUEUED")
    assert job["request"] == {"rows": 20_000, "partitions": 4, "device": "auto"}

    job = service.wait(job["id"], {"SUCCEEDED", "FAILED", "CANCELLED"})
    assert job["status"] == "SUCCEEDED", job["error"]
    assert job["progress"] == 1.0
    result = job["result"]
    assert result["counts"] == {"left": 20_000, "right": 20_000, "joined": 10_000, "expected": 10_000}
    assert result["key_sum"] == {"joined": 10_000 * 9_999, "expected": 10_000 * 9_999}
    assert result["ran_on"] == "cpu"
    assert result["gpu_operators"] == []
    assert result["join"] == "SortMergeJoin"  # a shuffled join, as on the GPU (GpuShuffledHashJoin)
    assert result["seconds"] > 0 and result["total_seconds"] >= result["seconds"]
    rapids = result["rapids"]
    assert rapids["active"] is False and rapids["configured"] is False
    assert result["why"] == rapids["reason"]
    assert result["why"].startswith("the RAPIDS plugin is not configured")
    assert result["gpu_addresses"] == {}
    assert "SortMergeJoin" in result["plan"]

    assert job["id"] in [j["id"] for j in _recipe_jobs(service)]
    metrics = service.client.get(f"/jobs/{job['id']}/metrics", params={"key": "join_seconds"}).json()["metrics"]
    assert [m["value"] for m in metrics] == [result["seconds"]]
    logs = service.client.get(f"/jobs/{job['id']}/logs").json()["lines"]
    assert any("gpu-smoke: 10,000 joined rows" in line["message"] for line in logs)


def test_gpu_smoke_on_cpu_by_request_with_an_odd_row_count(service: Service) -> None:
    job = service.client.post(PATH, json={"rows": 999, "partitions": 3, "device": "cpu"}).json()
    job = service.wait(job["id"], {"SUCCEEDED", "FAILED", "CANCELLED"})
    assert job["status"] == "SUCCEEDED", job["error"]
    assert job["result"]["counts"] == {"left": 999, "right": 999, "joined": 500, "expected": 500}
    assert job["result"]["ran_on"] == "cpu" and "device 'cpu'" in job["result"]["why"]


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"rows": 0}, "rows"),
        ({"rows": 100_000_001}, "rows"),
        ({"rows": "many"}, "rows"),
        ({"partitions": 0}, "partitions"),
        ({"device": "tpu"}, "device"),
        ({"rows": 10, "colour": "green"}, "colour"),
    ],
)
def test_bad_bodies_are_422_problems(service: Service, body: dict[str, Any], loc: str) -> None:
    response = service.client.post(PATH, json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["status"] == 422 and problem["type"].endswith("/validation")
    assert [e["loc"] for e in problem["errors"]] == [loc]
    assert problem["detail"].startswith(f"{loc}: ")


def test_cuda_without_rapids_is_refused_before_any_job_exists(service: Service) -> None:
    before = _recipe_jobs(service)
    response = service.client.post(PATH, json={"rows": 1000, "device": "cuda"})
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["errors"][0]["loc"] == "device"
    assert "the RAPIDS plugin is not configured" in problem["detail"]
    assert "device 'auto'" in problem["detail"]
    assert "location" not in response.headers
    assert _recipe_jobs(service) == before


def test_gpu_smoke_is_documented(service: Service) -> None:
    schema = service.client.get("/openapi.json").json()
    post = schema["paths"][PATH]["post"]
    assert set(post["requestBody"]["content"]["application/json"]["examples"]) >= {"article", "quick"}
    assert {"202", "422"} <= set(post["responses"])
    assert "recipe" in schema["components"]["schemas"]["JobType"]["enum"]


def test_a_replayed_key_returns_its_job_whatever_the_cluster_has_become(service: Service) -> None:
    """The key is looked up before the cluster is checked: a smoke test queued while the cluster had GPUs comes
    back on a replay after they are gone (here: a job written as if it had been queued then)."""
    from app.db.session import transaction
    from app.schemas.recipes import GpuSmokeRequest
    from app.services import jobs

    body = {"rows": 1000, "device": "cuda"}
    stored = GpuSmokeRequest.model_validate(body).model_dump(mode="json")
    with transaction(service.runtime.db) as s:
        first, _ = jobs.create_job(session=s, job_type="recipe", request=stored, name="gpu-smoke",
                                   idempotency_key="smoke-1")  # fmt: skip
        first_id = first.id
        first.status = "SUCCEEDED"
    replay = service.client.post(PATH, json=body, headers={"Idempotency-Key": "smoke-1"})
    assert replay.status_code == 202 and replay.json()["id"] == first_id, replay.text
    other = service.client.post(PATH, json={**body, "rows": 2000}, headers={"Idempotency-Key": "smoke-1"})
    assert other.status_code == 409, other.text

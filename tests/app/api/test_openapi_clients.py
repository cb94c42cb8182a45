"""The OpenAPI document serves teams that generate a typed client from it (openapi-python-client,
datamodel-code-generator, openapi-generator), as they do with Livy's or MLflow's REST APIs.

A client generated from ``/openapi.json`` named its functions after FastAPI's operation ids (``train_train_post``,
``get_job_jobs__job_id__get``); answered ``GET /checkpoints/{id}``, ``GET /jobs/{id}/checkpoints``, the tag and alias
``PUT``s and the V2 metadata with free-form objects or ``Any`` (anonymous ``ResponseGetCheckpointCheckpoints...``
classes); generated the V2 ``infer`` body twice, once per route, as inline classes; and left both downloads out,
their media types having no schema. These tests read the document's properties; the last one checks that what the
service really answers fits what the document declares.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from tests.helpers import TAXI_FEATURES, Service, small_xgboost

METHODS = {"get", "put", "post", "delete", "patch"}
BINARY = {"type": "string", "format": "binary"}
MODEL = "openapi-client-xgb"


@pytest.fixture(scope="module")
def document(service: Service) -> dict[str, Any]:
    answer = service.client.get("/openapi.json")
    assert answer.status_code == 200
    return dict(answer.json())


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(m, p, op) for p, item in document["paths"].items() for m, op in item.items() if m in METHODS]


def test_every_operation_has_a_unique_id_a_generated_function_can_be_named_after(document: dict[str, Any]) -> None:
    ids = [op["operationId"] for _, _, op in _operations(document)]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    bad = [i for i in ids if not re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)*", i) or i.endswith(("_get", "_post"))]
    assert not bad, bad
    by_route = {(m, p): op["operationId"] for m, p, op in _operations(document)}
    assert by_route[("post", "/train")] == "train"
    assert by_route[("get", "/jobs/{job_id}")] == "get_job"
    assert by_route[("get", "/checkpoints/{checkpoint_id}/artifact")] == "download_checkpoint"
    assert by_route[("get", "/models/{name}/versions/{version}/artifact")] == "download_model_version"
    assert by_route[("post", "/v2/models/{name}/infer")] == "v2_infer"


def test_every_json_body_and_answer_is_a_named_schema(document: dict[str, Any]) -> None:
    """A generator names an inline object after its route (``ResponsePutAliasModelsNameAliasesAliasPut``), and reads
    a schema-less answer as ``Any``: each JSON body and success answer refers to a component instead."""
    inline = []
    for method, path, operation in _operations(document):
        where = f"{method.upper()} {path}"
        body = operation.get("requestBody", {}).get("content", {}).get("application/json")
        if body is not None and "$ref" not in body["schema"]:
            inline.append(f"{where} body")
        for code, response in operation["responses"].items():
            media = response.get("content", {}).get("application/json")
            if code.startswith("2") and media is not None and "$ref" not in media.get("schema", {}):
                inline.append(f"{where} {code}")
    assert not inline, inline
    names = document["components"]["schemas"]
    assert not [n for n in names if n.startswith(("Body_", "Response"))], sorted(names)
    assert {"CheckpointRead", "CheckpointList", "AliasRead", "ModelTagRead", "VersionTagRead", "InferRequest",
            "V2ServerMetadata", "V2ModelMetadata"} <= set(names)  # fmt: skip


def test_downloads_are_binary_strings(document: dict[str, Any]) -> None:
    """A media type with no schema is left out of a generated client (openapi-python-client warns ``Cannot parse
    response``); a binary string is a file."""
    for path in ("/checkpoints/{checkpoint_id}/artifact", "/models/{name}/versions/{version}/artifact"):
        content = document["paths"][path]["get"]["responses"]["200"]["content"]
        assert content and all(media.get("schema") == BINARY for media in content.values()), (path, content)


def _fits(document: dict[str, Any], method: str, path: str, answer: Any) -> Any:
    """``answer`` (an httpx response to ``method`` ``path``) fits the schema the document declares for its status
    and media type; its JSON."""
    responses = document["paths"][path][method]["responses"]
    code = str(answer.status_code)
    response = responses.get(code) or responses[code[0] + "XX"]
    media_type = answer.headers["content-type"].split(";")[0]
    schema = response["content"][media_type]["schema"]
    body = answer.json()
    validator = Draft202012Validator({**schema, "components": document["components"]})
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(body)]
    assert not errors, (method, path, code, errors)
    return body


def test_real_answers_fit_their_declared_schemas(service: Service, document: dict[str, Any]) -> None:
    """What a generated client does (train, poll, logs, metrics, models, predict, evaluate, a problem), each answer
    validated against the document (a generated client parses by it)."""
    client = service.client

    def fits(method: str, path: str, answer: Any) -> Any:
        assert answer.status_code < 300 or answer.headers["content-type"].startswith("application/problem+json")
        return _fits(document, method, path, answer)

    trained = fits("post", "/train", client.post("/train", json=small_xgboost(MODEL)))
    job = service.wait(trained["id"], {"SUCCEEDED", "FAILED"})
    assert job["status"] == "SUCCEEDED", job["error"]
    fits("get", "/jobs/{job_id}", client.get(f"/jobs/{job['id']}"))
    fits("get", "/jobs/{job_id}/logs", client.get(f"/jobs/{job['id']}/logs"))
    fits("get", "/jobs/{job_id}/metrics", client.get(f"/jobs/{job['id']}/metrics"))
    fits("get", "/jobs", client.get("/jobs"))
    fits("get", "/models", client.get("/models"))
    fits("get", "/models/{name}", client.get(f"/models/{MODEL}"))
    fits("get", "/models/{name}/versions/{version}", client.get(f"/models/{MODEL}/versions/1"))
    alias = fits(
        "put", "/models/{name}/aliases/{alias}", client.put(f"/models/{MODEL}/aliases/best", json={"version": 1})
    )
    assert alias == {"name": MODEL, "alias": "best", "version": 1}
    tag = fits("put", "/models/{name}/tags/{key}", client.put(f"/models/{MODEL}/tags/team", json={"value": "a"}))
    assert tag == {"name": MODEL, "key": "team", "value": "a"}
    tagged = client.put(f"/models/{MODEL}/versions/1/tags/team", json={"value": "b"})
    assert fits("put", "/models/{name}/versions/{version}/tags/{key}", tagged)["version"] == 1
    row = dict.fromkeys(TAXI_FEATURES, 1.0)
    predicted = client.post("/predict", json={"model": {"name": MODEL}, "dataframe_records": [row, row]})
    assert len(fits("post", "/predict", predicted)["predictions"]) == 2
    evaluation = {"model": {"name": MODEL, "version": 1}, "dataset": {"uri": "datasets/taxi/eval.parquet"}}
    evaluated = service.wait(fits("post", "/evaluate", client.post("/evaluate", json=evaluation))["id"], {"SUCCEEDED"})
    assert "regression" in fits("get", "/jobs/{job_id}", client.get(f"/jobs/{evaluated['id']}"))["result"]
    fits("get", "/v2", client.get("/v2"))
    metadata = fits("get", "/v2/models/{name}", client.get(f"/v2/models/{MODEL}"))
    assert metadata["inputs"][0]["parameters"]["features"] == TAXI_FEATURES
    tensor = {"name": "input", "shape": [1, len(TAXI_FEATURES)], "datatype": "FP32", "data": [list(row.values())]}
    fits("post", "/v2/models/{name}/infer", client.post(f"/v2/models/{MODEL}/infer", json={"inputs": [tensor]}))
    body = small_xgboost(MODEL)
    bad = client.post("/train", json={**body, "dataset": {**body["dataset"], "label": "fare"}})
    assert bad.status_code == 422 and fits("post", "/train", bad)["errors"]

    torch = {"name": "openapi-client-mlp", "framework": "torch",
             "dataset": {"uri": "datasets/taxi/train.parquet", "features": TAXI_FEATURES, "label": "fare_amount",
                         "task": "regression"},
             "network": {"layers": [{"type": "output", "units": 1, "activation": "identity", "loss": "mse"}]},
             "training": {"epochs": 1, "batch_size_per_worker": 256, "num_workers": 1}, "device": "cpu"}  # fmt: skip
    mlp = service.done("/train", torch)
    listed = fits("get", "/jobs/{job_id}/checkpoints", client.get(f"/jobs/{mlp['id']}/checkpoints"))
    assert listed["checkpoints"], listed
    fits("get", "/checkpoints/{checkpoint_id}", client.get(f"/checkpoints/{listed['checkpoints'][0]['id']}"))


def test_the_members_every_answer_has_are_required(document: dict[str, Any]) -> None:
    """A member with a default (``JobRead.slots``, ``ModelVersionRead.formats``) was optional in the document, so a
    generated client typed it ``list[str] | Unset`` though every answer has it."""
    schemas = document["components"]["schemas"]
    for name in ("JobRead", "ModelRead", "ModelVersionRead"):
        assert set(schemas[name]["properties"]) == set(schemas[name]["required"]), name

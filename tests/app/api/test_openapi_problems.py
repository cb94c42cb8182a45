"""The OpenAPI document, read from the running service's ``/openapi.json``, says which problems each operation
answers, with an example body of each kind, and shows an example of every request body.

It listed no 404 anywhere (``GET /jobs/{id}`` answers one for an unknown id), no 409 for a cancel of a finished job
or a prediction of a model still in its first training, no 400, 413 or 415 for bodies, and not one example of an
error; ``POST /datasets``, the alias and tag ``PUT``s and both V2 ``infer`` routes had no request example, and
Swagger's batch prediction keyed its rows by ``hour`` (2,976 of 3,000 keys repeat, so the job warns).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from jsonschema import Draft202012Validator

from app.api.openapi import OPERATION_PROBLEMS, REQUEST_EXAMPLES
from tests.app.api.openapi_doc import operations
from tests.helpers import Service

REPO = Path(__file__).resolve().parents[3]
PROBLEM = "application/problem+json"
BODY_CODES = {"400", "413", "415", "422"}


def _resolved(document: dict[str, Any], example: dict[str, Any]) -> dict[str, Any]:
    """An example, or the shared one (``components.examples``) it refers to."""
    ref = example.get("$ref")
    return dict(document["components"]["examples"][ref.rpartition("/")[2]]) if ref else example


def _validator(document: dict[str, Any], schema: dict[str, Any]) -> Draft202012Validator:
    """A validator of ``schema`` whose ``#/components/...`` references resolve in ``document``."""
    return Draft202012Validator({**schema, "components": document["components"]})


def test_every_looked_up_path_documents_404_and_every_body_400_413_415_422(document: dict[str, Any]) -> None:
    missing = []
    for method, path, operation in operations(document):
        codes = set(operation["responses"])
        if "{" in path and "404" not in codes:
            missing.append(f"{method.upper()} {path}: 404")
        if "requestBody" in operation:
            # V2's body may be JSON followed by binary tensors, of any media type: it never answers 415
            wanted = BODY_CODES - {"415"} if path.startswith("/v2/") else BODY_CODES
            missing += [f"{method.upper()} {path}: {code}" for code in sorted(wanted - codes)]
        if "422" not in codes:  # an unknown query parameter, on every operation (app/api/http_semantics.py)
            missing.append(f"{method.upper()} {path}: 422")
    assert not missing, missing


@pytest.mark.parametrize(
    ("method", "path", "code"),
    [
        ("post", "/jobs/{job_id}/cancel", "409"),
        ("post", "/predict", "404"),
        ("post", "/predict", "409"),
        ("post", "/predict", "413"),
        ("post", "/evaluate", "404"),
        ("post", "/evaluate", "409"),
        ("post", "/train", "409"),
        ("post", "/train", "429"),
        ("post", "/train", "503"),
        ("get", "/jobs", "400"),
        ("delete", "/models/{name}", "409"),
        ("post", "/v2/models/{name}/infer", "409"),
        ("get", "/models/{name}/versions/{version}/artifact", "503"),
    ],
)
def test_the_errors_a_shape_does_not_tell_are_documented(
    document: dict[str, Any], method: str, path: str, code: str
) -> None:
    response = document["paths"][path][method]["responses"][code]
    assert response["content"][PROBLEM]["examples"], response


def test_every_error_response_is_problem_json_with_examples_of_its_own_status(document: dict[str, Any]) -> None:
    problem = _validator(document, {"$ref": "#/components/schemas/Problem"})
    for method, path, operation in operations(document):
        for code, response in operation["responses"].items():
            if code[0] not in "45":
                continue
            media = response["content"][PROBLEM]
            assert media["schema"] == {"$ref": "#/components/schemas/Problem"}, (method, path, code)
            if code == "4XX":
                continue  # the range left for anything else
            assert media.get("examples"), (method, path, code)
            assert response["description"] not in ("Validation Error", "Client error"), (method, path, code)
            for name, example in media["examples"].items():
                body = _resolved(document, example)["value"]
                problem.validate(body)
                assert str(body["status"]) == code or (code == "5XX" and body["status"] >= 500), (path, name)
                assert body["type"].startswith("https://sparktrain.dev/problems/"), body
                assert path.startswith("/v2") == ("error" in body), (path, name)  # the V2 protocol's member


def test_the_examples_look_like_real_answers(service: Service, document: dict[str, Any]) -> None:
    """Real bad requests answer the documented kind of problem, with the documented members."""

    def documented(method: str, path: str, code: str, kind: str) -> dict[str, Any]:
        example = document["paths"][path][method]["responses"][code]["content"][PROBLEM]["examples"][kind]
        return dict(_resolved(document, example)["value"])

    taxi = json.loads((REPO / "examples" / "xgboost-taxi.json").read_text())
    sent = [
        ("post", "/train", "400", "malformed-json", service.client.post(
            "/train", content=b"examples/xgboost-taxi.json", headers={"content-type": "application/json"})),
        ("post", "/train", "415", "media-type", service.client.post("/train", data={"a": "b"})),
        ("post", "/train", "413", "too-large", service.client.post(
            "/train", content=b" " * 1_100_000, headers={"content-type": "application/json"})),
        ("post", "/train", "422", "invalid-body", service.client.post(
            "/train", json={**taxi, "dataset": {**taxi["dataset"], "label": "fare"}})),
        ("get", "/jobs/{job_id}", "404", "not-found", service.client.get("/jobs/" + "0" * 32)),
        ("get", "/jobs/{job_id}", "422", "invalid-query", service.client.get("/jobs/" + "0" * 32, params={"foo": 1})),
        ("get", "/jobs", "400", "bad-cursor", service.client.get("/jobs", params={"cursor": "nope"})),
        ("post", "/predict", "404", "unknown-model", service.client.post(
            "/predict", json={"model": {"name": "no-such-model"}, "instances": [[1.0]]})),
        ("post", "/v2/models/{name}/infer", "404", "not-found", service.client.post(
            "/v2/models/no-such-model/infer", json={"inputs": [{"name": "x", "shape": [1], "datatype": "FP32",
                                                                  "data": [1]}]})),
    ]  # fmt: skip
    for method, path, code, kind, answer in sent:
        assert answer.status_code == int(code), (path, answer.text)
        assert answer.headers["content-type"] == PROBLEM
        real, shown = answer.json(), documented(method, path, code, kind)
        assert (real["type"], real["title"], real["status"]) == (shown["type"], shown["title"], shown["status"])
        assert set(real) == set(shown), (path, kind, real, shown)
        if "errors" in real:
            assert set(real["errors"][0]) == set(shown["errors"][0])

    # V2 takes any media type (binary tensors): no 415, and none documented
    plain = service.client.post("/v2/models/no-such-model/infer", content=b"{}", headers={"content-type": "text/plain"})
    assert plain.status_code != 415 and "415" not in document["paths"]["/v2/models/{name}/infer"]["post"]["responses"]

    job = service.done("/recipes/gpu-smoke", {"rows": 1000, "partitions": 2, "device": "cpu"})
    cancel = service.client.post(f"/jobs/{job['id']}/cancel")
    assert cancel.status_code == 409
    shown = documented("post", "/jobs/{job_id}/cancel", "409", "job-finished")
    assert set(cancel.json()) == set(shown) and cancel.json()["type"] == shown["type"]


def test_every_request_body_has_examples_that_fit_its_schema(document: dict[str, Any]) -> None:
    without = []
    for method, path, operation in operations(document):
        if "requestBody" not in operation:
            continue
        media = operation["requestBody"]["content"]["application/json"]
        if not media.get("examples"):
            without.append(f"{method.upper()} {path}")
            continue
        validator = _validator(document, media["schema"])
        for name, example in media["examples"].items():
            errors = [e.message for e in validator.iter_errors(example["value"])]
            assert not errors, (method, path, name, errors)
    assert not without, f"request bodies without an example: {without}"
    for method, path in [
        ("post", "/datasets"),
        ("put", "/models/{name}/aliases/{alias}"),
        ("put", "/models/{name}/tags/{key}"),
        ("put", "/models/{name}/versions/{version}/tags/{key}"),
        ("post", "/v2/models/{name}/infer"),
        ("post", "/v2/models/{name}/versions/{version}/infer"),
    ]:
        assert document["paths"][path][method]["requestBody"]["content"]["application/json"]["examples"]  # fmt: skip


def test_the_batch_example_keys_by_a_column_unique_in_its_file(document: dict[str, Any]) -> None:
    examples = document["paths"]["/predict"]["post"]["requestBody"]["content"]["application/json"]["examples"]
    batch = examples["batch"]["value"]["dataset"]
    keys = pd.read_parquet(REPO / batch["uri"], columns=[batch["key"]])[batch["key"]]
    assert keys.is_unique, f"{batch['key']}: {len(keys) - keys.nunique()} of {len(keys)} keys repeat"


def test_the_tables_name_operations_that_exist(document: dict[str, Any]) -> None:
    existing = {(m, p) for m, p, _ in operations(document)}
    assert set(OPERATION_PROBLEMS) <= existing, set(OPERATION_PROBLEMS) - existing
    assert set(REQUEST_EXAMPLES) <= existing, set(REQUEST_EXAMPLES) - existing


def test_the_optimizer_field_lists_every_optimizer_and_its_fields(document: dict[str, Any]) -> None:
    """``training.optimizer`` is a free-form object in the schema; Swagger showed it with no word of what it takes
    (a newcomer had to read workers/training/torch/spec/optimizer.py)."""
    from workers.training.torch.spec import OPTIMIZERS

    described = document["components"]["schemas"]["TrainingOptions"]["properties"]["optimizer"]["description"]
    for kind in OPTIMIZERS:
        assert f"{{type: {kind}, learning_rate" in described, kind
    assert "weight_decay" in described and "warmup_steps" in described and "{type: cosine, t_max, min_lr}" in described

"""The OpenAPI document serves teams that generate a typed client from it (openapi-python-client,
datamodel-code-generator, openapi-generator), as they do with Livy's or MLflow's REST APIs.

A client generated from ``/openapi.json`` named its functions after FastAPI's operation ids (``train_train_post``,
``get_job_jobs__job_id__get``); answered ``GET /checkpoints/{id}``, ``GET /jobs/{id}/checkpoints``, the tag and alias
``PUT``s and the V2 metadata with free-form objects or ``Any`` (anonymous ``ResponseGetCheckpointCheckpoints...``
classes); generated the V2 ``infer`` body twice, once per route, as inline classes; and left both downloads out,
their media types having no schema; typed a job's and a model version's ``framework`` and ``status`` as any text,
named the request bodies' inline enums ``Mode``, ``Mode1``, ``Mode2``, ``Metric1``, and read ``POST /predict``'s
``model`` as a free-form object. These tests read the document's properties, and check that what the service really
answers fits what the document declares.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from app.core.jobstates import JobStatus, JobType
from app.db.models import ModelVersion
from app.schemas.models import FAMILY_FORMATS
from tests.app.api.openapi_doc import operations
from tests.helpers import TAXI_FEATURES, Service, problem, small_xgboost
from workers.families import FRAMEWORKS

ROOT = Path(__file__).resolve().parents[3]
BINARY = {"type": "string", "format": "binary"}
MODEL = "openapi-client-xgb"


def test_every_operation_has_a_unique_id_a_generated_function_can_be_named_after(document: dict[str, Any]) -> None:
    ids = [op["operationId"] for _, _, op in operations(document)]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    bad = [i for i in ids if not re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)*", i) or i.endswith(("_get", "_post"))]
    assert not bad, bad
    by_route = {(m, p): op["operationId"] for m, p, op in operations(document)}
    assert by_route[("post", "/train")] == "train"
    assert by_route[("get", "/jobs/{job_id}")] == "get_job"
    assert by_route[("get", "/checkpoints/{checkpoint_id}/artifact")] == "download_checkpoint"
    assert by_route[("get", "/models/{name}/versions/{version}/artifact")] == "download_model_version"
    assert by_route[("post", "/v2/models/{name}/infer")] == "v2_infer"


def test_every_json_body_and_answer_is_a_named_schema(document: dict[str, Any]) -> None:
    """A generator names an inline object after its route (``ResponsePutAliasModelsNameAliasesAliasPut``), and reads
    a schema-less answer as ``Any``: each JSON body and success answer refers to a component instead."""
    inline = []
    for method, path, operation in operations(document):
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
    predicted = fits("post", "/predict", client.post("/predict", json={"model": {"name": MODEL},
                                                                       "dataframe_records": [row, row]}))  # fmt: skip
    assert len(predicted["predictions"]) == 2
    assert predicted["model"] == {"name": MODEL, "version": 1, "checkpoint": None}
    model = _resolve(document, document["components"]["schemas"]["PredictResponse"]["properties"]["model"])
    assert set(model["properties"]) == set(model["required"]) == set(predicted["model"]), model
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
    checkpoint = listed["checkpoints"][0]["id"]
    fits("get", "/checkpoints/{checkpoint_id}", client.get(f"/checkpoints/{checkpoint}"))
    by_checkpoint = client.post("/predict", json={"model": {"checkpoint": checkpoint}, "dataframe_records": [row]})
    assert fits("post", "/predict", by_checkpoint)["model"] == {"name": "openapi-client-mlp", "version": None,
                                                               "checkpoint": checkpoint}  # fmt: skip


def test_the_members_every_answer_has_are_required(document: dict[str, Any]) -> None:
    """A member with a default (``JobRead.slots``, ``ModelVersionRead.formats``) was optional in the document, so a
    generated client typed it ``list[str] | Unset`` though every answer has it."""
    schemas = document["components"]["schemas"]
    for name in ("JobRead", "ModelRead", "ModelVersionRead"):
        assert set(schemas[name]["properties"]) == set(schemas[name]["required"]), name


def _resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its ``$ref`` (to a component) followed."""
    while "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _values(document: dict[str, Any], schema: dict[str, Any]) -> set[Any]:
    """The values ``schema`` (a property's, maybe ``X | None`` or a list of X) declares: its ``enum``, or empty."""
    schema = _resolve(document, schema)
    if "items" in schema:
        return _values(document, schema["items"])
    if "anyOf" in schema:
        return set().union(*(_values(document, s) for s in schema["anyOf"] if s.get("type") != "null"))
    return set(schema.get("enum", ()))


def _sent_literals(calls: set[str], keyword: str) -> set[str]:
    """Every text constant the code in app/ and workers/ passes as ``keyword`` to one of ``calls`` (the
    constructors of what the registry and the jobs table store)."""
    found = set()
    for path in [*ROOT.joinpath("app").rglob("*.py"), *ROOT.joinpath("workers").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in calls:
                given = [k.value for k in node.keywords if k.arg == keyword]
                found |= {v.value for v in given if isinstance(v, ast.Constant) and isinstance(v.value, str)}
    return found


def test_answers_that_take_a_fixed_set_of_values_declare_every_one(document: dict[str, Any]) -> None:
    """A generated client parses an enum strictly: one that lacks a value the service sends fails on that answer, and
    a plain string says nothing of the values. The sets come from the code: the state machine, the families a job
    trains (workers/families.py), what the registry stores, the formats the artifact route serves."""
    schemas = document["components"]["schemas"]
    job, version = schemas["JobRead"]["properties"], schemas["ModelVersionRead"]["properties"]
    assert _values(document, job["type"]) == {t.value for t in JobType}
    assert _values(document, job["status"]) == {s.value for s in JobStatus}
    frameworks = _sent_literals(
        {"ModelArtifact", "ModelRef", "ModelVersion", "register_version", "submit"}, "framework"
    )
    assert set(FRAMEWORKS) >= frameworks and "torch" in frameworks, frameworks  # the scan found the writers
    assert _values(document, job["framework"]) == _values(document, version["framework"]) == set(FRAMEWORKS)
    statuses = _sent_literals({"ModelVersion"}, "status") | {ModelVersion.__table__.c.status.default.arg}
    assert statuses and _values(document, version["status"]) >= statuses, statuses
    served = {"archive"}.union(*FAMILY_FORMATS.values())  # app/api/routes/models.py: archive for any other family
    assert _values(document, version["formats"]) >= served


def test_request_enums_are_named_schemas(document: dict[str, Any]) -> None:
    """An inline enum is named after its property, numbered when two differ (datamodel-codegen's ``Mode``, ``Mode1``
    and ``Mode2`` for a training mode and two metric directions): those are named schemas, and no two inline enums
    of one property name hold different values."""
    schemas = document["components"]["schemas"]
    named = {("EarlyStopping", "metric"): "EarlyStoppingMetric", ("EarlyStopping", "mode"): "MetricMode",
             ("TuneRequest", "mode"): "MetricMode", ("TrainingOptions", "mode"): "TrainingMode",
             ("EvaluateRequest", "metrics"): "MetricGroup", ("TrainRequest", "framework"): "Framework"}  # fmt: skip
    for (model, field), name in named.items():
        assert name in json.dumps(schemas[model]["properties"][field]), (model, field)
        assert schemas[name]["enum"], name
    inline: dict[str, set[tuple[Any, ...]]] = {}
    for schema in schemas.values():
        for field, prop in schema.get("properties", {}).items():
            for part in [prop, prop.get("items", {}), *prop.get("anyOf", ())]:
                if "enum" in part:
                    inline.setdefault(field, set()).add(tuple(part["enum"]))
    assert not {f: v for f, v in inline.items() if len(v) > 1}, inline


@pytest.mark.parametrize(
    ("path", "body", "loc", "msg"),
    [
        ("/train", {"training": {"mode": "sync"}}, "training.mode",
         "Input should be 'gradient_sharing', 'parameter_averaging' or 'allreduce', got \"sync\""),
        ("/train", {"training": {"early_stopping": {"metric": "loss", "mode": "up"}}},
         "training.early_stopping.metric", "Input should be 'val_loss', 'val_accuracy' or 'val_rmse', got \"loss\""),
        ("/train", {"training": {"early_stopping": {"mode": "up"}}}, "training.early_stopping.mode",
         "Input should be 'min' or 'max', got \"up\""),
        ("/train", {"framework": "caffe"}, "framework",
         "Input should be 'torch', 'xgboost' or 'spark_ml', got \"caffe\""),
        ("/tune", {"mode": "up"}, "mode", "Input should be 'min' or 'max', got \"up\""),
        ("/evaluate", {"metrics": ["regression", "mae"]}, "metrics[1]",
         "Input should be 'classification', 'roc' or 'regression', got \"mae\""),
    ],
)  # fmt: skip
def test_a_named_enum_refuses_what_its_literal_did(
    service: Service, path: str, body: dict[str, Any], loc: str, msg: str
) -> None:
    """A named schema changes the document only: a value outside the set is the same 422, in the same words."""
    torch = {"name": "enum-words", "framework": "torch", "device": "cpu",
             "dataset": {"uri": "datasets/taxi/train.parquet", "features": TAXI_FEATURES, "label": "fare_amount"},
             "network": {"layers": [{"type": "output", "units": 1, "activation": "identity", "loss": "mse"}]},
             "training": {"epochs": 1}}  # fmt: skip
    bases = {"/train": torch, "/tune": {"name": "enum-words", "base": torch,
                                        "space": {"training.epochs": {"type": "choice", "values": [1, 2]}}},
             "/evaluate": {"model": {"name": MODEL}, "dataset": {"uri": "datasets/taxi/eval.parquet"}}}  # fmt: skip
    sent = {**bases[path], **body}
    if "training" in body:
        sent["training"] = {**torch["training"], **body["training"]}
    errors = problem(service.client.post(path, json=sent), 422)["errors"]
    assert [e for e in errors if e["loc"] == loc] == [{"loc": loc, "in": "body", "msg": msg, "type": "literal_error"}]

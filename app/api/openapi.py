"""The OpenAPI document tells clients which errors each operation answers, and what they look like: every 4xx and
5xx is ``application/problem+json`` (FastAPI documents a 422 with its own ``HTTPValidationError`` body under
``application/json``, which is not what app/api/errors.py sends), each with an example body of every kind it can be.

:func:`document_problems` reads what an operation answers from its shape, the same for every route:

- every operation: 422, an unknown or repeated query parameter (app/api/http_semantics.py) or one out of range;
- one that is not public: 401 (app/api/auth.py documents it), 429 (the key's ``requests_per_s`` quota,
  app/api/ratelimit.py) and 503 (the database away, or the service not started yet);
- one with a path parameter: 404 (an unknown id or name, or another owner's, which reads as unknown);
- one that takes a body: 400 (not JSON, nested too deeply), 413 (over the body limit), 415 (not sent as
  ``application/json``; not for V2, whose body may carry binary tensors) and 422 (the problem names each field);
- ``cursor`` (a page) or ``Last-Event-ID`` (an event stream): 400 for one the service did not issue;
- one that queues a job (it takes ``Idempotency-Key``): 409 (the key used with another body), 429 (the owner's
  ``queued_jobs`` quota) and 503 (the broker unreachable: nothing was queued);
- and the errors that the shape does not tell, in :data:`OPERATION_PROBLEMS` (a cancel's 409, a prediction's 404).

The descriptions of error responses are this module's, one per kind (a route's own ``responses=`` describes its
successes); a route adds a kind its shape does not tell in :data:`OPERATION_PROBLEMS`. Request bodies that their
routes do not show examples of get them from :data:`REQUEST_EXAMPLES`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic import BaseModel

from app.api.auth import document_security, public_paths
from app.api.errors import PROBLEM_JSON
from app.api.middleware import OTHER_BODY_BYTES
from app.core.errors import (
    PROBLEM_BASE,
    AppError,
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    ServiceUnavailable,
    TooManyRequests,
    Unauthorized,
    UnsupportedMediaType,
    ValidationFailed,
)
from app.schemas.inference import InferRequest
from app.schemas.problems import Problem

_REF = "#/components/schemas/{model}"
_FASTAPI_ERROR_SCHEMAS = ("HTTPValidationError", "ValidationError")
_METHODS = {"get", "put", "post", "delete", "patch"}
REQUEST_ID = "3f2b9c1d7e6a4b5c8d9e0f1a2b3c4d5e"
JOB_ID = "9a4c2e7b1d3f4a6c8e0b2d4f6a8c0e1b"
PATH_VALUES = {"job_id": JOB_ID, "checkpoint_id": "c7e1a9b3d5f74e2a8c6b0d4f2e8a1c3b", "dataset_id":
               "d2b4f6a8c0e14b3d5f7a9c1e3b5d7f9a", "name": "taxi-fare-xgboost", "version": "1", "alias": "champion",
               "key": "team", "owner": "alice"}  # fmt: skip
"""What the examples put in the path's parameters (their ``instance``)."""


@dataclass(frozen=True)
class Kind:
    """One kind of problem: its status, what it means, and an example body (given the example request's path)."""

    status: int
    description: str
    example: Callable[[str], dict[str, Any]]


def _of(error: AppError) -> Callable[[str], dict[str, Any]]:
    """An example body of ``error`` as app/api/errors.py renders it: its problem, then the request's id and path."""
    return lambda path: {**error.problem(), "request_id": REQUEST_ID, "instance": path}


def _literal(kind: str, title: str, status: int, detail: str, **more: Any) -> Callable[[str], dict[str, Any]]:
    """An example of a problem that app/api/errors.py or a route writes as a dict, not from an :class:`AppError`."""
    body = {"type": PROBLEM_BASE + kind, "title": title, "status": status, "detail": detail, **more}
    return lambda path: {**body, "request_id": REQUEST_ID, "instance": path}


_MODEL_TRAINING = Conflict(
    f"Model 'taxi-fare-xgboost' has no version yet: its training job {JOB_ID} is RUNNING. Wait for it to succeed.",
    job_id=JOB_ID,
)
KINDS: dict[str, Kind] = {
    "malformed-json": Kind(400, "The body is not JSON (`malformed-json`), or nests too deeply (`nested-json`).",
                           _literal("malformed-json", "Malformed JSON", 400,
                                    "The body is not valid JSON: Expecting value at character 1")),
    "bad-cursor": Kind(400, "A `cursor` this service did not issue for this list.", _of(BadRequest(
        "The cursor is not one this service issued for this list; start without it."))),
    "bad-event-id": Kind(400, "A `Last-Event-ID` that is not an event id of this stream.", _of(BadRequest(
        "Last-Event-ID is not an event id of this stream (expected METRIC-LOG-STATE, e.g. 120-4-3fa9c01b); reconnect "
        "without it to start from the job's beginning."))),
    "unauthorized": Kind(401, "No valid API key (`Authorization: Bearer <key>`); `WWW-Authenticate` says why.", _of(
        Unauthorized("This endpoint needs an API key: send the header 'Authorization: Bearer <key>'."))),
    "forbidden": Kind(403, "The API key is not an admin's.", _of(Forbidden(
        "GET /metrics needs an admin's API key (or SPARKTRAIN_METRICS_PUBLIC=true)."))),
    "not-found": Kind(404, "Nothing by that id or name (another owner's reads as unknown).", lambda path: {}),
    "unknown-model": Kind(404, "No such model, version, alias or checkpoint (another owner's reads as unknown).",
                          _of(NotFound("No model named 'taxi-fare-xgbost'. Did you mean 'taxi-fare-xgboost'?"))),
    "idempotency-key": Kind(409, "The `Idempotency-Key` was used with another body (`job_id` names its job).",
                            _of(Conflict("This Idempotency-Key was already used with a different request body; use a "
                                         "new key for a new request.", job_id=JOB_ID))),
    "model-owner": Kind(409, "The model name belongs to another owner (with API keys).", _of(Conflict(
        "The model name 'taxi-fare-xgboost' belongs to another owner; a new version can only come from its owner. "
        "Choose another name."))),
    "model-training": Kind(409, "The model has no version yet: its first training job has not succeeded (`job_id`).",
                           _of(_MODEL_TRAINING)),
    "job-finished": Kind(409, "The job already finished (`SUCCEEDED` or `FAILED`): there is nothing to cancel.",
                         _of(Conflict(f"Job {JOB_ID} already finished (SUCCEEDED); there is nothing to cancel.",
                                      job_status="SUCCEEDED"))),
    "in-use": Kind(409, "An unfinished job uses what would be deleted (for a whole model, also one that will register "
                   "a version into it); `jobs` lists them.", _of(Conflict(
        f"taxi-fare-xgboost version 1 is in use by an unfinished job: {JOB_ID} (RUNNING, evaluate). Cancel the job "
        "or wait for it to end, then delete again.", jobs=[JOB_ID]))),
    "too-large": Kind(413, f"The body is over the endpoint's limit ({OTHER_BODY_BYTES} bytes; /predict and /v2 take "
                      "8 times more).", _of(PayloadTooLarge(
                          f"The body has 1100000 bytes; at most {OTHER_BODY_BYTES} are accepted (rows go to /predict, "
                          "whose bodies may be larger, or into a dataset)."))),
    "too-many-rows": Kind(413, "More inline rows than SPARKTRAIN_MAX_PREDICT_ROWS: send a `dataset` (a batch job).",
                          _of(PayloadTooLarge(
                              "20000 rows; online /predict takes at most 10000. Register the rows as a dataset and "
                              'POST /predict with "dataset" (and a key column) for a batch job on the executors.'))),
    "media-type": Kind(415, "The body is not sent as `application/json`.", _of(UnsupportedMediaType(
        "Send the body as application/json (got application/x-www-form-urlencoded)."))),
    "invalid-body": Kind(422, "The request cannot work: `errors` names each field and how to fix it.", _of(
        ValidationFailed.at("dataset.label", "no column 'fare' in datasets/taxi/train.parquet; columns: "
                            "passenger_count (int), trip_distance (double), ..., fare_amount (double)"))),
    "invalid-query": Kind(422, "A query parameter the operation does not take, or one given twice, or a parameter out "
                          "of its range (named in `errors`).", lambda path: {}),
    "bad-format": Kind(422, "An unknown `format`, one this family does not have, or a network ONNX cannot express "
                       "(the layer is named).", _of(ValidationFailed.at(
                           "format", "xgboost models download as archive or mlflow; onnx is for torch networks",
                           source="query"))),
    "rate-limit": Kind(429, "Over the API key's `requests_per_s` quota; `Retry-After` says when to try again.", _of(
        TooManyRequests("This API key may make 5 requests a second (quota requests_per_s of 'alice'); try again in "
                        "0.20 s.", quota="requests_per_s", limit=5))),
    "queued-jobs": Kind(429, "The owner has as many jobs queued as its `queued_jobs` quota allows.", _of(
        TooManyRequests("'alice' has 10 jobs queued, the most its quota allows (queued_jobs = 10); submit again once "
                        "some have started.", quota="queued_jobs", limit=10, used=10))),
    "database": Kind(503, "The database does not answer (`Retry-After`), or the service has not started yet.",
                     _literal("database-unavailable", "Database unavailable", 503, "The service's database does not "
                              "answer right now (a restart?); try again in a few seconds.")),
    "broker": Kind(503, "The job broker is unreachable: nothing was queued.", _of(ServiceUnavailable(
        "The job broker is unreachable (OperationalError); nothing was queued, try again later."))),
    "onnx-export": Kind(503, "format=onnx: the export still runs; `Retry-After` says when to ask again.", _of(
        ServiceUnavailable("The ONNX export of digits-cnn version 1 is still running; ask again in a few seconds (the "
                           "export runs once, later downloads are served from it)."))),
    "not-ready": Kind(503, "What does not answer, as `checks`.", _literal(
        "not-ready", "Not ready", 503, "broker unreachable: OperationalError",
        checks={"database": "ok", "broker": "unreachable: OperationalError", "spark": "ok", "consumer": "ok"})),
    "inference-unready": Kind(503, "The SparkSession or the database does not answer.", _of(ServiceUnavailable(
        "The SparkSession does not answer (SparkContext stopped or JVM gone)."))),
    "internal": Kind(500, "The service failed; the request id locates the error in its log.", _literal(
        "internal", "Internal error", 500, "The service failed to answer this request; the request id locates the "
        "error in its log.")),
}  # fmt: skip

_NOT_FOUND = {
    "job_id": f"No job with id '{JOB_ID}'.",
    "checkpoint_id": f"No checkpoint with id '{PATH_VALUES['checkpoint_id']}'.",
    "dataset_id": f"No dataset with id '{PATH_VALUES['dataset_id']}'.",
    "name": "No model named 'taxi-fare-xgboost'.",
    "version": "Model 'taxi-fare-xgboost' has no version 1.",
    "alias": "Model 'taxi-fare-xgboost' has no alias 'champion' (aliases: production).",
    "key": "Model 'taxi-fare-xgboost' has no tag 'team'.",
    "owner": "No owner 'alice' whose usage you may see.",
}
"""The 404's detail by the path's last parameter: what was looked up."""

OPERATION_PROBLEMS: dict[tuple[str, str], tuple[str, ...]] = {
    ("post", "/train"): ("model-owner",),
    ("post", "/tune"): ("model-owner",),
    ("post", "/evaluate"): ("unknown-model", "model-training"),
    ("post", "/predict"): ("unknown-model", "model-training", "too-many-rows"),
    ("post", "/jobs/{job_id}/cancel"): ("job-finished",),
    ("delete", "/models/{name}"): ("in-use",),
    ("delete", "/models/{name}/versions/{version}"): ("in-use",),
    ("get", "/models/{name}/versions/{version}/artifact"): ("bad-format", "onnx-export"),
    ("get", "/metrics"): ("forbidden",),
    ("get", "/readyz"): ("not-ready",),
    ("get", "/v2/health/ready"): ("inference-unready",),
    ("get", "/v2/models/{name}"): ("model-training",),
    ("get", "/v2/models/{name}/versions/{version}"): ("model-training",),
    ("get", "/v2/models/{name}/ready"): ("model-training",),
    ("get", "/v2/models/{name}/versions/{version}/ready"): ("model-training",),
    ("post", "/v2/models/{name}/infer"): ("model-training",),
    ("post", "/v2/models/{name}/versions/{version}/infer"): ("model-training",),
}
"""What an operation answers that its shape does not tell (:func:`kinds_of` reads the rest)."""

REQUEST_EXAMPLES: dict[tuple[str, str], dict[str, dict[str, Any]]] = {
    ("post", "/datasets"): {
        "parquet": {"summary": "A parquet file of the shipped taxi sample, by a name",
                    "value": {"uri": "datasets/taxi/train.parquet", "name": "taxi-train"}},
        "csv": {"summary": "Your own CSV (copied into var/data/), `;`-separated, malformed lines counted",
                "value": {"uri": "fares.csv", "name": "fares", "format": "csv",
                          "options": {"sep": ";", "header": "true"}, "bad_rows": "skip"}},
    },
}  # fmt: skip
"""Request examples of routes that do not show them themselves, by name; one of the same name is replaced."""


OPERATION_IDS: dict[tuple[str, str], str] = {
    ("get", "/checkpoints/{checkpoint_id}/artifact"): "download_checkpoint",
    ("get", "/models/{name}/versions/{version}/artifact"): "download_model_version",
    ("post", "/datasets"): "register_dataset",
}
"""Operation ids that are not the route function's name (two functions are named ``download``)."""

COMPONENTS: tuple[type[BaseModel], ...] = (InferRequest,)
"""Schemas of bodies that routes read by hand (FastAPI does not see them), referred to by ``$ref``."""


def file_response(*media_types: str) -> dict[int | str, dict[str, Any]]:
    """A route's ``responses=`` for a download: the file's media types, each a binary string (a client generator
    reads that as a file; a media type with no schema is left out of the client)."""
    binary = {"schema": {"type": "string", "format": "binary"}}
    return {200: {"description": "The file.", "content": {media: binary for media in media_types}}}


def operation_id(route: APIRoute) -> str:
    """A route's ``operationId`` (the app's ``generate_unique_id_function``): its function's name (``v2_`` first
    under ``/v2``), which a generated client names its function after, in place of FastAPI's ``train_train_post``."""
    path, method = route.path_format, min(route.methods or {"GET"}).lower()
    return OPERATION_IDS.get((method, path)) or ("v2_" + route.name if path.startswith("/v2") else route.name)


def _add_components(definitions: dict[str, Any]) -> None:
    for model in COMPONENTS:
        schema = model.model_json_schema(ref_template=_REF)
        for name, nested in schema.pop("$defs", {}).items():
            definitions.setdefault(name, nested)
        definitions.setdefault(model.__name__, schema)


def kinds_of(method: str, path: str, operation: dict[str, Any], public: bool) -> list[str]:
    """Every kind of problem ``operation`` (``method`` ``path``) answers, in status order."""
    params = operation.get("parameters", [])
    names = {(p.get("in"), str(p.get("name", "")).lower()) for p in params}
    kinds = ["invalid-query", "internal"]
    if not public:
        kinds += ["rate-limit", "database"]
    if any(where == "path" for where, _ in names):
        kinds.append("not-found")
    if "requestBody" in operation:
        kinds += ["malformed-json", "too-large", "invalid-body"]
        if not path.startswith("/v2/"):  # JSON, or JSON followed by binary tensors: any media type
            kinds.append("media-type")
    if ("query", "cursor") in names:
        kinds.append("bad-cursor")
    if ("header", "last-event-id") in names:
        kinds.append("bad-event-id")
    if ("header", "idempotency-key") in names:
        kinds += ["idempotency-key", "queued-jobs", "broker"]
    kinds += OPERATION_PROBLEMS.get((method, path), ())
    return sorted(dict.fromkeys(kinds), key=lambda k: KINDS[k].status)


def _example(kind: str, method: str, path: str, operation: dict[str, Any]) -> dict[str, Any]:
    """The example body of ``kind`` for a request of ``operation`` (``path`` with its parameters filled in)."""
    concrete = re.sub(r"\{([^}]+)\}", lambda m: PATH_VALUES.get(m.group(1), "x"), path)
    if kind == "not-found":
        last = re.findall(r"\{([^}]+)\}", path)[-1]
        detail = _NOT_FOUND.get(last, f"No {last.removesuffix('_id')} {PATH_VALUES.get(last, 'x')!r}.")  # a new one
        body = _of(NotFound(detail))(concrete)
    elif kind == "invalid-query":  # as app/api/http_semantics.py words it
        names = [p["name"] for p in operation.get("parameters", []) if p.get("in") == "query"]
        takes = f"{method.upper()} {path} takes {', '.join(names) if names else 'none'}"
        error = {"loc": "foo", "in": "query", "msg": f"unknown query parameter; {takes}", "type": "extra_forbidden"}
        body = _of(ValidationFailed(f"foo: {error['msg']}", errors=[error]))(concrete)
    else:
        body = KINDS[kind].example(concrete)
    if path == "/v2" or path.startswith("/v2/"):  # the V2 protocol's error member (app/api/errors.py)
        body = {**body, "error": body["detail"]}
    return body


def _problem_content(examples: dict[str, Any] | None = None) -> dict[str, Any]:
    media: dict[str, Any] = {"schema": {"$ref": _REF.format(model="Problem")}}
    if examples:
        media["examples"] = examples
    return {PROBLEM_JSON: media}


_PER_OPERATION = frozenset({"not-found", "invalid-query"})
"""Kinds whose example is the operation's own (what it looks up, the parameters it takes); the others' examples
are shared, under ``components.examples`` (once for the V2 routes, whose problems carry ``error``)."""


def _examples(kinds: list[str], method: str, path: str, operation: dict[str, Any], shared: dict[str, Any]) -> Any:
    examples: dict[str, Any] = {}
    for kind in kinds:
        example = {"summary": KINDS[kind].description, "value": _example(kind, method, path, operation)}
        if kind in _PER_OPERATION:
            examples[kind] = example
            continue
        name = f"{kind}-v2" if path.startswith("/v2") else kind
        shared.setdefault(name, example)  # its request path: the first operation's that answers it
        examples[kind] = {"$ref": f"#/components/examples/{name}"}
    return examples


def _document_operation(
    method: str, path: str, operation: dict[str, Any], public: bool, shared: dict[str, Any]
) -> None:
    responses = operation.setdefault("responses", {})
    by_status: dict[str, list[str]] = {}
    for kind in kinds_of(method, path, operation, public):
        status = "5XX" if kind == "internal" else str(KINDS[kind].status)
        by_status.setdefault(status, []).append(kind)
    if "401" in responses:  # app/api/auth.py's, on every operation that needs a key
        by_status["401"] = ["unauthorized"]
    for status, kinds in by_status.items():
        response = responses.setdefault(status, {})
        described = [KINDS[k].description for k in kinds]
        response["description"] = described[0] if len(described) == 1 else "\n".join(f"- {d}" for d in described)
        response["content"] = _problem_content(_examples(kinds, method, path, operation, shared))
    for status, response in responses.items():  # a route's own code that no kind covers
        if status[0] in "45" and "content" not in response:
            response["content"] = _problem_content()
    responses.setdefault("4XX", {"description": "Client error", "content": _problem_content()})
    operation["responses"] = dict(
        sorted(responses.items(), key=lambda item: (item[0][0], item[0][1:] == "XX", item[0]))
    )


def _add_request_examples(method: str, path: str, operation: dict[str, Any]) -> None:
    extra = REQUEST_EXAMPLES.get((method, path))
    if not extra:
        return
    media = operation["requestBody"]["content"]["application/json"]
    media.pop("example", None)
    media["examples"] = {**media.get("examples", {}), **extra}


def document_problems(schema: dict[str, Any], public: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Rewrite ``schema`` (an OpenAPI document) in place: every operation's error responses are problem+json, with
    an example of each kind; ``public``: the paths that need no API key."""
    definitions = schema.setdefault("components", {}).setdefault("schemas", {})
    problem = Problem.model_json_schema(ref_template=_REF, mode="serialization")
    definitions.update(problem.pop("$defs", {}))
    definitions["Problem"] = problem
    _add_components(definitions)
    shared: dict[str, Any] = {}
    for path, path_item in schema.get("paths", {}).items():
        for method, operation in path_item.items():
            if method not in _METHODS:
                continue
            _document_operation(method, path, operation, path in public, shared)
            _add_request_examples(method, path, operation)
    schema["components"]["examples"] = {**schema["components"].get("examples", {}), **dict(sorted(shared.items()))}
    for name in _FASTAPI_ERROR_SCHEMAS:
        definitions.pop(name, None)
    return schema


def install_openapi(app: FastAPI) -> None:
    """Serve the document with problem+json errors and the API key scheme (built once, on the first request for
    it; before start-up, when no keys are loaded yet, keys are documented as required)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            keyring = getattr(app.state, "keyring", None)
            required = keyring is None or keyring.enabled
            public = getattr(app.state, "public_paths", None) or public_paths(app)
            schema = document_security(generate(), public=public, required=required)
            app.openapi_schema = document_problems(schema, public)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

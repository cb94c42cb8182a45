"""The V2 Open Inference Protocol (KServe, Triton, Seldon) on the same model cache as ``POST /predict``: HTTP only
(the body read, JSON or binary tensors; the answer shaped); the tensors, the model and its outputs are
:mod:`app.services.v2_infer`'s. Errors carry the protocol's ``error`` member next to the problem+json fields, a
missing or unknown API key (401, answered before any route) included. A key sees only its owner's models (another
owner's answer 404).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from app.api.deps import CallerDep, RuntimeDep
from app.api.errors import problem_response
from app.api.json_body import INLINE_BYTES, parse_in_pieces
from app.core.errors import AppError, ServiceUnavailable, ValidationFailed
from app.schemas.inference import INFER_EXAMPLES, InferRequest, InferResponse, V2ModelMetadata, V2ServerMetadata
from app.services import v2_infer
from app.services.health import readiness_of_database
from app.spark.session import spark_alive

router = APIRouter(prefix="/v2", tags=["v2 inference protocol"])


def _v2_error(request: Request, exc: AppError) -> JSONResponse:
    body = exc.problem()
    body["error"] = exc.detail
    return problem_response(body, request)


async def _answer(request: Request, work: Any, **kwargs: Any) -> Any:
    """``work`` (a service function, given ``kwargs``) in the thread pool; an error as the protocol answers it."""
    try:
        return await run_in_threadpool(work, **kwargs)
    except AppError as exc:
        return _v2_error(request, exc)


_EMPTY_200: dict[int | str, dict[str, Any]] = {200: {"description": "Yes (an empty body)."}}


@router.get("/health/live", summary="V2 liveness", response_class=Response, responses=_EMPTY_200)
def live() -> Response:
    return Response(status_code=200)


@router.get(
    "/health/ready",
    summary="V2 readiness: the database and the SparkSession answer (what inference needs)",
    response_class=Response,
    responses=_EMPTY_200,
)
def ready(rt: RuntimeDep) -> Response:
    if not spark_alive(rt.spark):
        raise ServiceUnavailable("The SparkSession does not answer (SparkContext stopped or JVM gone).")
    if readiness_of_database(rt.engine) != "ok":  # models are looked up there: infer was 503 while this said 200
        raise ServiceUnavailable("The service's database does not answer; inference needs it to find models.")
    return Response(status_code=200)


@router.get("", summary="V2 server metadata", response_model=None, responses={200: {"model": V2ServerMetadata}})
def server() -> dict[str, Any]:
    return {"name": "sparktrain", "version": "0.1.0", "extensions": []}


@router.get("/models/{name}", summary="V2 model metadata (newest version)", response_model=None,
            responses={200: {"model": V2ModelMetadata}})  # fmt: skip
async def model_metadata(name: str, request: Request, rt: RuntimeDep, caller: CallerDep) -> Any:
    return await _answer(request, v2_infer.metadata, db=rt.db, name=name, version=None, owner=caller.scope)


@router.get("/models/{name}/versions/{version}", summary="V2 model metadata", response_model=None,
            responses={200: {"model": V2ModelMetadata}})  # fmt: skip
async def version_metadata(name: str, version: str, request: Request, rt: RuntimeDep, caller: CallerDep) -> Any:
    return await _answer(request, v2_infer.metadata, db=rt.db, name=name, version=version, owner=caller.scope)


@router.get("/models/{name}/ready", summary="V2 model readiness (newest version)", response_class=Response,
            responses=_EMPTY_200)  # fmt: skip
async def model_ready(name: str, request: Request, rt: RuntimeDep, caller: CallerDep) -> Any:
    answer = await _answer(request, v2_infer.resolve, db=rt.db, name=name, version=None, owner=caller.scope)
    return answer if isinstance(answer, JSONResponse) else Response(status_code=200)


@router.get(
    "/models/{name}/versions/{version}/ready",
    summary="V2 model readiness",
    response_class=Response,
    responses=_EMPTY_200,
)
async def version_ready(name: str, version: str, request: Request, rt: RuntimeDep, caller: CallerDep) -> Any:
    answer = await _answer(request, v2_infer.resolve, db=rt.db, name=name, version=version, owner=caller.scope)
    return answer if isinstance(answer, JSONResponse) else Response(status_code=200)


def _infer_body() -> dict[str, Any]:
    """The request body as the OpenAPI document describes it: the body is read by hand (JSON, or JSON followed by
    binary tensors), so FastAPI does not see it; app/api/openapi.py adds ``InferRequest`` to the components (one
    named type for both routes, not an inline object a client generator names after each route)."""
    media = {"schema": {"$ref": "#/components/schemas/InferRequest"}, "examples": INFER_EXAMPLES}
    return {"requestBody": {"required": True, "content": {"application/json": media}}}


_INFER_BODY = _infer_body()


async def _request_body(request: Request) -> InferRequest:
    """A JSON request, or JSON followed by raw tensors (the binary tensor data extension tritonclient uses). A body
    that is not JSON, or not an inference request, is answered as ``/train``'s is (:func:`_parsed`)."""
    raw = await request.body()
    header_length = request.headers.get("inference-header-content-length")
    if header_length is None:
        try:
            return await _parsed(raw)
        except RequestValidationError as exc:  # JSON and then bytes: binary tensors without their header
            raise RequestValidationError([_binary_hint(e) for e in exc.errors()]) from exc
    try:
        head = int(header_length)
    except ValueError:
        head = -1
    if not 0 <= head <= len(raw):
        where = f"within the body's {len(raw)} bytes"
        raise ValidationFailed.at("body", f"Inference-Header-Content-Length {header_length!r} is not a length {where}")
    body = await _parsed(raw[:head])
    await run_in_threadpool(v2_infer.read_binary_data, body=body, raw=raw, offset=head)  # megabytes to lists
    return body


def _binary_hint(error: Any) -> Any:
    """A JSON error of trailing bytes, with what a binary tensor body needs to be read."""
    if error.get("type") != "json_invalid" or "trailing characters" not in str(error.get("ctx", {}).get("error", "")):
        return error
    why = f"{error['ctx']['error']} (binary tensor data after the JSON needs the Inference-Header-Content-Length " \
        "header: the JSON's length in bytes)"  # fmt: skip
    return {**error, "ctx": {**error["ctx"], "error": why}}


async def _parsed(raw: bytes) -> InferRequest:
    """The inference request in ``raw``. Malformed JSON is the API's 400 ``malformed-json``, and a body off the
    schema its 422 listing every field (``inputs[0].datatype: Field required``): pydantic's errors go to the one
    handler of request validation errors (app/api/errors.py), located in the body as FastAPI's own are. A body over
    ``INLINE_BYTES`` (megabytes of numbers) is parsed on a worker thread a piece at a time, as ``/predict``'s are
    (app/api/json_body.py): pydantic's JSON parser holds the loop for the whole body (0.9 s for 8 MB)."""
    if len(raw) <= INLINE_BYTES or json.detect_encoding(raw) != "utf-8":
        return _validated(InferRequest.model_validate_json, raw)
    try:
        value = await run_in_threadpool(parse_in_pieces, raw)
    except (ValueError, RecursionError) as exc:
        raise RequestValidationError([_json_invalid(exc)]) from exc
    return await run_in_threadpool(_validated, InferRequest.model_validate, value)


def _validated(validate: Any, value: Any) -> InferRequest:
    try:
        request: InferRequest = validate(value)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in errors]) from exc
    return request


def _json_invalid(exc: Exception) -> dict[str, Any]:
    """A parse error of a large body as pydantic's ``json_invalid`` (FastAPI's form: its offset in ``loc``)."""
    if isinstance(exc, json.JSONDecodeError):
        why = "trailing characters after the JSON value" if exc.msg == "Extra data" else exc.msg
        return {"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error", "ctx": {"error": why}}
    if isinstance(exc, UnicodeDecodeError):  # bytes after the JSON, or text that is not UTF-8
        where, why = ("body", exc.start), "not UTF-8 text (trailing characters, or send JSON encoded as UTF-8)"
        return {"type": "json_invalid", "loc": where, "msg": "JSON decode error", "ctx": {"error": why}}
    why = (str(exc).splitlines() or [type(exc).__name__])[0][:200]  # nested too deep, a number of 4300 digits
    return {"type": "json_invalid", "loc": ("body",), "msg": "JSON decode error", "ctx": {"error": why}}


async def _infer(request: Request, rt: Any, name: str, version: str | None, owner: str | None) -> Any:
    try:
        body = await _request_body(request)
    except AppError as exc:
        return _v2_error(request, exc)
    return await _answer(
        request,
        v2_infer.infer,
        db=rt.db,
        settings=rt.settings,
        cache=rt.model_cache,
        spark=rt.spark,
        name=name,
        version=version,
        owner=owner,
        body=body,
    )


@router.post(
    "/models/{name}/infer",
    response_model=InferResponse,
    summary="V2 inference (newest version)",
    openapi_extra=_INFER_BODY,
)
async def infer(name: str, request: Request, rt: RuntimeDep, caller: CallerDep) -> Any:
    return await _infer(request, rt, name, None, caller.scope)


@router.post(
    "/models/{name}/versions/{version}/infer",
    response_model=InferResponse,
    summary="V2 inference",
    openapi_extra=_INFER_BODY,
)
async def infer_version(name: str, version: str, request: Request, rt: RuntimeDep, caller: CallerDep) -> Any:
    return await _infer(request, rt, name, version, caller.scope)

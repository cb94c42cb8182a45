"""The OpenAPI document tells clients what errors look like: every 4xx and 5xx is ``application/problem+json``.

FastAPI documents a ``422`` with its own ``HTTPValidationError`` body under ``application/json``, which is not
what ``app/api/errors.py`` sends; this replaces it and documents the ``4XX`` and ``5XX`` ranges of every
operation as a ``Problem``.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from app.api.auth import document_security, public_paths
from app.api.errors import PROBLEM_JSON
from app.schemas.problems import Problem

_REF = "#/components/schemas/{model}"
_FASTAPI_ERROR_SCHEMAS = ("HTTPValidationError", "ValidationError")


def _problem_content() -> dict[str, Any]:
    return {PROBLEM_JSON: {"schema": {"$ref": _REF.format(model="Problem")}}}


def document_problems(schema: dict[str, Any]) -> dict[str, Any]:
    """Rewrite ``schema`` (an OpenAPI document) in place so that its error responses are problem+json."""
    definitions = schema.setdefault("components", {}).setdefault("schemas", {})
    problem = Problem.model_json_schema(ref_template=_REF, mode="serialization")
    definitions.update(problem.pop("$defs", {}))
    definitions["Problem"] = problem
    for path_item in schema.get("paths", {}).values():
        for operation in path_item.values():
            responses = operation.setdefault("responses", {})
            for code, response in responses.items():
                if code[0] in "45":
                    response["content"] = _problem_content()
            responses.setdefault("4XX", {"description": "Client error", "content": _problem_content()})
            responses.setdefault("5XX", {"description": "Server error", "content": _problem_content()})
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
            schema = document_security(generate(), public=public_paths(app), required=required)
            app.openapi_schema = document_problems(schema)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

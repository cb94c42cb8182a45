"""Wire model of every error: RFC 9457 ``application/problem+json`` (``app/api/errors.py`` renders them)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class FieldError(BaseModel):
    """One field that failed validation."""

    model_config = ConfigDict(extra="allow")

    loc: str = Field(examples=["dataset.features[1]"])
    msg: str
    in_: str | None = Field(None, alias="in", description="body, query, path or header")
    type: str | None = None


class Problem(BaseModel):
    """An error. Members beyond these (``checks`` of ``/readyz``, ``error`` of the V2 protocol, ...) may follow."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(examples=["https://sparktrain.dev/problems/validation"])
    title: str
    status: int = Field(ge=400, le=599)
    detail: str = Field(description="What happened and how to fix it.")
    instance: str | None = Field(None, description="The request's path.")
    request_id: str | None = Field(None, description="Also in the X-Request-ID header; locates the error in the log.")
    errors: list[FieldError] | None = Field(None, description="Validation problems: each field that failed.")

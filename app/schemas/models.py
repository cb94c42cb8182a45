"""Wire models of the model registry."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

VERSION_MAX = 2**31 - 1  # model_versions.version is a 32-bit integer column
ALIAS_PATTERN = r"^[A-Za-z][A-Za-z0-9._-]{0,99}$"


class ModelVersionRead(BaseModel):
    name: str
    version: int
    framework: str
    status: str
    artifact_uri: str
    metrics: dict[str, Any]
    params: dict[str, Any]
    job_id: str | None
    created_at: datetime


class ModelRead(BaseModel):
    name: str
    owner: str
    created_at: datetime
    latest_version: int | None
    aliases: dict[str, int] = {}
    versions: list[ModelVersionRead]


class ModelPage(BaseModel):
    items: list[ModelRead]

"""Wire models of checkpoints (``GET /checkpoints/{id}``, ``GET /jobs/{id}/checkpoints``): what the OpenAPI document
declares for them, so that a generated client has a named type instead of a free-form object."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field


class CheckpointRead(BaseModel):
    id: str
    job_id: str
    attempt: int = Field(description="The job's attempt that wrote it.")
    epoch: int
    step: int
    uri: str
    metrics: dict[str, Any] = Field(description="The epoch's validation metrics (empty without validation).")
    created_at: datetime


class CheckpointList(BaseModel):
    checkpoints: list[CheckpointRead] = Field(description="Oldest epoch first.")

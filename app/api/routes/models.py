"""The model registry."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from app.api.deps import SessionDep
from app.db.models import Model, ModelVersion
from app.schemas.models import ModelPage, ModelRead, ModelVersionRead
from app.services import models

router = APIRouter(tags=["models"])


def to_version_read(v: ModelVersion) -> ModelVersionRead:
    return ModelVersionRead(
        name=v.model.name,
        version=v.version,
        framework=v.framework,
        status=v.status,
        artifact_uri=v.artifact_uri,
        metrics=v.metrics,
        params=v.params,
        job_id=v.job_id,
        created_at=v.created_at,
    )


def to_model_read(m: Model) -> ModelRead:
    versions = [to_version_read(v) for v in m.versions]
    return ModelRead(
        name=m.name,
        owner=m.owner,
        created_at=m.created_at,
        latest_version=versions[-1].version if versions else None,
        versions=versions,
    )


@router.get("/models", response_model=ModelPage, summary="Registered models with their versions")
def list_models(session: SessionDep, limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> ModelPage:
    return ModelPage(items=[to_model_read(m) for m in models.list_models(session=session, limit=limit)])


@router.get(
    "/models/{name}/versions/{version}",
    response_model=ModelVersionRead,
    summary="One version: framework, metrics, artifact URI, training job",
)
def get_version(name: str, version: Annotated[int, Path(ge=1)], session: SessionDep) -> ModelVersionRead:
    return to_version_read(models.get_version(session=session, name=name, version=version))

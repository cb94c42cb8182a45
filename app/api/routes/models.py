"""The model registry."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Path, Query, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from app.api.deps import CallerDep, SessionDep
from app.schemas.models import VERSION_MAX, ModelPage, ModelRead, ModelVersionRead
from app.services import artifacts, models

if TYPE_CHECKING:
    from app.db.models import Model, ModelVersion

router = APIRouter(tags=["models"])
VersionPath = Annotated[int, Path(ge=1, le=VERSION_MAX)]


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


def to_model_read(m: Model, aliases: dict[str, int]) -> ModelRead:
    versions = [to_version_read(v) for v in m.versions]
    return ModelRead(
        name=m.name,
        owner=m.owner,
        created_at=m.created_at,
        latest_version=versions[-1].version if versions else None,
        aliases=aliases,
        versions=versions,
    )


@router.get("/models", response_model=ModelPage, summary="Registered models with their versions")
def list_models(session: SessionDep, caller: CallerDep, limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> ModelPage:
    items = []
    for m in models.list_models(session=session, limit=limit, owner=caller.scope):
        aliases = {a.alias: a.version.version for a in models.aliases_of(session=session, model_id=m.id)}
        items.append(to_model_read(m, aliases))
    return ModelPage(items=items)


@router.get(
    "/models/{name}/versions/{version}",
    response_model=ModelVersionRead,
    summary="One version: framework, metrics, artifact URI, training job",
)
def get_version(name: str, version: VersionPath, session: SessionDep, caller: CallerDep) -> ModelVersionRead:
    return to_version_read(models.get_version(session=session, name=name, version=version, owner=caller.scope))


class AliasBody(BaseModel):
    version: int = Field(ge=1, le=VERSION_MAX)


@router.put("/models/{name}/aliases/{alias}", summary="Point an alias (champion, production, ...) at a version")
def put_alias(name: str, alias: str, body: AliasBody, session: SessionDep, caller: CallerDep) -> dict[str, Any]:
    row = models.set_alias(session=session, name=name, alias=alias, version=body.version, owner=caller.scope)
    session.commit()
    return {"name": name, "alias": alias, "version": row.version.version}


@router.delete("/models/{name}/aliases/{alias}", status_code=204, summary="Remove an alias")
def delete_alias(name: str, alias: str, session: SessionDep, caller: CallerDep) -> Response:
    models.delete_alias(session=session, name=name, alias=alias, owner=caller.scope)
    session.commit()
    return Response(status_code=204)


@router.get(
    "/models/{name}/versions/{version}/artifact",
    summary="Download the model as a .tar.gz (loads without sparktrain: see sparktrain_model.py inside)",
    response_class=StreamingResponse,
)
def download(name: str, version: VersionPath, session: SessionDep, caller: CallerDep) -> StreamingResponse:
    row = models.get_version(session=session, name=name, version=version, owner=caller.scope)
    stream = artifacts.model_archive(row)
    filename = f"{name}-v{version}.tar.gz"
    return StreamingResponse(
        stream, media_type="application/gzip", headers={"Content-Disposition": f'attachment; filename="{filename}"'}
    )

"""The model registry."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, get_args

from fastapi import APIRouter, Path, Query, Response
from fastapi.responses import StreamingResponse
from pydantic import Field

from app.api.deps import CallerDep, RuntimeDep, SessionDep, SettingsDep
from app.schemas.body import Body
from app.schemas.models import (
    FAMILY_FORMATS,
    VERSION_MAX,
    ArtifactFormat,
    ModelPage,
    ModelRead,
    ModelSignature,
    ModelVersionRead,
)
from app.services import artifacts, models

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

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
        signature=ModelSignature.model_validate(models.signature(v)),
        formats=list(FAMILY_FORMATS.get(v.framework, ("archive",))),
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


def _aliases(session: Session, m: Model) -> dict[str, int]:
    return {a.alias: a.version.version for a in models.aliases_of(session=session, model_id=m.id)}


@router.get(
    "/models",
    response_model=ModelPage,
    summary="Registered models with their versions, by name",
    description="At most `limit` models in name order; `next_cursor` (null on the last page) passed as `cursor` "
    "gives the next ones, as `GET /jobs` pages. A cursor this service did not issue is a 400.",
    responses={400: {"description": "A `cursor` this service did not issue."}},
)
def list_models(
    session: SessionDep,
    caller: CallerDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=300)] = None,
) -> ModelPage:
    page, next_cursor = models.page_models(session=session, limit=limit, cursor=cursor, owner=caller.scope)
    return ModelPage(items=[to_model_read(m, _aliases(session, m)) for m in page], next_cursor=next_cursor)


@router.get("/models/{name}", response_model=ModelRead, summary="One model: its versions and aliases")
def get_model(name: str, session: SessionDep, caller: CallerDep) -> ModelRead:
    m = models.get_model(session=session, name=name, owner=caller.scope)
    return to_model_read(m, _aliases(session, m))


@router.get(
    "/models/{name}/versions/{version}",
    response_model=ModelVersionRead,
    summary="One version: framework, metrics, artifact URI, training job, signature, download formats",
)
def get_version(name: str, version: VersionPath, session: SessionDep, caller: CallerDep) -> ModelVersionRead:
    return to_version_read(models.get_version(session=session, name=name, version=version, owner=caller.scope))


class AliasBody(Body):
    version: int = Field(ge=1, le=VERSION_MAX)


@router.put("/models/{name}/aliases/{alias}", summary="Point an alias (champion, production, ...) at a version")
def put_alias(
    name: str, alias: str, body: AliasBody, session: SessionDep, caller: CallerDep, rt: RuntimeDep
) -> dict[str, Any]:
    row = models.set_alias(session=session, name=name, alias=alias, version=body.version, owner=caller.scope)
    session.commit()
    rt.resolved_models.forget(name)  # this driver's next prediction by the alias takes the new version
    return {"name": name, "alias": alias, "version": row.version.version}


@router.delete("/models/{name}/aliases/{alias}", status_code=204, summary="Remove an alias")
def delete_alias(name: str, alias: str, session: SessionDep, caller: CallerDep, rt: RuntimeDep) -> Response:
    models.delete_alias(session=session, name=name, alias=alias, owner=caller.scope)
    session.commit()
    rt.resolved_models.forget(name)
    return Response(status_code=204)


FORMAT_HELP = (
    "archive (default): a .tar.gz of the model directory (a torch model loads without sparktrain through "
    "sparktrain_model.py); mlflow: a .zip of the MLflow model directory (MLmodel, signature, input example, "
    "requirements): mlflow.pyfunc.load_model, mlflow models serve; onnx (torch networks): a .zip of model.onnx "
    "(opset 18, a dynamic batch axis) and sparktrain_onnx.json (normalizer, class labels). The first ONNX download "
    "of a version exports it (seconds; a request waits up to 30 s, then answers 503 with Retry-After); later ones are "
    "served from the export."
)


@router.get(
    "/models/{name}/versions/{version}/artifact",
    summary="Download the model: a .tar.gz archive, an MLflow model directory (zip) or ONNX (zip)",
    description=FORMAT_HELP,
    response_class=StreamingResponse,
    responses={
        200: {"content": {"application/gzip": {}, "application/zip": {}}, "description": "The file."},
        422: {"description": "An unknown format, a format this family does not have, or a network ONNX cannot "
              "express (the layer is named)."},
        503: {"description": "format=onnx: the export is still running (the first download of a version starts it); "
              "`Retry-After` says when to ask again."},
    },
)  # fmt: skip
def download(
    name: str,
    version: VersionPath,
    session: SessionDep,
    caller: CallerDep,
    settings: SettingsDep,
    # a string checked against the version's family (a 422 listing its formats), shown as the enum in the schema
    format: Annotated[
        str, Query(description=FORMAT_HELP, max_length=32, json_schema_extra={"enum": list(get_args(ArtifactFormat))})
    ] = "archive",
) -> StreamingResponse:
    row = models.get_version(session=session, name=name, version=version, owner=caller.scope)
    artifacts.check_format(row, format)
    if format == "mlflow":
        stream, media, filename = artifacts.mlflow_zip(row), "application/zip", f"{name}-v{version}-mlflow.zip"
    elif format == "onnx":
        stream = artifacts.onnx_zip(row, artifact_root=settings.artifact_root)
        media, filename = "application/zip", f"{name}-v{version}-onnx.zip"
    else:
        stream, media, filename = artifacts.model_archive(row), "application/gzip", f"{name}-v{version}.tar.gz"
    return StreamingResponse(stream, media_type=media,
                             headers={"Content-Disposition": f'attachment; filename="{filename}"'})  # fmt: skip

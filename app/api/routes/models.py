"""The model registry."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Path, Query, Response
from fastapi import Body as BodyOf
from fastapi.responses import StreamingResponse
from pydantic import Field

from app.api.deps import CallerDep, RuntimeDep, SessionDep, SettingsDep
from app.api.openapi import file_response
from app.schemas.body import Body
from app.schemas.models import (
    ARTIFACT_FORMATS,
    FAMILY_FORMATS,
    TAG_EXAMPLES,
    TAG_FILTERS_MAX,
    TAG_KEY_RULE,
    VERSION_MAX,
    AliasRead,
    ModelPage,
    ModelRead,
    ModelSignature,
    ModelTagRead,
    ModelVersionRead,
    TagBody,
    VersionTagRead,
)
from app.services import artifacts, model_tags, models, registry_edits

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from app.db.models import Model, ModelVersion

router = APIRouter(tags=["models"])
DELETE_HELP = (
    "The model's owner (or an admin) deletes; another owner's model is a 404, as an unknown one. An unfinished job "
    "(QUEUED, STARTING, RUNNING, CANCELLING) that uses what would go is a 409 naming it in `jobs`: an evaluation or "
    "batch prediction of the version, training starting from it (`training.init_from`), a running tune whose trials "
    "registered it; for a whole model also a training job or tune into it. Aliases and tags go with what they are "
    "on. A deleted version's number is never given again. The artifact files are removed once the rows are gone "
    "(files that cannot be removed are logged; the entry is gone either way). Predictions stop at once on the driver "
    "that answered, within 2 s on the others."
)
VersionPath = Annotated[int, Path(ge=1, le=VERSION_MAX)]
TagValue = Annotated[TagBody, BodyOf(openapi_examples=TAG_EXAMPLES)]


def to_version_read(
    v: ModelVersion, aliases: list[str] | None = None, tags: dict[str, str] | None = None
) -> ModelVersionRead:
    signature = models.signature(v)
    return ModelVersionRead(
        name=v.model.name,
        version=v.version,
        framework=v.framework,
        status=v.status,
        artifact_uri=v.artifact_uri,
        metrics=v.metrics,
        params=models.shown_params(v, signature),
        job_id=v.job_id,
        created_at=v.created_at,
        signature=ModelSignature.model_validate(signature),
        formats=list(FAMILY_FORMATS.get(v.framework, ("archive",))),
        aliases=aliases or [],
        tags=tags or {},
    )


def to_model_read(
    m: Model, aliases: dict[str, int], tags: dict[str, str], version_tags: dict[int, dict[str, str]]
) -> ModelRead:
    named: dict[int, list[str]] = {}
    for alias, number in aliases.items():
        named.setdefault(number, []).append(alias)
    versions = [to_version_read(v, named.get(v.version), version_tags.get(v.id)) for v in m.versions]
    return ModelRead(
        name=m.name,
        owner=m.owner,
        created_at=m.created_at,
        latest_version=versions[-1].version if versions else None,
        aliases=aliases,
        tags=tags,
        versions=versions,
    )


def _aliases(session: Session, m: Model) -> dict[str, int]:
    return {a.alias: a.version.version for a in models.aliases_of(session=session, model_id=m.id)}


def _model_reads(session: Session, page: Sequence[Model]) -> list[ModelRead]:
    ids = [m.id for m in page]
    tags = model_tags.model_tags(session=session, model_ids=ids)
    version_tags = model_tags.version_tags(session=session, model_ids=ids)
    return [to_model_read(m, _aliases(session, m), tags[m.id], version_tags) for m in page]


def _version_read(session: Session, v: ModelVersion) -> ModelVersionRead:
    aliases = [a.alias for a in models.aliases_of(session=session, model_id=v.model_id) if a.version_id == v.id]
    return to_version_read(v, aliases, model_tags.of_version(session=session, version_id=v.id))


@router.get(
    "/models",
    response_model=ModelPage,
    summary="Registered models with their versions, by name",
    description="At most `limit` models in name order; `next_cursor` (null on the last page) passed as `cursor` "
    "gives the next ones, as `GET /jobs` pages. A cursor this service did not issue is a 400. `tag=key:value` "
    f"(or `tag=key`, any value; repeat it for several, at most {TAG_FILTERS_MAX}, all must match) lists only the "
    "models with that tag; pass it again with `cursor`.",
)
def list_models(
    session: SessionDep,
    caller: CallerDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=300)] = None,
    tag: Annotated[list[str] | None, Query(description=f"key:value or key; a key is {TAG_KEY_RULE}")] = None,
) -> ModelPage:
    page, next_cursor = models.page_models(
        session=session, limit=limit, cursor=cursor, owner=caller.scope, tags=model_tags.parse_filters(tag or [])
    )
    return ModelPage(items=_model_reads(session, page), next_cursor=next_cursor)


@router.get("/models/{name}", response_model=ModelRead, summary="One model: its versions, aliases and tags")
def get_model(name: str, session: SessionDep, caller: CallerDep) -> ModelRead:
    return _model_reads(session, [models.get_model(session=session, name=name, owner=caller.scope)])[0]


@router.get(
    "/models/{name}/versions/{version}",
    response_model=ModelVersionRead,
    summary="One version: framework, metrics, artifact URI, training job, signature, download formats",
)
def get_version(name: str, version: VersionPath, session: SessionDep, caller: CallerDep) -> ModelVersionRead:
    return _version_read(session, models.get_version(session=session, name=name, version=version, owner=caller.scope))


@router.delete(
    "/models/{name}/versions/{version}",
    status_code=204,
    summary="Delete a version: its aliases and tags go with it, its number is never given again",
    description=DELETE_HELP,
)
def delete_version(
    name: str, version: VersionPath, session: SessionDep, caller: CallerDep, rt: RuntimeDep, settings: SettingsDep
) -> Response:
    removal = registry_edits.delete_version(session=session, name=name, version=version, owner=caller.scope)
    session.commit()
    rt.resolved_models.forget(name, versions=True)  # this driver stops serving it now; another within 2 s
    rt.model_cache.discard(*removal.uris())  # and frees the memory of the loaded model now
    registry_edits.remove_files(removal, settings=settings)
    return Response(status_code=204)


@router.delete(
    "/models/{name}",
    status_code=204,
    summary="Delete a model: every version, alias and tag; the name is free again",
    description=DELETE_HELP,
)
def delete_model(name: str, session: SessionDep, caller: CallerDep, rt: RuntimeDep, settings: SettingsDep) -> Response:
    removal = registry_edits.delete_model(session=session, name=name, owner=caller.scope)
    session.commit()
    rt.resolved_models.forget(name, versions=True)
    rt.model_cache.discard(*removal.uris())
    registry_edits.remove_files(removal, settings=settings)
    return Response(status_code=204)


@router.put(
    "/models/{name}/tags/{key}",
    summary="Set a model's tag (created, or its value replaced)",
    response_model=None,  # documented only: the dict answers as it did (its members in its order)
    responses={200: {"model": ModelTagRead}},
)
def put_model_tag(name: str, key: str, body: TagValue, session: SessionDep, caller: CallerDep) -> dict[str, Any]:
    model_tags.set_model_tag(session=session, name=name, key=key, value=body.value, owner=caller.scope)
    session.commit()
    return {"name": name, "key": key, "value": body.value}


@router.delete("/models/{name}/tags/{key}", status_code=204, summary="Remove a model's tag")
def delete_model_tag(name: str, key: str, session: SessionDep, caller: CallerDep) -> Response:
    model_tags.delete_model_tag(session=session, name=name, key=key, owner=caller.scope)
    session.commit()
    return Response(status_code=204)


@router.put(
    "/models/{name}/versions/{version}/tags/{key}",
    summary="Set a version's tag (created, or replaced)",
    response_model=None,
    responses={200: {"model": VersionTagRead}},
)
def put_version_tag(
    name: str, version: VersionPath, key: str, body: TagValue, session: SessionDep, caller: CallerDep
) -> dict[str, Any]:
    model_tags.set_version_tag(
        session=session, name=name, version=version, key=key, value=body.value, owner=caller.scope
    )
    session.commit()
    return {"name": name, "version": version, "key": key, "value": body.value}


@router.delete("/models/{name}/versions/{version}/tags/{key}", status_code=204, summary="Remove a version's tag")
def delete_version_tag(name: str, version: VersionPath, key: str, session: SessionDep, caller: CallerDep) -> Response:
    model_tags.delete_version_tag(session=session, name=name, version=version, key=key, owner=caller.scope)
    session.commit()
    return Response(status_code=204)


class AliasBody(Body):
    version: int = Field(ge=1, le=VERSION_MAX)


ALIAS_EXAMPLES = {"version": {"summary": "Point the alias at version 1", "value": {"version": 1}}}


@router.get(
    "/models/{name}/aliases/{alias}",
    response_model=ModelVersionRead,
    summary="The version an alias names (MLflow's get_model_version_by_alias)",
)
def get_alias(name: str, alias: str, session: SessionDep, caller: CallerDep) -> ModelVersionRead:
    return _version_read(session, models.get_alias(session=session, name=name, alias=alias, owner=caller.scope))


@router.put(
    "/models/{name}/aliases/{alias}",
    summary="Point an alias (champion, production, ...) at a version",
    response_model=None,
    responses={200: {"model": AliasRead}},
)
def put_alias(
    name: str,
    alias: str,
    body: Annotated[AliasBody, BodyOf(openapi_examples=ALIAS_EXAMPLES)],
    session: SessionDep,
    caller: CallerDep,
    rt: RuntimeDep,
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
    responses=file_response("application/gzip", "application/zip"),
)
def download(
    name: str,
    version: VersionPath,
    session: SessionDep,
    caller: CallerDep,
    settings: SettingsDep,
    rt: RuntimeDep,
    # a string checked against the version's family (a 422 listing its formats), shown as the enum in the schema
    format: Annotated[
        str, Query(description=FORMAT_HELP, max_length=32, json_schema_extra={"enum": list(ARTIFACT_FORMATS)})
    ] = "archive",
) -> StreamingResponse:
    row = models.get_version(session=session, name=name, version=version, owner=caller.scope)
    artifacts.check_format(row, format)
    if format == "mlflow":
        stream, media, filename = artifacts.mlflow_zip(row), "application/zip", f"{name}-v{version}-mlflow.zip"
    elif format == "onnx":
        row_id, uri = row.id, row.artifact_uri
        stream = artifacts.onnx_zip(row, artifact_root=settings.artifact_root,
                                    still_there=lambda: models.version_exists(rt.db, row_id, uri))  # fmt: skip
        media, filename = "application/zip", f"{name}-v{version}-onnx.zip"
    else:
        stream, media, filename = artifacts.model_archive(row), "application/gzip", f"{name}-v{version}.tar.gz"
    return StreamingResponse(stream, media_type=media,
                             headers={"Content-Disposition": f'attachment; filename="{filename}"'})  # fmt: skip

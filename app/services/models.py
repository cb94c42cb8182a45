"""The model registry: names, integer versions, and the artifacts behind them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.core.errors import Conflict, NotFound, ValidationFailed
from app.db.base import utcnow
from app.db.models import Model, ModelAlias, ModelVersion
from app.schemas.models import ALIAS_PATTERN


def register_version(
    *,
    session: Session,
    name: str,
    framework: str,
    artifact_uri: str,
    metrics: dict[str, Any],
    params: dict[str, Any],
    job_id: str | None,
    owner: str = "anonymous",
) -> ModelVersion:
    """Add the next version of ``name`` (creating the model on first use). Unique keys (model, version) and
    (job) make a replayed job unable to register twice; the caller's transaction decides what lands."""
    model = session.scalar(select(Model).where(Model.name == name).with_for_update())
    if model is None:
        try:
            with session.begin_nested():
                model = Model(name=name, owner=owner, created_at=utcnow())
                session.add(model)
        except IntegrityError:
            model = session.scalar(select(Model).where(Model.name == name).with_for_update())
            if model is None:
                raise
    for _ in range(5):
        latest = session.scalar(select(func.max(ModelVersion.version)).where(ModelVersion.model_id == model.id))
        version = ModelVersion(
            model_id=model.id,
            version=(latest or 0) + 1,
            framework=framework,
            status="READY",
            artifact_uri=artifact_uri,
            metrics=metrics,
            params=params,
            job_id=job_id,
            created_at=utcnow(),
        )
        try:
            with session.begin_nested():
                session.add(version)
            return version
        except IntegrityError:
            if job_id is not None and session.scalar(select(ModelVersion).where(ModelVersion.job_id == job_id)):
                raise
            continue  # another job took this number: take the next one
    raise RuntimeError(f"could not allocate a version number for model {name!r}")


def list_models(*, session: Session, limit: int = 100) -> Sequence[Model]:
    return session.scalars(select(Model).order_by(Model.name).limit(limit)).all()


def get_version(*, session: Session, name: str, version: int) -> ModelVersion:
    row = session.scalar(select(ModelVersion).join(Model).where(Model.name == name, ModelVersion.version == version))
    if row is None:
        exists = session.scalar(select(Model.id).where(Model.name == name))
        if exists is None:
            raise NotFound(f"No model named {name!r}.")
        raise NotFound(f"Model {name!r} has no version {version}.")
    return row


_ALIAS = re.compile(ALIAS_PATTERN)


def resolve_version(
    *, session: Session, name: str, version: int | None = None, alias: str | None = None
) -> ModelVersion:
    """A model version named by number, by alias, or the newest one."""
    if version is not None:
        return get_version(session=session, name=name, version=version)
    model = session.scalar(select(Model).where(Model.name == name))
    if model is None or not model.versions:
        _still_training(session, name)
    if model is None:
        raise NotFound(f"No model named {name!r}.")
    if alias is not None:
        row = session.scalar(select(ModelAlias).where(ModelAlias.model_id == model.id, ModelAlias.alias == alias))
        if row is None:
            known = ", ".join(a.alias for a in aliases_of(session=session, model_id=model.id)) or "none"
            raise NotFound(f"Model {name!r} has no alias {alias!r} (aliases: {known}).")
        return row.version
    if not model.versions:
        raise NotFound(f"Model {name!r} has no versions yet.")
    return model.versions[-1]


def _still_training(session: Session, name: str) -> None:
    from app.core.jobstates import JobStatus
    from app.db.models import Job

    active = [JobStatus.QUEUED, JobStatus.STARTING, JobStatus.RUNNING]
    job = session.scalar(select(Job).where(Job.name == name, Job.type == "train", Job.status.in_(active)).limit(1))
    if job is not None:
        raise Conflict(
            f"Model {name!r} has no version yet: its training job {job.id} is {job.status}. Wait for it to succeed.",
            job_id=job.id,
        )


def aliases_of(*, session: Session, model_id: int) -> Sequence[ModelAlias]:
    return session.scalars(select(ModelAlias).where(ModelAlias.model_id == model_id).order_by(ModelAlias.alias)).all()


def set_alias(*, session: Session, name: str, alias: str, version: int) -> ModelAlias:
    if not _ALIAS.match(alias):
        raise ValidationFailed.at("alias", "letters, digits, '.', '_' or '-', starting with a letter (at most 100)")
    if alias.isdigit() or alias == "latest":
        raise ValidationFailed.at("alias", f"{alias!r} is reserved")
    target = get_version(session=session, name=name, version=version)
    # Lock the alias row only: PostgreSQL refuses FOR UPDATE on the outer join that loads its version.
    row = session.scalar(
        select(ModelAlias)
        .where(ModelAlias.model_id == target.model_id, ModelAlias.alias == alias)
        .with_for_update(of=ModelAlias)
    )
    if row is None:
        row = ModelAlias(model_id=target.model_id, alias=alias, version_id=target.id, updated_at=utcnow())
        session.add(row)
    else:
        row.version_id, row.updated_at = target.id, utcnow()
    session.flush()
    session.refresh(row)
    return row


def delete_alias(*, session: Session, name: str, alias: str) -> None:
    model = session.scalar(select(Model).where(Model.name == name))
    row = None
    if model is not None:
        row = session.scalar(select(ModelAlias).where(ModelAlias.model_id == model.id, ModelAlias.alias == alias))
    if row is None:
        raise NotFound(f"Model {name!r} has no alias {alias!r}.")
    session.delete(row)

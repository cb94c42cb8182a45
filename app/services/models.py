"""The model registry: names, integer versions, and the artifacts behind them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.core.errors import NotFound
from app.db.base import utcnow
from app.db.models import Model, ModelVersion


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

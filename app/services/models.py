"""The model registry: names, integer versions, and the artifacts behind them.

A model name belongs to the owner whose job registered its first version. Lookups take ``owner`` (None: any, for
an admin); another owner's model answers exactly as an unknown one does (404), so its existence does not leak.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from typing import Any

from sqlalchemy import exists, func, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from app.core.errors import Conflict, NotFound, ValidationFailed
from app.core.jobstates import JobStatus
from app.db.base import utcnow
from app.db.models import Job, Model, ModelAlias, ModelTag, ModelVersion
from app.db.session import savepoint
from app.schemas.models import ALIAS_PATTERN
from app.services.cursors import decode_name_cursor, encode_name_cursor


class ModelNameTaken(Conflict):
    """Another owner registered the model name while the job ran (the job fails as MODEL_NAME_TAKEN)."""


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
    (job) make a replayed job unable to register twice; the caller's transaction decides what lands.

    A job of another owner cannot add a version to a model created after it was queued (two owners training a new
    name at once: the first to finish owns it): a Conflict. ``POST /train`` vetted a job queued after the model
    existed (its owner's, or an admin's); a tune's trial counts from when the tune was queued."""
    model = session.scalar(select(Model).where(Model.name == name).with_for_update())
    if model is None:
        try:
            with savepoint(session):
                model = Model(name=name, owner=owner, created_at=utcnow())
                session.add(model)
        except IntegrityError:
            model = session.scalar(select(Model).where(Model.name == name).with_for_update())
            if model is None:
                raise
    if model.owner != owner and job_id is not None:
        row = session.execute(select(Job.created_at, Job.parent_id).where(Job.id == job_id)).first()
        queued_at = row.created_at if row is not None else None
        if row is not None and row.parent_id is not None:  # a tune's trial: vetted when the tune was queued
            queued_at = session.scalar(select(Job.created_at).where(Job.id == row.parent_id)) or queued_at
        if queued_at is not None and queued_at < model.created_at:
            raise ModelNameTaken(
                f"Model name {name!r} was taken by another owner while this job ran; train again under another name."
            )
    for _ in range(5):
        latest = session.scalar(select(func.max(ModelVersion.version)).where(ModelVersion.model_id == model.id))
        number = max(latest or 0, model.last_version or 0) + 1  # a deleted version's number is never given again
        version = ModelVersion(
            model_id=model.id,
            version=number,
            framework=framework,
            status="READY",
            artifact_uri=artifact_uri,
            metrics=metrics,
            params=params,
            job_id=job_id,
            created_at=utcnow(),
        )
        try:
            with savepoint(session):
                session.add(version)
                model.last_version = number
            return version
        except IntegrityError:
            if job_id is not None and session.scalar(select(ModelVersion).where(ModelVersion.job_id == job_id)):
                raise
            continue  # another job took this number: take the next one
    raise RuntimeError(f"could not allocate a version number for model {name!r}")


def signature(version: ModelVersion) -> dict[str, Any]:
    """The version's signature, as requests are checked against it: recorded at training, or derived from its card
    for an older version; a model trained with categorical features takes their columns (its recorded signature,
    in its MLflow files, lists the one-hot columns MLflow's flavors feed it)."""
    from workers.inference.spec import ModelRef

    return ModelRef(framework=version.framework, uri=version.artifact_uri, card=version.params).signature


def shown_params(version: ModelVersion, shown: dict[str, Any]) -> dict[str, Any]:
    """The version's params as a read shows them: without the recorded ``signature`` when it is ``shown``, the
    signature the read shows beside them (every model but one with categorical features, whose recorded signature
    lists the one-hot columns MLflow feeds it). ``GET /models`` gave each version's signature twice."""
    params = version.params or {}
    if params.get("signature") != shown:
        return params
    return {key: value for key, value in params.items() if key != "signature"}


def check_name(*, session: Session, name: str, owner: str | None) -> None:
    """Whether ``owner`` may train into ``name``: a name another owner registered first is a 409 (None: an admin,
    who may train into any name)."""
    if owner is None:
        return
    taken_by = session.scalar(select(Model.owner).where(Model.name == name))
    if taken_by is not None and taken_by != owner:
        raise Conflict(
            f"The model name {name!r} belongs to another owner; a new version can only come from its owner. "
            "Choose another name."
        )


def _model_named(name: str, owner: str | None) -> Any:
    stmt = select(Model).where(Model.name == name)
    return stmt if owner is None else stmt.where(Model.owner == owner)


def _no_model(session: Session, name: str, owner: str | None) -> NotFound:
    """The 404 of an unknown model name, with the closest of the caller's names when one is close (a typo)."""
    stmt = select(Model.name) if owner is None else select(Model.name).where(Model.owner == owner)
    close = difflib.get_close_matches(name, session.scalars(stmt.limit(1000)).all(), n=1, cutoff=0.75)
    return NotFound(f"No model named {name!r}." + (f" Did you mean {close[0]!r}?" if close else ""))


def page_models(
    *,
    session: Session,
    limit: int = 100,
    cursor: str | None = None,
    owner: str | None = None,
    tags: Sequence[tuple[str, str | None]] = (),
) -> tuple[Sequence[Model], str | None]:
    """In name order (``owner``'s; None: anyone's): a page and the cursor of the next one (None at the end).
    ``tags``: only models with every one of these tags, (key, value), or (key, None) for any value."""
    stmt = select(Model) if owner is None else select(Model).where(Model.owner == owner)
    for key, value in tags:
        has = select(ModelTag.id).where(ModelTag.model_id == Model.id, ModelTag.key == key)
        stmt = stmt.where(exists(has if value is None else has.where(ModelTag.value == value)))
    if cursor:
        stmt = stmt.where(Model.name > decode_name_cursor(cursor))
    rows = session.scalars(stmt.order_by(Model.name).limit(limit + 1)).all()
    page = rows[:limit]
    return page, encode_name_cursor(page[-1].name) if len(rows) > limit else None


def get_model(*, session: Session, name: str, owner: str | None = None) -> Model:
    row = session.scalar(_model_named(name, owner))
    if row is None:
        raise _no_model(session, name, owner)
    return row


def get_version(*, session: Session, name: str, version: int, owner: str | None = None) -> ModelVersion:
    stmt = select(ModelVersion).join(Model).where(Model.name == name, ModelVersion.version == version)
    row = session.scalar(stmt if owner is None else stmt.where(Model.owner == owner))
    if row is None:
        model = session.scalar(_model_named(name, owner))
        if model is None:
            raise _no_model(session, name, owner)
        deleted = version <= model.last_version
        gone = " (it was deleted; a deleted version's number is not given again)" if deleted else ""
        raise NotFound(f"Model {name!r} has no version {version}{gone}.")
    return row


def version_exists(db: sessionmaker[Session], row_id: int, artifact_uri: str) -> bool:
    """Whether the version row ``row_id`` (with these files: a row id SQLite gave again is another version) is
    registered now: asked in a new transaction, so a delete committed before it is seen."""
    with db() as session:
        stmt = select(ModelVersion.id).where(ModelVersion.id == row_id, ModelVersion.artifact_uri == artifact_uri)
        return session.scalar(stmt) is not None


def locked_model(*, session: Session, name: str, owner: str | None = None) -> Model:
    """:func:`get_model`, with the model's row locked until the end of the transaction (PostgreSQL's FOR UPDATE, as
    a registration and a delete take it): a write that races a delete of the model waits for it, then answers the
    404 of an unknown model instead of failing on a foreign key."""
    model = get_model(session=session, name=name, owner=owner)
    if session.get_bind().dialect.name == "sqlite":  # FOR UPDATE is nothing there: a write to the row takes the
        # database's write lock, so what the caller reads next (a count of tags) is what the last writer committed
        locked = session.execute(text("UPDATE models SET id = id WHERE id = :id"), {"id": model.id})
        if not locked.rowcount:  # type: ignore[attr-defined]
            raise _no_model(session, name, owner)
    elif session.scalar(select(Model.id).where(Model.id == model.id).with_for_update()) is None:
        raise _no_model(session, name, owner)
    return model


def locked_version(*, session: Session, name: str, version: int, owner: str | None = None) -> ModelVersion:
    """:func:`get_version`, with its model's row locked as :func:`locked_model` locks it; a version (or model)
    deleted while this waited for the lock is its 404."""
    get_version(session=session, name=name, version=version, owner=owner)  # its 404 before any lock
    locked_model(session=session, name=name, owner=owner)
    return get_version(session=session, name=name, version=version, owner=owner)  # read again under the lock


_ALIAS = re.compile(ALIAS_PATTERN)


def resolve_version(
    *,
    session: Session,
    name: str,
    version: int | None = None,
    alias: str | None = None,
    owner: str | None = None,
) -> ModelVersion:
    """A model version named by number, by alias, or the newest one (of ``owner``'s models; None: anyone's)."""
    if version is not None:
        return get_version(session=session, name=name, version=version, owner=owner)
    model = session.scalar(_model_named(name, owner))
    if model is None or not model.versions:
        _still_training(session, name, owner)
    if model is None:
        raise _failed_training(session, name, owner) or _no_model(session, name, owner)
    if alias is not None:
        row = session.scalar(select(ModelAlias).where(ModelAlias.model_id == model.id, ModelAlias.alias == alias))
        if row is None:
            known = ", ".join(a.alias for a in aliases_of(session=session, model_id=model.id)) or "none"
            raise NotFound(f"Model {name!r} has no alias {alias!r} (aliases: {known}).")
        return row.version
    if not model.versions:
        gone = f" (all {model.last_version} were deleted)" if model.last_version else " yet"
        raise NotFound(f"Model {name!r} has no versions{gone}.")
    return model.versions[-1]


def _training_job(session: Session, name: str, owner: str | None, statuses: Sequence[str]) -> Job | None:
    """The newest training job into ``name`` (of ``owner``; None: anyone's) in one of ``statuses``."""
    stmt = select(Job).where(Job.name == name, Job.type == "train", Job.status.in_(statuses))
    return session.scalar((stmt if owner is None else stmt.where(Job.owner == owner)).order_by(Job.created_at.desc()))


def _still_training(session: Session, name: str, owner: str | None) -> None:
    job = _training_job(session, name, owner, [JobStatus.QUEUED, JobStatus.STARTING, JobStatus.RUNNING])
    if job is not None:
        raise Conflict(
            f"Model {name!r} has no version yet: its training job {job.id} is {job.status}. Wait for it to succeed.",
            job_id=job.id,
        )


def _failed_training(session: Session, name: str, owner: str | None) -> NotFound | None:
    """The 404 of a name whose every training job ended without a model: it names the newest of them and why (the
    plain "No model named" sent users looking for a typo)."""
    job = _training_job(session, name, owner, [JobStatus.FAILED, JobStatus.CANCELLED])
    if job is None:
        return None
    why = f" ({job.error_reason})" if job.error_reason else ""
    return NotFound(f"No model named {name!r}: its training job {job.id} ended {job.status}{why} without one; "
                    f"GET /jobs/{job.id} says why, and a new POST /train makes the model.")  # fmt: skip


def aliases_of(*, session: Session, model_id: int) -> Sequence[ModelAlias]:
    return session.scalars(select(ModelAlias).where(ModelAlias.model_id == model_id).order_by(ModelAlias.alias)).all()


def get_alias(*, session: Session, name: str, alias: str, owner: str | None = None) -> ModelVersion:
    """The version an alias names (MLflow's ``get_model_version_by_alias``): 404 for an unknown model or alias."""
    model = get_model(session=session, name=name, owner=owner)
    row = session.scalar(select(ModelAlias).where(ModelAlias.model_id == model.id, ModelAlias.alias == alias))
    if row is None:
        known = ", ".join(a.alias for a in aliases_of(session=session, model_id=model.id)) or "none"
        raise NotFound(f"Model {name!r} has no alias {alias!r} (aliases: {known}).")
    return row.version


def set_alias(*, session: Session, name: str, alias: str, version: int, owner: str | None = None) -> ModelAlias:
    if not _ALIAS.match(alias):
        raise ValidationFailed.at(
            "alias", "letters, digits, '.', '_' or '-', starting with a letter (at most 100)", source="path"
        )
    if alias.isdigit() or alias == "latest":
        raise ValidationFailed.at("alias", f"{alias!r} is reserved", source="path")
    target = locked_version(session=session, name=name, version=version, owner=owner)
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


def alias_version(*, session: Session, name: str, alias: str) -> int | None:
    """The version an alias names now; None when the model or the alias does not exist."""
    model = session.scalar(_model_named(name, None))
    if model is None:
        return None
    row = session.scalar(select(ModelAlias).where(ModelAlias.model_id == model.id, ModelAlias.alias == alias))
    return int(row.version.version) if row is not None else None


def delete_alias(*, session: Session, name: str, alias: str, owner: str | None = None) -> None:
    model = get_model(session=session, name=name, owner=owner)  # an unknown name: "No model named", as GET and PUT
    row = session.scalar(select(ModelAlias).where(ModelAlias.model_id == model.id, ModelAlias.alias == alias))
    if row is None:
        raise NotFound(f"Model {name!r} has no alias {alias!r}.")
    session.delete(row)

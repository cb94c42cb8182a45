"""Deleting a model version or a whole model, with the rules a registry operator expects (docs/inference.md):

- Only the owner of the model (or an admin) deletes: lookups take ``owner`` as the rest of the registry does, so
  another owner's model is a 404, exactly as an unknown one.
- An unfinished job (QUEUED, STARTING, RUNNING, CANCELLING) that uses what would go is a 409 naming it: an
  evaluation or batch prediction of the version, a training job (or a tune's base) starting from its weights
  (``training.init_from``), a running tune whose trials registered it (the tune points ``best`` at one of them when
  it ends); for a whole model also a training job or tune that will register a version into it.
- The version's aliases and tags go with it (MLflow removes the aliases too); a whole model takes its versions,
  aliases and tags. Its number is never given again (``models.last_version``); a model deleted whole frees its
  name, and a model made again under it starts at version 1, as in MLflow.
- The rows go in the caller's transaction; the artifact files only after it committed (:func:`remove_files`), so
  a failure there leaves files behind (logged, named), never a half-deleted registry entry. Only files inside the
  artifact root or the artifact store are removed, and only when no other version names them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.core.errors import Conflict
from app.core.jobstates import JobStatus, JobType
from app.core.settings import Settings
from app.db.models import Job, Model, ModelAlias, ModelTag, ModelVersion, ModelVersionTag
from app.services import artifacts, models
from workers import storage

log = logging.getLogger(__name__)
UNFINISHED = (JobStatus.QUEUED, JobStatus.STARTING, JobStatus.RUNNING, JobStatus.CANCELLING)
SHOWN_JOBS = 5


@dataclass(frozen=True)
class Removal:
    """What a committed delete leaves to remove from the artifact store: (version row id, number, artifact URI)."""

    name: str
    versions: tuple[tuple[int, int, str], ...] = ()
    shared: frozenset[str] = field(default_factory=frozenset)
    """Artifact URIs another version still names: kept."""

    def uris(self) -> list[str]:
        """The artifact URIs no version names any more (what a driver may unload)."""
        return [uri for _, _, uri in self.versions if uri not in self.shared]


def delete_version(*, session: Session, name: str, version: int, owner: str | None = None) -> Removal:
    """Remove one version, its aliases and its tags (uncommitted); 404 for an unknown name or number, 409 when an
    unfinished job uses it."""
    row = models.locked_version(session=session, name=name, version=version, owner=owner)  # another delete: 404
    _refuse_if_used(session, name, {version})
    return _delete_versions(session, name, [row])


def delete_model(*, session: Session, name: str, owner: str | None = None) -> Removal:
    """Remove a model with every version, alias and tag (uncommitted); 404 for an unknown name, 409 when an
    unfinished job uses one of its versions or will register one."""
    model = models.locked_model(session=session, name=name, owner=owner)
    _refuse_if_used(session, name, None)
    rows = session.scalars(select(ModelVersion).where(ModelVersion.model_id == model.id)).all()
    removal = _delete_versions(session, name, rows)
    session.execute(delete(ModelAlias).where(ModelAlias.model_id == model.id))
    session.execute(delete(ModelTag).where(ModelTag.model_id == model.id))
    session.execute(delete(Model).where(Model.id == model.id))
    return removal


def _delete_versions(session: Session, name: str, rows: Iterable[ModelVersion]) -> Removal:
    rows = list(rows)
    ids = [r.id for r in rows]
    if ids:
        session.execute(delete(ModelAlias).where(ModelAlias.version_id.in_(ids)))
        session.execute(delete(ModelVersionTag).where(ModelVersionTag.version_id.in_(ids)))
        session.execute(delete(ModelVersion).where(ModelVersion.id.in_(ids)))
    uris = {r.artifact_uri for r in rows}
    shared = session.scalars(select(ModelVersion.artifact_uri).where(ModelVersion.artifact_uri.in_(uris))).all()
    return Removal(name, tuple((r.id, r.version, r.artifact_uri) for r in rows), frozenset(shared))


# --- who uses it --------------------------------------------------------------------------------------------------


def _refuse_if_used(session: Session, name: str, versions: set[int] | None) -> None:
    """A 409 naming the unfinished jobs that use ``versions`` of model ``name`` (None: any of it, or that will
    register a version into it)."""
    users = _users(session, name, versions)
    if not users:
        return
    what = f"Model {name!r}" + (f" version {min(versions)}" if versions else "")
    shown = "; ".join(f"{job.type} job {job.id} ({job.status}) {why}" for job, why in users[:SHOWN_JOBS])
    more = f" and {len(users) - SHOWN_JOBS} more" if len(users) > SHOWN_JOBS else ""
    raise Conflict(
        f"{what} is in use by {'an unfinished job' if len(users) == 1 else 'unfinished jobs'}: {shown}{more}. Cancel "
        "the job or wait for it to end, then delete again.",
        jobs=[job.id for job, _ in users],
    )


def _users(session: Session, name: str, versions: set[int] | None) -> list[tuple[Job, str]]:
    unfinished = select(Job).where(Job.status.in_([s.value for s in UNFINISHED]))
    found: dict[str, tuple[Job, str]] = {}
    # evaluations and batch predictions pin the version they use
    stmt = unfinished.where(Job.model_name == name, Job.model_version.is_not(None))
    if versions is not None:
        stmt = stmt.where(Job.model_version.in_(versions))
    for job in session.scalars(stmt.order_by(Job.created_at)):
        found[job.id] = (job, f"uses version {job.model_version}")
    # training (or a tune's base) starting from a version's weights; training into the model
    for job in session.scalars(unfinished.where(Job.type.in_([JobType.TRAIN, JobType.TUNE])).order_by(Job.created_at)):
        init = _init_from(job.request)
        if init is not None and init.get("name") == name:
            number = init.get("version")
            if versions is None or not isinstance(number, int) or number in versions:
                said = f"version {number}" if isinstance(number, int) else "its newest version or an alias"
                found.setdefault(job.id, (job, f"starts from {said} (training.init_from)"))
        if versions is None and job.name == name and job.parent_id is None:
            found.setdefault(job.id, (job, "will register a version into it"))
    # a running tune points the alias `best` at one of its trials' versions when it ends
    if versions is not None:
        tunes = {job.id: job for job in session.scalars(unfinished.where(Job.type == JobType.TUNE, Job.name == name))}
        trials = select(Job.parent_id, Job.model_version).where(
            Job.parent_id.in_(list(tunes)), Job.model_name == name, Job.model_version.in_(versions)
        )
        for parent_id, number in session.execute(trials) if tunes else ():
            tune = tunes[str(parent_id)]
            found.setdefault(tune.id, (tune, f"may point its alias 'best' at version {number}"))
    return list(found.values())


def _init_from(request: Any) -> dict[str, Any] | None:
    body = request if isinstance(request, dict) else {}
    if isinstance(body.get("base"), dict):  # a tune's trials are its base body
        body = body["base"]
    init = (body.get("training") or {}).get("init_from") if isinstance(body.get("training"), dict) else None
    return init if isinstance(init, dict) else None


# --- the files ----------------------------------------------------------------------------------------------------


def remove_files(removal: Removal, *, settings: Settings) -> list[str]:
    """After the delete committed: each version's artifact directory (when inside the artifact root or the artifact
    store, and no other version names it) and its ONNX export. What cannot be removed is logged and returned
    (its URIs); the registry entry is gone either way."""
    left: list[str] = []
    for row_id, number, uri in removal.versions:
        targets = [str(artifacts.onnx_dir(row_id, removal.name, number, uri, artifact_root=settings.artifact_root))]
        if uri in removal.shared:
            log.info("model %s version %s deleted; its files stay: another version names %s", removal.name, number, uri)
        elif _in_store(uri, settings):
            targets.insert(0, uri)
        else:
            log.info("model %s version %s deleted; its files at %s are outside the artifact store and stay",
                     removal.name, number, uri)  # fmt: skip
        for target in targets:
            try:
                storage.discard_dir(target, ignore_errors=False)
            except Exception as exc:  # any failure leaves files behind, never the rows
                log.warning("model %s version %s deleted, but its files at %s could not be removed (%s); remove "
                            "them by hand", removal.name, number, target, exc)  # fmt: skip
                left.append(target)
    return left


def _in_store(uri: str, settings: Settings) -> bool:
    store = settings.artifact_store
    if storage.is_remote(uri):
        return bool(store) and storage.is_remote(store) and uri.startswith(store.rstrip("/") + "/")
    path = storage.local_path(uri).resolve()
    roots = [settings.artifact_root.resolve()]
    if store and not storage.is_remote(store):
        roots.append(storage.local_path(store).resolve())
    return any(path != root and path.is_relative_to(root) for root in roots)

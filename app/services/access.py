"""What a caller may see: jobs, checkpoints, models and datasets belong to an owner, and a key that is not an admin's
reaches only its owner's. Another owner's object answers exactly as one that does not exist (404, or the 422 an
unknown reference in a body gets), so ids and names do not leak. The one exception is a model name: names are
global, and training into a name another owner registered is a 409.

The checks of references inside request bodies (a dataset id, a checkpoint to resume from, a model to evaluate)
run here, before the request is planned, because planning (app/services/planning/) does not know the caller.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.core.auth import Caller
from app.core.errors import NotFound, ValidationFailed
from app.core.settings import Settings
from app.db.loop_reads import LoopReads
from app.db.models import Checkpoint, Job
from app.schemas.inference import ModelSelector
from app.schemas.train import DatasetRef, TrainRequest
from app.services import checkpoints, jobs, models, outputs
from app.services.datasets import paths, registry
from app.services.planning.inference import resolve_model


def job_of(*, session: Session, job_id: str, caller: Caller) -> Job:
    return _visible(jobs.get_job(session=session, job_id=job_id), job_id, caller)


async def job_of_on_loop(*, reads: LoopReads, job_id: str, caller: Caller) -> Job:
    """:func:`job_of` on the event loop (``ServiceRuntime.loop_reads``, PostgreSQL only)."""
    return _visible(await reads.job(job_id), job_id, caller)


def _visible(job: Job | None, job_id: str, caller: Caller) -> Job:
    """A job another owner holds answers as one that does not exist."""
    if job is None or not caller.sees(job.owner):
        raise NotFound(f"No job with id {job_id!r}.")
    return job


def visible_job_ids(*, db: sessionmaker[Session], job_ids: list[str], caller: Caller) -> list[str]:
    """The ids among ``job_ids`` of jobs the caller may see, in their order."""
    if caller.admin or not job_ids:
        return list(job_ids)
    with db() as session:
        mine = set(session.scalars(select(Job.id).where(Job.id.in_(job_ids), Job.owner == caller.owner)))
    return [i for i in job_ids if i in mine]


def checkpoint_of(*, session: Session, checkpoint_id: str, caller: Caller) -> Checkpoint:
    row = checkpoints.get(session=session, checkpoint_id=checkpoint_id)
    if not caller.admin:
        job = session.get(Job, row.job_id)
        if job is None or not caller.sees(job.owner):
            raise NotFound(f"No checkpoint with id {checkpoint_id!r}.")
    return row


def _dataset_uris(ref: DatasetRef, loc: str) -> list[tuple[str, str]]:
    uris = [(ref.uri, f"{loc}.uri")]
    if ref.sequence is not None and ref.sequence.labels_uri is not None:
        uris.append((ref.sequence.labels_uri, f"{loc}.sequence.labels_uri"))
    return uris


def _check_datasets(session: Session, refs: list[tuple[str, str]], caller: Caller, settings: Settings) -> None:
    """Registered datasets by id are the caller's, and no path reads another owner's batch prediction output."""
    roots = settings.data_roots
    for uri, loc in refs:
        registry.check_reference(session=session, uri=uri, owner=caller.scope, roots=roots, loc=loc)
        row = registry.registered(session, uri)
        path = row.resolved_uri if row is not None else None
        if path is None:
            path = paths.resolve_uri(
                uri, roots=roots, remote_prefixes=settings.remote_uri_prefixes, loc=loc, walk=False
            )
        outputs.check_read(session, path=path, owner=caller.owner, uri=uri, roots=roots, loc=loc)


def check_registration(*, session: Session, uri: str, caller: Caller, settings: Settings) -> None:
    """``POST /datasets``: the path is not another owner's batch prediction output."""
    if not caller.admin:
        _check_datasets(session, [(uri, "uri")], caller, settings)


def check_train(*, db: sessionmaker[Session], request: TrainRequest, caller: Caller, settings: Settings) -> None:
    """The model name is free or the caller's (409 otherwise); datasets, the checkpoint to resume from and the model
    to start from are the caller's (as unknown ones otherwise)."""
    if caller.admin:
        return
    with db() as session:
        models.check_name(session=session, name=request.name, owner=caller.owner)
        refs = _dataset_uris(request.dataset, "dataset")
        if request.validation is not None:
            refs.append((request.validation.uri, "validation.uri"))
        _check_datasets(session, refs, caller, settings)
        init = request.training.init_from if request.training is not None else None
        if init is not None:  # another owner's model reads as an unknown one
            try:
                models.resolve_version(session=session, name=init.name, version=init.version, alias=init.alias,
                                       owner=caller.owner)  # fmt: skip
            except NotFound as exc:
                raise ValidationFailed.at("training.init_from", exc.detail) from None
        resume = request.training.resume_from if request.training is not None else None
        if resume is not None:
            try:
                checkpoint_of(session=session, checkpoint_id=resume, caller=caller)
            except NotFound:
                raise ValidationFailed.at("training.resume_from", f"no checkpoint with id {resume!r}") from None


def check_inference(
    *,
    db: sessionmaker[Session],
    model: ModelSelector,
    dataset: DatasetRef | None,
    caller: Caller,
    settings: Settings,
) -> None:
    """The model (or checkpoint) and the dataset of an evaluation or a batch prediction are the caller's."""
    if caller.admin:
        return
    with db() as session:
        resolve_model(session, model, owner=caller.owner)
        if dataset is not None:
            _check_datasets(session, _dataset_uris(dataset, "dataset"), caller, settings)

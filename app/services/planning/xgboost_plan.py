"""Planning an xgboost training job: the parameters, the classes, the workers and the device, checked against the
cluster before anything starts (a barrier stage of ``num_workers`` tasks needs all its slots at once)."""

from __future__ import annotations

from dataclasses import replace
from importlib import metadata
from typing import TYPE_CHECKING, Literal

from sqlalchemy.orm import Session, sessionmaker

from app.core.errors import ValidationFailed
from app.core.settings import Settings
from app.schemas.train import TrainRequest
from app.services.planning import xgboost_resume
from app.services.planning.labels import (
    check_counted,
    check_whole_labels,
    local_count,
    resolve_classes,
    unused_classes,
)
from app.services.planning.tabular import SPLIT_UNUSED, check_tabular
from workers import cluster
from workers.data.spec import ResolvedDataset
from workers.errors import SpecError
from workers.training.xgboost.spec import XGBoostPlan, parse_xgboost_params

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def xgboost_has_cuda() -> bool:
    """False when the installed build is ``xgboost-cpu`` (read from package metadata: nothing is imported)."""
    try:
        metadata.version("xgboost-cpu")
    except metadata.PackageNotFoundError:
        return True
    return False


def plan_xgboost(
    *,
    request: TrainRequest,
    train: ResolvedDataset,
    validation: ResolvedDataset | None,
    schema: dict[str, str],
    settings: Settings,
    spark: SparkSession,
    db: sessionmaker[Session] | None = None,
) -> XGBoostPlan:
    check_tabular(
        request, train, family="xgboost", normalize_hint="trees do not need scaled features; leave normalize out"
    )
    _check_feature_names(request, train)
    found = xgboost_resume.source(request, db)  # training.resume_from: the checkpoint it names, if any
    class_labels, warnings = None, list[str]()
    if found is not None:
        xgboost_resume.check_early(request, found, None)  # the task and the label before the classes
    if train.task == "classification":
        dtype = schema[train.label or ""]
        if dtype in ("float", "double") or dtype.startswith("decimal"):
            check_whole_labels(train, spark)  # a fare is not a class: each row was a bad row of the job
        given = train.num_classes
        if found is not None:  # the checkpoint's classes, which the data's may be some of
            train, class_labels = xgboost_resume.classes(found, train, dtype, spark, warnings)
        else:
            train, class_labels = resolve_classes(train, dtype, spark)
            if class_labels is None and given is not None:  # as Spark ML's: integer labels say how many classes
                check_counted(train, local_count(train, spark))
    try:
        spec = parse_xgboost_params(request.params, task=train.task, num_classes=train.num_classes)
    except SpecError as exc:
        raise ValidationFailed.of(exc) from exc
    if spec.num_round > settings.max_epochs * 100:
        raise ValidationFailed.at("params.num_round", f"at most {settings.max_epochs * 100} rounds on this service")

    warnings = list(spec.warnings) + warnings
    resume, categories = None, None
    if found is not None:
        resume, categories = xgboost_resume.resume_point(request, found, train=train, validation=validation,
                                                         spec=spec, warnings=warnings)  # fmt: skip
    if train.task == "classification" and (unused := unused_classes(train, schema[train.label or ""])):
        warnings.append(unused)
    if validation is not None and "validation_fraction" in (request.params or {}):
        warnings.append("params.validation_fraction is not used: validation names the validation data")
    if validation is not None and request.dataset.split is not None:
        warnings.append(SPLIT_UNUSED)
    elif request.dataset.split is not None and "validation_fraction" in (request.params or {}):
        warnings.append("params.validation_fraction is not used: dataset.split.validation_fraction holds out "
                        f"{request.dataset.split.validation_fraction:g} of the rows")  # fmt: skip
    device: Literal["cpu", "cuda"]
    gpus = cluster.has_gpus(spark)
    addresses = [a for holder, found in cluster.gpu_addresses(spark).items() if holder != "driver" for a in found]
    if request.device == "cuda":
        if not gpus:
            raise ValidationFailed.at(
                "device",
                "cuda was asked for, but no executor has GPUs: set spark.executor.resource.gpu.amount, "
                "spark.task.resource.gpu.amount and a GPU discovery script (spark-conf/), or use device auto",
            )
        if not xgboost_has_cuda():
            raise ValidationFailed.at(
                "device",
                "cuda was asked for, but this service has xgboost-cpu (built without CUDA): install plain xgboost "
                "(the docker GPU image does), or use device auto",
            )
        device = "cuda"
    elif request.device == "auto" and gpus and xgboost_has_cuda():
        device = "cuda"
    else:
        device = "cpu"
        if request.device == "auto" and gpus:
            warnings.append("device auto: the executors have GPUs but xgboost is xgboost-cpu; training on CPU")

    counted = cluster.slot_count(spark)
    slots = counted.count
    local = str(spark.sparkContext.master).startswith("local")
    # One machine: one worker with every core (as plain xgboost); a cluster: one single-threaded worker per slot
    # (at least one: a cluster without executors is refused below, not planned for no workers).
    workers = spec.num_workers or (1 if local else max(1, min(slots, settings.max_workers_per_job)))
    if workers > settings.max_workers_per_job:
        raise ValidationFailed.at("params.num_workers", f"at most {settings.max_workers_per_job} on this service")
    if workers > slots:
        raise ValidationFailed.at(
            "params.num_workers",
            f"{cluster.workers_need(workers)} at once (xgboost trains in a barrier stage that starts all tasks or "
            f"none), and {counted.shortfall()}",
        )
    if device == "cuda" and addresses and workers > len(addresses):
        raise ValidationFailed.at(
            "params.num_workers", f"{workers} workers on cuda need a GPU each; the executors have {len(addresses)}"
        )
    threads = spec.threads_per_worker
    if threads is None and local:
        threads = max(1, slots // workers)
    if local and threads is not None and threads * workers > slots:
        raise ValidationFailed.at(
            "params.threads_per_worker",
            f"{workers} worker{'' if workers == 1 else 's'} x {threads} threads exceed this machine's {slots} cores",
        )
    return XGBoostPlan(
        threads=threads,
        train=train,
        validation=replace(validation, num_classes=train.num_classes) if validation else None,
        spec=spec,
        num_workers=workers,
        device=device,
        class_labels=class_labels,
        warnings=tuple(warnings),
        resume=resume,
        started_from=resume,
        categories=categories,
    )


def _check_feature_names(request: TrainRequest, train: ResolvedDataset) -> None:
    """A 422 for a feature xgboost cannot name: it refuses ``[``, ``]`` and ``<`` in feature names, and the job failed
    in its workers with a traceback (a categorical column's one-hot names have them replaced already)."""
    listed = request.dataset.features is not None
    for i, column in enumerate(train.features):
        if column in train.categorical or not set(column) & set("[]<"):
            continue
        renamed = column.translate(str.maketrans("[]<", "___"))
        raise ValidationFailed.at(
            f"dataset.features[{i}]" if listed else "dataset.features",
            f"{column!r}: xgboost refuses '[', ']' and '<' in a feature's name; rename the column in the data (e.g. "
            f"{renamed!r}){'' if listed else ', or list dataset.features without it'}",
        )

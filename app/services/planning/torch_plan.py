"""Planning a ``framework: "torch"`` job: the network against the data's shape and task, the optimizer, the
sharing settings, the cluster's slots and devices, and the checkpoint to resume from.

Only pure spec modules are imported here: torch itself stays out of the API process.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session, sessionmaker

from app.core.errors import ValidationFailed
from app.core.settings import Settings
from app.db.models import Job
from app.schemas.train import TrainingOptions, TrainRequest
from app.services import checkpoints
from app.services.datasets import schema as data
from app.services.datasets.deferred import before_spark_job
from app.services.planning.categories import kept_categories, read_categories, spark_reads_them
from app.services.planning.labels import class_count, resolve_classes, unused_classes
from app.services.planning.tabular import SPLIT_UNUSED
from workers import cluster, storage
from workers.data.spec import ResolvedDataset
from workers.errors import SpecError
from workers.training.torch.config import InitPoint, ResumePoint, SharingConfig, TorchPlan, parse_sharing
from workers.training.torch.meta import read_meta
from workers.training.torch.spec import (
    NetworkSpec,
    check_loss_for_task,
    check_optimizer_l2,
    network_difference,
    parameter_count,
    parse_early_stopping,
    parse_network,
    parse_optimizer,
    spec_to_dict,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _data_shape(
    request: TrainRequest, train: ResolvedDataset, schema: dict[str, str], spark: SparkSession
) -> tuple[tuple[int, ...], bool]:
    """(input shape of one example as the data has it, whether it comes from one array column). An array column's
    length is read from its first row and checked against ``dataset.input_shape``; rows of another length are
    bad rows of the job."""
    first = train.features[0]
    if not schema[first].startswith("array<"):
        return (len(train.features),), False
    from pyspark.sql import functions as F

    from workers.data.spec import read_dataframe

    value = data.first_value(train.path, train.format, train.options, first)
    if value is not data.NOT_LOCAL:  # local parquet: no Spark job in the request
        if value is None:
            raise ValidationFailed.at("dataset.uri", f"{train.path} has no rows")
        length = len(value)
    else:
        before_spark_job(f"the width of the array column {first!r} of {train.path} (Spark reads it)")
        row = read_dataframe(spark, train).select(F.size(first).alias("n")).where(F.col(first).isNotNull()).first()
        if row is None:
            raise ValidationFailed.at("dataset.uri", f"{train.path} has no rows")
        length = int(row["n"])
    wanted = request.dataset.input_shape
    if wanted is not None:
        if math.prod(wanted) != length:
            raise ValidationFailed.at(
                "dataset.input_shape",
                f"{first!r} holds {length} values per row, input_shape {wanted} needs {math.prod(wanted)}",
            )
        return tuple(wanted), True
    return (length,), True


def _init(options: TrainingOptions, network: dict[str, Any], db: sessionmaker[Session] | None) -> InitPoint | None:
    """``training.init_from``: the model version, and which tensors of this network its weights fill (torch is
    imported only for a request that asks for this)."""
    init = options.init_from
    if init is None:
        return None
    where = "training.init_from"
    if db is None:
        raise ValidationFailed.at(where, "starting from a model needs the model registry")
    from app.core.errors import AppError
    from app.services import models

    with db() as session:
        try:
            version = models.resolve_version(session=session, name=init.name, version=init.version, alias=init.alias)
        except AppError as exc:  # none, or still training
            raise ValidationFailed.at(where, exc.detail) from exc
        framework, uri, number = version.framework, version.artifact_uri, version.version
    if framework != "torch":
        article = "an" if framework == "xgboost" else "a"
        raise ValidationFailed.at(where, f"{init.name} version {number} is {article} {framework} model; a torch "
                                  "network starts only from a torch model's weights")  # fmt: skip
    from workers.training.torch import warm_start

    try:
        saved = warm_start.saved_shapes(storage.fetch_dir(uri))
    except (OSError, ValueError) as exc:
        raise ValidationFailed.at(where, f"the weights of {init.name} version {number} are unreadable: {exc}") from exc
    wanted = warm_start.network_shapes(network)
    try:
        fresh = warm_start.match(saved, wanted, strict=init.strict)
    except ValueError as exc:
        raise ValidationFailed.at(where, f"{init.name} version {number}: {exc}") from exc
    return InitPoint(name=init.name, version=number, uri=uri, fresh=fresh, copied=len(wanted) - len(fresh))


def _trained_categories(options: TrainingOptions, db: sessionmaker[Session] | None) -> tuple[Any, str, str] | None:
    """(the card's ``categorical``, the field, its words) of the checkpoint or model version a categorical request
    continues or starts from; None when it starts afresh. What is missing or unreadable is left to
    :func:`_resume` and :func:`_init` to say."""
    if db is None or (options.resume_from is None and options.init_from is None):
        return None
    from app.core.errors import AppError
    from app.services import models

    with db() as session:
        try:
            if options.resume_from is not None:
                uri = checkpoints.get(session=session, checkpoint_id=options.resume_from).uri
                card = read_meta(storage.fetch_dir(uri)).get("model_card") or {}
                where, what = "training.resume_from", f"checkpoint {options.resume_from}"
            else:
                init = options.init_from
                assert init is not None
                version = models.resolve_version(session=session, name=init.name, version=init.version,
                                                 alias=init.alias)  # fmt: skip
                card, where, what = version.params or {}, "training.init_from", f"{init.name} version {version.version}"
        except (AppError, OSError, ValueError, LookupError):
            return None
    return card.get("categorical"), where, what


def pin_init_from(body: dict[str, Any], db: sessionmaker[Session] | None) -> dict[str, Any]:
    """A stored request's ``training.init_from`` with the version it names now (by alias, or the newest): a job
    planned again later (a deferred plan, a retry) or a tune's trials start from that version, not from one
    registered since (a search fine-tuning its own model name would start each trial from the one before)."""
    init = (body.get("training") or {}).get("init_from")
    if not isinstance(init, dict) or init.get("version") is not None or db is None:
        return body
    from app.core.errors import AppError
    from app.services import models

    with db() as session:
        try:
            number = models.resolve_version(session=session, name=init["name"], alias=init.get("alias")).version
        except AppError:  # the request's own checks say what is wrong
            return body
    pinned = {k: v for k, v in init.items() if k != "alias"} | {"version": number}
    return {**body, "training": {**body["training"], "init_from": pinned}}


def _resume(
    options: TrainingOptions, network: dict[str, object], db: sessionmaker[Session] | None, inputs_from: str
) -> ResumePoint | None:
    if options.resume_from is None:
        return None
    if db is None:
        raise ValidationFailed.at("training.resume_from", "resuming needs the job database")
    with db() as session:
        try:
            row = checkpoints.get(session=session, checkpoint_id=options.resume_from)
        except Exception as exc:
            raise ValidationFailed.at("training.resume_from", f"no checkpoint with id {options.resume_from!r}") from exc
        path, epoch, job_id = row.uri, row.epoch, row.job_id
        source = session.get(Job, job_id)
        framework = source.framework if source is not None else None
    if framework not in (None, "torch"):  # its files hold a booster, and read as "unreadable" below
        raise ValidationFailed.at(
            "training.resume_from", f"checkpoint {options.resume_from!r} belongs to a {framework!r} job; a torch job "
            "resumes only from a torch job's checkpoint"
        )  # fmt: skip
    try:
        meta = read_meta(storage.fetch_dir(path))
    except (OSError, ValueError) as exc:
        raise ValidationFailed.at("training.resume_from", f"checkpoint files at {path} are unreadable: {exc}") from exc
    if meta.get("network") != network:
        where, what = network_difference(meta.get("network") or {}, network, inputs_from)
        raise ValidationFailed.at(where, f"{what} (training.resume_from continues the same network)")
    if epoch >= options.epochs:
        raise ValidationFailed.at(
            "training.epochs", f"the checkpoint already has {epoch} epochs; ask for more than {epoch} to continue"
        )
    return ResumePoint(checkpoint_id=options.resume_from, path=path, epoch=epoch, job_id=job_id)


def _inputs_from(request: TrainRequest, train: ResolvedDataset) -> str:
    """The field that set the network's input shape (a resume whose shape differs names it)."""
    if (request.network or {}).get("input_shape") is not None:
        return "network.input_shape"
    if train.sequence is not None and train.sequence.get("max_length"):
        return "dataset.sequence.max_length"
    return "dataset.input_shape" if request.dataset.input_shape is not None else "dataset.features"


def check_request(request: TrainRequest) -> None:
    """What a torch request must hold, whatever the data."""
    if request.network is None:
        raise ValidationFailed.at("network", "required for torch: the layers to train")
    if request.params is not None:
        raise ValidationFailed.at("params", "torch takes network and training, not params")


def check_options(request: TrainRequest, settings: Settings, spark: SparkSession) -> tuple[Any, Any, Any]:
    """(optimizer, sharing, early stopping) of the request's training options, checked against the service's limits
    and the cluster: what a torch request's checks need nothing of the data for (a request whose data checks are
    deferred to the job makes these at once, app/services/datasets/deferred.py)."""
    options = request.training or TrainingOptions()
    try:
        optimizer = parse_optimizer(options.optimizer)
        sharing = parse_sharing(options.gradient_sharing, optimizer)
        stopping = options.early_stopping.model_dump(exclude_none=True) if options.early_stopping else None
        early_stopping = parse_early_stopping(stopping, request.dataset.task or "regression")
    except SpecError as exc:
        raise ValidationFailed.of(exc) from exc
    if options.epochs > settings.max_epochs:
        raise ValidationFailed.at("training.epochs", f"at most {settings.max_epochs} on this service")
    if options.num_workers > settings.max_workers_per_job:
        raise ValidationFailed.at("training.num_workers", f"at most {settings.max_workers_per_job} on this service")
    slots = cluster.slot_count(spark)
    if options.num_workers > slots.count:
        raise ValidationFailed.at(
            "training.num_workers",
            f"{cluster.workers_need(options.num_workers)} at once (a barrier stage starts all or none), and "
            f"{slots.shortfall()}",
        )
    if request.device == "cuda" and not cluster.has_gpus(spark):
        raise ValidationFailed.at(
            "device",
            "cuda was asked for, but no executor has GPUs: set spark.executor.resource.gpu.amount, "
            "spark.task.resource.gpu.amount and a GPU discovery script (spark-conf/), or use device auto",
        )
    return optimizer, sharing, early_stopping


def plan_torch(
    *,
    request: TrainRequest,
    train: ResolvedDataset,
    validation: ResolvedDataset | None,
    schema: dict[str, str],
    settings: Settings,
    spark: SparkSession,
    db: sessionmaker[Session] | None,
) -> TorchPlan:
    check_request(request)
    options = request.training or TrainingOptions()
    ds = request.dataset
    class_labels: tuple[str, ...] | None = None
    categories = None
    if train.sequence is not None:
        train, shape, array_column = _sequence_plan(request, train, spark)
    else:
        if ds.task == "classification":
            train, class_labels = resolve_classes(train, schema[train.label or ""], spark)
        shape, array_column = _data_shape(request, train, schema, spark)
        if train.categorical:  # the network's input: a column per category (read now: the width is planned)
            categories = read_categories(train, spark)
            trained = _trained_categories(options, db)
            if trained is not None:
                categories = kept_categories(categories, *trained)
            shape = (len(categories.names),)
        _check_rows_for_batches(request.training or TrainingOptions(), train, held_out=validation is None)
    try:
        spec = parse_network(request.network, input_shape=shape)
        check_loss_for_task(spec, ds.task or "regression", train.num_classes, len(train.label_columns))
        if train.sequence is not None:
            _check_sequence_output(spec, train.sequence["labels"])
    except SpecError as exc:
        raise ValidationFailed.of(exc) from exc
    parameters = _check_size(spec, options.batch_size_per_worker, settings)
    optimizer, sharing, early_stopping = check_options(request, settings, spark)
    try:
        check_optimizer_l2(optimizer, spec.l2)
    except SpecError as exc:
        raise ValidationFailed.of(exc) from exc
    network = spec_to_dict(spec)
    warnings = ignored_settings(options, sharing, parameters)
    if class_labels is None and ds.task == "classification" and train.sequence is None:
        unused = unused_classes(train, schema[train.label or ""])
        warnings = (*warnings, unused) if unused else warnings
    if validation is not None and _given(options, "validation_fraction"):
        warnings = (*warnings, "training.validation_fraction is not used: validation names the validation data")
    if validation is not None and ds.split is not None:
        warnings = (*warnings, SPLIT_UNUSED)
    if options.resume_from is not None and options.init_from is not None:
        warnings = (*warnings, "training.init_from is not used: the checkpoint of resume_from holds the weights")
    resume = _resume(options, network, db, _inputs_from(request, train))
    init = _init(options, network, db) if options.resume_from is None else None  # a checkpoint has the weights
    if categories is not None and not (resume or init):  # checked with the driver's reading: the job uses Spark's
        spark_reads_them(train)
    return TorchPlan(
        train=train,
        validation=replace(validation, num_classes=train.num_classes) if validation else None,
        network=network,
        optimizer=spec_to_dict(optimizer),
        sharing=sharing,
        mode=options.mode,
        epochs=options.epochs,
        batch_size=options.batch_size_per_worker,
        num_workers=options.num_workers,
        seed=options.seed,
        averaging_frequency=options.averaging_frequency,
        device=request.device,
        input_shape=tuple(spec.input_shape),
        array_column=array_column,
        resume=resume,
        init=init,
        validation_fraction=options.validation_fraction,
        class_labels=class_labels,
        data_path=options.data_path or settings.data_path,
        export_root=str(settings.artifact_root / "exports"),
        early_stopping=early_stopping,
        warnings=warnings,
        categorical=categories.to_dict() if categories is not None else None,
    )


def _check_rows_for_batches(options: TrainingOptions, train: ResolvedDataset, *, held_out: bool) -> None:
    """Refuse a request whose training rows cannot fill one batch per worker, when the footers of local parquet
    say so (the job checks the exact count, after bad rows and the held-out draw). With a held-out fraction the
    training rows are at most the rows less a bound six standard deviations under the expected held-out count, so
    a request this refuses could not have run."""
    needed = options.num_workers * options.batch_size_per_worker
    fraction = options.validation_fraction if held_out else 0.0
    # the bound below is at least rows * (1 - fraction): past that many rows no footer needs reading
    rows = data.parquet_rows(train.path, train.format, train.options, enough=math.ceil(needed / (1 - fraction)))
    if rows is None:
        return
    if rows == 0:
        raise ValidationFailed.at("dataset.uri", f"{train.path} has no rows")
    expected = rows * fraction
    at_most = rows - max(0, math.floor(expected - 6 * math.sqrt(expected * (1 - fraction))))
    if at_most >= needed:
        return
    held = f", about {round(expected):,} of them held out for validation (validation_fraction)" if held_out else ""
    raise ValidationFailed.at(
        "training.batch_size_per_worker",
        f"{train.path} has {rows:,} rows{held}: not enough for {options.num_workers} workers to take a batch of "
        f"{options.batch_size_per_worker} each (needs {needed:,} training rows); use fewer workers, a smaller "
        "batch_size_per_worker or more data",
    )


def _given(options: TrainingOptions, name: str) -> bool:
    """Whether the request set a training option to other than its default. A stored request (the one a job whose
    checks were left to it plans again) holds every default, so being set is not enough."""
    default = TrainingOptions.model_fields[name].default
    return name in options.model_fields_set and getattr(options, name) != default


def ignored_settings(options: TrainingOptions, sharing: SharingConfig, parameters: int) -> tuple[str, ...]:
    """Warnings for settings the request gave that this job will not use (its log and ``warnings`` say so)."""
    out = []
    if options.gradient_sharing is not None and options.mode != "gradient_sharing":
        out.append(f"training.gradient_sharing is ignored: it applies to mode gradient_sharing, and this job runs "
                   f"{options.mode}")  # fmt: skip
    if _given(options, "averaging_frequency") and options.mode != "parameter_averaging":
        out.append(f"training.averaging_frequency is ignored: it applies to mode parameter_averaging, and this job "
                   f"runs {options.mode}")  # fmt: skip
    given = set(options.gradient_sharing or {})
    dense = 4 * parameters
    exact = sharing.collective == "auto" and dense <= sharing.exact_below_bytes
    thresholding = sorted(given & {"threshold_algorithm", "residual_clipping", "index_coding", "bitmap_ratio",
                                   "encoding_debug"})  # fmt: skip
    if options.mode == "gradient_sharing" and exact and thresholding:
        for name in thresholding:  # one each, named first (a search drops the one about a threshold it wrote in)
            out.append(f"training.gradient_sharing.{name} does not apply: the network's {parameters:,} parameters "
                       f"({dense:,} bytes, at most exact_below_bytes {sharing.exact_below_bytes:,}) are exchanged "
                       "exactly on every step, with no threshold; set exact_below_bytes to 0 to threshold "
                       "them")  # fmt: skip
    elif options.mode == "gradient_sharing" and not exact and options.num_workers == 1:
        out.append("training.num_workers is 1: gradient sharing has no other worker to share with, and its threshold "
                   "only holds updates back (the shipped LSTM thresholded alone: 0.932 against Adam's 0.985); mode "
                   "allreduce trains one worker exactly")  # fmt: skip
    return tuple(out)


def _sequence_plan(
    request: TrainRequest, train: ResolvedDataset, spark: SparkSession
) -> tuple[ResolvedDataset, tuple[int, ...], bool]:
    """Sequence data: the network sees (time, features); time is the declared one, max_length, or 1 (an lstm/gru
    takes any length, the number only shows in shapes). Class labels are integer indices here."""
    assert train.sequence is not None
    if train.normalize is not None:
        raise ValidationFailed.at("dataset.normalize", "normalizers do not apply to sequence datasets yet")
    width = len(train.features)
    declared = (request.network or {}).get("input_shape")
    if isinstance(declared, list) and len(declared) == 2 and all(isinstance(d, int) and d > 0 for d in declared):
        if (train.sequence["layout"] == "rows" or width > 1) and declared[1] != width:
            raise ValidationFailed.at(
                "network.input_shape", f"[time, features]: the sequence has {width} features, not {declared[1]}"
            )
        shape = (declared[0], declared[1])
    else:
        if train.sequence["layout"] == "arrays" and width == 1:
            raise ValidationFailed.at(
                "network.input_shape", "one nested array column: declare network.input_shape as [time, features]"
            )
        shape = (train.sequence.get("max_length") or 1, width)
    if train.task == "classification" and train.num_classes is None:
        count = class_count(replace(train, path=train.labels_path or train.path), spark)
        train = replace(train, num_classes=count, sequence={**train.sequence, "num_classes": count})
    return train, shape, False


def _check_sequence_output(spec: Any, labels: str) -> None:
    per_step = len(spec.output_shape) == 2
    if labels == "per_step" and not per_step:
        raise ValidationFailed.at(
            "network.layers",
            "per_step labels need an output per step: end with lstm/gru return_sequences true, then output",
        )
    if labels == "last_step" and per_step:
        raise ValidationFailed.at(
            "network.layers",
            "last_step labels need one output per sequence: set return_sequences false on the last lstm/gru",
        )


def _check_size(spec: NetworkSpec, batch_size: int, settings: Settings) -> int:
    """A network too large for a worker is a 422 before anything allocates (a dense layer of 2e9 units was
    queued, and in local mode would have taken the driver's host down with it). Returns the parameter count."""
    count = parameter_count(spec)
    if count > settings.max_parameters:
        raise ValidationFailed.at(
            "network.layers", f"the network has {count:,} parameters; this service trains at most "
            f"{settings.max_parameters:,} (SPARKTRAIN_MAX_PARAMETERS): use fewer units or filters"
        )  # fmt: skip
    outputs = batch_size * sum(math.prod(shape) for shape in spec.shapes)
    if outputs > settings.max_activations:
        raise ValidationFailed.at(
            "network.layers", f"one batch of {batch_size} rows makes {outputs:,} layer outputs per worker; this "
            f"service takes at most {settings.max_activations:,} (SPARKTRAIN_MAX_ACTIVATIONS): use fewer units or "
            "filters, or a smaller training.batch_size_per_worker"
        )  # fmt: skip
    return count

"""Planning an evaluation or a batch prediction: the model version (or checkpoint) a selector names, pinned, and
the dataset read the way the model was trained on it; the prediction's new output path inside the data roots."""

from __future__ import annotations

import os
import uuid
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from sqlalchemy.orm import Session, sessionmaker

from app.core.errors import NotFound, ValidationFailed
from app.core.settings import REPO_ROOT, Settings
from app.core.urls import holds
from app.db.models import Checkpoint, Job
from app.schemas.inference import EvaluateRequest, ModelSelector, PredictRequest
from app.schemas.train import DatasetRef, SequenceOptions
from app.services import checkpoints, models
from app.services.datasets.check import PARSED_FORMATS, locate, readable_name, resolve_dataset
from app.services.datasets.paths import check_literal, check_output_target, output_target
from workers import storage
from workers.data.spec import ResolvedDataset
from workers.families import FRAMEWORKS
from workers.inference.signature import dataset_problem
from workers.inference.spec import EvaluationPlan, ModelRef, PredictionPlan
from workers.plans import DeferredPlan
from workers.training.torch.meta import read_meta

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def card_of(framework: str, params: dict[str, Any]) -> dict[str, Any]:
    """What feeding a model needs, from a version's stored params (torch: the model card; spark_ml: its columns)."""
    card = dict(params)
    if framework == "spark_ml" and "labels" not in card:
        card["labels"] = [params.get("label")]
    card.setdefault("array_column", False)
    return card


def resolve_model(session: Session, selector: ModelSelector, *, owner: str | None = None) -> ModelRef:
    """The model version or checkpoint a selector names. With ``owner`` (None: any, an admin) another owner's
    model or checkpoint answers 404 exactly as an unknown one does."""
    return resolve_model_and_owner(session, selector, owner)[0]


def resolve_model_and_owner(session: Session, selector: ModelSelector, owner: str | None) -> tuple[ModelRef, str]:
    """As :func:`resolve_model`, with the owner of what it resolved to (for caches that serve several callers)."""
    if selector.checkpoint is not None:
        row: Checkpoint = checkpoints.get(session=session, checkpoint_id=selector.checkpoint)
        job = session.get(Job, row.job_id)
        if job is not None and owner is not None and job.owner != owner:
            raise NotFound(f"No checkpoint with id {selector.checkpoint!r}.")
        if job is None or job.framework != "torch":
            framework = job.framework if job else "deleted"
            kind = f"{'an' if framework == 'xgboost' else 'a'} {framework}"
            raise ValidationFailed.at("model.checkpoint", f"only a torch training job's checkpoint serves "
                                      f"predictions: this is {kind} job's, which its "
                                      "job resumes from; use the model version it registered (model.name)")  # fmt: skip
        meta = read_meta(storage.fetch_dir(row.uri))
        card = {"network": meta["network"], **meta.get("model_card", {})}
        return ModelRef(framework="torch", uri=row.uri, card=card, checkpoint_id=row.id, name=job.name), job.owner
    assert selector.name is not None
    version = models.resolve_version(
        session=session, name=selector.name, version=selector.version, alias=selector.alias, owner=owner
    )
    ref = ModelRef(
        framework=version.framework,
        uri=version.artifact_uri,
        card=card_of(version.framework, version.params),
        name=version.model.name,
        version=version.version,
    )
    return ref, version.model.owner


def _dataset_for(model: ModelRef, ref: DatasetRef, *, need_labels: bool) -> DatasetRef:
    """The request's dataset with the model's columns and task where the request leaves them out. A task the
    request gives must be the model's (it was replaced by the model's without a word)."""
    if ref.task is not None and model.task is not None and ref.task != model.task:
        raise ValidationFailed.at(
            "dataset.task", f"the model is a {model.task} model, not {ref.task}: leave task out (it is the model's)"
        )
    if ref.categorical is not None:
        raise ValidationFailed.at("dataset.categorical", "the model's categories apply: leave it out")
    if ref.normalize is not None:  # they were ignored without a word
        raise ValidationFailed.at("dataset.normalize", "the model's normalizer applies: leave it out")
    if ref.split is not None:
        raise ValidationFailed.at("dataset.split", "a split is for training, and every row is used here: leave it out")
    given = [ref.label] if isinstance(ref.label, str) else list(ref.label or [])
    if need_labels and given and given != list(model.labels):  # scored against the model's label all the same
        trained = ", ".join(repr(c) for c in model.labels)
        raise ValidationFailed.at("dataset.label", f"the model predicts {trained}, and its predictions are compared "
                                  f"with that column: leave label out (or name {trained})")  # fmt: skip
    update: dict[str, Any] = {"task": model.task, "num_classes": model.card.get("num_classes")}
    if ref.features is None:
        update["features"] = list(model.inputs)
    if model.categories is not None:  # read as the training job read them: categories as text, not numbers
        update["categorical"] = list(model.categories.levels)
    if need_labels and ref.label is None:
        labels = list(model.labels)
        update["label"] = labels[0] if len(labels) == 1 else labels
    if not need_labels:
        update["label"] = None
    sequence = model.card.get("sequence")
    if sequence and ref.sequence is None:  # read the data as the model was trained on it
        update["sequence"] = SequenceOptions(
            **{k: sequence[k] for k in ("layout", "sequence_id", "step", "labels", "alignment", "max_length")}
        )
    return ref.model_copy(update=update)


def _check_sequence_options(model: ModelRef, ref: DatasetRef) -> None:
    """A sequence model reads sequences with the labels (last_step / per_step) it was trained on; other data is
    not sequences at all."""
    sequence = model.card.get("sequence")
    if not sequence:
        if ref.sequence is not None:
            raise ValidationFailed.at("dataset.sequence", "the model was not trained on sequences")
        return
    if ref.sequence is not None and ref.sequence.labels != sequence["labels"]:
        raise ValidationFailed.at("dataset.sequence.labels", f"the model was trained with {sequence['labels']} labels")


def _check_features(model: ModelRef, dataset: ResolvedDataset, schema: dict[str, str]) -> None:
    """The dataset's feature columns against the model's: the same names, and types the signature takes (checked
    before the job exists; a string column where the model takes numbers is a 422 naming it). A string column of
    a CSV / JSON file is read as numbers, as in training: the job parses each value, a token that is not a number
    being a bad row (workers/data/clean.py)."""
    if tuple(dataset.features) != model.inputs:
        raise ValidationFailed.at(
            "dataset.features",
            f"the model was trained on {list(model.inputs)}; the dataset names {list(dataset.features)}",
        )
    parsed = dataset.format in PARSED_FORMATS and dataset.sequence is None
    read = {c: "double" if parsed and t == "string" else t for c, t in schema.items()}
    problem = dataset_problem(read, model.signature)
    if problem is not None:
        raise ValidationFailed.at("dataset.features", problem[1])


def _evaluation_model(request: EvaluateRequest, db: sessionmaker[Session]) -> tuple[ModelRef, tuple[str, ...]]:
    """The model an evaluation names and its metric groups, checked against each other (nothing of the data)."""
    with db() as session:
        model = resolve_model(session, request.model)
    groups = tuple(request.metrics or (["classification", "roc"] if model.task == "classification" else ["regression"]))
    for group in groups:
        if (group == "regression") != (model.task == "regression"):
            raise ValidationFailed.at("metrics", f"{group} metrics do not fit a {model.task} model")
    if model.framework not in FRAMEWORKS:
        raise ValidationFailed.at("model", f"evaluation of {model.framework} models is not available yet")
    _check_sequence_options(model, request.dataset)
    return model, groups


def _resolve(
    model: ModelRef, ref: DatasetRef, given: DatasetRef, **kwargs: Any
) -> tuple[ResolvedDataset, dict[str, str]]:
    """The dataset read the way the model was trained on it (CSV / JSON columns it takes as numbers parsed);
    ``given``: the request's own dataset, before the model's columns filled it in."""
    try:
        dataset, schema = resolve_dataset(ref, allow_array=model.framework == "torch", parse_numbers=True, **kwargs)
    except ValidationFailed as exc:
        raise _the_models_columns(exc, given) from exc
    if dataset.sequence is not None:
        dataset = replace(dataset, sequence={**dataset.sequence, "num_classes": model.card.get("num_classes")})
    _check_features(model, dataset, schema)
    return dataset, schema


def _the_models_columns(exc: ValidationFailed, ref: DatasetRef) -> ValidationFailed:
    """A problem with a column the request did not name (the model's features and categorical columns fill them in,
    :func:`_dataset_for`) said of the data, not of a field the request does not have."""
    if not exc.errors:
        return exc
    loc, words = str(exc.errors[0]["loc"]), str(exc.errors[0]["msg"])
    filled = loc.startswith("dataset.categorical") or (loc.startswith("dataset.features") and ref.features is None)
    if not filled or "is the label" in words or "is the weight column" in words:  # those, the request's fields
        return exc
    return ValidationFailed.at("dataset.uri", f"the model's input columns: {words}")


def _locate(ref: DatasetRef, settings: Settings, db: sessionmaker[Session]) -> None:
    """Where a deferred request's data is (inside the data roots, or a registered dataset): checked in the request."""
    locate(ref.uri, ref.format, ref.options, settings=settings, db=db, loc="dataset.uri")
    if ref.sequence is not None and ref.sequence.labels_uri is not None:
        locate(ref.sequence.labels_uri, None, {}, settings=settings, db=db, loc="dataset.sequence.labels_uri")


def plan_evaluation(
    *, request: EvaluateRequest, settings: Settings, spark: SparkSession, db: sessionmaker[Session]
) -> EvaluationPlan:
    model, groups = _evaluation_model(request, db)
    ref = _dataset_for(model, request.dataset, need_labels=True)
    dataset, _schema = _resolve(model, ref, request.dataset, settings=settings, spark=spark, db=db)
    return EvaluationPlan(
        model=model,
        dataset=dataset,
        groups=groups,
        batch_size=request.batch_size,
        eval_workers=request.eval_workers,
        roc_steps=request.roc_steps,
        exact_auc=request.exact_auc,
        top_k=tuple(request.top_k),
    )


def defer_evaluation(
    *, request: EvaluateRequest, settings: Settings, db: sessionmaker[Session], deferred: str
) -> tuple[ModelRef, DeferredPlan]:
    """An evaluation whose data checks need a Spark job (``deferred``: what the first one would read): the model,
    its metrics and where the data is are checked now, the rest by the job (app/services/datasets/deferred.py)."""
    model, _groups = _evaluation_model(request, db)
    _dataset_for(model, request.dataset, need_labels=True)  # what it refuses needs nothing of the data
    _locate(request.dataset, settings, db)
    return model, DeferredPlan(deferred_checks=(deferred,))


SHIPPED = Path(os.path.realpath(REPO_ROOT / "datasets"))
"""The sample datasets that come with sparktrain: readable (a default data root), never an output."""


def output_path(settings: Settings, model: ModelRef, given: str | None) -> str:
    """A new path inside a data root (symlinks followed for the part that exists)."""
    writable = settings.output_roots  # the caller's own data space when spaces are on (app/services/spaces.py)
    home = settings.var_dir / "data"  # the var dir's data root, else the first that is not the shipped samples
    others = [r for r in writable if not holds(SHIPPED, r)] or [home]
    home = home if home in writable else others[0]  # a relative output_uri is taken from here too
    if given is None:
        root = home / "predictions"
        root.mkdir(parents=True, exist_ok=True)
        return str(root / f"{model.name or 'checkpoint'}-{model.version or model.checkpoint_id}-{uuid.uuid4().hex[:8]}")
    if "\x00" in given:
        raise ValidationFailed.at("output_uri", "the path contains a NUL byte")
    given = _local_output(given)
    target = output_target(given, writable, home)
    check_literal(str(target), given, "output_uri")
    parent = Path(os.path.realpath(target.parent))
    if Path(os.path.realpath(target)) in writable:  # the root itself: its parent is outside
        raise ValidationFailed.at("output_uri", f"{given!r} is a data root; name a new path inside it (for "
                                  f"example {str(target).rstrip('/')}/predictions-1)")  # fmt: skip
    inside = [r for r in writable if parent == r or r in parent.parents]
    if not inside and set(writable) != set(settings.data_roots):  # a space's key (an admin writes in every root)
        raise ValidationFailed.at("output_uri", f"{given!r} lies outside your data space ({writable[0]}): this "
                                  "key writes batch predictions only there; name a path inside it")  # fmt: skip
    if not inside:
        roots = ", ".join(str(r) for r in settings.data_roots)
        raise ValidationFailed.at("output_uri", f"{given!r} lies outside the configured data roots ({roots})")
    if holds(SHIPPED, parent):  # a data root by default: any key wrote into the install
        raise ValidationFailed.at("output_uri", f"{given!r} lies in the shipped sample datasets ({SHIPPED}), which "
                                  "no job writes into: leave output_uri out (predictions go under "
                                  f"{home / 'predictions'}) or name a path in another data root")  # fmt: skip
    # a dangling link would send Spark elsewhere (only once inside: a link in another owner's space must answer as
    # any path outside this caller's)
    check_output_target(given, roots=writable, home=home)
    try:
        if target.exists():
            raise ValidationFailed.at("output_uri", f"{given!r} exists already; name a new path")
        above = parent  # nothing is created here (the job's write makes the directories): a refusal leaves no trace
        while not above.exists():
            above = above.parent
    except OSError as exc:  # a name longer than the file system allows, ...
        raise ValidationFailed.at("output_uri", f"{given[:200]!r} is not a usable path: {exc.strerror}") from exc
    if not above.is_dir():
        raise ValidationFailed.at("output_uri", f"{given[:200]!r} is not a usable path: {above.name!r} is a file")
    longest = os.pathconf(above, "PC_NAME_MAX")
    if any(len(os.fsencode(part)) > longest for part in target.parts):
        raise ValidationFailed.at("output_uri", f"{given[:200]!r} is not a usable path: a name is longer than "
                                  f"{longest} bytes")  # fmt: skip
    return str(parent / target.name)


def _local_output(given: str) -> str:
    """A ``file:`` URI as its path, percent-decoded as a dataset's is (``file:///x`` was taken for a relative path
    and written to ``<root>/file:/x``); another scheme is refused: outputs are written into the data roots."""
    parsed = urlparse(given)
    if parsed.scheme == "file" and parsed.netloc in ("", "localhost"):
        if parsed.query or parsed.fragment or given.endswith(("?", "#")):
            raise ValidationFailed.at("output_uri", f"{given[:200]!r}: a file: URI's ? and # would be dropped; "
                                      "write them percent-encoded (%3F, %23), or name a path")  # fmt: skip
        path = unquote(parsed.path)
        if "\x00" in path:
            raise ValidationFailed.at("output_uri", "the path contains a NUL byte")
        return path
    if parsed.scheme and (len(parsed.scheme) > 1 or parsed.netloc):
        raise ValidationFailed.at(
            "output_uri", f"{given[:200]!r}: batch predictions are written into the data roots; give a path there "
            "(or a file: URI without a host), not a URI of another scheme or host"
        )  # fmt: skip
    return given


OUTPUT_COLUMNS = ("prediction", "label", "probabilities")
"""The columns batch prediction writes beside the key (workers/inference/remote.py, batch.py)."""
SPARK_ML_COLUMNS = ("features", "_features_raw", "rawPrediction", "probability")
"""The columns a Spark ML pipeline adds on its way (workers/training/spark_ml/driver.py)."""


def _prediction_target(request: PredictRequest, db: sessionmaker[Session]) -> tuple[ModelRef, DatasetRef, str]:
    """(the model, the dataset as the model reads it, the key column) of a batch prediction; nothing of the data."""
    assert request.dataset is not None
    with db() as session:
        model = resolve_model(session, request.model)
    if model.framework not in FRAMEWORKS:
        raise ValidationFailed.at("model", f"batch prediction with {model.framework} models is not available yet")
    _check_sequence_options(model, request.dataset)
    ref = _dataset_for(model, request.dataset, need_labels=False)
    key = request.dataset.key
    if ref.sequence is not None:  # one prediction row per sequence, keyed by its id
        if key is not None and key != ref.sequence.sequence_id:
            raise ValidationFailed.at(
                "dataset.key",
                f"a sequence model predicts per sequence: the key is the sequence id column "
                f"{ref.sequence.sequence_id!r} (leave key out, or name it)",
            )
        key = ref.sequence.sequence_id
    if not key:
        raise ValidationFailed.at("dataset.key", "batch prediction needs a key column: partitions are unordered")
    written = (*(OUTPUT_COLUMNS if model.task == "classification" else OUTPUT_COLUMNS[:1]),
               *(SPARK_ML_COLUMNS if model.framework == "spark_ml" else ()))  # fmt: skip
    if key.lower() in {c.lower() for c in written}:  # Spark's names are case-insensitive
        raise ValidationFailed.at("dataset.key", f"{key!r} is a column the predictions are made in "
                                  f"({', '.join(written)}); key the rows by another column")  # fmt: skip
    return model, ref, key


def plan_prediction(
    *, request: PredictRequest, settings: Settings, spark: SparkSession, db: sessionmaker[Session]
) -> PredictionPlan:
    model, ref, key = _prediction_target(request, db)
    given = request.dataset or ref
    dataset, schema = _resolve(model, ref, given, settings=settings, spark=spark, db=db, labelled=False)
    if key not in schema:
        available = ", ".join(f"{c} ({t})" for c, t in schema.items())  # as a misspelt feature's 422 lists them
        raise ValidationFailed.at("dataset.key", f"no column {key!r} in {ref.uri}; columns: {available}")
    readable_name(key, "dataset.key")
    return PredictionPlan(
        model=model,
        dataset=dataset,
        key=key,
        output_path=output_path(settings, model, request.output_uri),
        batch_size=request.batch_size,
    )


def defer_prediction(
    *, request: PredictRequest, settings: Settings, db: sessionmaker[Session], deferred: str
) -> tuple[ModelRef, DeferredPlan, str]:
    """A batch prediction whose data checks need a Spark job: the model, the key's presence in the request, where
    the data is and the output path (new, inside the data roots) are checked now, the rest by the job. Returns the
    output path too: the stored request names it, so the job writes where the answer said."""
    model, ref, _key = _prediction_target(request, db)
    _locate(ref, settings, db)
    return model, DeferredPlan(deferred_checks=(deferred,)), output_path(settings, model, request.output_uri)


def pinned(body: dict[str, Any], model: ModelRef) -> dict[str, Any]:
    """The stored request names the exact version it resolved to: an alias may move before the job runs."""
    if model.version is not None:
        body = {**body, "model": {"name": model.name, "version": model.version}}
    return body

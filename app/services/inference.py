"""``POST /evaluate`` and ``POST /predict``: resolve the model and the data, then queue a job (evaluation, batch
prediction) or answer now from a model cached in the driver (online prediction)."""

from __future__ import annotations

import json
import math
import os
import uuid
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session, sessionmaker

from app.core.errors import PayloadTooLarge, ValidationFailed
from app.core.jobstates import JobType
from app.core.settings import Settings
from app.db.models import Checkpoint, Job
from app.db.session import transaction
from app.schemas.inference import EvaluateRequest, ModelSelector, PredictRequest
from app.schemas.train import DatasetRef, SequenceOptions
from app.services import checkpoints, datasets, jobs, models
from app.services.dataset_check import resolve_dataset
from app.services.training import Enqueue
from workers import storage
from workers.families import FRAMEWORKS, task_name
from workers.inference.spec import EvaluationPlan, ModelRef, PredictionPlan

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def card_of(framework: str, params: dict[str, Any]) -> dict[str, Any]:
    """What feeding a model needs, from a version's stored params (torch: the model card; spark_ml: its columns)."""
    card = dict(params)
    if framework == "spark_ml" and "labels" not in card:
        card["labels"] = [params.get("label")]
    card.setdefault("array_column", False)
    return card


class ResolvedModels:
    """Model selectors already resolved, so an online request does not query the database: an explicit version
    or checkpoint never changes; the newest version or an alias is looked up again after ``ttl_s``. Each entry
    remembers its owner, so a hit serves only a caller who may see it."""

    def __init__(self, ttl_s: float = 2.0, capacity: int = 256) -> None:
        self.ttl_s, self.capacity = ttl_s, capacity
        self._items: dict[tuple[Any, ...], tuple[float, ModelRef, str]] = {}

    def peek(self, key: tuple[Any, ...], *, owner: str | None = None) -> ModelRef | None:
        """The cached resolution of a selector key when it is still fresh and ``owner``'s (no database access)."""
        import time

        hit = self._items.get(key)
        if hit is None or owner not in (None, hit[2]):
            return None
        fixed = key[1] is not None or key[3] is not None
        return hit[1] if fixed or time.monotonic() - hit[0] < self.ttl_s else None

    def get(self, db: sessionmaker[Session], selector: ModelSelector, *, owner: str | None = None) -> ModelRef:
        """As :func:`resolve_model`: ``owner`` (None: any) sees only its own models and checkpoints."""
        import time

        key = (selector.name, selector.version, selector.alias, selector.checkpoint)
        fixed = selector.version is not None or selector.checkpoint is not None
        hit = self._items.get(key)
        now = time.monotonic()
        if hit is not None and (fixed or now - hit[0] < self.ttl_s) and owner in (None, hit[2]):
            return hit[1]
        with db() as session:
            model, model_owner = _resolve(session, selector, owner)
        if len(self._items) >= self.capacity:
            self._items.clear()
        self._items[key] = (now, model, model_owner)
        return model


def resolve_model(session: Session, selector: ModelSelector, *, owner: str | None = None) -> ModelRef:
    """The model version or checkpoint a selector names. With ``owner`` (None: any, an admin) another owner's
    model or checkpoint answers 404 exactly as an unknown one does."""
    return _resolve(session, selector, owner)[0]


def _resolve(session: Session, selector: ModelSelector, owner: str | None) -> tuple[ModelRef, str]:
    """The model and its owner."""
    if selector.checkpoint is not None:
        from app.core.errors import NotFound

        row: Checkpoint = checkpoints.get(session=session, checkpoint_id=selector.checkpoint)
        job = session.get(Job, row.job_id)
        if job is not None and owner is not None and job.owner != owner:
            raise NotFound(f"No checkpoint with id {selector.checkpoint!r}.")
        if job is None or job.framework != "torch":
            raise ValidationFailed.at("model.checkpoint", "only torch training jobs write checkpoints")
        meta = json.loads((storage.fetch_dir(row.uri) / "meta.json").read_text())
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
    """The request's dataset with the model's columns and task where the request leaves them out."""
    update: dict[str, Any] = {"task": model.task, "num_classes": model.card.get("num_classes")}
    if ref.features is None:
        update["features"] = list(model.features)
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


def _check_features(model: ModelRef, dataset_features: tuple[str, ...]) -> None:
    if tuple(dataset_features) != model.features:
        raise ValidationFailed.at(
            "dataset.features",
            f"the model was trained on {list(model.features)}; the dataset names {list(dataset_features)}",
        )


def plan_evaluation(
    *, request: EvaluateRequest, settings: Settings, spark: SparkSession, db: sessionmaker[Session]
) -> EvaluationPlan:
    with db() as session:
        model = resolve_model(session, request.model)
    groups = tuple(request.metrics or (["classification", "roc"] if model.task == "classification" else ["regression"]))
    for group in groups:
        if (group == "regression") != (model.task == "regression"):
            raise ValidationFailed.at("metrics", f"{group} metrics do not fit a {model.task} model")
    if model.framework not in FRAMEWORKS:
        raise ValidationFailed.at("model", f"evaluation of {model.framework} models is not available yet")
    _check_sequence_options(model, request.dataset)
    ref = _dataset_for(model, request.dataset, need_labels=True)
    dataset, _ = resolve_dataset(ref, settings=settings, spark=spark, allow_array=model.framework == "torch", db=db)
    if dataset.sequence is not None:
        dataset = replace(dataset, sequence={**dataset.sequence, "num_classes": model.card.get("num_classes")})
    _check_features(model, dataset.features)
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


def _output_path(settings: Settings, model: ModelRef, given: str | None) -> str:
    """A new path inside a data root (symlinks followed for the part that exists)."""
    if given is None:
        home = settings.var_dir / "data"
        root = (home if home in settings.data_roots else settings.data_roots[0]) / "predictions"
        root.mkdir(parents=True, exist_ok=True)
        return str(root / f"{model.name or 'checkpoint'}-{model.version or model.checkpoint_id}-{uuid.uuid4().hex[:8]}")
    if "\x00" in given:
        raise ValidationFailed.at("output_uri", "the path contains a NUL byte")
    datasets.check_output_target(given, roots=settings.data_roots)  # a dangling link would send Spark elsewhere
    target = Path(given) if Path(given).is_absolute() else settings.data_roots[-1] / given
    parent = Path(os.path.realpath(target.parent))
    inside = [r for r in settings.data_roots if parent == r or r in parent.parents]
    if not inside:
        roots = ", ".join(str(r) for r in settings.data_roots)
        raise ValidationFailed.at("output_uri", f"{given!r} lies outside the configured data roots ({roots})")
    try:
        if target.exists():
            raise ValidationFailed.at("output_uri", f"{given!r} exists already; name a new path")
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a name longer than the file system allows, a file where a directory should be, ...
        raise ValidationFailed.at("output_uri", f"{given[:200]!r} is not a usable path: {exc.strerror}") from exc
    return str(parent / target.name)


def plan_prediction(
    *, request: PredictRequest, settings: Settings, spark: SparkSession, db: sessionmaker[Session]
) -> PredictionPlan:
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
    dataset, schema = resolve_dataset(
        ref, settings=settings, spark=spark, allow_array=model.framework == "torch", db=db, labelled=False
    )
    if dataset.sequence is not None:
        dataset = replace(dataset, sequence={**dataset.sequence, "num_classes": model.card.get("num_classes")})
    if key not in schema:
        raise ValidationFailed.at("dataset.key", f"no column {key!r} in {request.dataset.uri}")
    _check_features(model, dataset.features)
    return PredictionPlan(
        model=model,
        dataset=dataset,
        key=key,
        output_path=_output_path(settings, model, request.output_uri),
        batch_size=request.batch_size,
    )


def pinned(body: dict[str, Any], model: ModelRef) -> dict[str, Any]:
    """The stored request names the exact version it resolved to: an alias may move before the job runs."""
    if model.version is not None:
        body = {**body, "model": {"name": model.name, "version": model.version}}
    return body


def submit(
    *,
    db: sessionmaker[Session],
    enqueue: Enqueue,
    job_type: JobType,
    model: ModelRef,
    body: dict[str, Any],
    owner: str,
    idempotency_key: str | None,
) -> tuple[Job, bool]:
    with transaction(db) as session:
        job, created = jobs.create_job(
            session=session,
            job_type=job_type,
            request=body,
            framework=model.framework,
            name=model.name,
            owner=owner,
            idempotency_key=idempotency_key,
        )
        if created:
            job.model_name, job.model_version = model.name, model.version
    if created:
        jobs.enqueue_new(db=db, enqueue=enqueue, task=task_name(job_type, model.framework), job_id=job.id)
    return job, created


# --- online prediction ---------------------------------------------------------------------------------------


def inline_rows(request: PredictRequest, model: ModelRef) -> list[dict[str, Any]] | list[list[Any]]:
    """The rows of an inline request: dicts (by column name) or lists (in the model's feature order)."""
    if request.dataframe_records is not None:
        return request.dataframe_records
    if request.dataframe_split is not None:
        split = request.dataframe_split
        return [dict(zip(split.columns, row, strict=False)) for row in split.data]
    if request.instances is not None:
        return list(request.instances)
    inputs = request.inputs
    if isinstance(inputs, dict):
        columns = list(inputs)
        values = list(inputs.values())
        if not all(isinstance(v, list) for v in values) or len({len(v) for v in values}) > 1:
            raise ValidationFailed.at("inputs", "an object of columns maps each column to a list, all of one length")
        n = len(values[0]) if values else 0
        return [{c: inputs[c][i] for c in columns} for i in range(n)]
    if isinstance(inputs, list):
        return inputs
    raise ValidationFailed.at("inputs", "an object of columns or a list of rows")


FLOAT32_MAX = 3.4028234663852886e38  # models take float32 features: anything larger would become infinite


def feature_matrix(rows: list[Any], model: ModelRef, loc: str) -> Any:
    """(n, width) float32 in the model's feature order; 422 naming what is missing, mistyped or not finite."""
    import numpy as np

    fast = _fast_matrix(rows, model)
    if fast is not None:
        return fast

    features = model.features
    array_column = bool(model.card.get("array_column"))
    width = model.width
    out = np.zeros((len(rows), width), dtype=np.float32)
    for i, row in enumerate(rows):
        if isinstance(row, dict):
            missing = [f for f in features if f not in row]
            if missing:
                raise ValidationFailed.at(
                    f"{loc}[{i}]", f"missing features {missing}; the model needs {list(features)}"
                )
            values = row[features[0]] if array_column else [row[f] for f in features]
        else:
            values = row
        flat = _flatten(values)
        if len(flat) != width:
            raise ValidationFailed.at(f"{loc}[{i}]", f"{len(flat)} values; the model needs {width} ({list(features)})")
        try:
            row64 = np.asarray(flat, dtype=np.float64)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ValidationFailed.at(f"{loc}[{i}]", f"features must be numbers: {exc}") from exc
        if not (np.abs(row64) <= FLOAT32_MAX).all():  # NaN compares false
            raise ValidationFailed.at(
                f"{loc}[{i}]", "a feature is NaN, infinite, missing or beyond float32; the model cannot take it"
            )
        out[i] = row64
    return out


def _fast_matrix(rows: list[Any], model: ModelRef) -> Any:
    """The common case in one numpy call: well-formed numeric rows. None sends the rows down the careful path,
    which finds the first problem and names it."""
    import numpy as np

    try:
        if rows and isinstance(rows[0], dict):
            if model.card.get("array_column"):
                values = [row[model.features[0]] for row in rows]
            else:
                values = [[row[f] for f in model.features] for row in rows]
        else:
            values = rows
        matrix = np.asarray(values, dtype=np.float64).reshape(len(rows), -1)
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    if matrix.shape[1] != model.width or not (np.abs(matrix) <= FLOAT32_MAX).all():  # NaN compares false
        return None
    return matrix.astype(np.float32)


def _flatten(values: Any) -> list[Any]:
    if isinstance(values, list | tuple):
        flat: list[Any] = []
        for v in values:
            flat.extend(_flatten(v))
        return flat
    if values is None:
        return [math.nan]
    if isinstance(values, bool) or not isinstance(values, int | float):
        raise ValidationFailed.at("rows", f"features must be numbers, got {values!r}")
    return [values]


def check_row_limit(count: int, settings: Settings) -> None:
    if count == 0:
        raise ValidationFailed.at("rows", "no rows to predict; send at least one")
    if count > settings.max_predict_rows:
        raise PayloadTooLarge(
            f"{count} rows; online /predict takes at most {settings.max_predict_rows}. Register the rows as a "
            'dataset and POST /predict with "dataset" (and a key column) for a batch job on the executors.'
        )


def predict_rows(*, model: ModelRef, x: Any, cache: Any, spark: SparkSession, as_lists: bool = True) -> dict[str, Any]:
    """Predictions for a (n, width) matrix from the driver's model cache (numpy arrays with ``as_lists=False``)."""
    if model.framework == "torch":
        net = cache.get(model.uri, lambda: _load_online(model.uri))
        shape = model.card.get("input_shape") or [model.width]
        out: dict[str, Any] = net.predict(x.reshape(-1, *shape), as_lists=as_lists)
        return out
    if model.framework == "xgboost":
        booster = cache.get(model.uri, lambda: _load_xgboost(model.uri))
        answer: dict[str, Any] = booster.predict(x, as_lists=as_lists)
        return answer
    if model.framework == "spark_ml":
        return _spark_ml_rows(model, x, cache, spark)
    raise ValidationFailed.at("model", f"online prediction with {model.framework} models is not available yet")


def predict_sequences(*, model: ModelRef, rows: list[Any], cache: Any) -> dict[str, Any]:
    """Online prediction with a sequence model. A row is one sequence: a list of steps (each a list of the
    features' values, or a number with one feature), or an object mapping each feature to its per-step values.
    A last_step model answers one prediction per sequence, a per_step model a list per sequence (its steps)."""
    import numpy as np

    from workers.inference.answer import prediction_answer
    from workers.inference.sequences import pad_inline, per_step_lists

    features = model.features
    sequences: list[Any] = []
    for i, row in enumerate(rows):
        if isinstance(row, dict):
            missing = [f for f in features if f not in row]
            if missing:
                raise ValidationFailed.at(f"rows[{i}]", f"missing features {missing}; the model needs {list(features)}")
            columns = [row[f] for f in features]
            if not all(isinstance(c, list) for c in columns) or len({len(c) for c in columns}) != 1:
                raise ValidationFailed.at(f"rows[{i}]", "map each feature to a list of per-step values, all one length")
            sequences.append([list(step) for step in zip(*columns, strict=True)])
        else:
            sequences.append(row)
    width = int((model.card.get("input_shape") or [0, len(features)])[-1])
    try:
        x, lengths = pad_inline(sequences, width)
    except ValueError as exc:
        raise ValidationFailed.at("rows", f"{exc} (one row is one sequence: a list of steps)") from exc
    net = cache.get(model.uri, lambda: _load_online(model.uri))
    out = net.outputs(x, lengths)
    classification = model.task == "classification"
    labels = list(model.class_labels) if model.class_labels else None
    if out.ndim == 2:  # last_step: one per sequence
        answer: dict[str, Any] = prediction_answer(out, classification=classification, labels=labels, as_lists=True)
        return answer
    flat = prediction_answer(
        out.reshape(-1, out.shape[-1]), classification=classification, labels=labels, as_lists=False
    )
    shaped = {k: np.asarray(v, dtype=object if k == "label" else None).reshape(*out.shape[:2], *np.shape(v)[1:])
              for k, v in flat.items()}  # fmt: skip
    return {k: per_step_lists(v, lengths) for k, v in shaped.items()}


def _load_online(uri: str) -> Any:
    """Small requests: one torch thread each beats a thread pool contending for the same cores."""
    import torch

    from workers.inference.torch_model import TorchModel

    torch.set_num_threads(1)
    return TorchModel.load(uri)


def _load_xgboost(uri: str) -> Any:
    from workers.inference.xgboost_model import XGBoostModel

    return XGBoostModel.load(uri, threads=1)


def _spark_ml_rows(model: ModelRef, x: Any, cache: Any, spark: SparkSession) -> dict[str, Any]:
    import pandas as pd
    from pyspark.ml import PipelineModel

    pipeline = cache.get(model.uri, lambda: PipelineModel.load(str(storage.fetch_dir(model.uri))))
    frame = spark.createDataFrame(pd.DataFrame(x.astype("float64"), columns=list(model.features)))
    rows = pipeline.transform(frame).collect()
    if model.task != "classification":
        return {"prediction": [float(r["prediction"]) for r in rows]}
    index = [int(r["prediction"]) for r in rows]
    names = model.class_labels
    return {
        "class_index": index,
        "label": [names[i] for i in index] if names else index,
        "probabilities": [[float(p) for p in r["probability"]] for r in rows],
    }

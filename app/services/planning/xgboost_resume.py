"""``training.resume_from`` for xgboost: a new job that goes on boosting the booster of another xgboost job's
checkpoint (xgboost's ``xgb_model``, as a retried job continues from its own), checked when the request is planned.

What the checkpoint was trained on is the card written beside its booster (workers/training/xgboost/remote.py
``CARD_FILE``; for a checkpoint written before cards were, the stored plan of its job). The new job must train the
same thing: task, label, features in the same order (trees split on feature positions), categorical columns (the
job encodes with the checkpoint's categories), objective, classes and booster type, and ask for more rounds than
the checkpoint has: ``num_round`` counts the checkpoint's rounds too, as a retry's does. Every other parameter may
change (learning rate, depth, data, workers, device). Early stopping goes on from the checkpoint's best round when
it watches the same metric; otherwise it counts from the new job's first round (a warning says so).

Another owner's checkpoint is refused before planning as an unknown one (app/services/access.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from app.core.errors import ValidationFailed
from app.db.models import Checkpoint, Job
from app.schemas.train import TrainRequest
from workers import plans, storage
from workers.data.spec import ResolvedDataset
from workers.training.xgboost.remote import CARD_FILE
from workers.training.xgboost.spec import ALIASES, DEFAULT_METRICS, XGBoostResume, XGBoostSpec

WHERE = "training.resume_from"
OBJECTIVE_METRICS = {**DEFAULT_METRICS, "reg:squarederror": "rmse", "reg:squaredlogerror": "rmsle",
                     "reg:pseudohubererror": "mphe", "reg:absoluteerror": "mae"}  # fmt: skip
"""xgboost's evaluation metric when ``eval_metric`` is not given, for the objectives whose default is one name."""


@dataclass(frozen=True)
class Source:
    """The checkpoint a request names, and what it was trained on."""

    checkpoint_id: str
    job_id: str
    uri: str
    rounds: int
    card: dict[str, Any]

    @property
    def said(self) -> str:
        return f"checkpoint {self.checkpoint_id!r}"


def source(request: TrainRequest, db: sessionmaker[Session] | None) -> Source | None:
    """The checkpoint ``training.resume_from`` names (None when it names none); 422s for an unknown one, another
    family's, and one whose card cannot be read."""
    checkpoint_id = request.training.resume_from if request.training is not None else None
    if checkpoint_id is None:
        return None
    if db is None:
        raise ValidationFailed.at(WHERE, "resuming needs the job database")
    with db() as session:
        row = session.get(Checkpoint, checkpoint_id)
        if row is None:
            hint = ""
            if session.get(Job, checkpoint_id) is not None:
                hint = f": that is a job's id; name one of its checkpoints (GET /jobs/{checkpoint_id}/checkpoints)"
            raise ValidationFailed.at(WHERE, f"no checkpoint with id {checkpoint_id!r}{hint}")
        job = session.get(Job, row.job_id)
        framework, stored = (job.framework, job.plan) if job is not None else (None, None)
        job_id, uri, rounds = row.job_id, row.uri, row.epoch
    if framework != "xgboost":
        raise ValidationFailed.at(WHERE, f"checkpoint {checkpoint_id!r} belongs to a {framework!r} job; an xgboost "
                                  "job continues only from an xgboost job's checkpoint")  # fmt: skip
    card = _card(uri, stored)
    if card is None:
        raise ValidationFailed.at(WHERE, f"checkpoint {checkpoint_id!r} does not say what it was trained on (written "
                                  "by an earlier release, of a job whose categories or plan were not kept): continue "
                                  "from a checkpoint written since, or train again")  # fmt: skip
    return Source(checkpoint_id=checkpoint_id, job_id=job_id, uri=uri, rounds=rounds, card=card)


def _card(uri: str, stored: dict[str, Any] | None) -> dict[str, Any] | None:
    try:
        path = storage.fetch_dir(uri) / CARD_FILE
        if path.exists():
            return dict(json.loads(path.read_text()))
    except (OSError, ValueError) as exc:
        raise ValidationFailed.at(WHERE, f"checkpoint files at {uri} are unreadable: {exc}") from exc
    if stored is None or plans.is_deferred(stored):  # a checkpoint written before cards were: its job's plan
        return None
    train, spec, labels = stored.get("train") or {}, stored.get("spec") or {}, stored.get("class_labels")
    if train.get("categorical"):  # fitted in the job, and not kept
        return None
    return {"task": spec.get("task"), "features": train.get("features"), "label": train.get("label"),
            "num_classes": len(labels) if labels else train.get("num_classes"), "class_labels": labels,
            "objective": spec.get("objective"), "spec": spec}  # fmt: skip


def check_early(request: TrainRequest, found: Source, spec: XGBoostSpec | None) -> None:
    """What needs no data: the task, a single label's name, and (with the parameters) the objective, the booster
    type and the rounds."""
    card, said, ds = found.card, found.said, request.dataset
    if ds.task != card.get("task"):
        raise ValidationFailed.at("dataset.task", f"{said} was trained for {card.get('task')}; continuing it needs "
                                  f"dataset.task {card.get('task')}")  # fmt: skip
    if isinstance(ds.label, str) and ds.label != card.get("label"):
        raise ValidationFailed.at("dataset.label", f"{said} was trained on the label {card.get('label')!r}, not "
                                  f"{ds.label!r}: name the same label to continue it")  # fmt: skip
    if spec is None:
        return
    if spec.objective != card.get("objective"):
        raise ValidationFailed.at("params.objective", f"{said} was trained with {card.get('objective')}, and this "
                                  f"job's objective is {spec.objective}: continuing boosts the same objective (set "
                                  f"params.objective to {card.get('objective')})")  # fmt: skip
    booster = (card.get("spec") or {}).get("params", {}).get("booster", "gbtree")
    if spec.params.get("booster", "gbtree") != booster:
        raise ValidationFailed.at("params.booster", f"{said} is a {booster} model; xgboost would drop its trees and "
                                  f"start afresh: leave booster out or set it to {booster!r}")  # fmt: skip
    if spec.num_round <= found.rounds:
        given = {ALIASES.get(k, k): k for k in request.params or {}}.get("num_round", "num_round")
        raise ValidationFailed.at(f"params.{given}", f"{said} already has {found.rounds} rounds, and {given} counts "
                                  f"them too (the job trains {given} - {found.rounds} more): ask for more than "
                                  f"{found.rounds}")  # fmt: skip


def resume_point(
    request: TrainRequest,
    found: Source,
    *,
    train: ResolvedDataset,
    spec: XGBoostSpec,
    class_labels: tuple[str, ...] | None,
    warnings: list[str],
) -> tuple[XGBoostResume, dict[str, Any] | None]:
    """Where the job starts, and the checkpoint's categories, once the request is checked against the card."""
    check_early(request, found, spec)
    card, said = found.card, found.said
    if train.label != card.get("label"):
        raise ValidationFailed.at("dataset.label", f"{said} was trained on the label {card.get('label')!r}, not "
                                  f"{train.label!r}: name the same label to continue it")  # fmt: skip
    categories = card.get("categorical")
    inputs = list(categories["inputs"]) if categories else list(card.get("features") or ())
    if list(train.features) != inputs:
        raise ValidationFailed.at("dataset.features", f"{said} was trained on the features {inputs}, in that order "
                                  f"(its trees split on feature positions); this request has {list(train.features)}: "
                                  "name the same ones")  # fmt: skip
    kept = sorted((categories or {}).get("levels") or ())
    if sorted(train.categorical) != kept:
        raise ValidationFailed.at("dataset.categorical", f"{said} was trained with {kept or 'no'} categorical "
                                  f"column{'' if len(kept) == 1 else 's'}; this request has "
                                  f"{sorted(train.categorical) or 'none'}: name the same ones")  # fmt: skip
    if train.task == "classification":
        mine = list(class_labels) if class_labels else train.num_classes
        theirs = list(card["class_labels"]) if card.get("class_labels") else card.get("num_classes")
        if mine != theirs:
            where = "dataset.num_classes" if isinstance(mine, int) and isinstance(theirs, int) else "dataset.label"
            raise ValidationFailed.at(where, f"{said} was trained on {_classes(theirs)}, and this data has "
                                      f"{_classes(mine)}: continuing needs data of the same classes")  # fmt: skip
    keep_best = spec.early_stopping_rounds is not None
    before = _watched(card.get("spec") or {})
    if keep_best and (card.get("spec") or {}).get("early_stopping_rounds") is not None and before != _watched(spec):
        keep_best = False
        warnings.append(f"params.early_stopping_rounds counts from this job's first round: {said} early-stopped on "
                        f"{before}, this job on {_watched(spec)}")  # fmt: skip
    point = XGBoostResume(checkpoint_id=found.checkpoint_id, uri=found.uri, rounds=found.rounds, job_id=found.job_id,
                          keep_best=keep_best)  # fmt: skip
    return point, categories


def _classes(classes: list[str] | int | None) -> str:
    if isinstance(classes, list):
        return f"the classes {classes}"
    return f"{classes} classes (labels 0..{classes - 1})" if isinstance(classes, int) else "no classes"


def _watched(spec: XGBoostSpec | dict[str, Any]) -> str:
    """The metric early stopping watches: the last one evaluated (the objective's default when none is given)."""
    if isinstance(spec, dict):
        spec = XGBoostSpec(task=spec.get("task") or "regression", objective=str(spec.get("objective")),
                           eval_metric=tuple(spec.get("eval_metric") or ()))  # fmt: skip
    metrics = spec.fit_eval_metrics()
    return metrics[-1] if metrics else OBJECTIVE_METRICS.get(spec.objective, f"{spec.objective}'s default metric")

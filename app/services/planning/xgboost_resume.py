"""``training.resume_from`` for xgboost: a new job that goes on boosting the booster of another xgboost job's
checkpoint (xgboost's ``xgb_model``, as a retried job continues from its own), checked when the request is planned.

What the checkpoint was trained on is the card written beside its booster (workers/training/xgboost/remote.py
``CARD_FILE``; for a checkpoint written before cards were, the stored plan of its job). The new job must train the
same thing: task, label, features in the same order (trees split on feature positions), categorical columns (the
job encodes with the checkpoint's categories), objective, classes and booster type, and ask for more rounds than
the checkpoint has: ``num_round`` counts the checkpoint's rounds too, as a retry's does. Every other parameter may
change (learning rate, depth, data, workers, device). The data's classes may be some of the checkpoint's (a month
without a rare class): the model keeps all of them. Early stopping goes on from the checkpoint's best round only
when it watches the same metric on the same validation rows (the same validation data, or the same share of the
same training data held out with the same seed, as the checkpoint's job planned them), and that data is unchanged
since the checkpoint was written (the fingerprint of its files in the card: an overwritten CSV has the same path
and other rows): a best score measured on other rows cannot be compared. Otherwise it counts from the new job's
first round (a warning says so).

Another owner's checkpoint is refused before planning as an unknown one (app/services/access.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session, sessionmaker

from app.core.errors import ValidationFailed
from app.db.models import Checkpoint, Job
from app.schemas.train import TrainRequest
from app.services.planning.labels import local_count, resolve_classes
from workers import plans, storage
from workers.data.spec import ResolvedDataset
from workers.training.xgboost.checkpoints import VALIDATION_DATA, data_fingerprint
from workers.training.xgboost.remote import CARD_FILE, MODEL_FILE
from workers.training.xgboost.spec import ALIASES, DEFAULT_METRICS, XGBoostResume, XGBoostSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

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
    validated_on: dict[str, Any] | None = None
    """The rows its job's validation metrics (and early stopping's best score) were measured on (:func:`_rows`);
    None when its stored plan does not say."""

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
    card = _card(uri, stored, checkpoint_id, job_id)
    if card is None:
        raise ValidationFailed.at(WHERE, f"checkpoint {checkpoint_id!r} does not say what it was trained on (written "
                                  "by an earlier release, of a job whose categories or plan were not kept): continue "
                                  "from a checkpoint written since, or train again")  # fmt: skip
    validated_on = None
    if stored is not None and not plans.is_deferred(stored) and stored.get("train"):
        validated_on = _rows(stored["train"], stored.get("validation"), stored.get("spec") or {})
    return Source(checkpoint_id=checkpoint_id, job_id=job_id, uri=uri, rounds=rounds, card=card,
                  validated_on=validated_on)  # fmt: skip


def _card(uri: str, stored: dict[str, Any] | None, checkpoint_id: str, job_id: str) -> dict[str, Any] | None:
    try:
        directory = storage.fetch_dir(uri)
        found = (directory / MODEL_FILE).is_file()
    except FileNotFoundError:
        found = False
    except OSError as exc:
        raise ValidationFailed.at(WHERE, f"checkpoint files at {uri} are unreadable: {exc}") from exc
    if not found:  # the job would fail reading the booster, with xgboost's backtrace
        raise ValidationFailed.at(WHERE, f"the files of checkpoint {checkpoint_id!r} are gone: {uri}/{MODEL_FILE} is "
                                  "missing (removed or moved since it was written): continue from another checkpoint "
                                  f"(GET /jobs/{job_id}/checkpoints), or train again")  # fmt: skip
    try:
        path = directory / CARD_FILE
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
    validation: ResolvedDataset | None,
    spec: XGBoostSpec,
    warnings: list[str],
) -> tuple[XGBoostResume, dict[str, Any] | None]:
    """Where the job starts, and the checkpoint's categories, once the request is checked against the card (its
    classes are the checkpoint's already: :func:`classes`)."""
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
    keep_best = spec.early_stopping_rounds is not None and (card.get("spec") or {}).get("early_stopping_rounds")
    before, mine = _watched(card.get("spec") or {}), _rows(plans.dump(train), plans.dump(validation) if validation
                                                           else None, spec.to_dict())  # fmt: skip
    why = ""
    if keep_best and before != _watched(spec):
        why = f"{said} early-stopped on {before}, this job on {_watched(spec)}"
    elif keep_best and found.validated_on is None:
        why = f"{said}'s job does not record its validation rows, so its best score may be of other rows"
    elif keep_best and found.validated_on != mine:
        why = (
            f"{said}'s best score was measured on {_said_rows(found.validated_on)}, and this job validates on "
            f"{_said_rows(mine)}: scores of other rows cannot be compared"
        )
    elif keep_best and (changed := _changed_data(found, validation or train)):
        why = changed
    if why:
        warnings.append(f"params.early_stopping_rounds counts from this job's first round: {why}")
    keep_best = bool(keep_best) and not why
    point = XGBoostResume(checkpoint_id=found.checkpoint_id, uri=found.uri, rounds=found.rounds, job_id=found.job_id,
                          keep_best=keep_best)  # fmt: skip
    return point, categories


def classes(
    found: Source, train: ResolvedDataset, dtype: str, spark: SparkSession, warnings: list[str]
) -> tuple[ResolvedDataset, tuple[str, ...] | None]:
    """The classes of a job continuing ``found``: the checkpoint's, which the data's must be some of (a new month
    may lack a rare class; the model keeps it). ``dataset.num_classes``, when given, is the checkpoint's number."""
    said, given = found.said, train.num_classes
    count, names = _theirs(found.card)
    if count is None:  # a card that does not say: the data's own, and the job's checks
        return resolve_classes(train, dtype, spark)
    shown = _classes(list(names) if names else count)
    if given is not None and given != count:
        raise ValidationFailed.at("dataset.num_classes", f"{said} was trained on {shown}; continuing it keeps "
                                  f"them: set dataset.num_classes to {count}, or leave it out")  # fmt: skip
    if names is not None:  # text labels: the data's may be some of them, indexed as the checkpoint's
        if dtype != "string":
            raise ValidationFailed.at("dataset.label", f"{said} was trained on {shown}, and {train.label!r} holds "
                                      "class indices: name a label with those classes")  # fmt: skip
        mine = resolve_classes(replace(train, num_classes=None), dtype, spark)[1] or ()
        if extra := sorted(set(mine) - set(names)):
            raise ValidationFailed.at("dataset.label", f"{said} was trained on {shown}, and this data also has "
                                      f"{extra}: continuing needs data of those classes (or some of them)")  # fmt: skip
        if missing := [n for n in names if n not in mine]:
            warnings.append(f"dataset.label {train.label!r} has no rows of {missing} of the {count} classes of "
                            f"{said}: the model keeps them")  # fmt: skip
        return replace(train, num_classes=count), names
    if dtype == "string":
        raise ValidationFailed.at("dataset.label", f"{said} was trained on {shown}, and {train.label!r} holds text: "
                                  "name a label of class indices 0..k-1")  # fmt: skip
    checked = resolve_classes(replace(train, num_classes=count), dtype, spark)[0]  # whole, not negative
    counted = local_count(checked, spark)  # None where that needs a Spark job: a label past them is a bad row
    if counted is not None and counted > count:
        raise ValidationFailed.at("dataset.label", f"{said} was trained on {shown}, and {train.label!r} has labels "
                                  f"0..{counted - 1}: continuing needs labels of those classes (or of some of "
                                  "them)")  # fmt: skip
    return checked, None


def _theirs(card: dict[str, Any]) -> tuple[int | None, tuple[str, ...] | None]:
    """The checkpoint's number of classes and, for text labels, their names in index order."""
    names = tuple(card["class_labels"]) if card.get("class_labels") else None
    return (len(names) if names else card.get("num_classes")), names


def _rows(train: dict[str, Any], validation: dict[str, Any] | None, spec: dict[str, Any]) -> dict[str, Any]:
    """The rows a job's validation metrics are measured on, from its plan (datasets and spec as dumped): the
    validation data, or the seeded share of the training data held out."""
    ds = validation if validation is not None else train
    rows = {k: ds.get(k) for k in ("path", "format", "options", "bad_rows")}
    if validation is None:
        rows.update(fraction=train.get("validation_fraction") or spec.get("validation_fraction"),
                    seed=train.get("split_seed"))  # fmt: skip
    return rows


def _changed_data(found: Source, ds: ResolvedDataset) -> str:
    """Why the checkpoint's best score is of other rows though its job's validation data had the same path: the
    data there changed since the checkpoint was written (its card's fingerprint differs); "" when it did not, or
    the card has no fingerprint (a checkpoint written before cards had one)."""
    then = found.card.get(VALIDATION_DATA)
    if not isinstance(then, dict):
        return ""
    now = data_fingerprint(ds.path)
    if now == then:
        return ""
    if now is None:
        detail = f"{ds.path} cannot be listed now"
    elif (now.get("files"), now.get("bytes")) != (then.get("files"), then.get("bytes")):
        detail = f"{ds.path} holds {_said_files(now)} now, {_said_files(then)} then"
    else:
        detail = f"{ds.path} was rewritten since: its files have other modification times"
    return (
        f"the validation data changed since {found.said} was written ({detail}): its best score may be of other "
        "rows, and cannot be compared"
    )


def _said_files(seen: dict[str, Any]) -> str:
    return f"{seen.get('files')} file{'' if seen.get('files') == 1 else 's'} of {seen.get('bytes')} bytes"


def _said_rows(rows: dict[str, Any] | None) -> str:
    if rows is None:
        return "rows its job does not record"
    if "fraction" in rows:
        return f"a {rows['fraction']} share of {rows['path']} held out (seed {rows['seed']})"
    return str(rows["path"])


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

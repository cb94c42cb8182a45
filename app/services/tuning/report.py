"""The result of a tune job: the leaderboard, the best trial (its model version gets the alias ``best``) and the
parameters' importances."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.db.models import JobMetric
from app.db.session import retrying
from app.services import jobs, models
from workers.context import JobOutcome

if TYPE_CHECKING:
    import optuna

log = logging.getLogger("sparktrain.jobs")
BEST_ALIAS = "best"


@dataclass
class TrialRecord:
    number: int
    params: dict[str, Any]
    job_id: str | None = None
    state: str = "RUNNING"
    """COMPLETE, PRUNED, CANCELLED (cancelled other than by the pruner: a user, or the timeout) or FAIL."""
    metric: float | None = None
    epochs: int | None = None
    """torch: epochs trained; xgboost: boosting rounds (kept, or reached when pruned)."""
    pruned_at: int | None = None
    """The epoch (round) whose metric the pruner stopped it at; it may train on a little before it stops."""
    duration_s: float | None = None
    finished: float | None = None
    model: dict[str, Any] | None = None

    def row(self, framework: str) -> dict[str, Any]:
        unit = "rounds" if framework == "xgboost" else "epochs"
        row = {"trial": self.number, "params": self.params, "metric": self.metric, "state": self.state,
               unit: self.epochs, "duration_s": self.duration_s, "job_id": self.job_id,
               "model": self.model}  # fmt: skip
        if self.pruned_at is not None:
            row["pruned_at"] = self.pruned_at
        return row


def metric_curve(
    s: Session, job_id: str, after: int = 0, *, framework: str, metric: str
) -> tuple[dict[int, float], int]:
    """A trial's validation metric per epoch (torch) or boosting round (xgboost) from the rows after metric row
    ``after``, and the last row's id (Spark ML reports none). A trial's rows of one key come from one writer in
    order, so polling from the last id read sees each row once."""
    if framework == "spark_ml":
        return {}, after
    rows = s.execute(
        select(JobMetric.id, JobMetric.step, JobMetric.epoch, JobMetric.value)
        .where(JobMetric.job_id == job_id, JobMetric.key == f"validation_{metric}", JobMetric.id > after)
        .order_by(JobMetric.id)
    ).all()
    curve: dict[int, float] = {}
    for row_id, step, epoch, value in rows:
        curve.setdefault(int(epoch if epoch is not None else step), float(value))
        after = row_id
    return curve, after


def never_submitted(result: Any, known: set[int]) -> list[TrialRecord]:
    """The failed trials a rebuilt study has no job for: a sampled body that did not plan fails its trial before a
    job exists, so the leaderboard the search published (its running ``result``, written before the next trial is
    sent) is their only record. Without it a search resumed after a driver loss ended with fewer than ``trials``
    entries. ``known``: the trial numbers that have jobs."""
    rows = result.get("leaderboard") if isinstance(result, dict) else None
    return [
        TrialRecord(number=row["trial"], params=dict(row.get("params") or {}), state="FAIL")
        for row in (rows if isinstance(rows, list) else [])
        if isinstance(row, dict) and row.get("state") == "FAIL" and row.get("job_id") is None
        and isinstance(row.get("trial"), int) and row["trial"] not in known
    ]  # fmt: skip


def leaderboard(records: list[TrialRecord], mode: str) -> list[TrialRecord]:
    """Completed trials best first, then the others by number."""
    sign = -1.0 if mode == "max" else 1.0
    done = [r for r in records if r.state == "COMPLETE" and r.metric is not None and not math.isnan(r.metric)]
    rest = sorted((r for r in records if r not in done), key=lambda r: r.number)
    return sorted(done, key=lambda r: (sign * float(r.metric or 0), r.number)) + rest


MIN_IMPORTANCE_TRIALS = 4
"""Completed trials below which importances are None: from one, PED-ANOVA answered ``{"a": 0.5, "b": 0.5}``, and
from three fANOVA ranked a parameter that drives the metric first in 30 of 40 random searches (37 of 40 from four)."""
FANOVA_MAX_TRIALS = 100
"""Completed trials up to which importances are fANOVA's; PED-ANOVA's above. PED-ANOVA compares the best tenth of
the trials with the rest, and on small searches it ranked backwards: in 40 random searches of a metric that one
parameter drives, it put that parameter first in none from 4 to 10 trials, 27 at 15, 39 at 30 (fANOVA: 37 at 4,
every one from 6). fANOVA fits a random forest: 0.05 s for 10 trials, 1.4 s for 100, a minute for 2,000."""


def importances(study: optuna.Study) -> dict[str, float] | None:
    """Optuna's parameter importances (fANOVA for up to FANOVA_MAX_TRIALS completed trials, seeded; PED-ANOVA,
    which needs many trials and takes milliseconds, above); None when they cannot be computed or would mean nothing:
    fewer than MIN_IMPORTANCE_TRIALS completed trials, or one metric in all of them."""
    import optuna

    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if len(done) < MIN_IMPORTANCE_TRIALS or len({t.value for t in done}) < 2:
        return None
    # a choice among lists or objects (layer stacks) has no importance: Optuna's evaluators need hashable values
    params = sorted({name for t in done for name, dist in t.distributions.items()
                     if not isinstance(dist, optuna.distributions.CategoricalDistribution)
                     or all(isinstance(c, None | bool | int | float | str) for c in dist.choices)})  # fmt: skip
    if not params:
        return None
    evaluator: optuna.importance.BaseImportanceEvaluator = (
        optuna.importance.FanovaImportanceEvaluator(seed=0)
        if len(done) <= FANOVA_MAX_TRIALS
        else optuna.importance.PedAnovaImportanceEvaluator()
    )
    try:
        found = optuna.importance.get_param_importances(study, evaluator=evaluator, params=params)
        return {k: float(v) for k, v in found.items()}
    except Exception as exc:  # a single parameter, a constant metric, ...
        log.info("no parameter importances: %s: %s", type(exc).__name__, exc)
        return None


def partial(records: list[TrialRecord], *, metric: str, mode: str, trials: int, framework: str) -> dict[str, Any]:
    """The result a running search shows (and a cancelled one keeps): its finished trials ranked so far."""
    return {
        "partial": True,
        "metric": metric,
        "mode": mode,
        "trials": len(records),  # as in the final result: the trials that ran so far (the leaderboard's length)
        "trials_requested": trials,
        "finished": len(records),
        "leaderboard": [r.row(framework) for r in leaderboard(records, mode)],
    }


def outcome(
    ctx: Any,
    study: optuna.Study,
    records: list[TrialRecord],
    *,
    metric: str,
    db: sessionmaker[Session],
    name: str,
    framework: str,
    budget_s: float = 0.0,
    requested: int | None = None,
    timed_out: bool = False,
) -> JobOutcome:
    """The tune job's result; sets the alias ``best`` on the best trial's model version, retried while the database
    is away for up to ``budget_s`` (the runner's ``db_retry_s``): a restart as the search ends must not fail it."""
    mode = "max" if study.direction.name == "MAXIMIZE" else "min"
    board = leaderboard(records, mode)
    best = board[0]
    result: dict[str, Any] = {
        "metric": metric,
        "mode": mode,
        "trials": len(records),  # those that ran; fewer than requested when timeout_minutes passed first
        "trials_requested": len(records) if requested is None else requested,
        "timed_out": timed_out,
        "states": {s: sum(r.state == s for r in records) for s in sorted({r.state for r in records})},
        "leaderboard": [r.row(framework) for r in board],
        "best": {
            "trial": best.number,
            "params": best.params,
            "metric": best.metric,
            "model": best.model,
            "job_id": best.job_id,
        },
        "importances": importances(study),
    }
    if timed_out:
        cancelled = sum(r.state == "CANCELLED" for r in records)
        stopped = f", {cancelled} of them cancelled by it" if cancelled else ""
        ctx.warn(f"timeout_minutes passed after {len(records)} of the {requested} trials{stopped}; the leaderboard "
                 "and the best trial are of those")  # fmt: skip
    if best.model is not None:
        version = int(best.model["version"])

        ours = {int(r.model["version"]) for r in records if r.model is not None}
        before: list[int | None] = [None]

        def mark(s: Session) -> None:  # both idempotent: safe to run again
            before[0] = models.alias_version(session=s, name=name, alias=BEST_ALIAS)
            models.set_alias(session=s, name=name, alias=BEST_ALIAS, version=version)
            # the tune job's own `model` is its best trial's version: a script reading only .model saw null
            jobs.set_model(session=s, job_id=ctx.job_id, name=name, version=version)

        retrying(db, mark, budget_s=budget_s, what=f"tune job {ctx.job_id} marking its best trial")
        if before[0] is not None and before[0] not in ours:  # another search's (or a person's) choice
            ctx.warn(f"alias {BEST_ALIAS!r} of {name} moved from version {before[0]}, which this search did not "
                     f"train, to version {version} ({metric} {best.metric}); compare the two before serving it, "
                     f"or give each search a model name of its own")  # fmt: skip
        ctx.log(f"best trial {best.number}: {metric} {best.metric}; alias {BEST_ALIAS!r} -> {name} "
                f"version {best.model['version']}")  # fmt: skip
    return JobOutcome(result=result)

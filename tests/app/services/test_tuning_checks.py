"""What ``POST /tune`` checks before the job exists, on the real local[2] SparkSession and the shipped data: a float
range over a whole-number field, the work a grid or a long choice may cost, the field a refusal names; and how the
search is then judged (the pruner's first rung, the importances, the warnings of a pruner that stops nothing)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from app.core.errors import ValidationFailed
from app.core.settings import Settings
from app.schemas.train import TrainRequest
from app.schemas.tune import Distribution, TuneRequest
from app.services.tuning import space as spaces
from app.services.tuning.submit import check, check_space, planned_values, pruning_warnings, resolved, train_request
from bench.chaos import digits_job
from tests.helpers import taxi_request

DATA = Path(__file__).resolve().parents[3] / "datasets"
XGBOOST = {**taxi_request("t"), "framework": "xgboost",
           "params": {"max_depth": 3, "max_bin": 256, "subsample": 0.8, "num_round": 50, "num_workers": 1}}  # fmt: skip
SPARK_ML = taxi_request("t", algorithm="random_forest", maxDepth=3)


def _search(base: dict[str, Any], space: dict[str, Any], **search: Any) -> TuneRequest:
    return TuneRequest.model_validate({"name": "t", "base": base, "space": space, **search})


def _checked(spark: Any, request: TuneRequest, settings: Settings | None = None) -> Any:
    """Every check submit_tune makes before it writes the job (the access checks aside: no API keys)."""
    check_space(request, {**request.base, "name": request.name})
    return check(request=request, settings=settings or Settings(data_roots=[DATA]), spark=spark, db=None)


def _refused(spark: Any, request: TuneRequest, settings: Settings | None = None) -> ValidationFailed:
    with pytest.raises(ValidationFailed) as caught:
        _checked(spark, request, settings)
    return caught.value


def _digits() -> dict[str, Any]:
    return digits_job("t", epochs=1, units=16, batch=128, workers=1)


@pytest.mark.parametrize(
    ("base", "path", "dist", "inner"),
    [
        (_digits(), "network.layers.0.units", {"type": "loguniform", "low": 8, "high": 64}, "network.layers[0].units"),
        (_digits(), "network.layers.0.units", {"type": "uniform", "low": 8, "high": 64}, "network.layers[0].units"),
        (_digits(), "network.layers.0.units", {"type": "uniform", "low": 8, "high": 64, "step": 8},
         "network.layers[0].units"),
        (XGBOOST, "params.max_depth", {"type": "uniform", "low": 2, "high": 6}, "params.max_depth"),
        (XGBOOST, "params.max_depth", {"type": "uniform", "low": 2, "high": 6, "step": 1}, "params.max_depth"),
        (SPARK_ML, "params.maxDepth", {"type": "uniform", "low": 2, "high": 6}, "params.maxDepth"),
    ],
)  # fmt: skip
def test_a_float_range_over_a_whole_number_field_is_refused_saying_int(
    spark: Any, base: dict[str, Any], path: str, dist: dict[str, Any], inner: str
) -> None:
    """Tuning walkthrough: each was a 202, then every trial failed ("must be a positive integer, got 8.0"; "max_depth
    must be a whole number, got 5.98"): the ends were planned as 8, Optuna samples 8.0, and only a uniform's inside
    was tried, against the schema alone (which does not read network or params)."""
    refused = _refused(spark, _search(base, {path: dist}))
    assert refused.errors is not None and refused.errors[0]["loc"] == f"space.{path}", refused.detail
    assert 'use type "int"' in refused.detail and refused.extra["inner"] == inner, (refused.detail, refused.extra)
    as_int = {k: v for k, v in dist.items() if k != "type"} | {"type": "int"}
    _checked(spark, _search(base, {path: as_int}))  # what the message says to send instead


def test_an_int_may_take_a_log_scale(spark: Any) -> None:
    dist = Distribution(type="int", low=8, high=256, log=True)
    assert spaces.to_optuna(dist).log  # type: ignore[attr-defined]
    _checked(spark, _search(_digits(), {"network.layers.0.units": dist.model_dump(exclude_none=True)}))
    for bad in ({"low": 0, "high": 8}, {"low": 8, "high": 64, "step": 8}):  # Optuna refuses both
        with pytest.raises(ValidationError, match="low >= 1 and no step"):
            Distribution.model_validate({"type": "int", "log": True, **bad})
    with pytest.raises(ValidationError, match="use type loguniform"):
        Distribution.model_validate({"type": "uniform", "low": 1, "high": 2, "log": True})
    # left out, it is left out of the stored request (and of the fingerprint of a request posted before it existed)
    assert "log" not in Distribution(type="int", low=1, high=2).model_dump(exclude_none=True)


def test_a_uniform_over_a_float_field_still_passes_and_a_bad_end_says_no_int(spark: Any) -> None:
    rates = {"training.optimizer.learning_rate": {"type": "uniform", "low": 1e-3, "high": 1e-2}}
    _checked(spark, _search(_digits(), rates))
    rows = {"params.subsample": {"type": "uniform", "low": 0.5, "high": 2.0}}  # xgboost's subsample is at most 1
    refused = _refused(spark, _search(XGBOOST, rows))
    assert refused.detail.startswith("space.params.subsample: the value 2.0 makes an invalid /train body: ")
    assert '"int"' not in refused.detail, refused.detail


def test_a_grid_is_counted_before_any_point_is_listed(spark: Any) -> None:
    """Tuning walkthrough: two axes of 1..1000 built 1,000,000 points (5.9 s) before the trials refused them; two of
    10,000 would have built 10^8 dicts."""
    huge = {f"params.{name}": {"type": "int", "low": 1, "high": 10_000} for name in ("max_depth", "max_bin")}
    request = _search(XGBOOST, huge, sampler="grid")
    assert spaces.grid_size(request.space) == 10**8
    started = time.monotonic()
    refused = _refused(spark, request)
    assert time.monotonic() - started < 2, "the grid was listed"
    assert refused.errors is not None and refused.errors[0]["loc"] == "trials"
    assert "a trial for each of the grid's 100000000 points" in refused.detail, refused.detail
    # five trials of it: the search lists the five points it runs, no more
    first = spaces.grid(_search(XGBOOST, huge, sampler="grid", trials=5).space, 5)
    assert first == [{"params.max_depth": 1, "params.max_bin": n} for n in range(1, 6)]
    with pytest.raises(ValueError, match="20,001 grid points"):
        spaces.grid_size({"n": Distribution(type="int", low=1, high=20_001)})
    with pytest.raises(ValidationError, match="use a larger step"):  # round(inf) raised OverflowError: a 500
        Distribution(type="uniform", low=0, high=1e308, step=1e-300)


def test_a_long_choice_is_planned_at_a_bounded_sample_and_checked_whole(spark: Any) -> None:
    """Tuning walkthrough: a choice of 300 values planned every value inside the request (10 s)."""
    values = [round(1e-3 * (i + 1), 6) for i in range(300)]
    dist = Distribution(type="choice", values=values)
    sample = planned_values(dist)
    assert len(sample) == 16 and sample[0] == values[0] and sample[-1] == values[-1]
    rates = _search(_digits(), {"training.optimizer.learning_rate": dist.model_dump(exclude_none=True)})
    started = time.monotonic()
    _checked(spark, rates)
    assert time.monotonic() - started < 3
    # a value left out of the sample is still checked as a /train body
    sizes = [64 + i for i in range(300)]
    sizes[5] = 0
    refused = _refused(spark, _search(_digits(), {"training.batch_size_per_worker": {"type": "choice",
                                                                                     "values": sizes}}))  # fmt: skip
    assert refused.detail.startswith("space.training.batch_size_per_worker: the value 0 makes"), refused.detail
    assert refused.extra["inner"] == "training.batch_size_per_worker"


@pytest.mark.parametrize(
    ("space", "inner"),
    [
        ({"training.batch_size_per_worker": {"type": "choice", "values": [64, 0]}}, "training.batch_size_per_worker"),
        ({"training.epochs": {"type": "int", "low": 1, "high": 10**9}}, "training.epochs"),
        ({"training.epochs": {"type": "uniform", "low": 1, "high": 3}}, "training.epochs"),
    ],
)
def test_inner_is_the_field_inside_the_train_body(spark: Any, space: dict[str, Any], inner: str) -> None:
    """Tuning walkthrough: a schema error of a space value said "base.training.batch_size_per_worker", a planning
    error "training.epochs"."""
    refused = _refused(spark, _search(_digits(), space))
    assert refused.extra["inner"] == inner, (refused.detail, refused.extra)
    assert "base." not in refused.detail, refused.detail


def test_a_base_the_schema_refuses_names_the_field_inside_it_as_inner() -> None:
    """Tuning walkthrough: a base without a dataset was a 422 at base.dataset with no inner."""
    base = {k: v for k, v in _digits().items() if k != "dataset"}
    with pytest.raises(ValidationFailed) as caught:
        train_request(base, "base")
    assert caught.value.errors is not None and caught.value.errors[0]["loc"] == "base.dataset"
    assert caught.value.extra["inner"] == "dataset" and caught.value.detail.startswith("base.dataset: ")


def test_asha_judges_an_xgboost_trial_after_a_share_of_its_rounds() -> None:
    """Tuning walkthrough: ASHA judged xgboost trials at round 1 (min_resource 1, hard-coded)."""
    from app.services.tuning.trials import min_resource, pruner

    def first_pruned(tune: TuneRequest) -> int | None:
        """The step at which a trial far worse than a finished one is first pruned."""
        import optuna

        optuna.logging.set_verbosity(optuna.logging.ERROR)
        study = optuna.create_study(pruner=pruner(tune))
        for value in (1.0, 5.0):
            trial = study.ask()
            for step in range(1, 201):
                trial.report(value, step)
                if trial.should_prune():
                    return step
            study.tell(trial, value)
        return None

    def xgboost(params: dict[str, Any], **search: Any) -> TuneRequest:
        return _search({**XGBOOST, "params": params}, {"params.eta": {"type": "choice", "values": [0.1]}}, **search)

    assert first_pruned(xgboost({"num_round": 500}, pruner="asha")) == 15  # 3%
    assert min_resource(xgboost({"n_estimators": 1000}, pruner="asha")) == 30  # an alias
    assert min_resource(xgboost({}, pruner="asha")) == 5  # 100 rounds by default: at least 5
    assert first_pruned(xgboost({"num_round": 500}, pruner="asha", min_resource=40)) == 40
    assert first_pruned(xgboost({"num_round": 500}, pruner="median")) == 1  # as before
    assert first_pruned(xgboost({"num_round": 500}, pruner="median", min_resource=40)) == 40
    torch = _search(_digits(), {"training.epochs": {"type": "choice", "values": [1, 2]}}, pruner="asha")
    assert first_pruned(torch) == 1  # one epoch, as before
    with pytest.raises(ValidationError, match="set pruner asha or median"):
        xgboost({}, min_resource=3)
    stored = resolved(xgboost({"num_round": 500}, pruner="asha"), TrainRequest.model_validate(XGBOOST))
    assert stored["min_resource"] == 15  # what the search ran with, in the job's request
    assert "min_resource" not in resolved(xgboost({}, pruner="median"), TrainRequest.model_validate(XGBOOST))


def test_importances_rank_the_parameter_that_drives_a_small_search_first() -> None:
    """Tuning walkthrough: 4 Spark ML trials whose rmse maxDepth drives ranked numTrees first (0.76): PED-ANOVA
    compares the best tenth of the trials with the rest, which on 4 trials says nothing."""
    import optuna

    from app.services.tuning.report import importances

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    dists = {"params.maxDepth": optuna.distributions.IntDistribution(2, 10),
             "params.numTrees": optuna.distributions.IntDistribution(5, 50)}  # fmt: skip
    study = optuna.create_study()
    for depth, trees in ((2, 50), (5, 10), (8, 30), (10, 20)):
        rmse = 5.0 - 0.4 * depth - 0.002 * trees
        study.add_trial(optuna.trial.create_trial(params={"params.maxDepth": depth, "params.numTrees": trees},
                                                  distributions=dists, value=rmse))  # fmt: skip
        found = importances(study)
        if len(study.trials) < 4:
            assert found is None, found  # too few to say anything
    assert found is not None and max(found, key=found.__getitem__) == "params.maxDepth", found
    assert found["params.maxDepth"] > 0.6, found


@pytest.mark.parametrize(
    ("task", "params", "metric", "says", "not_said"),
    [
        ("classification", {}, "f1", "search on accuracy, which every round reports", "eval_metric (accuracy"),
        ("regression", {"eval_metric": "rmse"}, "r2", "search on rmse (it ranks trials as mse and r2 do)", "add it"),
        ("regression", {"eval_metric": "rmse"}, "mae", 'add it to the base\'s params.eval_metric (a list keeps the '
         'others: ["rmse", "mae"])', "has no"),
    ],
)  # fmt: skip
def test_a_pruner_on_a_metric_no_round_reports_says_what_works(
    task: str, params: dict[str, Any], metric: str, says: str, not_said: str
) -> None:
    """Tuning walkthrough: an xgboost classifier searched on f1 was told to put f1 in params.eval_metric, which
    xgboost has no such metric for."""
    from types import SimpleNamespace

    request = _search({}, {"a": {"type": "choice", "values": [1]}}, pruner="asha", metric=metric)
    (warning,) = pruning_warnings(request, SimpleNamespace(framework="xgboost", params=params), task)  # type: ignore[arg-type]
    assert says in warning and not_said not in warning, warning

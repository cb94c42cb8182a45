"""Search spaces (paths into a /train body, substitution, grids, Optuna distributions) and the leaderboard order."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.schemas.tune import Distribution
from app.services.tuning import space
from app.services.tuning.report import TrialRecord, leaderboard

BODY = {
    "training": {"optimizer": {"type": "adam", "learning_rate": 0.003}, "epochs": 2},
    "network": {"layers": [{"type": "dense", "units": 32}, {"type": "output", "units": 10}]},
}


def test_paths_resolve_into_dicts_and_list_indices() -> None:
    assert space.lookup(BODY, "training.optimizer.learning_rate") == 0.003
    assert space.lookup(BODY, "network.layers.0.units") == 32
    for missing in ("training.optimizer.momentum", "network.layers.2.units", "network.layers.x", "epochs.0"):
        assert not space.exists(BODY, missing), missing


def test_substitute_copies_and_params_read_back() -> None:
    dists = {"network.layers.0.units": Distribution(type="int", low=16, high=64, step=16)}
    out = space.substitute(BODY, {"network.layers.0.units": 48, "training.optimizer.learning_rate": 0.01})
    assert out["network"]["layers"][0]["units"] == 48 and out["training"]["optimizer"]["learning_rate"] == 0.01
    assert BODY["network"]["layers"][0]["units"] == 32  # type: ignore[index]
    assert space.params_of(out, dists) == {"network.layers.0.units": 48}


def test_grid_in_listed_order_and_none_for_continuous_ranges() -> None:
    grid = space.grid(
        {
            "a": Distribution(type="choice", values=[0.1, 0.01]),
            "b": Distribution(type="int", low=1, high=3, step=2),
        }
    )
    assert grid == [{"a": 0.1, "b": 1}, {"a": 0.1, "b": 3}, {"a": 0.01, "b": 1}, {"a": 0.01, "b": 3}]
    assert space.grid({"a": Distribution(type="loguniform", low=1e-4, high=1e-2)}) is None


def test_distributions_are_checked_and_map_to_optuna() -> None:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    for bad in (
        {"type": "uniform", "low": 1},
        {"type": "loguniform", "low": 0, "high": 1},
        {"type": "int", "low": 1.5, "high": 3},
        {"type": "choice"},
        {"type": "uniform", "low": 2, "high": 1},
    ):
        with pytest.raises(ValidationError):
            Distribution.model_validate(bad)
    assert isinstance(space.to_optuna(Distribution(type="choice", values=["a"])), CategoricalDistribution)
    assert space.to_optuna(Distribution(type="int", low=8, high=64, step=8)) == IntDistribution(8, 64, step=8)
    log = space.to_optuna(Distribution(type="loguniform", low=1e-4, high=1e-1))
    assert isinstance(log, FloatDistribution) and log.log
    assert Distribution(type="int", low=8, high=64).extremes() == [8, 64]


def test_leaderboard_puts_completed_trials_best_first() -> None:
    records = [
        TrialRecord(0, {}, state="COMPLETE", metric=0.5),
        TrialRecord(1, {}, state="PRUNED", metric=None),
        TrialRecord(2, {}, state="COMPLETE", metric=0.9),
        TrialRecord(3, {}, state="FAIL"),
    ]
    assert [r.number for r in leaderboard(records, "max")] == [2, 0, 1, 3]
    assert [r.number for r in leaderboard(records, "min")] == [0, 2, 1, 3]


def test_torch_trials_take_the_export_path_unless_the_base_chooses() -> None:
    from app.services.tuning.runner import trial_body

    params = {"training.optimizer.learning_rate": 0.01}
    out = trial_body({**BODY, "framework": "torch"}, params)
    assert out["training"]["data_path"] == "export" and out["training"]["optimizer"]["learning_rate"] == 0.01
    assert "data_path" not in BODY["training"]  # type: ignore[operator]
    chosen = {**BODY, "framework": "torch", "training": {**BODY["training"], "data_path": "direct"}}  # type: ignore[dict-item]
    assert trial_body(chosen, params)["training"]["data_path"] == "direct"
    xgb = {"framework": "xgboost", "params": {"max_depth": 3}}
    assert trial_body(xgb, {"params.max_depth": 5}) == {"framework": "xgboost", "params": {"max_depth": 5}}

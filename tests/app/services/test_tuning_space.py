"""Search spaces (paths into a /train body, substitution, grids, Optuna distributions) and the leaderboard order."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from pydantic import ValidationError

from app.schemas.tune import Distribution
from app.services.tuning import space
from app.services.tuning.report import TrialRecord, leaderboard
from workers.training.torch.config import ONE_STEP

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
    stepped = {"network.layers.0.units": Distribution(type="uniform", low=16, high=64, step=16)}
    read = space.params_of(out, stepped)  # the body holds 48, a whole number: Optuna sampled 48.0
    assert read == {"network.layers.0.units": 48.0} and isinstance(read["network.layers.0.units"], float)


def test_grid_in_listed_order_and_none_for_continuous_ranges() -> None:
    grid = space.grid(
        {
            "a": Distribution(type="choice", values=[0.1, 0.01]),
            "b": Distribution(type="int", low=1, high=3, step=2),
        }
    )
    assert grid == [{"a": 0.1, "b": 1}, {"a": 0.1, "b": 3}, {"a": 0.01, "b": 1}, {"a": 0.01, "b": 3}]
    assert space.grid({"a": Distribution(type="loguniform", low=1e-4, high=1e-2)}) is None
    # (0.3 - 0.1) // 0.1 is 1.0: the last point was lost, and the others carried float noise (audit, 2026-12-06)
    assert space.grid({"lr": Distribution(type="uniform", low=0.1, high=0.3, step=0.1)}) == [
        {"lr": 0.1}, {"lr": 0.2}, {"lr": 0.3}
    ]  # fmt: skip
    with pytest.raises(ValueError, match="20,000 grid points"):
        space.grid({"n": Distribution(type="int", low=1, high=20_000)})


def test_distributions_are_checked_and_map_to_optuna() -> None:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    for bad in (
        {"type": "uniform", "low": 1},
        {"type": "loguniform", "low": 0, "high": 1},
        {"type": "int", "low": 1.5, "high": 3},
        {"type": "choice"},
        {"type": "uniform", "low": 2, "high": 1},
        {"type": "loguniform", "low": 1e-4, "high": 1e-1, "step": 1e-3},  # Optuna refuses it; it was ignored
        {"type": "int", "low": 16, "high": 60, "step": 16},  # Optuna moves high to 48 without a word
        {"type": "uniform", "low": 0.1, "high": 0.35, "step": 0.1},
    ):
        with pytest.raises(ValidationError):
            Distribution.model_validate(bad)
    assert isinstance(space.to_optuna(Distribution(type="choice", values=["a"])), CategoricalDistribution)
    assert space.to_optuna(Distribution(type="int", low=8, high=64, step=8)) == IntDistribution(8, 64, step=8)
    log = space.to_optuna(Distribution(type="loguniform", low=1e-4, high=1e-1))
    assert isinstance(log, FloatDistribution) and log.log
    assert Distribution(type="int", low=8, high=64).extremes() == [8, 64]
    # the stored request says what was sent: whole bounds stay whole (they echoed as 8.0 and 64.0)
    echoed = Distribution.model_validate({"type": "int", "low": 8, "high": 64, "step": 8}).model_dump(mode="json")
    assert [type(echoed[k]) for k in ("low", "high", "step")] == [int, int, int]
    assert Distribution.model_validate({"type": "uniform", "low": 0, "high": 0.5}).model_dump()["high"] == 0.5


def test_leaderboard_puts_completed_trials_best_first() -> None:
    records = [
        TrialRecord(0, {}, state="COMPLETE", metric=0.5),
        TrialRecord(1, {}, state="PRUNED", metric=None),
        TrialRecord(2, {}, state="COMPLETE", metric=0.9),
        TrialRecord(3, {}, state="FAIL"),
    ]
    assert [r.number for r in leaderboard(records, "max")] == [2, 0, 1, 3]
    assert [r.number for r in leaderboard(records, "min")] == [0, 2, 1, 3]


@pytest.mark.filterwarnings("ignore:Choices for a categorical distribution")  # (Optuna's, for its storage)
def test_importances_leave_out_a_choice_among_lists_and_keep_the_rest() -> None:
    """A choice of layer stacks made Optuna's evaluator fail (unhashable list): importances were null for all."""
    import optuna

    from app.services.tuning.report import importances

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    stacks = [[{"units": 16}], [{"units": 32}, {"units": 8}]]
    for _ in range(12):
        trial = study.ask()
        lr = trial.suggest_float("lr", 1e-4, 1e-1, log=True)
        layers = trial.suggest_categorical("layers", stacks)  # type: ignore[arg-type]
        study.tell(trial, lr * 10 + (0.1 if len(layers) == 1 else 0.0))
    found = importances(study)
    assert found is not None and set(found) == {"lr"}, found


def test_torch_trials_take_the_export_path_unless_the_base_chooses() -> None:
    from app.services.tuning.trials import trial_body

    params = {"training.optimizer.learning_rate": 0.01}
    out = trial_body({**BODY, "framework": "torch"}, params)
    assert out["training"]["data_path"] == "export" and out["training"]["optimizer"]["learning_rate"] == 0.01
    assert "data_path" not in BODY["training"]  # type: ignore[operator]
    chosen = {**BODY, "framework": "torch", "training": {**BODY["training"], "data_path": "direct"}}  # type: ignore[dict-item]
    assert trial_body(chosen, params)["training"]["data_path"] == "direct"
    xgb = {"framework": "xgboost", "params": {"max_depth": 3}}
    assert trial_body(xgb, {"params.max_depth": 5}) == {"framework": "xgboost", "params": {"max_depth": 5}}


def _sharing(body: dict[str, Any]) -> dict[str, Any]:
    return dict(body["training"].get("gradient_sharing") or {})


def test_a_pruned_search_starts_gradient_sharing_at_one_optimizer_step() -> None:
    """Left to the trainer the first threshold follows the planned length (up to ten steps), which hides a trial's
    first epochs from the pruner: a pruned search writes one step (Adam: the trial's learning rate) into the trial."""
    from app.services.tuning.trials import trial_body

    torch_base = {**BODY, "framework": "torch"}
    params = {"training.optimizer.learning_rate": 0.02}
    pruned = trial_body(torch_base, params, pruned=True)
    assert _sharing(pruned)["threshold_algorithm"] == {"initial_threshold": 0.02 * ONE_STEP}
    assert pruned["training"]["optimizer"]["learning_rate"] == 0.02 and pruned["training"]["data_path"] == "export"
    assert "gradient_sharing" not in trial_body(torch_base, params)["training"]  # no pruner: the planned length's
    assert "gradient_sharing" not in BODY["training"]  # type: ignore[operator]
    rmsprop = {**BODY["training"], "optimizer": {"type": "rmsprop", "learning_rate": 0.001}}  # type: ignore[dict-item]
    assert _sharing(trial_body({**torch_base, "training": rmsprop}, {}, pruned=True))["threshold_algorithm"] == {
        "initial_threshold": 0.001 * ONE_STEP
    }
    # no optimizer in the body: the request's default (Adam at 1e-3)
    bare = trial_body({"framework": "torch", "training": {"epochs": 3}}, {}, pruned=True)
    assert _sharing(bare)["threshold_algorithm"] == {"initial_threshold": 0.001 * ONE_STEP}
    # other settings of gradient sharing are kept beside it
    kept = {**BODY["training"], "gradient_sharing": {"aggregation": "sum", "threshold_algorithm": {"type": "adaptive"}}}  # type: ignore[dict-item]
    assert _sharing(trial_body({**torch_base, "training": kept}, params, pruned=True)) == {
        "aggregation": "sum",
        "threshold_algorithm": {"type": "adaptive", "initial_threshold": 0.02 * ONE_STEP},
    }


def test_the_one_step_threshold_is_said_only_where_it_is_written_and_its_own_warning_is_dropped() -> None:
    """Every torch search with a pruner logged it (SGD and allreduce too), and every trial of a small network
    warned that a threshold nobody set does not apply (tuning walkthrough)."""
    from dataclasses import dataclass

    from app.services.tuning.trials import one_step_note, quiet_injected, trial_body

    torch_base = {**BODY, "framework": "torch"}
    assert one_step_note(torch_base, "asha") is not None and one_step_note(torch_base, "none") is None
    sgd = {**torch_base, "training": {**BODY["training"], "optimizer": {"type": "sgd", "learning_rate": 0.1}}}  # type: ignore[dict-item]
    allreduce = {**torch_base, "training": {**BODY["training"], "mode": "allreduce"}}  # type: ignore[dict-item]
    assert one_step_note(sgd, "asha") is None and one_step_note(allreduce, "median") is None

    @dataclass(frozen=True)
    class Plan:
        warnings: tuple[str, ...]

    exact = "training.gradient_sharing.threshold_algorithm does not apply: the network's 650 parameters ..."
    plan, other = Plan((exact, "training.averaging_frequency is ignored: ...")), "training.averaging_frequency"
    written = trial_body(torch_base, {}, pruned=True)
    assert [w.split(" ")[0] for w in quiet_injected(plan, written, torch_base).warnings] == [other]
    assert quiet_injected(plan, torch_base, torch_base) == plan  # the user's own threshold: still warned


@pytest.mark.parametrize(
    "training",
    [
        {"optimizer": {"type": "sgd", "learning_rate": 0.1}},  # SGD's first threshold does not follow the length
        {"optimizer": {"type": "adam", "learning_rate": 0.003}, "mode": "allreduce"},
        {
            "optimizer": {"type": "adam", "learning_rate": 0.003},
            "gradient_sharing": {"threshold_algorithm": {"initial_threshold": 0.05}},
        },
        {
            "optimizer": {"type": "adam", "learning_rate": 0.003},
            "gradient_sharing": {"threshold_algorithm": {"type": "fixed", "threshold": 0.01}},
        },
        {"optimizer": {"type": "nadam", "learning_rate": 0.003}},  # invalid: the trial's planning says so
    ],
)
def test_a_pruned_search_leaves_every_other_threshold_alone(training: dict[str, Any]) -> None:
    from app.services.tuning.trials import trial_body

    out = trial_body({"framework": "torch", "training": training}, {}, pruned=True)
    assert out["training"] == {**training, "data_path": "export"}


def test_a_fixed_threshold_under_a_sampled_learning_rate_is_warned_about() -> None:
    from app.services.tuning.trials import threshold_warnings

    rates = {"training.optimizer.learning_rate": Distribution(type="loguniform", low=1e-5, high=1e-1)}
    fixed = {
        "framework": "torch",
        "training": {"gradient_sharing": {"threshold_algorithm": {"initial_threshold": 0.003}}},
    }
    (warning,) = threshold_warnings(fixed, rates)
    assert "initial_threshold is fixed at 0.003" in warning and "from 1e-05 to 0.1" in warning, warning
    assert "0.03 to 3e+02 optimizer steps" in warning, warning
    fixed_tau = {
        "framework": "torch",
        "training": {"gradient_sharing": {"threshold_algorithm": {"type": "fixed", "threshold": 0.01}}},
    }
    assert "threshold stays at 0.1 to 1e+03 optimizer steps" in threshold_warnings(fixed_tau, rates)[0]
    # nothing to say: the threshold left to the trainer, sampled as well, another mode, another family, no rate
    assert threshold_warnings({"framework": "torch", "training": {}}, rates) == []
    both = {**rates, "training.gradient_sharing.threshold_algorithm.initial_threshold": Distribution(
        type="loguniform", low=1e-4, high=1e-2)}  # fmt: skip
    assert threshold_warnings(fixed, both) == []
    allreduce = {"framework": "torch", "training": {**fixed["training"], "mode": "allreduce"}}  # type: ignore[dict-item]
    assert threshold_warnings(allreduce, rates) == []
    assert threshold_warnings({**fixed, "framework": "xgboost"}, rates) == []
    assert threshold_warnings(fixed, {}) == []


def _search(**search: Any) -> Any:
    from app.schemas.tune import TuneRequest
    from bench.chaos import digits_job

    return TuneRequest.model_validate({"name": "t", "base": digits_job("t", epochs=1, units=16, batch=128), **search})


@pytest.mark.parametrize("path", ["network.layers.00.units", "network.layers.007.units", "network.layers.\u0660.units"])
def test_a_list_index_is_written_one_way(path: str) -> None:
    """walkthrough: 00 beside 0 was a 202, and the leaderboard reported values the trials never used."""
    from app.core.errors import ValidationFailed
    from app.services.tuning.submit import check_space

    request = _search(space={path: {"type": "int", "low": 16, "high": 32},
                             "network.layers.0.units": {"type": "int", "low": 8, "high": 64}})  # fmt: skip
    with pytest.raises(ValidationFailed) as caught:
        check_space(request, request.base)
    assert caught.value.errors is not None and caught.value.errors[0]["loc"] == f"space.{path}"
    assert caught.value.detail.endswith("write list indices as 0, 1, 2 (no leading zeros, ASCII digits only)")
    assert not space.exists(BODY, path) and space.exists(BODY, "network.layers.0.units")


def test_a_stepped_uniform_over_a_whole_number_field_is_refused_at_its_first_step() -> None:
    """walkthrough: 1 and 3 passed, then the grid's 1.5 and 2.5 trials failed ("Input should be a valid integer")."""
    from app.core.errors import ValidationFailed
    from app.services.tuning.submit import check_space

    stepped = _search(space={"training.epochs": {"type": "uniform", "low": 1, "high": 3, "step": 0.5}}, sampler="grid")
    with pytest.raises(ValidationFailed, match=r"^space.training.epochs: a value inside the range \(1.5\)"):
        check_space(stepped, stepped.base)
    whole = _search(space={"training.epochs": {"type": "uniform", "low": 1, "high": 3, "step": 1}}, sampler="grid")
    check_space(whole, whole.base)  # 1.0, 2.0, 3.0: whole numbers


def test_trials_left_out_run_every_point_of_a_grid_and_ten_otherwise() -> None:
    """walkthrough: a grid without trials was refused ("the grid has 2 points"); Optuna's and Ray's run them all."""
    grid = {"training.epochs": {"type": "choice", "values": [1, 2]}, "network.layers.0.units": {"type": "int",
            "low": 16, "high": 48, "step": 16}}  # fmt: skip
    assert _search(space=grid, sampler="grid").trials == 6
    assert _search(space=grid, sampler="grid").model_dump(mode="json", exclude_none=True)["trials"] == 6  # stored
    assert _search(space=grid, sampler="grid", trials=4).trials == 4
    assert _search(space=grid).trials == 10
    lr = {"training.optimizer.learning_rate": {"type": "loguniform", "low": 1e-4, "high": 1e-2}}
    assert _search(space={**grid, **lr}, sampler="grid").trials == 10  # refused by check: grid needs no range


@pytest.mark.parametrize(
    ("base", "search", "warned"),
    [
        ({"framework": "spark_ml", "params": {"algorithm": "linear_regression"}}, {"pruner": "median"}, True),
        ({"framework": "spark_ml", "params": {"algorithm": "linear_regression"}}, {}, False),
        ({"framework": "xgboost", "params": {"eval_metric": "rmse"}}, {"pruner": "asha", "metric": "mae"}, True),
        ({"framework": "xgboost", "params": {"eval_metric": ["rmse", "mae"]}}, {"pruner": "asha", "metric": "mae"},
         False),
        ({"framework": "xgboost", "params": {}}, {"pruner": "asha"}, False),  # rmse, the default of both
        ({"framework": "xgboost", "params": {}}, {"pruner": "asha", "metric": "r2"}, True),
    ],
)  # fmt: skip
def test_a_pruner_that_can_stop_no_trial_is_warned_about(base: dict[str, Any], search: dict[str, Any],
                                                           warned: bool) -> None:  # fmt: skip
    """walkthrough: xgboost with asha on mae while eval_metric was rmse was accepted, and pruned nothing."""
    from types import SimpleNamespace

    from app.schemas.tune import TuneRequest
    from app.services.tuning.submit import pruning_warnings

    request = TuneRequest.model_validate({"name": "t", "base": {}, "space": {"a": {"type": "choice", "values": [1]}},
                                          **search})  # fmt: skip
    train: Any = SimpleNamespace(**base)
    found = pruning_warnings(request, train, "regression")
    assert bool(found) == warned, found
    assert all("stops no trial" in w for w in found)
    assert pruning_warnings(request, train, None) == []  # the metric is not known yet


def test_importances_need_four_completed_trials_with_different_metrics() -> None:
    """walkthrough: one completed trial gave {"a": 0.5, "b": 0.5}; the docs promise null (and from 3, fANOVA's
    ranking is a guess: test_tuning_checks)."""
    import optuna

    from app.services.tuning.report import importances

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))

    def tell(value: float) -> None:
        trial = study.ask()
        trial.suggest_float("a", 0, 1), trial.suggest_float("b", 0, 1)
        study.tell(trial, value)

    tell(0.5)
    assert importances(study) is None
    tell(0.5)
    assert importances(study) is None  # a constant metric
    tell(0.1)
    assert importances(study) is None  # three
    tell(0.9)
    assert set(importances(study) or {}) == {"a", "b"}


def test_a_choice_among_layer_stacks_does_not_warn_about_optunas_storage() -> None:
    """The study is rebuilt from the trial jobs, never kept in Optuna's storage: its warning only puzzled readers.
    In a process of its own, as the driver is (pytest's own warning filters would come before the module's)."""
    code = (
        "from app.schemas.tune import Distribution\n"
        "from app.services.tuning import space\n"
        "dist = space.to_optuna(Distribution(type='choice', values=[[{'type': 'dense', 'units': 8}], [1, 2]]))\n"
        "print(len(dist.choices))\n"
    )
    run = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True, text=True, check=False,
                         timeout=120)  # fmt: skip
    assert run.returncode == 0 and run.stdout.strip() == "2", run.stderr
    assert "categorical distribution" not in run.stderr, run.stderr


def test_min_resource_without_a_pruner_is_its_own_fields_error() -> None:
    """docs/tuning.md: every check is a 422 naming the field; this one was the whole body's (``loc`` ``body``)."""
    from app.schemas.tune import TuneRequest

    body = {"name": "t", "base": {}, "space": {"a": {"type": "choice", "values": [1, 2]}}, "pruner": "none",
            "min_resource": 2}  # fmt: skip
    with pytest.raises(ValidationError) as caught:
        TuneRequest.model_validate(body)
    errors = caught.value.errors()
    assert [e["loc"] for e in errors] == [("min_resource",)], errors
    assert "set pruner asha or median" in errors[0]["msg"]
    TuneRequest.model_validate({**body, "pruner": "asha"})  # a pruner judges from min_resource on

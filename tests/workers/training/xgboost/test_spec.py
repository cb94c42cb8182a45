"""xgboost parameters: the table matches xgboost itself, bad values and names are refused with the field named."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from workers.errors import SpecError
from workers.training.xgboost.spec import BOOSTER_PARAMS, parse_xgboost_params

SAMPLE: dict[str, Any] = {
    "grow_policy": "lossguide",
    "tree_method": "hist",
    "booster": "dart",
    "sampling_method": "uniform",
    "max_depth": 3,
    "max_bin": 16,
    "max_leaves": 4,
    "num_parallel_tree": 1,
    "max_cat_to_onehot": 2,
    "quantile_alpha": 0.5,
    "tweedie_variance_power": 1.5,
}
OBJECTIVE_FOR = {"huber_slope": "reg:pseudohubererror", "quantile_alpha": "reg:quantileerror",
                 "tweedie_variance_power": "reg:tweedie", "scale_pos_weight": "binary:logistic"}  # fmt: skip
NATIVE = {"learning_rate": "eta", "reg_lambda": "lambda", "reg_alpha": "alpha"}


@pytest.mark.parametrize("name", sorted(BOOSTER_PARAMS))
def test_every_table_entry_is_a_parameter_xgboost_uses(name: str) -> None:
    """xgboost.train with validate_parameters warns about any parameter it does not use: a typo in the table would
    let a user's parameter be ignored silently."""
    import xgboost

    value = SAMPLE.get(name, 0.5 if BOOSTER_PARAMS[name].kind is float else 1)
    objective = OBJECTIVE_FOR.get(name, "reg:squarederror")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 3))
    y = (x[:, 0] > 0).astype(float) if objective.startswith("binary") else np.abs(x[:, 0]) + 0.1
    params = {NATIVE.get(name, name): value, "objective": objective, "validate_parameters": True, "nthread": 1}
    if name in ("rate_drop", "skip_drop"):
        params["booster"] = "dart"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        xgboost.train(params, xgboost.DMatrix(x, label=y), num_boost_round=1)
    assert not [w for w in caught if "not used" in str(w.message)], [str(w.message) for w in caught]


def test_defaults_per_task() -> None:
    assert parse_xgboost_params({}, task="regression").objective == "reg:squarederror"
    assert parse_xgboost_params({}, task="classification", num_classes=2).objective == "binary:logistic"
    assert parse_xgboost_params({}, task="classification", num_classes=5).objective == "multi:softprob"
    assert parse_xgboost_params({}, task="regression").num_round == 100


def test_the_articles_parameters() -> None:
    spec = parse_xgboost_params(
        {"learning_rate": 0.05, "max_depth": 8, "subsample": 0.8, "gamma": 1, "num_round": 500,
         "tree_method": "gpu_hist"},
        task="regression",
    )  # fmt: skip
    assert spec.num_round == 500
    assert spec.params == {"learning_rate": 0.05, "max_depth": 8, "subsample": 0.8, "gamma": 1.0, "tree_method": "hist"}
    assert any("gpu_hist" in w for w in spec.warnings)


def test_native_aliases_are_stored_under_one_name() -> None:
    spec = parse_xgboost_params({"eta": 0.1, "lambda": 2, "n_estimators": 7}, task="regression")
    assert spec.params == {"learning_rate": 0.1, "reg_lambda": 2.0} and spec.num_round == 7
    with pytest.raises(SpecError, match="eta and learning_rate are the same parameter"):
        parse_xgboost_params({"eta": 0.1, "learning_rate": 0.2}, task="regression")
    with pytest.raises(SpecError, match="lambda and reg_lambda are the same parameter"):  # said reg_lambda twice
        parse_xgboost_params({"lambda": 1, "reg_lambda": 2}, task="regression")


@pytest.mark.parametrize(
    ("params", "task", "classes", "path", "words"),
    [
        ({"max_dept": 3}, "regression", None, "params.max_dept", "unknown xgboost parameter 'max_dept'"),
        ({"n_jobs": 3}, "regression", None, "params.n_jobs", "use params.threads_per_worker"),
        ({"nthread": 3}, "regression", None, "params.nthread", "use params.threads_per_worker"),
        ({"missing": 0}, "regression", None, "params.missing", "a null or NaN feature is a bad row"),
        # xgboost refused these only when the fit started, with a traceback and a C++ backtrace
        ({"objective": "reg:quantileerror"}, "regression", None, "params.quantile_alpha", "need quantile_alpha"),
        ({"eval_metric": "quantile"}, "regression", None, "params.quantile_alpha", "need quantile_alpha"),
        ({"base_score": 5}, "classification", 2, "params.base_score", "binary:logistic takes a base_score in (0, 1)"),
        ({"objective": "reg:gamma", "base_score": 0}, "regression", None, "params.base_score", "> 0"),
        ({"subsample": 0}, "regression", None, "params.subsample", "in (0, 1]"),
        ({"learning_rate": "fast"}, "regression", None, "params.learning_rate", "must be a finite number"),
        ({"tree_method": "exact"}, "regression", None, "params.tree_method", "one of hist, approx"),
        ({"num_round": 0}, "regression", None, "params.num_round", "between 1"),
        ({"objective": "reg:nonsense"}, "regression", None, "params.objective", "unknown objective"),
        ({"objective": "multi:softprob"}, "regression", None, "params.objective", "classification objective"),
        ({"objective": "count:poisson"}, "classification", 2, "params.objective", "regression objective"),
        ({"objective": "multi:softprob"}, "classification", 2, "params.objective", "binary:logistic"),
        ({"eval_metric": "mlogloss"}, "classification", 2, "params.eval_metric", "not a binary metric"),
        ({"eval_metric": ["rmse", 3]}, "regression", None, "params.eval_metric", "list of names"),
        ({"max_depth": 0}, "regression", None, "params.max_depth", "lossguide"),
        ({"validation_fraction": 1}, "regression", None, "params.validation_fraction", "(0, 1)"),
        ({}, None, None, "dataset.task", "required"),
    ],
)
def test_bad_params(params: dict[str, Any], task: Any, classes: int | None, path: str, words: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_xgboost_params(params, task=task, num_classes=classes)
    assert info.value.path == path and words in info.value.message, info.value


def test_metric_thresholds_and_lists() -> None:
    spec = parse_xgboost_params({"eval_metric": ["error@0.7", "auc"]}, task="classification", num_classes=2)
    assert spec.eval_metric == ("error@0.7", "auc")


@pytest.mark.parametrize(
    ("params", "words"),
    [  # the job succeeded exactly as without them, and nothing said so
        ({"rate_drop": 0.5}, "params.rate_drop is not used: xgboost reads it only with booster dart (this job's "
         "objective is reg:squarederror)"),
        ({"huber_slope": 2}, "only with objective reg:pseudohubererror or eval_metric mphe"),
        ({"quantile_alpha": 0.3}, "only with objective reg:quantileerror or eval_metric quantile"),
    ],
)  # fmt: skip
def test_a_parameter_xgboost_would_ignore_is_warned_about(params: dict[str, Any], words: str) -> None:
    assert any(words in w for w in parse_xgboost_params(params, task="regression").warnings)
    for used in ({**params, "booster": "dart", "objective": "reg:pseudohubererror"}, {**params, "eval_metric": "mphe"}):
        if "huber_slope" in params:  # read by the objective, or by the metric (its value changes with it)
            assert not parse_xgboost_params(used, task="regression").warnings
    # scale_pos_weight changes a regression too (reg:logistic, reg:squarederror): no warning
    assert not parse_xgboost_params({"objective": "reg:logistic", "scale_pos_weight": 3}, task="regression").warnings


def test_labels_an_objective_cannot_take() -> None:
    from workers.training.xgboost.spec import label_problem

    assert "reg:gamma needs labels positive; the training labels run from -3 to 8" in (
        label_problem("reg:gamma", -3.0, 8.0) or ""
    )
    assert label_problem("reg:gamma", 0.0, 1.0) is not None and label_problem("reg:tweedie", 0.0, 1.0) is None
    assert label_problem("reg:logistic", 0.0, 1.5) is not None and label_problem("reg:squarederror", -9, 9) is None


def test_an_alias_is_named_as_the_request_gave_it_and_values_as_written() -> None:
    """``{"eta": -1}`` said ``params.learning_rate: ... got -1.0``; ``{"num_round": true}`` said ``got True``
    (walkthrough)."""
    with pytest.raises(SpecError) as caught:
        parse_xgboost_params({"eta": -1}, task="regression")
    assert caught.value.path == "params.eta"
    assert caught.value.message.startswith("eta (learning_rate) must be") and caught.value.message.endswith("got -1")
    with pytest.raises(SpecError, match=r"got true$"):
        parse_xgboost_params({"num_round": True}, task="regression")
    with pytest.raises(SpecError) as caught:
        parse_xgboost_params({"n_estimators": -1}, task="regression")
    assert caught.value.path == "params.n_estimators"
    with pytest.raises(SpecError) as caught:
        parse_xgboost_params({"random_state": "x"}, task="regression")
    assert caught.value.path == "params.random_state" and caught.value.message.endswith('got "x"')


def test_every_bad_field_is_named_at_once() -> None:
    """A request with three bad parameters was refused three times, one field per 422 (pydantic names them all)."""
    with pytest.raises(SpecError) as caught:
        parse_xgboost_params(
            {"eta": -1, "max_depth": "3", "num_round": 0, "subsample": 0.5, "objective": "nope", "colsample": 1},
            task="regression",
        )
    paths = [p.path for p in caught.value.problems]
    assert paths == ["params.colsample", "params.eta", "params.max_depth", "params.num_round", "params.objective"]
    assert caught.value.path == "params.colsample" and "unknown xgboost parameter 'colsample'" in caught.value.message
    ends = [p.message.rsplit(", ", 1)[-1] for p in caught.value.problems[1:4]]
    assert ends == ["got -1", 'got "3"', "got 0"]


def test_a_check_of_two_fields_waits_for_both_to_be_valid() -> None:
    """max_depth 0 needs grow_policy lossguide: with grow_policy itself wrong, only grow_policy is named."""
    with pytest.raises(SpecError) as caught:
        parse_xgboost_params({"max_depth": 0, "grow_policy": "lossy"}, task="regression")
    assert [p.path for p in caught.value.problems] == ["params.grow_policy"]
    with pytest.raises(SpecError) as caught:
        parse_xgboost_params({"checkpoint_rounds": 50, "num_round": 1.5}, task="regression")
    assert [p.path for p in caught.value.problems] == ["params.num_round"]  # not checkpoint_rounds above 100
    with pytest.raises(SpecError) as caught:  # its type is its own: named with the others (review)
        parse_xgboost_params({"eta": -1, "checkpoint_rounds": "x"}, task="regression")
    assert [p.path for p in caught.value.problems] == ["params.eta", "params.checkpoint_rounds"]


def _paths(params: dict[str, Any], task: Any = "regression", classes: int | None = None) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as caught:
        parse_xgboost_params(params, task=task, num_classes=classes)
    return [(p.path, p.message) for p in caught.value.problems]


def test_every_unknown_name_is_named_on_its_own_with_its_hint() -> None:
    """{"nthread": 2, "missing": 0} named only missing; with "foo" added, the three were one entry at params.foo
    without their hints (walkthrough)."""
    found = _paths({"nthread": 2, "missing": 0})
    assert [path for path, _ in found] == ["params.missing", "params.nthread"]
    assert "a null or NaN feature is a bad row" in found[0][1] and "params.threads_per_worker" in found[1][1]
    found = _paths({"nthread": 2, "missing": 0, "foo": 1})
    assert [path for path, _ in found] == ["params.foo", "params.missing", "params.nthread"]
    assert found[0][1].startswith("unknown xgboost parameter 'foo'; known: ")
    assert "bad row" in found[1][1] and "threads_per_worker" in found[2][1]


def test_an_alias_clash_is_named_with_the_other_problems() -> None:
    found = _paths({"eta": 0.1, "learning_rate": 0.2, "subsample": 2})
    assert [path for path, _ in found] == ["params.learning_rate", "params.subsample"]
    assert "eta and learning_rate are the same parameter" in found[0][1]


@pytest.mark.parametrize(
    ("params", "task", "classes", "expected"),
    [
        ({"objective": "reg:quantileerror", "subsample": 2}, "regression", None,
         ["params.subsample", "params.quantile_alpha"]),
        ({"base_score": 5, "max_bin": 1}, "classification", 2, ["params.max_bin", "params.base_score"]),
        ({"max_depth": 0, "eta": -1}, "regression", None, ["params.eta", "params.max_depth"]),
        ({"checkpoint_rounds": 50, "num_round": 10, "subsample": 2}, "regression", None,
         ["params.subsample", "params.checkpoint_rounds"]),
        # the field a rule reads is bad itself: only its own problem
        ({"objective": "reg:quantileerror", "quantile_alpha": 2}, "regression", None, ["params.quantile_alpha"]),
    ],
)  # fmt: skip
def test_a_rule_of_several_fields_is_named_once_its_fields_are_valid(
    params: dict[str, Any], task: Any, classes: int | None, expected: list[str]
) -> None:
    """Those rules waited for every field of the request to be valid (walkthrough)."""
    assert [path for path, _ in _paths(params, task, classes)] == expected


def test_max_cat_to_onehot_is_warned_about() -> None:
    """sparktrain one-hot encodes categorical columns itself: xgboost never sees a categorical feature."""
    spec = parse_xgboost_params({"max_cat_to_onehot": 4}, task="regression")
    assert any(w.startswith("params.max_cat_to_onehot is not used: sparktrain one-hot encodes") for w in spec.warnings)

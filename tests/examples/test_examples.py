"""The shipped request bodies are valid requests (the README's curl session posts them), and Swagger shows the
same bodies as examples/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.schemas.train import TRAIN_EXAMPLES, TrainRequest
from workers.training.spark_ml.spec import parse_spark_ml_params
from workers.training.torch.spec import parse_network, parse_optimizer
from workers.training.xgboost.spec import parse_xgboost_params

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
NOT_TRAINING = {"gpu-smoke.json"}
"""Bodies of other endpoints (tested with theirs)."""
EXAMPLES = sorted(p for p in EXAMPLES_DIR.glob("*.json") if p.name not in NOT_TRAINING)


def _check(request: TrainRequest) -> None:
    if request.framework == "spark_ml":
        parse_spark_ml_params(request.params, task=request.dataset.task)
    elif request.framework == "xgboost":
        parse_xgboost_params(request.params, task=request.dataset.task, num_classes=request.dataset.num_classes)
    else:
        assert request.network is not None and request.training is not None
        features = request.dataset.features or []
        width = 64 if features == ["pixels"] else len(features)
        spec = parse_network(request.network, input_shape=(width,))
        parse_optimizer(request.training.optimizer)
        assert spec.output_units >= 1


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_is_a_valid_train_request(path: Path) -> None:
    _check(TrainRequest.model_validate(json.loads(path.read_text())))


def test_swagger_examples_are_valid() -> None:
    for example in TRAIN_EXAMPLES.values():
        _check(TrainRequest.model_validate(example["value"]))


@pytest.mark.parametrize(
    ("swagger", "file"),
    [("xgboost_taxi", "xgboost-taxi.json"), ("linear_regression_torch", "linear-regression.json"),
     ("random_forest_cv", "random-forest-cv.json")],
)  # fmt: skip
def test_swagger_shows_the_shipped_bodies(swagger: str, file: str) -> None:
    assert TRAIN_EXAMPLES[swagger]["value"] == json.loads((EXAMPLES_DIR / file).read_text())


def test_the_article_jobs_are_shipped() -> None:
    """One body per job of the seed article (docs/examples.md)."""
    names = {p.name for p in EXAMPLES_DIR.glob("*.json")}
    assert {"linear-regression.json", "random-forest-cv.json", "xgboost-taxi.json"} <= names


def test_readme_example_is_the_article_grid() -> None:
    body = json.loads((EXAMPLES_DIR / "random-forest-cv.json").read_text())
    assert body["params"]["grid"] == {"maxBins": [100, 200], "maxDepth": [2, 7, 10], "numTrees": [5, 20]}
    assert body["params"]["num_folds"] == 3


def test_xgboost_example_has_the_articles_parameters() -> None:
    params = json.loads((EXAMPLES_DIR / "xgboost-taxi.json").read_text())["params"]
    article = {"learning_rate": 0.05, "max_depth": 8, "subsample": 0.8, "gamma": 1, "num_round": 500}
    assert {k: params[k] for k in article} == article

"""The shipped request bodies are valid requests (the README's curl session posts them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.schemas.train import TRAIN_EXAMPLES, TrainRequest
from workers.training.spark_ml.spec import parse_spark_ml_params
from workers.training.torch.spec import parse_network, parse_optimizer

EXAMPLES = sorted(Path(__file__).resolve().parents[2].joinpath("examples").glob("*.json"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_is_a_valid_train_request(path: Path) -> None:
    request = TrainRequest.model_validate(json.loads(path.read_text()))
    if request.framework == "spark_ml":
        parse_spark_ml_params(request.params, task=request.dataset.task)
    else:
        assert request.network is not None and request.training is not None
        width = len(request.dataset.features or []) if request.dataset.features != ["pixels"] else 64
        spec = parse_network(request.network, input_shape=(width,))
        parse_optimizer(request.training.optimizer)
        assert spec.output_units >= 1


def test_swagger_examples_are_valid() -> None:
    for example in TRAIN_EXAMPLES.values():
        request = TrainRequest.model_validate(example["value"])
        if request.framework == "spark_ml":
            parse_spark_ml_params(request.params, task=request.dataset.task)
        else:
            assert request.network is not None
            parse_network(request.network, input_shape=(64,))


def test_readme_example_is_the_article_grid() -> None:
    body = json.loads((EXAMPLES[0].parent / "random-forest-cv.json").read_text())
    assert body["params"]["grid"] == {"maxBins": [100, 200], "maxDepth": [2, 7, 10], "numTrees": [5, 20]}
    assert body["params"]["num_folds"] == 3

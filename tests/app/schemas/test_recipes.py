"""The recipe request models: bounds, and the shipped example body (examples/gpu-smoke.json) is the Swagger one."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from app.core.settings import REPO_ROOT
from app.schemas.recipes import GPU_SMOKE_EXAMPLES, GpuSmokeRequest


def test_example_file_is_the_article_request() -> None:
    body = json.loads((REPO_ROOT / "examples" / "gpu-smoke.json").read_text())
    request = GpuSmokeRequest.model_validate(body)
    assert request == GpuSmokeRequest()  # the defaults are the article's test
    assert body == GPU_SMOKE_EXAMPLES["article"]["value"]
    for example in GPU_SMOKE_EXAMPLES.values():
        GpuSmokeRequest.model_validate(example["value"])


@pytest.mark.parametrize(
    "body",
    [{"rows": 0}, {"rows": 100_000_001}, {"partitions": 0}, {"partitions": 10_001}, {"device": "gpu"}, {"x": 1}],
)
def test_out_of_bounds(body: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        GpuSmokeRequest.model_validate(body)


def test_bounds_are_inclusive() -> None:
    assert GpuSmokeRequest(rows=1, partitions=1).rows == 1
    assert GpuSmokeRequest(rows=100_000_000, partitions=10_000, device="cuda").partitions == 10_000

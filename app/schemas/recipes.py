"""Wire models of the recipes: small self-contained Spark jobs that check what the cluster can do."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from app.schemas.body import Body

GPU_SMOKE = "gpu-smoke"


class GpuSmokeRequest(Body):
    """``POST /recipes/gpu-smoke``: join two DataFrames of ``rows`` rows, count the result and say whether the
    RAPIDS Accelerator ran it on GPUs (the RAPIDS documentation's first example, the article's ``/gpu_test``)."""

    rows: int = Field(
        1_000_000, ge=1, le=100_000_000, description="Rows of each of the two DataFrames (1 to 100,000,000)."
    )
    partitions: int = Field(
        16, ge=1, le=10_000, description="Partitions of each DataFrame and of the join's shuffle (1 to 10,000)."
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="auto: whatever the cluster has (GPUs when the RAPIDS plugin is active); cpu: Spark SQL on the "
        "CPU even where the plugin is active; cuda: the GPU or nothing (422 at once when the plugin is not active "
        "or Spark knows of no GPU, and the job fails if no operator ran on a GPU).",
    )


GPU_SMOKE_EXAMPLES: dict[str, dict[str, Any]] = {
    "article": {
        "summary": "The article's GPU test: two 1,000,000-row DataFrames",
        "value": {"rows": 1_000_000, "partitions": 16, "device": "auto"},
    },
    "quick": {
        "summary": "A quick check (20,000 rows, 4 partitions)",
        "value": {"rows": 20_000, "partitions": 4, "device": "auto"},
    },
    "gpu_required": {
        "summary": "Fail unless the join runs on GPUs",
        "value": {"rows": 10_000_000, "partitions": 16, "device": "cuda"},
    },
}

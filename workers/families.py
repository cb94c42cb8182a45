"""Which model families exist, the Celery task that runs each kind of job, and the module that does the work.

Plain constants: the API imports this to route jobs without importing any family's code.
"""

from __future__ import annotations

FRAMEWORKS = ("torch", "xgboost", "spark_ml")
AVAILABLE_FRAMEWORKS = FRAMEWORKS
"""Families this release can train."""

DRIVERS = {
    "torch": "workers.training.torch.driver",
    "xgboost": "workers.training.xgboost.driver",
    "spark_ml": "workers.training.spark_ml.driver",
}

RECIPES = {"gpu-smoke": "workers.recipes.gpu_smoke"}
"""Recipe jobs (type ``recipe``, the recipe's name in the job's ``name``): each module has ``run(ctx, request)``."""


def task_name(job_type: str, framework: str) -> str:
    """Explicit Celery task names (DESIGN.md §3): ``train.spark_ml``, ``train.torch``, ``evaluate.run``, ..."""
    if job_type == "train":
        return f"train.{framework}"
    return f"{job_type}.run"

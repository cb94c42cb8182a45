"""Which model families exist, the Celery task that runs each kind of job, the module that does the work, and the
plan type each kind of job stores.

Plain constants: the API imports this to route jobs without importing any family's code.
"""

from __future__ import annotations

import importlib
from typing import Any

FRAMEWORKS = ("torch", "xgboost", "spark_ml")
"""Families this release trains, evaluates and serves."""

DRIVERS = {
    "torch": "workers.training.torch.driver",
    "xgboost": "workers.training.xgboost.driver",
    "spark_ml": "workers.training.spark_ml.driver",
}
"""The module whose ``train(ctx, plan)`` runs a training job of each family."""

RECIPES = {"gpu-smoke": "workers.recipes.gpu_smoke"}
"""Recipe jobs (type ``recipe``, the recipe's name in the job's ``name``): each module has ``run(ctx, plan)``."""

_PLANS = {
    "train.torch": "workers.training.torch.config:TorchPlan",
    "train.xgboost": "workers.training.xgboost.spec:XGBoostPlan",
    "train.spark_ml": "workers.training.spark_ml.spec:SparkMLPlan",
    "evaluate": "workers.inference.spec:EvaluationPlan",
    "predict": "workers.inference.spec:PredictionPlan",
    "recipe.gpu-smoke": "workers.recipes.gpu_smoke:GpuSmokePlan",
}


def task_name(job_type: str, framework: str) -> str:
    """Explicit Celery task names: ``train.spark_ml``, ``train.torch``, ``evaluate.run``, ..."""
    if job_type == "train":
        return f"train.{framework}"
    return f"{job_type}.run"


def plan_type(job_type: str, framework: str | None, name: str | None) -> Any:
    """The dataclass a job of this kind stores as its plan (see workers.plans); KeyError for an unknown kind."""
    key = {"train": f"train.{framework}", "recipe": f"recipe.{name}"}.get(job_type, job_type)
    module, cls = _PLANS[key].split(":")
    return getattr(importlib.import_module(module), cls)

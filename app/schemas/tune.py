"""Wire model of ``POST /tune``: a search space over a ``/train`` body (docs/tuning.md)."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from app.schemas.body import Body
from app.schemas.train import NAME_PATTERN, MetricMode

DEFAULT_TRIALS = 10
"""A search's trials where ``trials`` is left out and the sampler is not a grid."""


class Distribution(Body):
    """Where one value of the base body is sampled from."""

    type: Literal["uniform", "loguniform", "int", "choice"]
    low: int | float | None = Field(None, description="uniform, loguniform, int: the smallest value.")
    high: int | float | None = Field(None, description="uniform, loguniform, int: the largest value.")
    step: int | float | None = Field(None, gt=0, description="int (and uniform): sample on this grid from low.")
    log: bool | None = Field(None, description="int: sample on a log scale (low >= 1, no step), as Optuna's int.")
    values: list[Any] | None = Field(None, min_length=1, max_length=1000, description="choice: the candidates.")

    @model_validator(mode="after")
    def _complete(self) -> Distribution:
        if self.type == "choice":
            if not self.values:
                raise ValueError("a choice needs values")
            return self
        if self.low is None or self.high is None:
            raise ValueError(f"a {self.type} distribution needs low and high")
        if self.low > self.high:
            raise ValueError("low must not be above high")
        if self.type == "loguniform" and self.low <= 0:
            raise ValueError("a loguniform distribution needs low > 0")
        if self.type == "int" and (not float(self.low).is_integer() or not float(self.high).is_integer()):
            raise ValueError("an int distribution needs whole low and high")
        if self.type == "int" and self.step is not None and not float(self.step).is_integer():
            raise ValueError("an int distribution needs a whole step")
        if self.type == "loguniform" and self.step is not None:
            raise ValueError("a loguniform distribution takes no step (Optuna's neither)")
        if self.log and self.type != "int":
            raise ValueError("log applies to int; for a float range on a log scale use type loguniform")
        if self.log and (self.low < 1 or (self.step is not None and self.step != 1)):
            raise ValueError("an int on a log scale needs low >= 1 and no step (Optuna's neither)")
        if self.step is not None:  # Optuna would quietly move high down onto the grid
            steps = (self.high - self.low) / self.step
            if not math.isfinite(steps):  # 0 to 1e308 by 1e-300: no grid, and round() of it raised (a 500)
                raise ValueError("the range holds more steps than a float counts: use a larger step")
            if abs(steps - round(steps)) > 1e-9 * max(1.0, abs(steps)):
                below = self.low + int(steps) * self.step
                raise ValueError(f"high must be low plus a whole number of steps: {below:g} or {below + self.step:g}")
        return self

    def points(self) -> int | None:
        """The values a grid takes along this axis: a choice's, an int's or a stepped uniform's (None: a range)."""
        if self.type == "choice":
            return len(self.values or [])
        if self.type == "int" or (self.type == "uniform" and self.step is not None):
            low, high, step = float(self.low or 0), float(self.high or 0), float(self.step or 1)
            return round((high - low) / step) + 1  # not //: (0.3 - 0.1) // 0.1 is 1.0, which lost 0.3
        return None

    def extremes(self) -> list[Any]:
        """The values that bound the range, as the sampler gives them (a uniform's as floats: Optuna samples ``8.0``,
        never ``8``): every value a sample can take lies between them (or is one of them)."""
        if self.type == "choice":
            return list(self.values or [])
        if self.type == "int":
            return [int(self.low or 0), int(self.high or 0)]
        return [float(self.low or 0), float(self.high or 0)]

    def inside(self) -> float | None:
        """A float range's value strictly inside it, as the sampler gives it (with a step, ``low + step``); None for
        an int or a choice, whose extremes are of the kind every sample is, and for a range of one value. A field
        that takes whole numbers passes a uniform's whole ends and refuses this."""
        if self.type not in ("uniform", "loguniform") or self.low == self.high:
            return None
        low, high = float(self.low or 0), float(self.high or 0)
        if self.step is not None:
            return round(low + float(self.step), 12)
        if self.type == "loguniform":
            return math.exp(math.log(low) * 0.623 + math.log(high) * 0.377)
        return low * 0.623 + high * 0.377


class TuneRequest(Body):
    name: str = Field(pattern=NAME_PATTERN, description="Model name every trial registers its version under.")
    base: dict[str, Any] = Field(description="A complete POST /train body (its own name is replaced by `name`).")
    space: dict[str, Distribution] = Field(
        min_length=1,
        max_length=50,
        description="Dotted paths into `base` (training.optimizer.learning_rate, network.layers.0.units, "
        "params.max_depth) to the distribution each is sampled from.",
    )
    sampler: Literal["random", "tpe", "grid"] = "tpe"
    pruner: Literal["none", "asha", "median"] = "none"
    min_resource: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="The epochs (torch) or boosting rounds (xgboost) a trial runs before a pruner judges it: ASHA's "
        "first rung (Optuna's min_resource, Ray's grace_period), the median pruner's warm-up. Default: 1 epoch for "
        "torch; for xgboost 3% of num_round, at least 5 rounds (median: from the first).",
    )
    trials: int = Field(  # type: ignore[assignment]  # None until _every_point: an int on every validated request
        None,
        ge=1,
        description="Trials in all (at most SPARKTRAIN_MAX_TRIALS); default: every point of a grid, else 10.",
    )
    parallel: int = Field(1, ge=1, le=64, description="Trials running at once.")
    metric: str | None = Field(
        None,
        max_length=64,
        pattern=r"^[A-Za-z0-9_]+$",
        description="A validation metric of the trials' results (loss, accuracy, rmse, ...); default: loss for "
        "torch, rmse for regression, accuracy for classification.",
    )
    mode: MetricMode | None = Field(None, description="Default: max for accuracy, f1, r2, auc; else min.")
    timeout_minutes: float | None = Field(
        None, gt=0, le=7 * 24 * 60, description="No new trial starts after this long; running ones are cancelled."
    )
    seed: int | None = Field(None, ge=0, le=2**31 - 1, description="The sampler's seed (reproducible searches).")

    @field_validator("min_resource", mode="after")
    @classmethod
    def _judged(cls, value: int | None, info: ValidationInfo) -> int | None:
        """Its own field's error (it was the whole body's): ``pruner`` is validated first, being declared first."""
        if value is not None and info.data.get("pruner") == "none":
            raise ValueError("min_resource is when a pruner first judges a trial: set pruner asha or median")
        return value

    @model_validator(mode="after")
    def _every_point(self) -> TuneRequest:
        """``trials`` left out: every point of a grid, as Optuna's GridSampler and Ray's grid_search run them
        (10 without a grid, or where a range has none: the sampler is refused then)."""
        if self.trials is None:
            counts = [dist.points() for dist in self.space.values()]
            grid = self.sampler == "grid" and None not in counts
            self.trials = math.prod(c or 0 for c in counts) if grid else DEFAULT_TRIALS
        return self


TUNE_EXAMPLE = {
    "digits_mlp_random": {
        "summary": "random search over the digits MLP's learning rate and width, with ASHA pruning",
        "value": {
            "name": "digits-tuned",
            "base": {
                "name": "digits-tuned",
                "framework": "torch",
                "dataset": {"uri": "datasets/digits/train.parquet", "features": ["pixels"], "label": "label",
                            "task": "classification", "num_classes": 10},
                "validation": {"uri": "datasets/digits/test.parquet"},
                "network": {"layers": [{"type": "dense", "units": 32, "activation": "relu"},
                                       {"type": "output", "units": 10, "activation": "softmax",
                                        "loss": "cross_entropy"}]},
                "training": {"epochs": 5, "batch_size_per_worker": 64, "num_workers": 1,
                             "optimizer": {"type": "adam", "learning_rate": 0.003}},
            },
            "space": {
                "training.optimizer.learning_rate": {"type": "loguniform", "low": 1e-4, "high": 3e-2},
                "network.layers.0.units": {"type": "int", "low": 16, "high": 128, "step": 16},
            },
            "sampler": "random",
            "pruner": "asha",
            "trials": 8,
            "parallel": 2,
            "metric": "accuracy",
            "mode": "max",
        },
    }
}  # fmt: skip

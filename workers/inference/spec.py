"""What evaluation and batch prediction jobs run: a resolved model and a resolved dataset (plain data)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from workers.data.categories import Categories
from workers.data.spec import ResolvedDataset
from workers.inference.signature import categorical_inputs, signature_of

OUTPUT_MARKER = "_SPARKTRAIN_JOB"
"""In a batch prediction's output: the id of the job that wrote it (Spark readers skip ``_`` files; the service
reads it to tell whose the output is, app/services/outputs.py)."""


@dataclass(frozen=True)
class ModelRef:
    """A model version or a checkpoint, with the card that says how to feed it."""

    framework: str
    uri: str
    card: dict[str, Any]
    """features, labels, task, num_classes, class_labels, array_column, input_shape"""
    name: str | None = None
    version: int | None = None
    checkpoint_id: str | None = None

    @property
    def features(self) -> tuple[str, ...]:
        return tuple(self.card.get("features") or ())

    @cached_property
    def categories(self) -> Categories | None:
        """The one-hot encoding of a model trained with categorical features (:mod:`workers.data.categories`)."""
        stored = self.card.get("categorical")
        return Categories.from_dict(stored) if stored else None

    @property
    def inputs(self) -> tuple[str, ...]:
        """The columns the model is fed from: its features, or the columns its one-hot features are made from."""
        return self.categories.inputs if self.categories is not None else self.features

    def reading(self, ds: ResolvedDataset, **changes: Any) -> ResolvedDataset:
        """``ds`` read as this model was trained: its input columns, its categorical ones as their trained types
        (a text ``x`` in a whole-number column is a bad row), and ``changes``."""
        categories = self.categories
        kinds = categories.types if categories is not None else {}
        return replace(ds, features=self.inputs, categorical=tuple(categories.levels) if categories else (),
                       column_types={**ds.column_types, **kinds}, **changes)  # fmt: skip

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(self.card.get("labels") or ())

    @property
    def task(self) -> str:
        return str(self.card.get("task") or "regression")

    @property
    def class_labels(self) -> tuple[Any, ...] | None:
        labels = self.card.get("class_labels")
        return tuple(labels) if labels else None

    @cached_property
    def signature(self) -> dict[str, Any]:
        """The model's signature (recorded at training, or derived from the card): what requests are checked
        against (:mod:`workers.inference.signature`)."""
        stored = signature_of(self.card, self.framework)
        if self.categories is None:
            return stored
        return {**stored, "inputs": categorical_inputs(stored, self.categories)}

    @property
    def width(self) -> int:
        if self.card.get("array_column"):
            shape = self.card.get("input_shape") or [0]
            total = 1
            for d in shape:
                total *= int(d)
            return total
        return len(self.features)


@dataclass(frozen=True)
class EvaluationPlan:
    model: ModelRef
    dataset: ResolvedDataset
    groups: tuple[str, ...]
    batch_size: int = 1024
    eval_workers: int | None = None
    roc_steps: int = 32
    exact_auc: bool = False
    top_k: tuple[int, ...] = (1, 5)


@dataclass(frozen=True)
class PredictionPlan:
    model: ModelRef
    dataset: ResolvedDataset
    key: str
    output_path: str
    batch_size: int = 1024

"""A model's signature: the columns (name and type) it takes and what it answers, in MLflow's schema format.

Recorded when a model is trained, from the feature columns' types in the training data (``ResolvedDataset.
column_types``), and stored in the model card (``card["signature"]``: the version's params, ``spec.json``,
``card.json``, and the ``MLmodel`` file). A version trained before signatures existed has none stored: its
signature is *derived* from the card (the feature names it records, every numeric column as ``double``), and says
so (``recorded: false``).

Inputs are MLflow column specs (``{"name", "type", "required"}``, an array column ``{"type": "array", "items":
{"type": "double"}}``); a sequence model takes one tensor ``{"type": "tensor", "tensor-spec": {"dtype":
"float32", "shape": [-1, -1, features]}}``. The checks here find the first column a request gets wrong and say
what the model expects (:class:`workers.errors.SpecError`, which the API answers as a 422).

Pure Python (the API process imports it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from workers.errors import SpecError
from workers.numbers import shown

if TYPE_CHECKING:
    from workers.data.categories import Categories

INTEGER_TYPES = ("integer", "long")
NUMERIC_TYPES = ("integer", "long", "float", "double", "boolean")
_SPARK_TO_MLFLOW = {
    "tinyint": "long",
    "smallint": "long",
    "int": "long",
    "integer": "long",
    "bigint": "long",
    "long": "long",
    "float": "double",
    "double": "double",
    "boolean": "boolean",
    "string": "string",
}
"""Whole numbers as ``long`` and fractions as ``double``, MLflow's widest: its schema enforcement refuses to
narrow (a DataFrame of Python ints is int64, of floats float64), and the network takes float32 either way."""


def mlflow_type(spark_type: str | None) -> dict[str, Any]:
    """An MLflow type (``{"type": ...}``, with ``items`` for arrays) for a Spark SQL type string."""
    text = (spark_type or "double").strip().lower()
    if text.startswith("array<") and text.endswith(">"):
        return {"type": "array", "items": mlflow_type(text[6:-1])}
    if text.startswith("decimal"):
        return {"type": "double"}
    return {"type": _SPARK_TO_MLFLOW.get(text, "double")}


def _outputs(card: Mapping[str, Any], framework: str) -> list[dict[str, Any]]:
    """What the model's MLflow ``python_function`` answers. torch (sparktrain's own loader, as ``/predict``):
    labels, class indices and probabilities for classification, one value per label column for regression, per
    step for per-step sequence models. xgboost (``mlflow.xgboost``): the booster's output, float32 values or
    P(class 1), or a probability per class. Spark ML (``mlflow.spark``): the ``prediction`` column, the value or
    the class index as a double."""
    if framework == "spark_ml":
        return [{"type": "double", "required": True}]
    if framework == "xgboost":
        classes = int(card.get("num_classes") or 0) if card.get("task") == "classification" else 0
        if classes > 2:
            return [{"type": "tensor", "tensor-spec": {"dtype": "float32", "shape": [-1, classes]}}]
        return [{"type": "float", "required": True}]
    per_step = bool(card.get("sequence")) and (card.get("sequence") or {}).get("labels") == "per_step"

    def spec(name: str, kind: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, **({"type": "array", "items": kind} if per_step else kind), "required": True}

    if card.get("task") == "classification":
        names = card.get("class_labels")
        label = {"type": "string"} if names and any(isinstance(n, str) for n in names) else {"type": "long"}
        probabilities = {"type": "array", "items": {"type": "double"}}
        return [spec("prediction", label), spec("class_index", {"type": "long"}), spec("probabilities", probabilities)]
    labels = [str(c) for c in card.get("labels") or []] or ["prediction"]
    if len(labels) == 1:
        return [spec("prediction", {"type": "double"})]
    return [spec(name, {"type": "double"}) for name in labels]


def build_signature(
    card: Mapping[str, Any], column_types: Mapping[str, str] | None, framework: str = "torch"
) -> dict[str, Any]:
    """The signature of a model with this card, from the training data's Spark types of its feature columns
    (``recorded``); without types every column is taken as a number (``recorded: false``, see
    :func:`signature_of`)."""
    features = [str(f) for f in card.get("features") or []]
    types = dict(column_types or {})
    recorded = bool(types) and all(f in types for f in features)
    sequence = card.get("sequence")
    if sequence:
        shape = [int(d) for d in card.get("input_shape") or [0, len(features)]]
        inputs: list[dict[str, Any]] = [
            {"type": "tensor", "tensor-spec": {"dtype": "float32", "shape": [-1, -1, shape[-1]]}}
        ]
    else:
        inputs = []
        for name in features:
            kind = mlflow_type(types.get(name)) if recorded else {"type": "double"}
            if card.get("array_column") and kind["type"] != "array":
                kind = {"type": "array", "items": {"type": "double"}}
            inputs.append({"name": name, **kind, "required": True})
    return {"inputs": inputs, "outputs": _outputs(card, framework), "params": None, "recorded": recorded}


def signature_of(card: Mapping[str, Any], framework: str = "torch") -> dict[str, Any]:
    """The stored signature of a card, or one derived from its feature names (a model trained before
    signatures were recorded: every feature a number, an array column an array of numbers)."""
    stored = card.get("signature")
    if isinstance(stored, Mapping) and isinstance(stored.get("inputs"), list):
        return dict(stored)
    return build_signature(card, None, framework)


def categorical_inputs(stored: Mapping[str, Any], categories: Categories) -> list[dict[str, Any]]:
    """The columns a model trained with categorical features is fed from (what sparktrain checks requests
    against): its numeric inputs as its stored signature has them, and each categorical one as text, a whole
    number or a boolean (``categorical: true``). The stored signature lists the one-hot columns: what MLflow's
    flavors feed the model."""
    specs = {spec["name"]: spec for spec in columns(stored)}
    types = categories.types
    out: list[dict[str, Any]] = []
    for name in categories.inputs:
        if name in categories.levels:
            out.append({"name": name, **mlflow_type(types.get(name, "string")), "required": True, "categorical": True})
        else:
            out.append(specs.get(name) or {"name": name, "type": "double", "required": True})
    return out


def columns(signature: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The named column specs of a signature (none for a tensor signature)."""
    return [spec for spec in signature.get("inputs") or [] if spec.get("type") != "tensor" and "name" in spec]


def describe(spec: Mapping[str, Any]) -> str:
    """``pixels: array<double>``, ``trip_distance: double``."""
    kind = str(spec.get("type"))
    if kind == "array":
        kind = f"array<{describe(spec.get('items') or {}).split(': ')[-1]}>"
    return f"{spec['name']}: {kind}" if "name" in spec else kind


def expected(signature: Mapping[str, Any]) -> str:
    return ", ".join(describe(spec) for spec in columns(signature))


def names_problem(given: Iterable[Any], specs: list[dict[str, Any]], noun: str = "column") -> str | None:
    """What is wrong with a request's column names, or None: the missing ones and the unexpected ones together (a
    misspelt column is both), then what the model takes."""
    given = list(given)
    names = [spec["name"] for spec in specs]
    missing = [n for n in names if n not in given]
    extra = [str(n) for n in given if n not in names]
    if not missing and not extra:
        return None
    parts = [f"missing {noun}s {missing}"] if missing else []
    parts += [f"unexpected {noun}s {extra}"] if extra else []
    return f"{'; '.join(parts)}; the model expects {', '.join(describe(spec) for spec in specs)}"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def value_problem(value: Any, spec: Mapping[str, Any]) -> str | None:
    """Why ``value`` (a JSON value) does not fit the column spec, or None. Nulls are left to the value checks
    (a missing value is a bad row, not a type)."""
    kind = spec.get("type")
    if value is None:
        return None
    if spec.get("categorical"):  # made the category text of its column's type (workers/data/categories.py)
        return None if isinstance(value, str | int | float) else f"{shown(value)} is not a category"
    if kind == "array":
        if not isinstance(value, list | tuple):
            return f"{shown(value)} is not an array"
        items = spec.get("items") or {"type": "double"}
        return next((p for p in (value_problem(v, items) for v in _leaves(value)) if p), None)
    if kind == "boolean":
        return None if isinstance(value, bool) or value in (0, 1) else f"{shown(value)} is not a boolean"
    if kind in NUMERIC_TYPES:
        if not _is_number(value):
            return f"{shown(value)} is not a number"
        if kind in INTEGER_TYPES and isinstance(value, float) and math.isfinite(value) and not value.is_integer():
            return f"{shown(value)} is not a whole number"
        return None
    if kind == "string" and not isinstance(value, str):
        return f"{shown(value)} is not a string"
    return None


def _leaves(values: Sequence[Any]) -> Iterator[Any]:
    """An array's values, however nested (an image sent as rows of pixels, as its ``input_shape`` reads)."""
    for v in values:
        if isinstance(v, list | tuple):
            yield from _leaves(v)
        else:
            yield v


def _takes(spec: Mapping[str, Any]) -> str:
    kind = spec.get("type")
    if kind == "array":
        return "arrays of numbers"
    return {"long": "whole numbers", "integer": "whole numbers", "boolean": "booleans", "string": "strings"}.get(
        str(kind), "numbers"
    )


def check_values(row: Sequence[Any], specs: Sequence[Mapping[str, Any]], where: str) -> None:
    """One row's values (in the specs' order) against their column types."""
    for value, spec in zip(row, specs, strict=False):
        problem = value_problem(value, spec)
        if problem:
            raise SpecError(
                where, f"column {spec['name']!r} takes {_takes(spec)}: {problem}; the model expects {describe(spec)}"
            )


def integer_columns(signature: Mapping[str, Any]) -> list[int]:
    """Positions of the whole-number columns (a feature matrix's columns, for a vectorised check)."""
    return [i for i, spec in enumerate(columns(signature)) if spec.get("type") in INTEGER_TYPES]


def dataset_problem(schema: Mapping[str, str], signature: Mapping[str, Any]) -> tuple[str, str] | None:
    """A dataset's column (Spark types) that cannot feed the model: (column, why), or None. Numbers feed any
    numeric column (a dataset of integers for a model trained on doubles is fine); an array feeds an array."""
    for spec in columns(signature):
        name = spec["name"]
        if name not in schema:
            return name, f"no column {name!r}; the model expects {expected(signature)}"
        given = mlflow_type(schema[name])
        if spec.get("categorical") and given["type"] in ("string", "long", "boolean"):
            continue
        if (given["type"] == "array") != (spec["type"] == "array") or given["type"] == "string":
            return name, f"column {name!r} is {schema[name]}; the model expects {describe(spec)}"
    return None

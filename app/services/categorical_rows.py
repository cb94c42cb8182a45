"""Online rows for a model trained with categorical features: each row's inputs (by column, or in the inputs'
order) checked against the model's columns and types, then encoded as its one-hot features
(:meth:`workers.data.categories.Categories.encode`) in the model's feature order. A category the training rows did
not have encodes as all zeros, as in batch prediction."""

from __future__ import annotations

from typing import Any

from app.core.errors import ValidationFailed
from workers.errors import SpecError
from workers.inference import signature
from workers.inference.spec import ModelRef
from workers.numbers import shown


def categorical_matrix(rows: list[Any], model: ModelRef, loc: str, dtype: str) -> Any:
    """(n, features) of ``dtype``; a 422 naming the row and the column that is missing, mistyped, null or not
    finite."""
    categories = model.categories
    assert categories is not None
    inputs = list(categories.inputs)
    specs = signature.columns(model.signature)
    records: list[dict[str, Any]] = []
    for i, row in enumerate(rows):
        where = f"{loc}[{i}]"
        if isinstance(row, dict):
            if row.keys() != set(inputs):
                problem = signature.names_problem(list(row), specs, "feature")
                raise ValidationFailed.at(where, problem or "missing features")
            values = [row[c] for c in inputs]
        elif isinstance(row, list | tuple):
            if len(row) != len(inputs):
                raise ValidationFailed.at(where, f"{len(row)} values; the model needs {len(inputs)} ({inputs})")
            values = list(row)
        else:
            raise ValidationFailed.at(where, f"a row is an object of {inputs} or a list of their values")
        try:
            signature.check_values(values, specs, where)
        except SpecError as exc:
            raise ValidationFailed.of(exc) from exc
        records.append(dict(zip(inputs, values, strict=True)))
    x, problems = categories.encode(records)
    if problems:
        row_text, _, what = problems[0].partition(": ")
        raise ValidationFailed.at(f"{loc}[{row_text.removeprefix('row ')}]", what)
    from app.services.online import non_finite  # it imports this module

    bad = non_finite(x)  # a null or a non-number in a numeric input is NaN
    if bad is not None:
        i, j = bad
        column = model.features[j]
        raise ValidationFailed.at(
            f"{loc}[{i}]", f"column {column!r} is {shown(records[i].get(column))}: a numeric feature is null, NaN, "
            "infinite or beyond float32; the model cannot take it"
        )  # fmt: skip
    return x.astype(dtype)

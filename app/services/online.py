"""Online prediction: inline rows answered now, from a model cached in the driver process (MLflow ``/invocations``
bodies; V2's routes share it). Models are resolved once per selector and cached
(:class:`app.services.resolved_models.ResolvedModels`)."""

from __future__ import annotations

from functools import lru_cache
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from pydantic import StrictBool, StrictFloat, TypeAdapter

from app.core.errors import PayloadTooLarge, ValidationFailed
from app.core.settings import Settings
from app.schemas.inference import PredictRequest
from app.services.categorical_rows import categorical_matrix
from app.services.resolved_models import loaded
from workers import storage
from workers.errors import SpecError
from workers.inference import signature
from workers.inference.spec import ModelRef
from workers.numbers import shown

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def inline_rows(request: PredictRequest, model: ModelRef) -> list[dict[str, Any]] | list[list[Any]]:
    """The rows of an inline request: dicts (by column name) or lists (in the model's feature order). Named
    columns are checked against the model's signature first: a missing or an extra one is a 422 naming it."""
    names = expected_names(model)
    if request.dataframe_records is not None:
        _check_record_names(request.dataframe_records, names, model, "dataframe_records")
        return request.dataframe_records
    if request.dataframe_split is not None:
        split = request.dataframe_split
        _check_names(split.columns, names, model, "dataframe_split.columns")
        for i, row in enumerate(split.data):  # zip would cut a long row and report a short one as missing columns
            if not isinstance(row, list | tuple) or len(row) != len(split.columns):
                given = f"{len(row)} values" if isinstance(row, list | tuple) else shown(row)
                raise ValidationFailed.at(
                    f"dataframe_split.data[{i}]", f"{given} for {len(split.columns)} columns {list(split.columns)}"
                )
        return [dict(zip(split.columns, row, strict=True)) for row in split.data]
    if request.instances is not None:
        if request.instances and isinstance(request.instances[0], dict):
            _check_record_names(request.instances, names, model, "instances")
        return list(request.instances)
    inputs = request.inputs
    if isinstance(inputs, dict):
        columns = list(inputs)
        values = list(inputs.values())
        if not all(isinstance(v, list) for v in values) or len({len(v) for v in values}) > 1:
            raise ValidationFailed.at("inputs", "an object of columns maps each column to a list, all of one length")
        n = len(values[0]) if values else 0
        if n:
            _check_names(columns, names, model, "inputs")
        return [{c: inputs[c][i] for c in columns} for i in range(n)]
    if isinstance(inputs, list):
        if inputs and isinstance(inputs[0], dict):
            _check_record_names(inputs, names, model, "inputs")
        return inputs
    raise ValidationFailed.at("inputs", "an object of columns or a list of rows")


def expected_names(model: ModelRef) -> list[str]:
    """The column names a request may (and must) send: the signature's, or a sequence model's features."""
    named = [spec["name"] for spec in signature.columns(model.signature)]
    return named or list(model.features)


def _name_specs(model: ModelRef, names: list[str]) -> list[dict[str, Any]]:
    specs = signature.columns(model.signature)
    if specs:
        return specs
    return [{"name": n, "type": "array", "items": {"type": "double"}} for n in names]  # a sequence's per-step values


def _check_names(given: Any, names: list[str], model: ModelRef, loc: str) -> None:
    given = list(given)
    if given == names:
        return
    problem = signature.names_problem(given, _name_specs(model, names), "feature")
    if problem:
        raise ValidationFailed.at(loc, problem)


def _check_record_names(rows: list[Any], names: list[str], model: ModelRef, loc: str) -> None:
    expected = set(names)
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValidationFailed.at(f"{loc}[{i}]", "rows are all objects (by column) or all lists")
        if row.keys() != expected:
            _check_names(list(row), names, model, f"{loc}[{i}]")


def check_input_names(given: list[str], model: ModelRef) -> None:
    """V2 tensors named after the features: a missing or an extra one is a 422 naming it."""
    names = expected_names(model)
    if sorted(given) == sorted(names):
        return
    problem = signature.names_problem(given, _name_specs(model, names), "input")
    if problem:
        raise ValidationFailed.at("inputs", problem)


def expected_types(model: ModelRef) -> str:
    """What a model takes, for messages: ``trip_distance: double, ...`` (a sequence model: its tensor)."""
    return signature.expected(model.signature) or "a float tensor [batch, steps, features]"


FLOAT32_MAX = 3.4028234663852886e38  # models take float32 features: anything larger would become infinite


def feature_dtype(model: ModelRef) -> str:
    """What the model's features are fed as: float32 for torch and xgboost, float64 for a Spark ML pipeline (which
    was fitted on the data's doubles: rounding them to float32 would change its answers)."""
    return "float64" if model.framework == "spark_ml" else "float32"


def feature_matrix(rows: list[Any], model: ModelRef, loc: str) -> Any:
    """(n, width) in the model's feature order and :func:`feature_dtype`; 422 naming the row and the column missing,
    mistyped (a string or a boolean for a number) or not finite, and the type the signature expects."""
    if model.categories is not None:  # inputs by column, encoded as the one-hot features
        return categorical_matrix(rows, model, loc, feature_dtype(model))
    x = _fast_matrix(rows, model)
    if x is None:
        x = _careful_matrix(rows, model, loc)
    check_whole_numbers(x, model, loc)
    return x


def _careful_matrix(rows: list[Any], model: ModelRef, loc: str) -> Any:
    """Row by row, value by value: the first problem, named (the rows :func:`_fast_matrix` does not take)."""
    import numpy as np

    features = model.features
    array_column = bool(model.card.get("array_column"))
    specs = signature.columns(model.signature)
    width = model.width
    out = np.zeros((len(rows), width), dtype=feature_dtype(model))
    for i, row in enumerate(rows):
        where = f"{loc}[{i}]"
        if isinstance(row, dict):
            if any(f not in row for f in features):
                problem = signature.names_problem(list(row), _name_specs(model, list(features)), "feature")
                raise ValidationFailed.at(where, problem or "missing features")
            values: Any = [row[f] for f in features]
        else:  # a scalar row is one value (a one-feature model's), checked as a row of one
            values = [row] if array_column or not isinstance(row, list | tuple) else row
        wrong = f"values; the model needs {width} ({list(features)})"
        if isinstance(values, list | tuple) and not array_column and len(values) != width:
            hint = "; a row is a list of values: wrap it, [[...]]" if not isinstance(row, list | tuple) else ""
            raise ValidationFailed.at(where, f"{len(values)} {wrong}{hint}")  # before the types: a shifted row misleads
        _check_types(values, specs, where)
        flat = _flatten(values, model, where, bools=bool(specs))
        if len(flat) != width:
            raise ValidationFailed.at(where, f"{len(flat)} {wrong}")
        try:
            row64 = np.asarray(flat, dtype=np.float64)
        except OverflowError as exc:  # a whole number beyond float64
            j = next((j for j, v in enumerate(flat) if _beyond_float64(v)), 0)
            problem = f"features must be numbers within float32, not {shown(flat[j])}"
            raise ValidationFailed.at(where, f"column {column_name(model, j)!r}: {problem}") from exc
        bad = non_finite(row64)
        if bad is not None:
            raise ValidationFailed.at(
                where,
                f"column {column_name(model, bad[0])!r} is {shown(flat[bad[0]])}: a feature is NaN, infinite, missing "
                "or beyond float32; the model cannot take it",
            )
        out[i] = row64
    return out


def column_name(model: ModelRef, position: int) -> str:
    """The column at ``position`` of a feature row, for messages: ``h_distance``, or ``pixels[12]`` (an array)."""
    features = model.features
    if model.card.get("array_column"):
        return f"{features[0]}[{position}]"
    return str(features[position]) if position < len(features) else f"#{position}"


def non_finite(x: Any) -> tuple[int, ...] | None:
    """The index (``(position,)`` in a row, ``(row, column)`` in a matrix) of the first value NaN, infinite or
    beyond float32, or None."""
    import numpy as np

    fine = np.abs(x) <= FLOAT32_MAX  # NaN compares false
    if fine.all():
        return None
    return tuple(int(i) for i in np.unravel_index(int(np.argmin(fine)), fine.shape))


def _beyond_float64(value: Any) -> bool:
    try:
        float(value)
    except OverflowError:
        return True
    return False


def _check_types(values: Any, specs: list[dict[str, Any]], loc: str) -> None:
    if not isinstance(values, list | tuple) or not specs:
        return
    try:
        signature.check_values(values, specs, loc)
    except SpecError as exc:
        raise ValidationFailed.of(exc) from exc


def check_whole_numbers(x: Any, model: ModelRef, loc: str, *, row_in_loc: bool = True) -> None:
    """A whole-number column (``long`` in the signature) given a fraction is mistyped: 422 naming the column, its row
    at ``loc[row]`` (a body's rows), or with ``row_in_loc`` False in the message (V2, where ``inputs[0]`` would be
    the first tensor)."""
    import numpy as np

    positions = signature.integer_columns(model.signature)
    if model.card.get("array_column") or not positions or not len(x):
        return
    block = x[:, positions]
    bad = np.argwhere(np.isfinite(block) & (block != np.round(block)))
    if len(bad):
        row, col = int(bad[0][0]), positions[int(bad[0][1])]
        spec = signature.columns(model.signature)[col]
        raise ValidationFailed.at(
            f"{loc}[{row}]" if row_in_loc else loc,
            ("" if row_in_loc else f"row {row}, ") + f"column {spec['name']!r} takes whole numbers: "
            f"{float(x[row, col])!r} is not one; "
            f"the model expects {signature.describe(spec)}",
        )


def check_booleans(x: Any, model: ModelRef, loc: str) -> None:
    """A boolean column (``boolean`` in the signature) takes 0 and 1 only (true and false), as the rows of a body do:
    a 422 at ``loc`` naming the row and the column in the message (V2 tensors, which carry booleans as numbers)."""
    import numpy as np

    specs = signature.columns(model.signature)
    positions = [i for i, spec in enumerate(specs) if spec.get("type") == "boolean"]
    if model.card.get("array_column") or not positions or not len(x) or x.shape[1] != len(specs):
        return
    bad = np.argwhere(~np.isin(x[:, positions], (0.0, 1.0)))
    if len(bad):
        row, col = int(bad[0][0]), positions[int(bad[0][1])]
        value = float(x[row, col])
        given = shown(int(value) if value.is_integer() else value)
        raise ValidationFailed.at(
            loc,
            f"row {row}, column {specs[col]['name']!r} takes booleans: {given} is not a boolean; the model expects "
            f"{signature.describe(specs[col])}",
        )


_NUMBER_ROWS = TypeAdapter(list[list[StrictFloat]])
"""Rows of JSON numbers, as floats, in one pass of pydantic's core: strict, so a string of digits, a boolean (an
int to Python) or a null is refused, where numpy's conversion takes the first two (and makes the last NaN)."""
_NUMBERS = TypeAdapter(list[StrictFloat])


@lru_cache(maxsize=256)
def _typed_rows(kinds: tuple[bool, ...]) -> TypeAdapter[Any]:
    """Rows of a signature with boolean columns (``kinds``: True for one), where a boolean is a value (elsewhere a
    number only); a row of the wrong length is refused too."""
    items = tuple(StrictBool | StrictFloat if boolean else StrictFloat for boolean in kinds)
    return TypeAdapter(list[tuple[items]])  # type: ignore[valid-type]


def _fast_matrix(rows: list[Any], model: ModelRef) -> Any:
    """The common case: well-formed numeric rows, type-checked and made floats in one pass of pydantic's core, then
    one numpy call. None sends the rows down the careful path, which finds the first problem and names it."""
    import numpy as np

    try:
        if rows and isinstance(rows[0], dict):
            if model.card.get("array_column"):
                values: Any = list(map(itemgetter(model.features[0]), rows))
            else:
                values = list(map(itemgetter(*model.features), rows))  # tuples (or values, with one feature)
        else:
            values = rows
        specs = signature.columns(model.signature)
        booleans = tuple(spec.get("type") == "boolean" for spec in specs)
        if not values or not isinstance(values[0], list | tuple):
            rows_of: TypeAdapter[Any] = _NUMBERS
        elif any(booleans) and len(booleans) == model.width:
            rows_of = _typed_rows(booleans)
        else:
            rows_of = _NUMBER_ROWS
        matrix = np.asarray(rows_of.validate_python(values), dtype=np.float64).reshape(len(rows), -1)
    except (KeyError, TypeError, ValueError, OverflowError):  # pydantic's ValidationError is a ValueError
        return None
    if matrix.shape[1] != model.width or not (np.abs(matrix) <= FLOAT32_MAX).all():  # NaN compares false
        return None
    # what the careful path checks value by value, on the float64 values (before float32 rounds a fraction away):
    # a boolean column takes 0 and 1 only, a whole-number column whole numbers only
    if any(booleans) and not np.isin(matrix[:, [i for i, b in enumerate(booleans) if b]], (0.0, 1.0)).all():
        return None
    whole = signature.integer_columns(model.signature)
    if whole and not model.card.get("array_column") and (matrix[:, whole] != np.round(matrix[:, whole])).any():
        return None
    return matrix.astype(feature_dtype(model))


def _flatten(values: Any, model: ModelRef, where: str, *, bools: bool) -> list[Any]:
    """A row's values, flat; a null stays (numpy makes it NaN, which the finite check refuses by its column).
    Booleans pass only where the signature's types were checked first (they may feed a boolean column)."""
    flat: list[Any] = []

    def add(value: Any) -> None:
        if isinstance(value, list | tuple):
            for v in value:
                add(v)
        elif value is None:
            flat.append(value)
        elif (isinstance(value, bool) and not bools) or not isinstance(value, int | float):
            raise ValidationFailed.at(
                where, f"column {column_name(model, len(flat))!r}: features must be numbers, got {shown(value)}"
            )
        else:
            flat.append(value)

    add(values)
    return flat


def rows_loc(request: PredictRequest) -> str:
    """The request's field that holds its rows, for the errors that name a row (``dataframe_records[3]``)."""
    fields = ("dataframe_records", "instances", "inputs")
    return next((f for f in fields if getattr(request, f) is not None), "dataframe_split.data")


def check_row_limit(count: int, settings: Settings, loc: str = "inputs") -> None:
    if count == 0:
        raise ValidationFailed.at(loc, "no rows to predict; send at least one")
    if count > settings.max_predict_rows:
        raise PayloadTooLarge(
            f"{count} rows; online /predict takes at most {settings.max_predict_rows}. Register the rows as a "
            'dataset and POST /predict with "dataset" (and a key column) for a batch job on the executors.'
        )


def predict_rows(*, model: ModelRef, x: Any, cache: Any, spark: SparkSession, as_lists: bool = True) -> dict[str, Any]:
    """Predictions for a (n, width) matrix from the driver's model cache (numpy arrays with ``as_lists=False``)."""
    if model.framework == "torch":
        net = loaded(cache, model, _load_online)
        shape = model.card.get("input_shape") or [model.width]
        out: dict[str, Any] = net.predict(x.reshape(-1, *shape), as_lists=as_lists)
        return out
    if model.framework == "xgboost":
        booster = loaded(cache, model, _load_xgboost)
        answer: dict[str, Any] = booster.predict(x, as_lists=as_lists)
        return answer
    if model.framework == "spark_ml":
        return _spark_ml_rows(model, x, cache, spark)
    raise ValidationFailed.at("model", f"online prediction with {model.framework} models is not available yet")


def predict_sequences(*, model: ModelRef, rows: list[Any], cache: Any, loc: str = "inputs") -> dict[str, Any]:
    """Online prediction with a sequence model. A row is one sequence: a list of steps (each a list of the
    features' values, or a number with one feature), or an object mapping each feature to its per-step values.
    A last_step model answers one prediction per sequence, a per_step model a list per sequence (its steps)."""
    import numpy as np

    from workers.inference.answer import prediction_answer
    from workers.inference.sequences import pad_inline, per_step_lists

    features = model.features
    sequences: list[Any] = []
    for i, row in enumerate(rows):
        if isinstance(row, dict):
            missing = [f for f in features if f not in row]
            if missing:
                raise ValidationFailed.at(f"{loc}[{i}]", f"missing features {missing}; needs {list(features)}")
            columns = [row[f] for f in features]
            if not all(isinstance(c, list) for c in columns) or len({len(c) for c in columns}) != 1:
                raise ValidationFailed.at(f"{loc}[{i}]", "map each feature to a list of its steps, all one length")
            sequences.append([list(step) for step in zip(*columns, strict=True)])
        else:
            sequences.append(row)
    width = int((model.card.get("input_shape") or [0, len(features)])[-1])
    try:
        x, lengths = pad_inline(sequences, width)
    except ValueError as exc:
        raise ValidationFailed.at(loc, f"{exc} (one row is one sequence: a list of steps)") from exc
    net = loaded(cache, model, _load_online)
    out = net.outputs(x, lengths)
    classification = model.task == "classification"
    labels = list(model.class_labels) if model.class_labels else None
    if out.ndim == 2:  # last_step: one per sequence
        answer: dict[str, Any] = prediction_answer(out, classification=classification, labels=labels, as_lists=True)
        return answer
    flat = prediction_answer(
        out.reshape(-1, out.shape[-1]), classification=classification, labels=labels, as_lists=False
    )
    shaped = {k: np.asarray(v, dtype=object if k == "label" else None).reshape(*out.shape[:2], *np.shape(v)[1:])
              for k, v in flat.items()}  # fmt: skip
    return {k: per_step_lists(v, lengths) for k, v in shaped.items()}


def _load_online(uri: str) -> Any:
    """Small requests: one torch thread each beats a thread pool contending for the same cores."""
    import torch

    from workers.inference.torch_model import TorchModel

    torch.set_num_threads(1)
    return TorchModel.load(uri)


def _load_xgboost(uri: str) -> Any:
    from workers.inference.xgboost_model import XGBoostModel

    return XGBoostModel.load(uri, threads=1)


def _spark_ml_rows(model: ModelRef, x: Any, cache: Any, spark: SparkSession) -> dict[str, Any]:
    import pandas as pd
    from pyspark.ml import PipelineModel

    pipeline = loaded(cache, model, lambda uri: PipelineModel.load(str(storage.fetch_dir(uri))))
    frame = spark.createDataFrame(pd.DataFrame(x.astype("float64"), columns=list(model.features)))
    rows = pipeline.transform(frame).collect()
    if model.task != "classification":
        return {"prediction": [float(r["prediction"]) for r in rows]}
    index = [int(r["prediction"]) for r in rows]
    names = model.class_labels
    return {
        "class_index": index,
        "label": [names[i] for i in index] if names else index,
        "probabilities": [[float(p) for p in r["probability"]] for r in rows],
    }

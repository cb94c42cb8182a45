"""The V2 Open Inference Protocol (KServe, Triton, Seldon) on the same model cache as ``POST /predict``: the model a
path names, a request's tensors checked and turned into rows, the prediction as output tensors, a model's metadata.

Inputs: one tensor ``[n, width]`` of a model's features in order (any name but a feature's), or one tensor per
feature named after it (``[n]`` or ``[n, 1]``, every one the same ``n``; an array feature ``[n, length]``); a
sequence model one tensor ``[batch, steps, features]``. The signature's column types hold as for ``/predict``
(booleans 0 or 1, whole numbers whole). Outputs: ``predictions`` (class index, value, or ``[n, k]`` values of k
label columns), and for classification ``probabilities`` ``[n, classes]`` and ``label`` (BYTES, when classes have
names); a request's ``outputs`` picks some of them. An input named twice, a requested output the model does not
have, and a value its tensor's datatype cannot hold (a fraction in an INT tensor, a number in a BOOL one) are 422s.
The routes are app/api/routes/v2.py.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import StrictFloat, TypeAdapter, ValidationError
from sqlalchemy.orm import Session, sessionmaker

from app.core.errors import NotFound, ValidationFailed
from app.core.settings import Settings
from app.schemas.inference import InferRequest, InferResponse, InferTensor, ModelSelector
from app.services import models, online
from app.services.planning.inference import resolve_model
from workers.inference.spec import ModelRef

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_DTYPES = {"FP16": "<f2", "FP32": "<f4", "FP64": "<f8", "INT8": "i1", "INT16": "<i2", "INT32": "<i4",
           "INT64": "<i8", "UINT8": "u1", "UINT16": "<u2", "UINT32": "<u4", "UINT64": "<u8", "BOOL": "?"}  # fmt: skip
"""The numeric tensor types, and the numpy type of each one's binary data (little-endian, as the protocol sends)."""


def resolve(*, db: sessionmaker[Session], name: str, version: str | None, owner: str | None) -> ModelRef:
    """The model a V2 path names (``version`` as the path gives it; None: the newest), ``owner``'s (None: any)."""
    number = None
    if version is not None:
        if not (version.isascii() and version.isdigit()):
            raise ValidationFailed.at("version", f"versions are numbers, got {version!r}", source="path")
        number = int(version)
    try:
        selector = ModelSelector(name=name, version=number)
    except ValidationError as exc:  # a name or number no registered model can have
        which = f"{name!r}" if version is None else f"{name!r} version {version}"
        raise NotFound(f"No model {which}.") from exc
    with db() as session:
        return resolve_model(session, selector, owner=owner)


def read_binary_data(*, body: InferRequest, raw: bytes, offset: int) -> None:
    """The binary tensor data extension (tritonclient): the tensors with a ``binary_data_size`` parameter take
    their data, in order, from the bytes of ``raw`` after the JSON header (``offset``: its length)."""
    for tensor in body.inputs:
        size = (tensor.parameters or {}).get("binary_data_size")
        if size is None:
            continue
        if tensor.datatype not in _DTYPES:
            raise ValidationFailed.at(f"inputs.{tensor.name}.datatype", f"{tensor.datatype} is not numeric")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0 or offset + size > len(raw):
            raise ValidationFailed.at(
                f"inputs.{tensor.name}.parameters.binary_data_size",
                f"{size!r} is not a byte count within the {len(raw) - offset} bytes left in the body",
            )
        chunk = raw[offset : offset + size]
        offset += size
        if tensor.datatype == "BOOL" and chunk.translate(None, b"\x00\x01"):  # numpy reads any byte but 0 as true
            at = next(i for i, b in enumerate(chunk) if b > 1)
            raise ValidationFailed.at(f"inputs.{tensor.name}.data", f"binary data: byte {at} is {chunk[at]}; BOOL "
                                      "bytes are 0 (false) or 1 (true)")  # fmt: skip
        try:
            tensor.data = np.frombuffer(chunk, dtype=_DTYPES[tensor.datatype]).tolist()
        except ValueError as exc:  # a size that is not a whole number of elements
            raise ValidationFailed.at(f"inputs.{tensor.name}", f"binary data: {exc}") from exc
    if offset != len(raw):  # bytes no tensor claims: a binary_data_size too small, or a tensor sent as JSON too
        raise ValidationFailed.at(
            "body", f"{len(raw) - offset} bytes after the binary tensor data that no input's binary_data_size "
            "claims; the sizes must add up to the bytes after the JSON"
        )  # fmt: skip


def infer(
    *,
    db: sessionmaker[Session],
    settings: Settings,
    cache: Any,
    spark: SparkSession,
    name: str,
    version: str | None,
    owner: str | None,
    body: InferRequest,
) -> InferResponse:
    """The model's predictions for the request's tensors, as V2 output tensors: the requested ones (in the order
    asked), or all the model's."""
    model = resolve(db=db, name=name, version=version, owner=owner)
    if model.categories is not None:
        columns = ", ".join(model.categories.levels)
        raise ValidationFailed.at("inputs", f"the model takes categorical columns ({columns}), and V2 tensors are "
                                  "numbers: POST /predict with dataframe_records")  # fmt: skip
    requested = _check_names(body, model)
    if model.card.get("sequence"):
        outputs = _infer_sequences(settings, cache, model, body)
    else:
        outputs = _infer_rows(settings, cache, spark, model, body)
    if requested:
        answered = {t.name: t for t in outputs}
        if not set(requested) <= set(answered):  # the metadata lists an output this model did not give
            raise ValidationFailed.at("outputs", f"{requested} asked; the model answered {list(answered)}")
        outputs = [answered[n] for n in requested]
    return InferResponse(
        model_name=name, model_version=str(model.version) if model.version else None, id=body.id, outputs=outputs
    )


def _check_names(body: InferRequest, model: ModelRef) -> list[str]:
    """An input named twice, or a requested output the model does not have (or asked twice, or without a name),
    is a 422 naming it and listing what the model has. The outputs requested, by name (none: all)."""
    seen: set[str] = set()
    for i, tensor in enumerate(body.inputs):
        if tensor.name in seen:
            raise ValidationFailed.at(f"inputs[{i}].name", f"{tensor.name!r} names two inputs; send each one once")
        seen.add(tensor.name)
    known = [spec["name"] for spec in _output_specs(model)]
    requested: list[str] = []
    for i, output in enumerate(body.outputs or []):
        name = output.get("name")
        if not isinstance(name, str):
            raise ValidationFailed.at(f"outputs[{i}].name", f"a requested output is named: one of {known}")
        if name not in known:
            raise ValidationFailed.at(f"outputs[{i}].name", f"unknown output {name!r}; the model's outputs are {known}")
        if name in requested:
            raise ValidationFailed.at(f"outputs[{i}].name", f"{name!r} is requested twice; ask for each output once")
        requested.append(name)
    return requested


def _infer_rows(
    settings: Settings, cache: Any, spark: SparkSession, model: ModelRef, body: InferRequest
) -> list[InferTensor]:
    x = _rows(body, model)
    online.check_row_limit(len(x), settings)
    bad = online.non_finite(x)
    if bad is not None:
        row, column = bad[0], bad[1]
        raise ValidationFailed.at(
            "inputs",
            f"row {row}, column {online.column_name(model, column)!r} is {online.shown(float(x[row, column]))}: a "
            "value is NaN, infinite, missing or beyond float32; the model cannot take it",
        )
    online.check_whole_numbers(x, model, "inputs", row_in_loc=False)
    online.check_booleans(x, model, "inputs")
    x = x.astype(online.feature_dtype(model))
    out = online.predict_rows(model=model, x=x, cache=cache, spark=spark)
    n = len(x)
    if "probabilities" not in out:
        return [_values_tensor(out["prediction"])]
    probabilities = out["probabilities"]
    outputs = [
        InferTensor(name="predictions", shape=[n], datatype="INT64", data=out["class_index"]),
        InferTensor(name="probabilities", shape=[n, len(probabilities[0]) if n else 0], datatype="FP64",
                    data=[p for row in probabilities for p in row]),
    ]  # fmt: skip
    if model.class_labels:
        outputs.append(InferTensor(name="label", shape=[n], datatype="BYTES", data=[str(v) for v in out["label"]]))
    return outputs


def metadata(*, db: sessionmaker[Session], name: str, version: str | None, owner: str | None) -> dict[str, Any]:
    """The V2 model metadata: the versions, the input tensor (with the features in order) and the outputs."""
    model = resolve(db=db, name=name, version=version, owner=owner)
    with db() as session:
        latest = models.resolve_version(session=session, name=name, owner=owner)
        versions = [str(v.version) for v in latest.model.versions]
    input_shape = [-1, -1, len(model.features)] if model.card.get("sequence") else [-1, model.width]
    inputs = [
        {"name": "input", "datatype": "FP32", "shape": input_shape, "parameters": {"features": list(model.features)}}
    ]
    out: dict[str, Any] = {"name": name, "versions": versions, "platform": f"sparktrain_{model.framework}",
                           "inputs": inputs, "outputs": _output_specs(model)}  # fmt: skip
    if model.categories is not None:  # infer refuses it: advertising the one-hot tensor misled V2 clients
        out["inputs"] = []
        out["parameters"] = {"v2_infer": "refused: the model takes categorical columns; POST /predict takes them"}
    return out


def _output_specs(model: ModelRef) -> list[dict[str, Any]]:
    """The outputs infer answers, as the metadata lists them (and a request may ask for them by name)."""
    sequence = model.card.get("sequence")
    lead = [-1, -1] if sequence is not None and sequence["labels"] == "per_step" else [-1]
    several = model.task != "classification" and len(model.labels) > 1  # a value per label column, as infer answers
    shape = [*lead, len(model.labels)] if several else lead
    outputs: list[dict[str, Any]] = [{"name": "predictions", "datatype": "INT64" if model.task == "classification"
                                      else "FP64", "shape": shape}]  # fmt: skip
    if model.task == "classification":
        classes = model.card.get("num_classes", -1)
        outputs.append({"name": "probabilities", "datatype": "FP64", "shape": [*lead, classes]})
        if model.class_labels and not sequence:  # what infer adds: each row's class by name
            outputs.append({"name": "label", "datatype": "BYTES", "shape": lead})
    return outputs


def _rows(body: InferRequest, model: ModelRef) -> np.ndarray:
    width = model.width
    if len(body.inputs) == 1 and not _per_feature(body.inputs[0], model):
        tensor = body.inputs[0]
        data = _values(tensor, model)
        shape = list(tensor.shape)
        if width == 0:
            raise ValidationFailed.at("inputs", "the model's card records no feature width: it cannot take a tensor")
        # rows first, then one row's features ([rows, width], or [rows, 8, 8] for an image); [width] is one row. A
        # shape that holds the values but not as rows ([1, 22] for two rows of 11) was read as rows without a word
        rows = width in (shape[0], 1) if len(shape) == 1 else len(shape) >= 2 and math.prod(shape[1:]) == width
        if not rows:
            here = f" (here [{data.size // width}, {width}])" if width and data.size % width == 0 else ""
            raise ValidationFailed.at("inputs[0].shape", f"{shape} is not rows of the model's {width} features: "
                                      f"send the shape [rows, {width}]{here}")  # fmt: skip
        return data.reshape(-1, width)
    by_name = {t.name: t for t in body.inputs}
    online.check_input_names(list(by_name), model)
    values = {f: _values(by_name[f], model, feature=f) for f in model.features}
    n = _feature_rows(by_name, model)
    if n == 0:
        raise ValidationFailed.at("inputs", "no rows to predict; send at least one")
    x = np.concatenate([v.reshape(n, -1) for v in values.values()], axis=1)
    if x.shape[1] != width:
        raise ValidationFailed.at("inputs", f"{x.shape[1]} values per row; the model takes {width}")
    return x


def _per_feature(tensor: InferTensor, model: ModelRef) -> bool:
    """Whether a lone tensor is the per-feature form, which needs every feature: it is named after one (read as whole
    rows, two rows of ``trip_distance`` were one row of both features). An array feature's one tensor is both forms,
    and a feature named ``input`` sent as whole rows ``[rows, width]`` is the metadata's advertised form."""
    if model.card.get("array_column") or tensor.name not in model.features:
        return False
    return not (tensor.name == "input" and model.width > 1 and tensor.shape[1:] == [model.width])


def _feature_rows(tensors: dict[str, InferTensor], model: ModelRef) -> int:
    """The rows of per-feature tensors: each one is ``[rows]`` or ``[rows, 1]`` (an array feature ``[rows,
    length]``), all with the same rows. A ``[3, 2]`` next to a ``[3, 0]`` made rows of the right width with the
    values shifted into the wrong columns."""
    array = bool(model.card.get("array_column"))
    form = f"[rows, {model.width}]" if array else "[rows] or [rows, 1]"
    for name in model.features:
        shape = tensors[name].shape
        fits = len(shape) >= 2 and math.prod(shape[1:]) == model.width if array else shape[1:] in ([], [1])
        if not fits:
            raise ValidationFailed.at(
                f"inputs.{name}.shape", f"{shape}: a feature's tensor is {form}, one value per row (whole rows of "
                f"every feature are one tensor [rows, {model.width}])"
            )  # fmt: skip
    first = model.features[0]
    rows = tensors[first].shape[0]
    for name in model.features:
        shape = tensors[name].shape
        if shape[0] != rows:
            raise ValidationFailed.at(
                f"inputs.{name}.shape", f"{shape} holds {shape[0]} rows, and {first!r} {tensors[first].shape} "
                f"{rows}: every feature's tensor holds the same rows"
            )  # fmt: skip
    return int(rows)


_NUMBER_VALUES: frozenset[type] = frozenset((int, float, type(None)))
"""The JSON values a numeric tensor's data may hold: numbers (exact types: a bool is an int to Python and a string
of digits a number to numpy) and nulls (NaN, refused with their row and column by the finite check)."""
_BOOL_VALUES: frozenset[type] = frozenset((bool, type(None)))
"""A BOOL tensor's: true and false (and nulls, as above)."""
_RANGES = {dt: (int(np.iinfo(code).min), int(np.iinfo(code).max)) for dt, code in _DTYPES.items() if dt[0] in "IU"}
_RANGES["FP16"] = (-65504, 65504)
"""What an integer (or half-precision) tensor's values may be: within its type's range, and whole for an integer."""
_NUMBER_DATA = TypeAdapter(list[StrictFloat | None])
"""The same check for flat data, as floats, in one pass of pydantic's core (strict: no strings, no booleans)."""


def _values(tensor: InferTensor, model: ModelRef | None = None, feature: str | None = None) -> np.ndarray:
    """A tensor's values, flat, checked against its type (and the model's signature) and its shape. ``feature``:
    the tensor holds that feature's values (else whole rows, or sequences)."""
    _check_type(tensor, model)
    values: list[Any] = tensor.data
    if tensor.datatype != "BOOL":
        try:
            values = _NUMBER_DATA.validate_python(values)
        except ValidationError:
            _check_values(tensor, _NUMBER_VALUES, model, feature)  # names the value (nested lists pass: row-major)
    elif not set(map(type, values)) <= _BOOL_VALUES:
        _check_values(tensor, _BOOL_VALUES, model, feature)
    try:
        data = np.asarray(values, dtype=np.float64).reshape(-1)
    except (ValueError, TypeError, OverflowError) as exc:
        raise ValidationFailed.at(f"inputs.{tensor.name}.data", "a flat, row-major list of numbers") from exc
    if tensor.datatype in _RANGES:
        _check_range(tensor, data, model, feature)
    if any(d < 0 for d in tensor.shape):  # -1 in the model's metadata stands for any number of rows
        rest = math.prod(tensor.shape[1:]) if all(d > 0 for d in tensor.shape[1:]) else 0
        example = f" (here {[data.size // rest, *tensor.shape[1:]]})" if rest and data.size % rest == 0 else ""
        raise ValidationFailed.at(
            f"inputs.{tensor.name}.shape", f"{tensor.shape}: give the data's own shape{example}; -1 in the model's "
            "metadata stands for any number of rows"
        )  # fmt: skip
    if not tensor.shape or math.prod(tensor.shape) != data.size:
        raise ValidationFailed.at(f"inputs.{tensor.name}.shape", f"{tensor.shape} does not hold its {data.size} values")
    return data


def _check_values(tensor: InferTensor, allowed: frozenset[type], model: ModelRef | None, feature: str | None) -> None:
    """The first value of the wrong type, by its row and column (nested lists are read row-major)."""
    flat: list[Any] = []
    pending: list[Any] = list(reversed(tensor.data))
    while pending:
        value = pending.pop()
        if isinstance(value, list):
            pending.extend(reversed(value))
            continue
        if type(value) not in allowed:
            kind = "boolean (true or false) in a BOOL tensor" if tensor.datatype == "BOOL" else "number"
            wanted = f"; the model expects {online.expected_types(model)}" if model is not None else ""
            raise ValidationFailed.at(
                f"inputs.{tensor.name}.data",
                f"{_position(tensor, len(flat), model, feature)}: {online.shown(value)} is not a {kind}{wanted}",
            )
        flat.append(value)


def _check_range(tensor: InferTensor, data: np.ndarray, model: ModelRef | None, feature: str | None) -> None:
    """The first value the tensor's datatype cannot hold (a fraction in an INT tensor, 300 in a UINT8 one), by its
    row and column."""
    low, high = _RANGES[tensor.datatype]
    integer = tensor.datatype != "FP16"
    with np.errstate(invalid="ignore"):
        bad = np.isfinite(data) & ((data < low) | (data > high) | (integer & (data != np.round(data))))
    if bad.any():
        index = int(np.argmax(bad))
        value = float(data[index])
        kind = tensor.datatype
        why = f"is not a whole number: {kind} values are whole, in" if not value.is_integer() else f"is beyond {kind}'s"
        shown = int(value) if value.is_integer() else value
        raise ValidationFailed.at(
            f"inputs.{tensor.name}.data",
            f"{_position(tensor, index, model, feature)}: {shown!r} {why} range [{low}, {high}]",
        )


def _position(tensor: InferTensor, index: int, model: ModelRef | None, feature: str | None) -> str:
    """Where the flat ``index`` of a tensor's data lands: ``row 2, column 'h_distance'``."""
    if model is None:
        return f"value {index}"
    if feature is None and not model.card.get("sequence"):
        width = model.width
        return f"row {index // width}, column {online.column_name(model, index % width)!r}"
    per_row = max(math.prod(tensor.shape[1:]), 1) if len(tensor.shape) > 1 else 1
    row = index // per_row
    if feature is None:  # a sequence model's [batch, steps, features]
        return f"sequence {row}, feature {model.features[index % len(model.features)]!r}"
    column = f"{feature}[{index % per_row}]" if model.card.get("array_column") else feature
    return f"row {row}, column {column!r}"


def _check_type(tensor: InferTensor, model: ModelRef | None = None) -> None:
    if tensor.datatype not in _DTYPES:
        wanted = f"; the model expects {online.expected_types(model)}" if model is not None else ""
        if tensor.datatype.upper() in _DTYPES:
            wanted = f" (datatypes are upper case: {tensor.datatype.upper()}){wanted}"
        raise ValidationFailed.at(
            f"inputs.{tensor.name}.datatype", f"{tensor.datatype} is not a numeric tensor{wanted}"
        )


def _infer_sequences(settings: Settings, cache: Any, model: ModelRef, body: InferRequest) -> list[InferTensor]:
    """A sequence model takes one FP tensor ``[batch, steps, features]`` (V2 tensors are rectangular: every
    sequence of a request has ``steps`` real steps). A last_step model answers ``[batch]`` predictions, a per_step
    model ``[batch, steps]``; probabilities add the classes as the last dimension."""
    width = int((model.card.get("input_shape") or [0, len(model.features)])[-1])
    tensor = body.inputs[0]
    data = _values(tensor, model)
    if len(body.inputs) != 1 or len(tensor.shape) != 3 or tensor.shape[2] != width or 0 in tensor.shape:
        raise ValidationFailed.at(
            "inputs", f"a sequence model takes one tensor of shape [batch, steps, {width}] (got {tensor.shape})"
        )
    online.check_row_limit(tensor.shape[0], settings)
    rows = data.reshape(tensor.shape).tolist()
    out = online.predict_sequences(model=model, rows=rows, cache=cache)
    lead = [tensor.shape[0]] if model.card["sequence"]["labels"] == "last_step" else tensor.shape[:2]
    outputs: list[InferTensor] = []
    if "probabilities" in out:
        probabilities = np.asarray(out["probabilities"], dtype=np.float64)
        index = np.asarray(out["class_index"], dtype=np.int64)
        outputs.append(InferTensor(name="predictions", shape=lead, datatype="INT64", data=index.reshape(-1).tolist()))
        outputs.append(InferTensor(name="probabilities", shape=list(probabilities.shape), datatype="FP64",
                                   data=probabilities.reshape(-1).tolist()))  # fmt: skip
    else:
        outputs.append(_values_tensor(out["prediction"]))
    return outputs


def _values_tensor(prediction: Any) -> InferTensor:
    values = np.asarray(prediction, dtype=np.float64)
    return InferTensor(name="predictions", shape=list(values.shape), datatype="FP64", data=values.reshape(-1).tolist())

"""Rows to predict, from what a notebook holds (a pandas DataFrame, a numpy array, a list), as the member of a
``POST /predict`` body that carries them; and what to do about a body that JSON cannot carry. pandas and numpy are
imported by nobody here: a value is recognised by its methods, so the client imports and runs without them."""

from __future__ import annotations

import json
import re
from typing import Any

from sparktrain.errors import UsageError

_NOT_SERIALIZABLE = re.compile(r"Object of type (\w+) is not JSON serializable")
_NUMPY_NUMBER = re.compile(r"^(u?int|float|bool|complex)\d*_?$")
_FIXES = {
    "DataFrame": "give rows as predict(model, df), or a body member as "
    "json.loads(df.to_json(orient='split', index=False))",
    "Series": "give series.tolist()",
    "ndarray": "give array.tolist(), or predict(model, array)",
    "Timestamp": "give timestamp.isoformat()",
    "datetime": "give value.isoformat()",
    "date": "give value.isoformat()",
    "Decimal": "give float(value)",
    "set": "give a list",
}


def rows_member(rows: Any) -> dict[str, Any]:
    """``rows`` as one member of a predict body: a DataFrame as ``dataframe_split`` (through ``to_json``, so that
    numpy cells, timestamps and NaN become lists, ISO text and null), an array (numpy) as ``instances``
    (``tolist()``), a list of objects as ``dataframe_records``, a list of lists as ``instances`` and an object of
    columns (``{column: [values]}``) as ``inputs``."""
    if hasattr(rows, "to_json") and hasattr(rows, "columns"):  # a pandas DataFrame
        split = json.loads(rows.to_json(orient="split", index=False, date_format="iso"))
        return {"dataframe_split": {"columns": split["columns"], "data": split["data"]}}
    if hasattr(rows, "to_frame") and hasattr(rows, "tolist"):  # a pandas Series: one column or one row? ambiguous
        raise UsageError(
            "predict got a pandas Series: give a DataFrame (series.to_frame() for one column, "
            "series.to_frame().T for one row)"
        )
    if hasattr(rows, "tolist") and hasattr(rows, "ndim"):  # a numpy array
        if rows.ndim == 0:
            raise UsageError("predict got a 0-dimensional array: give one row per item (array.reshape(1, -1))")
        return {"instances": rows.tolist()}
    if isinstance(rows, dict):  # column-oriented: {column: [values]}
        return {"inputs": rows}
    if isinstance(rows, list | tuple):
        rows = list(rows)
        if rows and all(isinstance(row, dict) for row in rows):
            return {"dataframe_records": rows}
        return {"instances": rows}
    raise UsageError(
        f"predict cannot send rows of type {type(rows).__name__}: give a pandas DataFrame, a numpy array, a list of "
        "rows as objects ({column: value}), a list of rows as lists or {column: [values]}"
    )


def not_json(exc: TypeError) -> UsageError:
    """A body's ``TypeError`` from JSON encoding, said with the type that JSON cannot carry and how to fix it."""
    match = _NOT_SERIALIZABLE.search(str(exc))
    kind = match.group(1) if match else None
    if kind is None:
        return UsageError(f"the request was not sent: its body cannot be JSON ({exc}); give only dicts, lists, str, "
                          "int, float, bool and None")  # fmt: skip
    if _NUMPY_NUMBER.match(kind):
        fix = "a numpy number: give float(x) or int(x) (array.tolist() converts a whole array)"
    else:
        fix = _FIXES.get(kind, "convert it to dicts, lists, str, int, float, bool or None first")
    return UsageError(f"the request was not sent: its body holds a {kind}, which JSON cannot carry: {fix}")

"""Rows to predict, from what a notebook holds (a pandas DataFrame, a numpy array, a list), as the member of a
``POST /predict`` body that carries them; and what to do about a body that JSON cannot carry. pandas and numpy are
imported by nobody here: a value is recognised by its methods, so the client imports and runs without them."""

from __future__ import annotations

import math
import re
import sys
from typing import Any

from sparktrain.errors import UsageError

_NOT_SERIALIZABLE = re.compile(r"Object of type (\w+) is not JSON serializable")
_NUMPY_NUMBER = re.compile(r"^(u?int|float|bool|complex)\d*_?$")
_FIXES = {
    "DataFrame": "give rows as predict(model, df), which sends it as dataframe_split (every float exact, NaN as null)",
    "Series": "give series.tolist()",
    "ndarray": "give array.tolist(), or predict(model, array)",
    "Timestamp": "give timestamp.isoformat()",
    "datetime": "give value.isoformat()",
    "date": "give value.isoformat()",
    "Decimal": "give float(value)",
    "set": "give a list",
}


class _Infinite(Exception):
    """A value that is infinite: JSON has no number for it, and no model takes it."""


_INFINITE = "JSON has no number for it and no model takes it: give a finite number, or None for a missing value"
_MISSING = frozenset({"NAType", "NaTType"})  # pandas' pd.NA and pd.NaT, recognised without importing pandas


def rows_member(rows: Any) -> dict[str, Any]:
    """``rows`` as one member of a predict body: a DataFrame as ``dataframe_split``, an array (numpy) as
    ``instances``, a list of objects as ``dataframe_records``, a list of lists as ``instances`` and an object of
    columns (``{column: [values]}``) as ``inputs``. Every value goes as it is: a float as the same float (exactly, all
    of its digits), NaN, NaT and None as null, a timestamp, a date or a numpy datetime as ISO text (to the
    microsecond, or the nanosecond), a numpy array or number (a cell) as a list or a number, a column's name as
    text. An infinite value is a :class:`UsageError` (JSON has no number for it)."""
    try:
        return _member(rows)
    except _Infinite as exc:
        where = f" (column {exc.args[0]!r})" if exc.args else ""
        raise UsageError(f"predict got an infinite value{where}: {_INFINITE} "
                         "(df.replace([np.inf, -np.inf], np.nan) sends them as null)") from None  # fmt: skip


def _member(rows: Any) -> dict[str, Any]:
    if hasattr(rows, "to_json") and hasattr(rows, "columns"):  # a pandas DataFrame
        columns = [_column(rows.iloc[:, i], name) for i, name in enumerate(rows.columns)]  # by place: names repeat
        data = [list(row) for row in zip(*columns, strict=True)] if columns else [[] for _ in range(len(rows))]
        return {"dataframe_split": {"columns": [str(name) for name in rows.columns], "data": data}}
    if hasattr(rows, "to_frame") and hasattr(rows, "tolist"):  # a pandas Series: one column or one row? ambiguous
        raise UsageError(
            "predict got a pandas Series: give a DataFrame (series.to_frame() for one column, "
            "series.to_frame().T for one row)"
        )
    if hasattr(rows, "tolist") and hasattr(rows, "ndim"):  # a numpy array
        if rows.ndim == 0:
            raise UsageError("predict got a 0-dimensional array: give one row per item (array.reshape(1, -1))")
        return {"instances": _array(rows)}
    if isinstance(rows, dict):  # column-oriented: {column: [values]}
        return {"inputs": {key: _plain(value) for key, value in rows.items()}}
    if isinstance(rows, list | tuple):
        rows = [_plain(row) for row in rows]
        if rows and all(isinstance(row, dict) for row in rows):
            return {"dataframe_records": rows}
        return {"instances": rows}
    raise UsageError(
        f"predict cannot send rows of type {type(rows).__name__}: give a pandas DataFrame, a numpy array, a list of "
        "rows as objects ({column: value}), a list of rows as lists or {column: [values]}"
    )


def _column(series: Any, name: Any) -> list[Any]:
    """A DataFrame's column as JSON values: ``tolist()``'s Python numbers as they are (a float keeps every digit),
    a missing value (NaN, NaT, pd.NA, None) as None, the rest through :func:`_plain`."""
    values: list[Any] = series.tolist()
    try:
        if getattr(series.dtype, "kind", "O") in "iub" and not series.hasnans:  # numbers JSON carries as they are
            return values
        missing: list[bool] = series.isna().tolist()
        return [None if gone else _plain(value) for value, gone in zip(values, missing, strict=True)]
    except _Infinite:
        raise _Infinite(str(name)) from None


def _array(array: Any) -> Any:
    """A numpy array as nested lists of JSON values: datetimes as ISO text (NaT: None), NaN as None."""
    kind = getattr(array.dtype, "kind", "O")
    if kind == "M":  # tolist() would give nanoseconds as integers
        return _plain(array.astype(str).tolist(), nat=True)
    if kind in "iub" or (kind == "f" and bool((abs(array) <= sys.float_info.max).all())):
        return array.tolist()  # no NaN, no infinity: nothing to change (NaN compares false)
    return _plain(array.tolist())


def _plain(value: Any, *, nat: bool = False) -> Any:
    """``value`` with what JSON cannot carry made into what it can, all the way down lists and objects: NaN, pd.NA
    and NaT as None, a date or a timestamp as ISO text, a numpy array or number as ``tolist()``'s. Infinity raises
    :class:`_Infinite`; anything else is left for the JSON encoder to refuse (:func:`not_json` says the fix)."""
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isinf(value):
            raise _Infinite
        return value
    if value is None or isinstance(value, str | int):
        return None if nat and value == "NaT" else value
    if isinstance(value, list | tuple):
        return [_plain(item, nat=nat) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if type(value).__name__ in _MISSING:
        return None
    dtype = getattr(value, "dtype", None)
    if getattr(dtype, "kind", None) == "M" and hasattr(value, "astype"):  # a numpy datetime (array or scalar)
        return _plain(value.astype(str).tolist(), nat=True)
    if hasattr(value, "isoformat"):  # datetime, date, time, pandas Timestamp and Timedelta
        return value.isoformat()
    if hasattr(value, "tolist"):  # a numpy array or number
        return _plain(value.tolist())
    return value


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

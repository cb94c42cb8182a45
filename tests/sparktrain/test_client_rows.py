"""The rows ``Client.predict(model, rows)`` sends, as the JSON body httpx makes of them (what goes on the wire):
every float exactly, NaN/NaT/pd.NA as null wherever they are (a DataFrame, an array, a list of rows, columns),
timestamps to the microsecond, dates as dates, numpy datetimes as ISO text, column names as text; an infinite value
and a hand-built body with NaN are usage errors that say the fix. No service: nothing here needs one."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest

from sparktrain._rows import rows_member
from sparktrain.client import Client, UsageError

NOBODY = "http://127.0.0.1:9"
EXACT = [0.12345678901234567, 1e-13, 1 / 3, 2.0**-1074, 1.7976931348623157e308, -0.0]


def sent(rows: Any) -> Any:
    """The body the client would POST for ``rows``, read back from the bytes httpx makes of it."""
    body = {"model": {"name": "m"}, **rows_member(rows)}
    return json.loads(httpx.Request("POST", NOBODY, json=body).content)


def test_a_dataframes_floats_go_bit_exact() -> None:
    """``to_json`` kept 10 digits: 0.12345678901234567 went as 0.123456789, 1e-13 as 0.0."""
    split = sent(pd.DataFrame({"x": EXACT, "y": np.array(EXACT, dtype=np.float64)}))["dataframe_split"]
    assert [row[0] for row in split["data"]] == EXACT and [row[1] for row in split["data"]] == EXACT
    assert all(a.hex() == b.hex() for a, b in zip([row[0] for row in split["data"]], EXACT, strict=True))
    assert sent(np.array([EXACT]))["instances"] == [EXACT]
    assert sent([dict(enumerate(EXACT))])["dataframe_records"] == [{str(i): v for i, v in enumerate(EXACT)}]


def test_a_dataframes_missing_values_times_and_names() -> None:
    frame = pd.DataFrame(
        {
            0: [1.5, np.nan],
            "at": pd.to_datetime(["2024-01-02 03:04:05.123456", None]),
            "utc": pd.to_datetime(["2024-01-02 03:04:05.000001", None], utc=True),
            "day": [dt.date(2024, 1, 2), None],
            "count": pd.array([7, None], dtype="Int64"),
            "kind": pd.Categorical(["a", None]),
            "pixels": [np.arange(3, dtype=np.float64) / 4, np.array([np.nan, 1.0, 2.0])],
            "nested": [[[1, 2], [3, 4]], [[5, 6], [7, 8]]],
        }
    )
    split = sent(frame)["dataframe_split"]
    assert split["columns"] == ["0", "at", "utc", "day", "count", "kind", "pixels", "nested"]  # names as text
    assert split["data"] == [
        [1.5, "2024-01-02T03:04:05.123456", "2024-01-02T03:04:05.000001+00:00", "2024-01-02", 7, "a",
         [0.0, 0.25, 0.5], [[1, 2], [3, 4]]],
        [None, None, None, None, None, None, [None, 1.0, 2.0], [[5, 6], [7, 8]]],
    ]  # fmt: skip
    assert sent(pd.DataFrame(index=[0, 1]))["dataframe_split"] == {"columns": [], "data": [[], []]}


def test_nan_in_an_array_or_in_rows_goes_as_null_as_from_a_dataframe() -> None:
    """It was refused as "Out of range float values are not JSON compliant", while a DataFrame sent it as null."""
    assert sent(np.array([[1.0, np.nan]]))["instances"] == [[1.0, None]]
    assert sent([[1.0, float("nan")]])["instances"] == [[1.0, None]]
    assert sent([{"a": np.nan, "b": np.float32(0.5), "c": np.arange(2)}])["dataframe_records"] == [
        {"a": None, "b": 0.5, "c": [0, 1]}
    ]
    assert sent({"a": [np.nan, 2.0]})["inputs"] == {"a": [None, 2.0]}
    frame = pd.DataFrame({"a": [np.nan, 2.0], "t": pd.to_datetime([None, "2024-01-01"])})
    assert sent(frame.to_dict("records"))["dataframe_records"] == [
        {"a": None, "t": None},
        {"a": 2.0, "t": "2024-01-01T00:00:00"},
    ]


def test_a_numpy_datetime_goes_as_iso_text_not_nanoseconds() -> None:
    """``tolist()`` of a datetime64[ns] array gives integers: 1704067200123456789 went for a time."""
    times = np.array(["2024-01-01T00:00:00.123456789", "NaT"], dtype="datetime64[ns]")
    assert sent(times.reshape(2, 1))["instances"] == [["2024-01-01T00:00:00.123456789"], [None]]
    assert sent(np.array(["2024-01-02"], dtype="datetime64[D]"))["instances"] == ["2024-01-02"]
    assert sent([{"t": times[0]}])["dataframe_records"] == [{"t": "2024-01-01T00:00:00.123456789"}]


@pytest.mark.parametrize(
    "rows",
    [np.array([[1.0, np.inf]]), [[1.0, float("-inf")]], [{"a": float("inf")}], pd.DataFrame({"x": [1.0, np.inf]})],
    ids=["array", "lists", "records", "dataframe"],
)
def test_an_infinite_value_is_a_usage_error_that_says_the_fix(rows: Any) -> None:
    with pytest.raises(UsageError, match=r"infinite value.*give a finite number, or None for a missing value"):
        Client(NOBODY).predict("m", rows)


def test_a_hand_built_body_with_nan_says_what_to_give() -> None:
    with pytest.raises(UsageError) as caught:
        Client(NOBODY).predict({"model": {"name": "m"}, "instances": [[float("nan")]]})
    said = str(caught.value)
    assert "its body is not JSON" in said and "NaN or Infinity" in said and "give None" in said, said


def test_the_client_imports_neither_pandas_nor_numpy() -> None:
    code = "import sys, sparktrain.client; print(sorted({'pandas', 'numpy'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip() == "[]", done.stdout

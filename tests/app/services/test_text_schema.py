"""Local CSV and JSON-lines schemas read on the driver from a bounded sample agree with Spark's own inference
on the messy cases (a token that is not a number, a short row, a quoted separator, a repeated header line, a line
that is not JSON, integers beyond 32 bits, arrays), and a column's facts are streamed without Spark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.services.datasets.schema import (
    NOT_LOCAL,
    distinct_values,
    first_value,
    max_value,
    read_schema,
    reader_options,
    text_schema_of,
)


def _messy(tmp_path: Path) -> tuple[Path, Path]:
    csv = tmp_path / "fares.csv"
    lines = ["distance,passengers,label,name,big"]
    lines += [
        f"{'n/a' if i in (5, 300) else i * 0.25},{i % 4},{'cat' if i % 2 else 'dog'},x{i},{i * 10**10}"
        for i in range(600)
    ]
    lines += ['1.0,2,cat,"a,b",5', "1.0,2", "distance,passengers,label,name,big"]
    csv.write_text("\n".join(lines) + "\n")
    js = tmp_path / "rows.json"
    records = [
        {"z": i * 0.5, "a": i, "arr": [i, i + 1.5], "lab": i % 3, "s": "n/a" if i == 7 else i} for i in range(300)
    ]
    js.write_text("".join(json.dumps(r) + "\n" for r in records) + "{not json\n")
    return csv, js


def test_sample_schema_is_sparks(spark: Any, tmp_path: Path) -> None:
    for path, fmt in zip(_messy(tmp_path), ("csv", "json"), strict=True):
        options = reader_options(fmt, {})
        expected = dict(spark.read.format(fmt).options(**options).load(str(path)).dtypes)
        assert text_schema_of(str(path), fmt, options) == expected
        no_header = {**options, "header": "false", "inferSchema": "false"}
        if fmt == "csv":
            expected = dict(spark.read.format(fmt).options(**no_header).load(str(path)).dtypes)
            assert text_schema_of(str(path), fmt, no_header) == expected


def test_a_line_that_does_not_parse_is_not_a_column(spark: Any, tmp_path: Path) -> None:
    """JSON inference adds ``_corrupt_record`` for a malformed line; the schema a request is checked against (and
    the columns a 422 lists) leaves it out, read on the driver or by Spark (an option the sample reader does not
    know)."""
    _csv, js = _messy(tmp_path)
    assert "_corrupt_record" in text_schema_of(str(js), "json", {})  # what inference gives
    for options in ({}, {"allowComments": "true"}):
        schema = read_schema(spark, str(js), "json", options, loc="dataset")
        assert sorted(schema) == ["a", "arr", "lab", "s", "z"], options


def test_column_facts_without_spark(tmp_path: Path) -> None:
    csv, js = _messy(tmp_path)
    options = reader_options("csv", {})
    assert sorted(distinct_values(str(csv), "csv", options, "label", limit=10) or []) == ["cat", "dog", "label"]
    assert max_value(str(csv), "csv", options, "passengers") == 3  # the repeated header line is no value
    assert max_value(str(js), "json", {}, "lab") == 2  # the line that is not JSON is skipped
    assert first_value(str(js), "json", {}, "arr") == [0, 1.5]
    assert text_schema_of(str(csv), "csv", {**options, "lineSep": ";"}) is None  # an option the sample does not know
    assert max_value(str(csv), "csv", {**options, "lineSep": ";"}, "passengers") is NOT_LOCAL

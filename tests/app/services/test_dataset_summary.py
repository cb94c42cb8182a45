"""Registering local CSV and JSON lines reads them on the driver (no Spark job), and reports what Spark's own
registration pass reports on the messy cases: the full schema inference, the rows, the malformed lines (a short
row, too many fields, an unclosed quote, a repeated header line, a line that is not JSON), and per string column
the values that do not parse as numbers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.schemas.datasets import DatasetCreate
from app.services.datasets import registry
from app.services.datasets.schema import local_summary, reader_options
from tests.app.api.test_datasets import BROKEN
from tests.workers.data.test_clean import fare_lines, write


def _files(tmp_path: Path) -> list[tuple[Path, dict[str, str]]]:
    fares = Path(write(tmp_path / "fares.csv", fare_lines()))
    broken = tmp_path / "broken.csv"
    broken.write_text(BROKEN)
    mixed = tmp_path / "mixed.csv"
    lines = ["distance,passengers,label,big,flag,empty"]
    lines += [f"{'n/a' if i == 4000 else i * 0.25},{i % 4},{'cat' if i % 2 else 'dog'},{i * 10**10},"
              f"{'true' if i % 3 else 'False'}," for i in range(6000)]  # fmt: skip
    lines += ['1.0,2,"a,b",5,true,', "1.0,2", "distance,passengers,label,big,flag,empty", "", "7,1,x,2,true,"]
    mixed.write_text("\n".join(lines) + "\n")  # 'n/a' beyond the schema's sample
    words = tmp_path / "words.csv"
    words.write_text("a,b\nx,1\ny,z\na,b\nw,2.5\n")  # every column text: the repeated header is a row
    headless = tmp_path / "headless.csv"
    headless.write_text("1;x;2.5\n2;y;\n3;z;4\n")
    rows = tmp_path / "rows.json"
    records = [{"z": i * 0.5, "a": i, "arr": [i, i + 1.5], "lab": i % 3, "s": "n/a" if i == 7 else i, "b": i % 2 == 0}
               for i in range(300)]  # fmt: skip
    rows.write_text("".join(json.dumps(r) + "\n" for r in records) + "{not json\n\n" + '{"z": 1, "extra": "x"}\n')
    return [
        (fares, reader_options("csv", {})),
        (broken, reader_options("csv", {})),
        (mixed, reader_options("csv", {})),
        (words, reader_options("csv", {})),
        (headless, reader_options("csv", {"header": "false", "sep": ";"})),
        (rows, reader_options("json", {})),
    ]


def test_the_driver_reports_what_spark_reports(spark: Any, tmp_path: Path) -> None:
    for path, options in _files(tmp_path):
        fmt = path.suffix[1:]
        found = local_summary(str(path), fmt, options, sample_rows=registry.SAMPLE_ROWS)
        assert found is not None, path.name
        columns, rows, sample, bad_rows, first_bad = found
        body = DatasetCreate(uri=str(path), bad_rows="skip")
        spark_columns, spark_rows, spark_sample, spark_bad = registry._read(spark, body, str(path), fmt, options)
        assert columns == [c for c in spark_columns if c["name"] != "_corrupt_record"], path.name
        assert (rows, bad_rows) == (spark_rows, spark_bad), path.name
        assert len(first_bad) == min(bad_rows, registry.SAMPLE_ROWS)
        if path.name != "broken.csv":  # Spark's first rows include a malformed line's (as nulls)
            assert sample == [registry._jsonable(r) for r in spark_sample], path.name


@pytest.mark.parametrize(
    ("name", "text", "options"),
    [
        ("dates.csv", "day,x\n2024-01-01,1\n2024-01-02,2\n", {}),  # Spark types dates by its own rules
        ("quoted.csv", 'a,b\n"two\nlines",1\n', {}),  # a quoted line break: Spark reads line by line
        ("huge.csv", "a\n" + "9" * 30 + "\n", {}),  # beyond a long: a decimal to Spark
        ("option.csv", "a\n1\n", {"lineSep": "\n"}),  # an option the driver does not read as Spark does
        ("nested.json", '{"a": {"b": 1}}\n', {}),
    ],
)
def test_what_the_driver_leaves_to_spark(tmp_path: Path, name: str, text: str, options: dict[str, str]) -> None:
    (tmp_path / name).write_text(text)
    fmt = name.rsplit(".", 1)[1]
    assert local_summary(str(tmp_path / name), fmt, reader_options(fmt, options), sample_rows=5) is None

"""Quotes and escapes in local CSV: what the driver reports for a registration (columns, rows, malformed lines,
sample), the schema a request is checked against and a column's values are what Spark reads, or the driver leaves
the data to Spark. pyarrow read RFC 4180's doubled quotes without ``escape: '"'`` (Spark splits such a field),
dropped every backslash (``C:\\temp``), and closed a quote before a letter (``"a"b``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.schemas.datasets import DatasetCreate
from app.services.datasets import registry
from app.services.datasets.quotes import reads_alike
from app.services.datasets.sample import text_columns
from app.services.datasets.schema import local_summary, reader_options, text_schema_of

_PLAIN = '"plain",3,4\n'
FILES = {
    "split.csv": '"East ""side"" 1, st",1,2\n',  # a doubled quote, then a quoted separator
    "doubled.csv": '"East ""side""",1,2\n',
    "opening.csv": '"""q"" a",1,2\n',
    "windows.csv": '"C:\\temp\\x",1,2\nC:\\a\\b,3,4\n',  # Spark keeps the backslashes
    "unquoted.csv": 'ab\\"c,1,2\n',
    "blank.csv": '"a" ,1,2\n',  # Spark drops the blank after the closing quote
    "after.csv": '"a"b,1,2\n',  # Spark keeps the field raw
    "inner.csv": '"a "b" c",1,2\n',
    "escaped.csv": '"a\\"b",1,2\n"a\\\\b",5,6\n',  # Spark's own escape: read alike without the option
    "middle.csv": 'ab""c,1,2\n"",5,6\n',  # quotes inside an unquoted field, an empty quoted one
}
ALIKE = {  # (file, escape option set): what the driver still reads itself
    ("escaped.csv", False), ("middle.csv", False), ("middle.csv", True), ("split.csv", True),
    ("doubled.csv", True), ("opening.csv", True), ("windows.csv", True), ("unquoted.csv", True),
}  # fmt: skip


def test_the_driver_reads_quotes_as_spark_does_or_leaves_them_to_spark(spark: Any, tmp_path: Path) -> None:
    for name, lines in FILES.items():
        path = tmp_path / name
        path.write_text("street,x,y\n" + lines + _PLAIN)
        for doubled in (False, True):
            options = reader_options("csv", {"escape": '"'} if doubled else {})
            found = local_summary(str(path), "csv", options, sample_rows=registry.SAMPLE_ROWS)
            schema = text_schema_of(str(path), "csv", options)
            values = text_columns([path], "csv", options, ["street"])
            body = DatasetCreate(uri=str(path), bad_rows="skip")
            columns, rows, sample, bad = registry._read(spark, body, str(path), "csv", options)
            if found is not None:
                assert found[:4] == (columns, rows, [registry._jsonable(r) for r in sample], bad), (name, doubled)
            if schema is not None:
                assert schema == {c["name"]: c["type"] for c in columns}, (name, doubled)
            if values is not None:
                read = spark.read.options(**options).csv(str(path)).select("street").collect()
                assert values["street"].to_pylist() == [r["street"] for r in read], (name, doubled)
            # Spark reads the rest (what the driver reads itself, it reads as Spark does: not everything left)
            alike = (name, doubled) in ALIKE
            assert (found is not None, schema is not None, values is not None) == (alike,) * 3, (name, doubled)


def test_what_pandas_r_and_spark_write_is_still_read_on_the_driver() -> None:
    doubled = {"escape": '"', "header": "true"}
    assert reads_alike('"street","x"\n"East ""side"", 1",2\n"",3\n,4\n"x""",5\n', doubled)  # R, pandas
    assert reads_alike('street;x\r\n"a; ""b""";2\r\n', {**doubled, "sep": ";"})
    assert reads_alike('street,x\n"say \\"hi\\"",1\n"plain",2\n"open quote,3\n', {"header": "true"})  # Spark
    assert reads_alike("# note\na,b\n1,2\n", {"comment": "#"})
    assert not reads_alike('street,x\n"East ""side""",1\n', {})
    assert not reads_alike("path\nC:\\temp\n", {})

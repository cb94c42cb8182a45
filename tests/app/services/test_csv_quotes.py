"""Quotes and escapes in local CSV: what the driver reports for a registration (columns, rows, malformed lines,
sample), the schema a request is checked against and a column's values are what Spark reads, or the driver leaves
the data to Spark. pyarrow read RFC 4180's doubled quotes without ``escape: '"'`` (Spark splits such a field),
dropped every backslash (``C:\\temp``), and closed a quote before a letter (``"a"b``); a quote left open at a
line's end, which Spark ends there, made pyarrow read the rest of the file as one value (only the summary, which
parses such lines itself, reads them locally). A file's verdict is kept until the file changes."""

from __future__ import annotations

import os
import random
import re
from pathlib import Path
from typing import Any

import pytest

from app.schemas.datasets import DatasetCreate
from app.services.datasets import quotes, registry
from app.services.datasets.quotes import files_read_alike, reads_alike
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
    "open.csv": '"open quote,1,2\n4,5,6\n',  # a quote left open: Spark ends the value at the line's end
    "open_last.csv": '7,8,"9\n4,5,6\n',
}
ALIKE = {  # (file, escape option set): what the driver still reads itself
    ("escaped.csv", False), ("middle.csv", False), ("middle.csv", True), ("split.csv", True),
    ("doubled.csv", True), ("opening.csv", True), ("windows.csv", True), ("unquoted.csv", True),
}  # fmt: skip
SUMMARY_ONLY = {(name, doubled) for name in ("open.csv", "open_last.csv") for doubled in (False, True)}
"""What the driver's summary may read itself (it parses a line with a quote left open as Spark does; not where
pyarrow's value holds a line break, as here: the next quote is the next line's), never its schema or a column's
values (pyarrow reads on past the line's end)."""


def _same_summary(found: Any, spark: tuple[Any, ...], where: Any) -> None:
    """The driver's summary is Spark's: columns, rows, malformed lines; the first rows too, but for Spark's rows
    of the malformed lines (its corrupt records: ``tests/app/services/test_dataset_summary.py`` leaves them out
    too)."""
    columns, rows, sample, bad = spark
    assert (found[0], found[1], found[3]) == (columns, rows, bad), where
    spark_sample = iter([registry._jsonable(r) for r in sample])
    assert all(row in spark_sample for row in found[2]), where  # in order
    assert len(found[2]) >= min(rows, registry.SAMPLE_ROWS) - bad, where


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
            if found is not None and (name, doubled) in SUMMARY_ONLY:
                _same_summary(found, (columns, rows, sample, bad), (name, doubled))
            elif found is not None:
                assert found[:4] == (columns, rows, [registry._jsonable(r) for r in sample], bad), (name, doubled)
            if schema is not None:
                assert schema == {c["name"]: c["type"] for c in columns}, (name, doubled)
            if values is not None:
                read = spark.read.options(**options).csv(str(path)).select("street").collect()
                assert values["street"].to_pylist() == [r["street"] for r in read], (name, doubled)
            # Spark reads the rest (what the driver reads itself, it reads as Spark does: not everything left)
            alike = (name, doubled) in ALIKE
            summary = alike if (name, doubled) in SUMMARY_ONLY else found is not None  # (it may read an open quote)
            assert (summary, schema is not None, values is not None) == (alike,) * 3, (name, doubled)


def test_what_pandas_r_and_spark_write_is_still_read_on_the_driver() -> None:
    doubled = {"escape": '"', "header": "true"}
    assert reads_alike('"street","x"\n"East ""side"", 1",2\n"",3\n,4\n"x""",5\n', doubled)  # R, pandas
    assert reads_alike('street;x\r\n"a; ""b""";2\r\n', {**doubled, "sep": ";"})
    assert reads_alike('street,x\n"say \\"hi\\"",1\n"plain",2\n', {"header": "true"})  # Spark
    assert reads_alike("# note\na,b\n1,2\n", {"comment": "#"})
    assert not reads_alike('street,x\n"East ""side""",1\n', {})
    assert not reads_alike("path\nC:\\temp\n", {})


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("open.csv", 'street,x\n"plain",1\n"open quote,3\n4,5\n6,7\n'),  # pyarrow read 1 row: Spark 4
        ("open_end.csv", 'a,b\n1,2\n"a,2\n'),  # pyarrow typed b string: Spark int
    ],
)
def test_a_quote_left_open_is_left_to_spark_but_by_the_summary(
    spark: Any, tmp_path: Path, name: str, text: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    options = reader_options("csv", {})
    read = spark.read.options(**options).csv(str(path))
    schema = text_schema_of(str(path), "csv", options)
    values = text_columns([path], "csv", options, read.columns)
    assert schema in (None, dict(read.dtypes))
    if values is not None:
        assert {c: v.to_pylist() for c, v in values.items()} == {
            c: [r[c] for r in read.collect()] for c in read.columns
        }
    assert (schema, values) == (None, None)  # what pyarrow reads on past the line's end: left to Spark
    found = local_summary(str(path), "csv", options, sample_rows=registry.SAMPLE_ROWS)
    assert found is not None  # the summary parses such a line as Spark does
    body = DatasetCreate(uri=str(path), bad_rows="skip")
    _same_summary(found, registry._read(spark, body, str(path), "csv", options), name)
    assert not reads_alike(text, {"header": "true"}) and reads_alike(text, {"header": "true"}, open_quotes=True)


def test_a_files_verdict_is_kept_until_it_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each categorical column's values (the request path) checked the whole file again: the verdict is kept for
    the file's path, size and modification time."""
    scans: list[str] = []
    pattern = quotes._odd_line

    def counted(*args: Any) -> re.Pattern[str]:
        scans.append(args[0])
        return pattern(*args)

    monkeypatch.setattr(quotes, "_odd_line", counted)
    path = tmp_path / "kept.csv"
    path.write_text('street,x\n"a \\"b\\"",1\n"plain",2\n')
    options = reader_options("csv", {})
    for column in ("street", "x", "street"):
        assert text_columns([path], "csv", options, [column]) is not None
    assert len(scans) == 1
    path.write_text('street,x\n"a ""b""",1\n"plain",2\n')  # the same size: a doubled quote Spark reads otherwise
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert text_columns([path], "csv", options, ["street"]) is None
    assert len(scans) == 2
    path.write_text('street,x\n"a \\"b\\"",1\n')  # another size
    assert text_columns([path], "csv", options, ["street"]) is not None
    assert len(scans) == 3


def test_text_without_quote_or_escape_is_alike_without_the_pattern() -> None:
    """The fast path (neither the quote nor the escape character, no lone carriage return) gives the pattern's
    verdict: random lines of separators, quotes, escapes, comment marks, carriage returns and letters."""
    rng = random.Random(15)
    for options in ({}, {"escape": '"'}, {"comment": "#"}, {"sep": ";", "quote": "'"}, {"quote": ""}, {"escape": ""}):
        reader = quotes._reader(options)
        assert reader is not None
        sep, quote, escape, comment = reader
        alphabet = [sep, quote or "'", escape or "\\", comment or "#", "\r", "\r\n", "\n", "a", "b", " ", "\u2028"]
        for open_quotes in (False, True):
            pattern = quotes._odd_line(*reader, open_quotes)
            plain = 0
            for _ in range(3000):
                text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 12))) + "\n"
                expected = pattern.search(text) is None
                assert reads_alike(text, options, open_quotes=open_quotes) == expected, (options, text)
                plain += quotes._plain(text, quote, escape, len(text))
            assert plain > 100  # the fast path was taken


def test_files_are_checked_across_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(quotes, "_BLOCK", 16)
    lines = ["street,x\r\n"] + [f"a{i},{i}\r\n" for i in range(40)]
    cases = (('"x"y,1\r\n', False), ('"x",1\r\n', True), ("C:\\a,1\r\n", False), ("c\rd,1\r\n", False))
    for n, (odd, alike) in enumerate(cases):
        for at in (1, 20, 41):  # a file of its own each (a verdict is kept for a file's path, size and time)
            path = tmp_path / f"{n}_{at}.csv"
            path.write_text("".join([*lines[:at], odd, *lines[at:]]), newline="")
            assert files_read_alike([path], {}, "utf-8") == alike, (odd, at)
        path = tmp_path / f"{n}_last.csv"  # the last line without its line break
        path.write_text("".join(lines) + odd.rstrip("\r\n"), newline="")
        assert files_read_alike([path], {}, "utf-8") == alike, odd

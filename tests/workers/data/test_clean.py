"""The bad-row pass on messy text files, as a new user's CSV comes: a numeric column with a few ``n/a`` (which
Spark's inference makes a string column), short and long rows, a quoted separator, a header line repeated in the
middle, a JSON-lines file with a string where a number is declared, and a file that has no usable row at all."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from workers.context import JobFailure
from workers.data.clean import clean, clean_holdout
from workers.data.spec import ResolvedDataset, read_dataframe

HEADER = "distance,passengers,pickup,fare"
MISSING = (3, 250, 599)


class _Warnings:
    """The one part of a job context the bad-row pass uses: where a skip's warning goes."""

    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warn(self, message: str) -> None:
        self.warnings.append(message)


def fare_lines(rows: int = 600, missing: tuple[int, ...] = MISSING) -> list[str]:
    """A fare table: ``distance`` is ``n/a`` on the ``missing`` rows; ``pickup`` is quoted text with a comma."""
    rng = random.Random(5)
    lines = [HEADER]
    for i in range(rows):
        distance = "n/a" if i in missing else f"{rng.uniform(0.5, 20):.2f}"
        lines.append(f'{distance},{i % 4 + 1},"Main St, {i}",{rng.uniform(3, 60):.2f}')
    return lines


def write(path: Path, lines: list[str]) -> str:
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def dataset(path: str, bad_rows: Any = "fail", fmt: Any = "csv", **extra: Any) -> ResolvedDataset:
    features = extra.pop("features", ("distance", "passengers"))
    return ResolvedDataset(path=path, format=fmt, features=features, label="fare", task="regression",
                           bad_rows=bad_rows, **extra)  # fmt: skip


def cleaned(spark: Any, ds: ResolvedDataset) -> tuple[Any, int, int, list[str]]:
    ctx = _Warnings()
    frame, rows, dropped = clean(ctx, read_dataframe(spark, ds, malformed=True), ds)  # type: ignore[arg-type]
    return frame, rows, dropped, ctx.warnings


def test_the_messy_fare_table_skips_exactly_its_three_bad_rows(spark: Any, tmp_path: Path) -> None:
    path = write(tmp_path / "fares.csv", fare_lines())
    assert dict(read_dataframe(spark, dataset(path)).dtypes)["distance"] == "string"  # what inference makes of it
    frame, rows, dropped, warnings = cleaned(spark, dataset(path, "skip"))
    assert (rows, dropped) == (597, 3)
    assert dict(frame.dtypes)["distance"] == "double"
    assert frame.count() == 597 and frame.where("distance is null").count() == 0
    assert warnings == [warnings[0]] and warnings[0].startswith("dropped 3 rows of")


def test_the_messy_fare_table_fails_with_the_count_and_the_reason(spark: Any, tmp_path: Path) -> None:
    path = write(tmp_path / "fares.csv", fare_lines())
    with pytest.raises(JobFailure) as failed:
        cleaned(spark, dataset(path))
    assert failed.value.reason == "BAD_ROWS"
    message = str(failed.value)
    assert message.startswith("3 rows of") and 'bad_rows to "skip"' in message
    assert message.count("not a number: 'n/a' (distance)") == 3  # each of the first rows says why


def test_short_long_and_repeated_header_lines_are_bad_rows(spark: Any, tmp_path: Path) -> None:
    lines = fare_lines(missing=())
    lines.insert(300, HEADER)  # a second file concatenated onto the first
    lines += ["4.5,2", '7.5,1,"Elm St, 9",12.0,surprise']  # too few and too many fields
    path = write(tmp_path / "messy.csv", lines)
    _, rows, dropped, _ = cleaned(spark, dataset(path, "skip"))
    assert (rows, dropped) == (600, 3)
    with pytest.raises(JobFailure) as failed:
        cleaned(spark, dataset(path))
    message = str(failed.value)
    assert message.startswith("3 rows of")
    assert f"malformed line: '{HEADER}'" in message and "malformed line: '4.5,2'" in message
    assert "12.0,surprise" in message


def test_a_quoted_separator_is_one_field(spark: Any, tmp_path: Path) -> None:
    path = write(tmp_path / "quoted.csv", fare_lines(missing=()))
    _, rows, dropped, _ = cleaned(spark, dataset(path))
    assert (rows, dropped) == (600, 0)
    whole = read_dataframe(spark, dataset(path)).select("pickup").first()
    assert whole is not None and whole["pickup"] == "Main St, 0"


def test_json_lines_with_a_string_in_a_numeric_field(spark: Any, tmp_path: Path) -> None:
    rows = [{"distance": 1.5 + i, "passengers": 1, "fare": 10.0 + i} for i in range(20)]
    rows[4]["distance"] = "n/a"
    rows[9]["fare"] = "12.5"  # a number in quotes is still a number
    path = tmp_path / "fares.json"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    ds = dataset(str(path), "skip", fmt="json")
    frame, usable, dropped, _ = cleaned(spark, ds)
    assert (usable, dropped) == (19, 1)
    assert sorted(r["fare"] for r in frame.collect())[2] == 12.0 and 12.5 in {r["fare"] for r in frame.collect()}
    with pytest.raises(JobFailure, match=r"1 row of .*not a number: 'n/a' \(distance\)"):
        cleaned(spark, dataset(str(path), fmt="json"))


def test_string_class_labels_are_not_bad_rows(spark: Any, tmp_path: Path) -> None:
    lines = ["distance,passengers,kind"] + [f"{i / 10},{i % 3},{'n/a' if i % 7 == 0 else 'short'}" for i in range(50)]
    path = write(tmp_path / "kinds.csv", lines)
    ds = ResolvedDataset(path=path, format="csv", features=("distance", "passengers"), label="kind",
                         task="classification")  # fmt: skip
    frame, rows, dropped, _ = cleaned(spark, ds)
    assert (rows, dropped) == (50, 0) and dict(frame.dtypes)["kind"] == "string"


def test_a_file_with_no_usable_row_says_to_check_the_separator(spark: Any, tmp_path: Path) -> None:
    lines = ["distance;passengers;fare"] + [f'"{i},5";{i % 3};"1{i},25"' for i in range(30)]  # decimal commas
    path = write(tmp_path / "european.csv", lines)
    ds = dataset(path, "skip", options={"sep": ";"})
    with pytest.raises(JobFailure) as failed:
        cleaned(spark, ds)  # even with skip: nothing would be left to train on
    message = str(failed.value)
    assert "every row" in message and "(30)" in message
    assert "options.sep" in message and "options.header" in message


def test_a_text_column_named_as_a_feature_is_said_to_be_text(spark: Any, tmp_path: Path) -> None:
    lines = ["distance,city,fare"] + [f"{i}.5,{'Oslo' if i % 2 else 'Bergen'},1{i}.25" for i in range(30)]
    path = write(tmp_path / "cities.csv", lines)
    with pytest.raises(JobFailure) as failed:
        cleaned(spark, dataset(path, features=("distance", "city")))
    message = str(failed.value)
    assert "every row" in message and "'city' holds text, not numbers: when training, name it in dataset." in message
    assert "options.sep" not in message
    # a regression whose label is text: classes (the hint was to leave the label out of the features)
    with pytest.raises(JobFailure) as failed:
        cleaned(spark, replace(dataset(path, features=("distance",)), label="city"))
    assert (
        "'city' holds text, not numbers: a regression's label is a number (when training on classes, set "
        "dataset.task to classification)" in str(failed.value)
    ), str(failed.value)


def test_a_held_out_fraction_is_counted_in_the_same_pass(spark: Any, tmp_path: Path) -> None:
    path = write(tmp_path / "fares.csv", fare_lines())
    ds = dataset(path, "skip")
    frame, train, held, dropped = clean_holdout(
        _Warnings(),  # type: ignore[arg-type]
        read_dataframe(spark, ds, malformed=True),
        ds,
        0.25,
        "_split",
    )
    assert (train + held, dropped) == (597, 3)
    assert 100 < held < 200
    counts = {r["_split"]: r["count"] for r in frame.groupBy("_split").count().collect()}
    assert counts == {0: train, 1: held}


def test_a_failure_with_a_held_out_fraction_shows_the_datas_columns_only(spark: Any, tmp_path: Path) -> None:
    path = write(tmp_path / "fares.csv", fare_lines())
    ds = dataset(path)
    with pytest.raises(JobFailure) as failed:
        clean_holdout(_Warnings(), read_dataframe(spark, ds, malformed=True), ds, 0.25, "_split")  # type: ignore[arg-type]
    message = str(failed.value)
    assert message.count("not a number: 'n/a' (distance)") == 3
    assert '"passengers"' in message and "_split" not in message, "the held-out mark is the job's, not the data's"


def test_a_category_its_columns_type_cannot_hold_is_a_bad_row(spark: Any, tmp_path: Path) -> None:
    """The planned type of a whole-number category came from the file's first rows; a later ``A1`` made Spark read
    the column as text, and its one-hot columns were nulls (a torch job ended NAN_LOSS, asking for a lower learning
    rate)."""
    path = write(tmp_path / "tiers.csv", ["distance,tier,fare", "1.0,1,3.0", "2.0,A1,4.0", "3.0,2,5.0", "4.0,,6.0"])
    ds = dataset(path, bad_rows="skip", features=("distance", "tier"), categorical=("tier",),
                 column_types={"distance": "double", "tier": "int"})  # fmt: skip
    _frame, rows, dropped, warnings = cleaned(spark, ds)
    assert (rows, dropped) == (2, 2), warnings
    assert "a category its column's type cannot hold" in warnings[0], warnings
    with pytest.raises(JobFailure, match=r"not a whole number: 'A1' \(tier\)"):
        cleaned(spark, replace(ds, bad_rows="fail"))
    text = replace(ds, column_types={"distance": "double", "tier": "string"})  # any text is a category of a text column
    assert cleaned(spark, text)[1:3] == (3, 1)


SPARK_VALUES = {  # a column's values, by the Spark type a file or a request's rows gave it
    "string": ["3", " 7", "+4", "02134", "3.0", "1e3", "x", "yes", " N ", "t", "f", "TRUE", "0", "1", "2", "maybe", "",
               "300", "99999999999", "-2147483648"],
    "double": [3.0, 2.5, 0.0, 1.0, -1.0, 2134.0, 3e9, 1e20],
    "bigint": [3, 0, 1, 2, -1, 300, 2**31, -(2**31)],
    "boolean": [True, False],
}  # fmt: skip


@pytest.mark.parametrize("kind", ["tinyint", "int", "bigint", "boolean"])
@pytest.mark.parametrize("dtype", list(SPARK_VALUES))
def test_spark_reads_a_category_as_the_online_encoding_does(spark: Any, kind: str, dtype: str) -> None:
    """Batch prediction and evaluation (Spark: the bad-row check, then the one-hot text) and online prediction
    (``level_of``) agree on every value of a whole-number or boolean categorical column: the same category, or a
    bad row where ``level_of`` refuses it. Spark alone truncated 2.5 to 2, read ``yes`` as true and 2 as true."""
    from pyspark.sql import functions as F

    from workers.data.categories import Categories, level_of
    from workers.data.clean import _category_checks
    from workers.data.one_hot import text_of

    values = SPARK_VALUES[dtype]
    df = spark.createDataFrame([(v,) for v in values], f"c {dtype}")
    [(bad, _reason)] = _category_checks("c", F.col("c"), kind, dtype)
    text = text_of(Categories(inputs=("c",), levels={}, types={"c": kind}), "c")
    rows = df.select(bad.alias("bad"), text.alias("text")).collect()
    for value, row in zip(values, rows, strict=True):
        try:
            online: str | None = level_of(value, kind)
        except ValueError:
            online = None
        assert (None if row["bad"] else row["text"]) == online, (value, dtype, kind, row)

"""A request's dataset checked against CSV / JSON data on the driver: compressed files are left to Spark (their
bytes are no text), a string column of numbers with a few tokens is a default feature (said in the warnings),
a declared numeric column with no number at all is a 422 naming the field, and a sequence's string feature is
refused with words that fit sequences."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from app.core.errors import ValidationFailed
from app.core.settings import Settings
from app.schemas.train import DatasetRef
from app.services.datasets.check import resolve_dataset
from app.services.datasets.deferred import DeferredCheck, request_without_spark
from app.services.datasets.numbers import Numbers, count_numbers
from app.services.datasets.schema import distinct_values, local_summary, read_schema, reader_options, text_schema_of
from tests.workers.data.test_clean import fare_lines, write

IRIS = "sepal_length,sepal_width,species\n" + "".join(
    f"{4 + i % 7 * 0.5},{2 + i % 5 * 0.25},{['setosa', 'versicolor'][i % 2]}\n" for i in range(40)
)


def _resolve(spark: Any, root: Path, warnings: list[str] | None = None, **dataset: Any) -> Any:
    ref = DatasetRef.model_validate(dataset)
    with request_without_spark():
        return resolve_dataset(
            ref, settings=Settings(data_roots=[root]), spark=spark, parse_numbers=True, warnings=warnings
        )


def _refused(spark: Any, root: Path, **dataset: Any) -> tuple[str, str]:
    with pytest.raises(ValidationFailed) as info:
        _resolve(spark, root, **dataset)
    return str(info.value.errors[0]["loc"]), str(info.value.errors[0]["msg"])


def test_compressed_text_is_left_to_spark(spark: Any, tmp_path: Path) -> None:
    # the driver read a gzip file's bytes as CSV: "no column 'species' in iris_train.csv.gz; columns: \x1f..."
    packed = tmp_path / "iris_train.csv.gz"
    packed.write_bytes(gzip.compress(IRIS.encode()))
    plain = tmp_path / "named.csv"
    plain.write_text(IRIS)
    options = reader_options("csv", {})
    for path, given in ((packed, options), (plain, {**options, "compression": "gzip"})):
        assert text_schema_of(str(path), "csv", given) is None
        assert local_summary(str(path), "csv", given, sample_rows=5) is None
        assert distinct_values(str(path), "csv", given, "species", limit=10) is None
        with request_without_spark(), pytest.raises(DeferredCheck, match="compressed files"):
            read_schema(spark, str(path), "csv", given, loc="dataset.uri")
    assert read_schema(spark, str(packed), "csv", options, loc="dataset.uri") == {
        "sepal_length": "double", "sepal_width": "double", "species": "string"
    }  # fmt: skip
    with pytest.raises(DeferredCheck):  # a request leaves its checks to the job, which reads the file with Spark
        _resolve(spark, tmp_path, uri="iris_train.csv.gz", label="species", task="classification")
    resolved, _schema = resolve_dataset(
        DatasetRef(uri="iris_train.csv.gz", label="species", task="classification"),
        settings=Settings(data_roots=[tmp_path]),
        spark=spark,
        parse_numbers=True,
    )
    assert resolved.format == "csv" and resolved.features == ("sepal_length", "sepal_width")


def _fares(root: Path) -> None:
    write(root / "fares.csv", fare_lines())  # distance: 3 'n/a' of 600; pickup: text
    packed = root / "packed"
    packed.mkdir()
    (packed / "fares.csv.gz").write_bytes(gzip.compress((root / "fares.csv").read_bytes()))


def test_numbers_are_counted_as_spark_counts_them(spark: Any, tmp_path: Path) -> None:
    """On the driver (pyarrow) and by Spark (compressed data, in the job) alike."""
    _fares(tmp_path)
    options = reader_options("csv", {})
    columns = ["distance", "pickup"]
    local = count_numbers(spark, str(tmp_path / "fares.csv"), "csv", options, columns)
    assert local == {"distance": Numbers(600, 3, "n/a"), "pickup": Numbers(600, 600, "Main St, 0")}
    assert local["distance"].mostly and not local["distance"].none and local["pickup"].none
    with request_without_spark(), pytest.raises(DeferredCheck):
        count_numbers(spark, str(tmp_path / "packed"), "csv", options, columns)
    assert count_numbers(spark, str(tmp_path / "packed"), "csv", options, columns) == local
    rows = tmp_path / "rows.json"
    rows.write_text("".join(json.dumps({"v": "n/a" if i == 7 else i, "t": f"x{i}"}) + "\n" for i in range(50)))
    assert count_numbers(spark, str(rows), "json", {}, ["v", "t"]) == {"v": Numbers(50, 1, "n/a"),
                                                                       "t": Numbers(50, 50, "x0")}  # fmt: skip


def test_large_local_data_is_counted_by_spark_in_the_job(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request streamed every string column of a local CSV through the API process whatever its size: beyond
    LOCAL_BYTES the count is Spark's, deferred to the job's planning."""
    from app.services.datasets import numbers

    _fares(tmp_path)
    options, path = reader_options("csv", {}), str(tmp_path / "fares.csv")
    small = count_numbers(spark, path, "csv", options, ["distance"])
    monkeypatch.setattr(numbers, "LOCAL_BYTES", (tmp_path / "fares.csv").stat().st_size - 1)
    with request_without_spark(), pytest.raises(DeferredCheck):
        count_numbers(spark, path, "csv", options, ["distance"])
    assert count_numbers(spark, path, "csv", options, ["distance"]) == small  # in the job: Spark's count


def test_a_column_of_numbers_with_a_few_tokens_is_a_default_feature(spark: Any, tmp_path: Path) -> None:
    # distance (3 'n/a' of 600) was left out of the default features without a word
    _fares(tmp_path)
    warnings: list[str] = []
    resolved, _schema = _resolve(
        spark, tmp_path, warnings, uri="fares.csv", label="fare", task="regression", bad_rows="skip"
    )
    assert resolved.features == ("distance", "passengers")  # not pickup: text
    assert resolved.column_types["distance"] == "double"
    assert warnings == [
        "dataset.features: 'distance' is a default feature read as numbers, although 3 of its 600 values are not "
        "numbers (such as 'n/a'): each such row is a bad row (list dataset.features to leave it out)"
    ]


@pytest.mark.parametrize(
    ("dataset", "loc", "words"),
    [
        ({"features": ["x", "city"]}, "dataset.features[1]",
         "'city' is string and none of its 30 values is a number (such as 'south'); features must be numeric; "
         "write numbers as numbers, name a text category in dataset.categorical"),
        ({"features": ["x"], "weight": "w"}, "dataset.weight",
         "'w' is string and none of its 30 values is a number (such as 'heavy'); weights are numbers"),
        ({"features": ["x"], "label": "city"}, "dataset.label",
         "'city' is string and none of its 30 values is a number (such as 'south'); a regression label must be "
         "numeric (when training on classes, set dataset.task to classification)"),
    ],
)  # fmt: skip
def test_a_declared_numeric_column_of_text_is_refused(
    spark: Any, tmp_path: Path, dataset: dict[str, Any], loc: str, words: str
) -> None:
    # accepted before, then every row was bad: "BAD_ROWS: every row ... not a number: 'south' (city)"
    lines = "".join(f"{i},{['south', 'north'][i % 2]},{i * 2},heavy\n" for i in range(30))
    (tmp_path / "cities.csv").write_text("x,city,y,w\n" + lines)
    (tmp_path / "cities.json").write_text(
        "".join(json.dumps(dict(zip(["x", "city", "y", "w"], line.split(","), strict=True))) + "\n"
                for line in lines.splitlines())
    )  # fmt: skip
    for uri in ("cities.csv", "cities.json"):
        refused = _refused(spark, tmp_path, **{"uri": uri, "label": "y", "task": "regression", **dataset})
        assert refused[0] == loc and refused[1].startswith(words), refused
    accepted, _schema = _resolve(spark, tmp_path, uri="cities.csv", label="y", task="regression",
                                 features=["x", "city"], categorical=["city"])  # fmt: skip
    assert accepted.features == ("x", "city")


def test_a_sequence_feature_that_is_not_all_numbers(spark: Any, tmp_path: Path) -> None:
    # the hint named dataset.categorical, which sequences refuse
    rows = "".join(f"{i // 4},{i % 4},{'n/a' if i == 5 else i * 0.5},{i},{(i // 4) % 2}\n" for i in range(40))
    (tmp_path / "seq.csv").write_text("sequence_id,step,f0,f1,label\n" + rows)
    sequence = {"uri": "seq.csv", "label": "label", "task": "classification", "sequence": {"layout": "rows"}}
    loc, words = _refused(spark, tmp_path, **sequence, features=["f0", "f1"])
    assert loc == "dataset.features[0]"
    assert words == ("'f0' is string: 1 of its 40 values are not numbers (such as 'n/a'); a sequence's features "
                     "must all be numbers (the job does not parse them): write them as numbers, or leave the column "
                     "out")  # fmt: skip
    warnings: list[str] = []
    resolved, _schema = _resolve(spark, tmp_path, warnings, **sequence)
    assert resolved.features == ("f1",)
    assert warnings == ["dataset.features: 'f0' is left out: 1 of its 40 values are not numbers (such as 'n/a'), "
                        "and a sequence's features must all be numbers"]  # fmt: skip

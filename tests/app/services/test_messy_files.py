"""Files as pandas, R and Excel write them, read on the driver as Spark reads them: doubled quotes with
``escape: '"'``, empty and repeated header names, a UTF-8 byte order mark; what Spark cannot read refused before a
job (nanosecond timestamps, part files of different types, names that differ only in case); and a request's checks
on them (a pandas index, ``NA`` tokens, a header without rows, whole-number class labels, negative classes, the
words of the messages)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.core.errors import ValidationFailed
from app.core.settings import Settings
from app.schemas.datasets import DatasetCreate
from app.schemas.train import DatasetRef, TrainRequest
from app.services.datasets import registry
from app.services.datasets.check import resolve_dataset
from app.services.datasets.deferred import request_without_spark
from app.services.datasets.schema import local_summary, read_schema, reader_options
from app.services.planning.training import plan_training


def _pandas_frame(rows: int = 300) -> pd.DataFrame:
    return pd.DataFrame({
        "name": [f'East "side" {i}, st' if i % 2 else f"plain {i}" for i in range(rows)],
        "x": [np.nan if i % 7 == 0 else i * 0.5 for i in range(rows)],
        "y": [i % 2 for i in range(rows)],
    })  # fmt: skip


def _texts(tmp_path: Path) -> list[tuple[Path, dict[str, str]]]:
    frame = _pandas_frame()
    frame.to_csv(tmp_path / "pandas_na.csv", index=False)
    with (tmp_path / "pandas_na.csv").open("a") as f:
        f.write('"short",1\n')  # a malformed line, counted as Spark counts it
    frame.to_csv(tmp_path / "pandas_semi.csv", index=False, sep=";")
    frame[["x", "y"]].to_csv(tmp_path / "indexed.csv")  # header ',x,y'
    (tmp_path / "r.csv").write_text('"","a","b","y"\n"1",1,2,0\n"2",3,4,1\n')
    (tmp_path / "twice.csv").write_text("a,,a,A,,y\n1,2,3,4,5,0\n6,7,8,9,10,1\n")
    (tmp_path / "case.csv").write_text("Price,price,y\n1,2,0\n3,4,1\n")
    # headers that look like numbers or a missing value (read through type inference: _c0, 1.0, 2019.0, _c1)
    (tmp_path / "numbered.csv").write_text("0,1,2019,NA,y\n0.5,1.5,2.5,3.5,1\n1.5,2.5,3.5,4.5,0\n")
    (tmp_path / "bom.json").write_bytes(b"\xef\xbb\xbf" + b"".join(json.dumps({"a": i, "y": i % 2}).encode() + b"\n"
                                                                    for i in range(200)))  # fmt: skip
    doubled = {"escape": '"'}
    return [
        (tmp_path / "pandas_na.csv", reader_options("csv", doubled)),
        (tmp_path / "pandas_semi.csv", reader_options("csv", {**doubled, "sep": ";"})),
        (tmp_path / "indexed.csv", reader_options("csv", {})),
        (tmp_path / "r.csv", reader_options("csv", {})),
        (tmp_path / "twice.csv", reader_options("csv", {})),
        (tmp_path / "case.csv", reader_options("csv", {})),
        (tmp_path / "numbered.csv", reader_options("csv", {})),
        (tmp_path / "bom.json", reader_options("json", {})),
    ]


def test_the_driver_reads_pandas_and_r_files_as_spark_does(spark: Any, tmp_path: Path) -> None:
    # escape '"' read a closing quote before ',' as an escape (151 of 300 lines malformed); a header ',x,y' was
    # read as a column named '' (jobs: KeyError ''); a byte order mark made the first JSON line malformed
    for path, options in _texts(tmp_path):
        fmt = path.suffix[1:]
        found = local_summary(str(path), fmt, options, sample_rows=registry.SAMPLE_ROWS)
        assert found is not None, path.name
        columns, rows, sample, bad_rows, _first_bad = found
        body = DatasetCreate(uri=str(path), bad_rows="skip")
        spark_columns, spark_rows, spark_sample, spark_bad = registry._read(spark, body, str(path), fmt, options)
        assert columns == spark_columns, path.name
        assert (rows, bad_rows) == (spark_rows, spark_bad), path.name
        assert sample == spark_sample, path.name
        assert read_schema(spark, str(path), fmt, options, loc="dataset.uri") == {
            c["name"]: c["type"] for c in spark_columns
        }, path.name
    names = {p.name: [c["name"] for c in local_summary(str(p), p.suffix[1:], o, sample_rows=1)[0]]  # type: ignore[index]
             for p, o in _texts(tmp_path)}  # fmt: skip
    assert names["indexed.csv"] == ["_c0", "x", "y"] and names["r.csv"] == ["_c0", "a", "b", "y"]
    assert names["twice.csv"] == ["a0", "_c1", "a2", "A3", "_c4", "y"]
    assert names["case.csv"] == ["Price0", "price1", "y"]
    assert names["numbered.csv"] == ["0", "1", "2019", "NA", "y"]
    from app.services.datasets.sample import header_names

    assert header_names(tmp_path / "numbered.csv", {}) == [(n, n) for n in names["numbered.csv"]]  # (as text)
    quoted = local_summary(str(tmp_path / "pandas_na.csv"), "csv", _texts(tmp_path)[0][1], sample_rows=2)
    assert quoted is not None and quoted[2][1]["name"] == 'East "side" 1, st' and quoted[3] == 1


def _refusal(spark: Any, path: Path, fmt: str = "parquet") -> str:
    """What a request's check says (registration says the same at ``uri``: tests/e2e/test_messy_data.py)."""
    with pytest.raises(ValidationFailed) as read:
        read_schema(spark, str(path), fmt, {}, loc="dataset.uri")
    assert str(read.value.errors[0]["loc"]) == "dataset.uri"
    return str(read.value.errors[0]["msg"])


def test_parquet_spark_cannot_read_is_refused_before_a_job(spark: Any, tmp_path: Path) -> None:
    stamped = pd.DataFrame({"t": pd.date_range("2024-01-01", periods=3, freq="h"), "x": [1.0, 2, 3], "y": [0, 1, 0]})
    stamped.to_parquet(tmp_path / "stamps.parquet")  # pandas' default: timestamp[ns]
    with pytest.raises(Exception, match="PARQUET_TYPE_ILLEGAL"):  # even with the column left out
        spark.read.parquet(str(tmp_path / "stamps.parquet")).select("x").collect()
    words = _refusal(spark, tmp_path / "stamps.parquet")
    assert "column 't' of stamps.parquet is a timestamp in nanoseconds" in words
    assert "coerce_timestamps='us'" in words
    stamped.to_parquet(tmp_path / "micros.parquet", coerce_timestamps="us", allow_truncated_timestamps=True)
    micros = str(tmp_path / "micros.parquet")
    assert read_schema(spark, micros, "parquet", {}, loc="dataset.uri") == dict(spark.read.parquet(micros).dtypes)

    parts = tmp_path / "parts"
    parts.mkdir()
    pq.write_table(pa.table({"k": pa.array([1, 2], pa.int64()), "y": [0, 1]}), parts / "part-00000.parquet")
    pq.write_table(pa.table({"k": pa.array([1.5, 2.5], pa.float64()), "y": [0, 1]}), parts / "part-00001.parquet")
    with pytest.raises(Exception):  # noqa: B017 (Spark's own error: the second part's doubles as bigint)
        spark.read.parquet(str(parts)).collect()
    assert ("column 'k' is bigint in part-00000.parquet but double in part-00001.parquet"
            in _refusal(spark, parts))  # fmt: skip
    # a narrower integer after a wider one Spark reads (as the first file's bigint): not refused (review)
    widened = tmp_path / "widened"
    widened.mkdir()
    pq.write_table(pa.table({"k": pa.array([1, 2], pa.int64()), "y": [0, 1]}), widened / "part-00000.parquet")
    pq.write_table(pa.table({"k": pa.array([3, 4], pa.int32()), "y": [0, 1]}), widened / "part-00001.parquet")
    assert spark.read.parquet(str(widened)).count() == 4
    from app.services.datasets.footers import check_parquet

    check_parquet(sorted(widened.iterdir()))

    pq.write_table(pa.table({"Price": [1.0], "price": [2.0], "y": [1]}), tmp_path / "case.parquet")
    (tmp_path / "case.json").write_text('{"Price": 1, "price": 2, "y": 1}\n')
    for path, fmt in ((tmp_path / "case.parquet", "parquet"), (tmp_path / "case.json", "json")):
        with pytest.raises(Exception, match="COLUMN_ALREADY_EXISTS"):
            spark.read.format(fmt).load(str(path)).collect()
        assert "the columns 'Price' and 'price', which differ only in case" in _refusal(spark, path, fmt)


def _resolve(spark: Any, root: Path, warnings: list[str] | None = None, **dataset: Any) -> Any:
    with request_without_spark():
        return resolve_dataset(
            DatasetRef.model_validate(dataset), settings=Settings(data_roots=[root]), spark=spark,
            parse_numbers=True, warnings=warnings,
        )[0]  # fmt: skip


def _refused(spark: Any, root: Path, **dataset: Any) -> tuple[str, str]:
    with pytest.raises(ValidationFailed) as info:
        _resolve(spark, root, **dataset)
    return str(info.value.errors[0]["loc"]), str(info.value.errors[0]["msg"])


def test_a_requests_checks_of_messy_files(spark: Any, tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {"x": [i * 0.5 for i in range(40)], "y": [i % 2 for i in range(40)]}, index=[i * 3 for i in range(40)]
    )
    frame.to_parquet(tmp_path / "indexed.parquet")  # __index_level_0__
    frame.rename_axis("row").to_parquet(tmp_path / "named.parquet")  # 'row', in the pandas metadata
    for name, index in (("indexed.parquet", "__index_level_0__"), ("named.parquet", "row")):
        assert index in read_schema(spark, str(tmp_path / name), "parquet", {}, loc="dataset.uri")
        assert _resolve(spark, tmp_path, uri=name, label="y", task="classification").features == ("x",)
        listed = _resolve(spark, tmp_path, uri=name, label="y", task="classification", features=["x", index])
        assert listed.features == ("x", index)

    (tmp_path / "na.csv").write_text("a,b,y\n" + "".join(f"{'NA' if i % 5 == 0 else i},{i},{i % 2}\n"
                                                          for i in range(40)))  # fmt: skip
    warnings: list[str] = []
    assert _resolve(spark, tmp_path, warnings, uri="na.csv", label="y", task="classification").features == ("b",)
    assert warnings == [
        "dataset.features: 'a' is left out of the default features: 8 of its 40 values are not numbers (such as "
        "'NA') (if 'NA' marks a missing value, set options.nullValue: 'NA'); list it in dataset.features to train "
        "on it, each such row a bad row"
    ]
    (tmp_path / "texts.json").write_text("".join(json.dumps({"a": str(i), "y": i % 2}) + "\n" for i in range(30)))
    warnings = []
    assert _resolve(spark, tmp_path, warnings, uri="texts.json", label="y", task="classification").features == ("a",)
    assert warnings == ["dataset.features: 'a' is a default feature read as numbers: its 30 values are numbers "
                        "written as text"]  # fmt: skip

    (tmp_path / "header.csv").write_text("a,b,y\n")
    pq.write_table(
        pa.table({"a": pa.array([], pa.float64()), "y": pa.array([], pa.int64())}), tmp_path / "none.parquet"
    )
    assert _refused(spark, tmp_path, uri="header.csv", label="y", task="classification") == (
        "dataset.uri", "header.csv has no rows (only its header); add rows, or name data that has some"
    )  # fmt: skip
    assert _refused(spark, tmp_path, uri="none.parquet", label="y", task="regression")[1].startswith(
        "none.parquet has no rows; "
    )

    (tmp_path / "semi.csv").write_text("alpha;beta;city;target\n1;2;x;0\n")
    (tmp_path / "spaces.csv").write_text("a, b, y\n1,2,0\n")
    assert _refused(spark, tmp_path, uri="semi.csv", label="target", task="classification")[1] == (
        "no column 'target' in semi.csv; columns: alpha;beta;city;target (string); one column whose name holds "
        "';': the file is likely separated by it, set options.sep: \";\""
    )
    assert (
        "columns: a (int), ' b' (int), ' y' (int)"
        in _refused(spark, tmp_path, uri="spaces.csv", label="y", task="classification")[1]
    )


def _plan(spark: Any, root: Path, framework: str, label: str, **extra: Any) -> Any:
    dataset = {"uri": "labels.csv", "label": label, "task": "classification"}
    body = {"name": "messy", "framework": framework, "dataset": dataset, **extra}
    with request_without_spark():
        return plan_training(request=TrainRequest.model_validate(body), settings=Settings(data_roots=[root]),
                             spark=spark)  # fmt: skip


def test_whole_number_doubles_are_classes_and_negative_classes_are_refused(spark: Any, tmp_path: Path) -> None:
    rows = [f"{i * 0.1},{float(i % 3) if i != 5 else ''},{1 if i % 2 else -1}\n" for i in range(60)]
    (tmp_path / "labels.csv").write_text("x,cls,signed\n" + "".join(rows))  # cls: 0.0/1.0/2.0 with a gap (pandas)
    output = {"type": "output", "units": 3, "activation": "softmax", "loss": "cross_entropy"}
    mlp = {"layers": [{"type": "dense", "units": 4, "activation": "relu"}, output]}
    forest = {"params": {"algorithm": "random_forest"}}
    for framework, extra in (("xgboost", {}), ("torch", {"network": mlp}), ("spark_ml", forest)):
        plan = _plan(spark, tmp_path, framework, "cls", **extra)
        assert plan.train.num_classes == 3, framework
    for framework, extra in (("xgboost", {}), ("spark_ml", forest)):
        with pytest.raises(ValidationFailed) as info:
            _plan(spark, tmp_path, framework, "signed", **extra)
        assert info.value.errors[0]["msg"] == (
            "'signed' has the class -1: class labels are integers 0..k-1 (or strings); number the classes from 0 "
            "(e.g. -1/1 as 0/1), or give them as text"
        )
    # an infinite label (int(-inf) was a 500; review)
    (tmp_path / "labels.csv").write_text("x,cls,signed\n" + "".join(rows) + "0.5,-inf,1\n")
    with pytest.raises(ValidationFailed, match="'cls' has the value -Infinity, which is not a class"):
        _plan(spark, tmp_path, "xgboost", "cls")

"""A new user's messy CSV through the real service: a fare table where three of 600 ``distance`` values are
``n/a`` is registered (``POST /datasets`` counts the values that do not parse) and trained with ``bad_rows``
``skip`` (exact counts) and ``fail`` (the reason shown); and every family says how many rows it trained on and how
many it validated on when it holds out a fraction itself. Files as pandas and R write them: doubled quotes,
an unnamed index column, nanosecond timestamps, part files of two types, a header without rows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers import TAXI_FEATURES, Service, running_service
from tests.workers.data.test_clean import fare_lines, write

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def svc(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    data = tmp_path_factory.mktemp("data")
    write(data / "fares.csv", fare_lines())
    pd.read_csv(data / "fares.csv", dtype={"distance": str}).to_parquet(data / "fares.parquet")
    _pandas_files(data)
    with running_service(spark, tmp_path_factory.mktemp("svc"), data_roots=[data, REPO / "datasets"]) as service:
        yield service


def fare_request(uri: str, bad_rows: str) -> dict[str, Any]:
    return {
        "name": f"fares-{bad_rows}",
        "framework": "spark_ml",
        "dataset": {"uri": uri, "features": ["distance", "passengers"], "label": "fare", "task": "regression",
                    "bad_rows": bad_rows},
        "params": {"algorithm": "linear_regression"},
    }  # fmt: skip


def test_the_messy_fare_table_registers_and_trains(svc: Service) -> None:
    registered = svc.client.post("/datasets", json={"uri": "fares.csv", "name": "fares"})
    assert registered.status_code == 201, registered.text
    columns = {c["name"]: c for c in registered.json()["schema"]}
    assert columns["distance"]["type"] == "string" and columns["distance"]["not_numbers"] == 3
    assert columns["fare"]["not_numbers"] == 0 and columns["pickup"]["not_numbers"] == 600  # text: none parse
    dataset_id = registered.json()["id"]

    skipped = svc.wait(svc.train(fare_request(dataset_id, "skip"))["id"], {"SUCCEEDED", "FAILED"})
    assert skipped["status"] == "SUCCEEDED", skipped["error"]
    rows = skipped["result"]["rows"]
    assert skipped["result"]["bad_rows"] == 3
    assert rows["train"] + rows["validation"] == 597 and rows["validation"] > 0
    assert any(w.startswith("dropped 3 rows of") for w in skipped["warnings"])
    version = svc.client.get(f"/models/fares-skip/versions/{skipped['model']['version']}").json()
    example = version["params"]["input_example"]
    assert example and all(isinstance(row["distance"], float) for row in example)  # as trained: numbers

    failed = svc.wait(svc.train(fare_request("fares.csv", "fail"))["id"], {"SUCCEEDED", "FAILED"})
    assert failed["status"] == "FAILED"
    assert failed["error"]["reason"] == "BAD_ROWS"
    assert failed["error"]["message"].startswith("3 rows of")
    assert "not a number: 'n/a' (distance)" in failed["error"]["message"]


def test_a_string_column_of_parquet_is_still_refused(svc: Service) -> None:
    """Parquet's types are the file's own, not inferred from text: a string there is not a number to parse."""
    refused = svc.client.post("/train", json=fare_request("fares.parquet", "skip"))
    assert refused.status_code == 422
    assert "'distance' is string; features must be numeric; write numbers as numbers" in refused.text
    assert "one 0/1 column per value" in refused.text


def test_xgboost_reports_its_held_out_rows(svc: Service) -> None:
    body = {
        "name": "taxi-xgb-held-out",
        "framework": "xgboost",
        "dataset": {"uri": "taxi/train.parquet", "features": TAXI_FEATURES, "label": "fare_amount",
                    "task": "regression", "split": {"validation_fraction": 0.25, "seed": 3}},
        "params": {"num_round": 5, "max_depth": 3},
    }  # fmt: skip
    job = svc.wait(svc.train(body)["id"], {"SUCCEEDED", "FAILED"})
    assert job["status"] == "SUCCEEDED", job["error"]
    rows = job["result"]["rows"]
    assert rows["train"] + rows["validation"] == 8000
    assert 1800 < rows["validation"] < 2200


def _pandas_files(data: Path) -> None:
    rows = range(300)
    frame = pd.DataFrame({"street": [f'East "side" {i}, st' if i % 2 else f"plain {i}" for i in rows],
                          "x": [np.nan if i % 7 == 0 else i * 0.5 for i in rows],
                          "y": [i * 1.5 + (i % 3) for i in rows]})  # fmt: skip
    frame.to_csv(data / "pandas_na.csv", index=False)  # doubled quotes, NaN as empty fields
    (data / "spark_escaped.csv").write_text('street,x\n"say \\"hi\\"",1\n"plain",2\n')  # as Spark writes CSV
    frame[["x", "y"]].fillna(0.0).to_csv(data / "indexed.csv")  # header ',x,y': the index's column is unnamed
    frame.assign(t=pd.date_range("2024-01-01", periods=300, freq="min")).to_parquet(data / "stamps.parquet")
    parts = data / "parts"
    parts.mkdir()
    pq.write_table(pa.table({"k": pa.array([1, 2], pa.int64()), "y": [0, 1]}), parts / "part-00000.parquet")
    pq.write_table(pa.table({"k": pa.array([0.5, 2.5], pa.float64()), "y": [0, 1]}), parts / "part-00001.parquet")
    csv_parts = data / "csvparts"
    csv_parts.mkdir()
    (csv_parts / "part-00000.csv").write_text("x,y\n1,2\n")
    (data / "header_only.csv").write_text("a,b,y\n")


def test_pandas_files_register_as_spark_reads_them(svc: Service) -> None:
    # escape '"' (the documented fix for doubled quotes) made the driver read 151 of 300 lines as malformed
    quoted = svc.client.post("/datasets", json={"uri": "pandas_na.csv", "options": {"escape": '"'}})
    assert quoted.status_code == 201, quoted.text
    assert quoted.json()["row_count"] == 300 and quoted.json()["bad_rows"] == 0
    assert quoted.json()["sample"][1]["street"] == 'East "side" 1, st'
    assert {c["name"]: c["type"] for c in quoted.json()["schema"]} == {"street": "string", "x": "double", "y": "double"}
    assert quoted.json()["warnings"] == []
    # without the option the registration warns, and keeps saying so (Spark reads the values with their quotes)
    plain = svc.client.post("/datasets", json={"uri": "pandas_na.csv"})
    assert plain.status_code == 201, plain.text
    (warning,) = plain.json()["warnings"]
    assert warning.startswith("pandas_na.csv writes a quote inside a quoted field by doubling it (line 3: ")
    assert warning.endswith('register it with options {"escape": "\\""}'), warning
    assert svc.client.get(f"/datasets/{plain.json()['id']}").json()["warnings"] == [warning]
    # Spark's own escape (a backslash) before the closing quote is not a doubled quote (it was warned about)
    assert svc.client.post("/datasets", json={"uri": "spark_escaped.csv"}).json()["warnings"] == []

    refused = {
        "stamps.parquet": "column 't' of stamps.parquet is a timestamp in nanoseconds",
        "parts": "column 'k' is bigint in part-00000.parquet but double in part-00001.parquet",
        "csvparts": "part-00000.csv is not a parquet file (no PAR1 at its start or end); set format to csv",
    }
    for uri, words in refused.items():
        answer = svc.client.post("/datasets", json={"uri": uri})
        assert answer.status_code == 422, (uri, answer.text)
        assert words in answer.text, answer.text


def test_an_unnamed_index_column_trains_and_a_header_without_rows_is_refused(svc: Service) -> None:
    # registration showed _c0, and the job failed INTERNAL KeyError: ''
    registered = svc.client.post("/datasets", json={"uri": "indexed.csv"})
    assert registered.status_code == 201, registered.text
    assert [c["name"] for c in registered.json()["schema"]] == ["_c0", "x", "y"]
    body = {"name": "indexed", "framework": "spark_ml", "params": {"algorithm": "linear_regression"},
            "dataset": {"uri": registered.json()["id"], "label": "y", "task": "regression"}}  # fmt: skip
    job = svc.wait(svc.train(body)["id"], {"SUCCEEDED", "FAILED"})
    assert job["status"] == "SUCCEEDED", job["error"]

    empty = svc.client.post("/datasets", json={"uri": "header_only.csv"})
    assert empty.status_code == 201 and empty.json()["row_count"] == 0, empty.text
    body["dataset"] = {"uri": empty.json()["id"], "label": "y", "task": "classification"}
    refused = svc.client.post("/train", json=body)
    assert refused.status_code == 422, refused.text
    assert "header_only.csv has no rows (only its header)" in refused.text

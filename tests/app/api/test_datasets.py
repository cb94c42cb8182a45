"""Registered datasets over HTTP: parquet and CSV (quoted commas, missing values, malformed lines), lookups, and
naming a registered dataset in a training request."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Service

REPO = Path(__file__).resolve().parents[3]
CSV = """id,city,fare,label
1,"New York, NY",10.5,a
2,"Boston, MA",,b
3,"Chicago, IL",7.25,a
4,"Austin, TX",12.0,b
"""
BROKEN = CSV + '5,"unclosed quote,3.0,a\n6,Seattle,not-a-number,oops,extra\n'


@pytest.fixture
def svc(make_service: Callable[..., Any], tmp_path: Path) -> Iterator[Service]:
    data = tmp_path / "data"
    data.mkdir()
    (data / "cities.csv").write_text(CSV)
    (data / "broken.csv").write_text(BROKEN)
    (data / "empty.csv").write_text("id,fare\n")
    (data / "garbage.parquet").write_bytes(b"this is not parquet at all")
    (data / "zero.csv").write_bytes(b"")
    (data / "latin1.csv").write_bytes("trip_distance,fare_amount\n1,caf\xe9\n".encode("latin-1"))
    with make_service(data_roots=[data, REPO / "datasets"]) as service:
        yield service


def test_register_parquet_and_look_it_up(svc: Service) -> None:
    response = svc.client.post("/datasets", json={"uri": "taxi/train.parquet", "name": "taxi-train"})
    assert response.status_code == 201, response.text
    ds = response.json()
    assert response.headers["location"] == f"/datasets/{ds['id']}"
    assert ds["format"] == "parquet" and ds["row_count"] == 8000
    assert {"name": "fare_amount", "type": "double", "nullable": True, "not_numbers": None} in ds["schema"]
    assert len(ds["sample"]) == 5 and "trip_distance" in ds["sample"][0]
    assert svc.client.get(f"/datasets/{ds['id']}").json() == ds
    assert [d["id"] for d in svc.client.get("/datasets").json()["items"]] == [ds["id"]]


def test_csv_with_quoted_commas_and_missing_values(svc: Service) -> None:
    ds = svc.client.post("/datasets", json={"uri": "cities.csv"}).json()
    assert ds["row_count"] == 4 and ds["bad_rows"] == 0
    types = {c["name"]: c["type"] for c in ds["schema"]}
    assert types == {"id": "int", "city": "string", "fare": "double", "label": "string"}
    assert ds["sample"][0]["city"] == "New York, NY"
    assert ds["sample"][1]["fare"] is None


def test_malformed_lines_fail_or_are_counted(svc: Service) -> None:
    before = len(svc.client.get("/datasets").json()["items"])
    refused = svc.client.post("/datasets", json={"uri": "broken.csv"})
    assert refused.status_code == 422
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert refused.json()["bad_rows"] >= 1 and "do not parse" in refused.json()["detail"]
    assert len(svc.client.get("/datasets").json()["items"]) == before
    counted = svc.client.post("/datasets", json={"uri": "broken.csv", "bad_rows": "skip"}).json()
    assert counted["bad_rows"] == refused.json()["bad_rows"]
    assert counted["row_count"] == 6 - counted["bad_rows"]


def test_bad_registrations(svc: Service) -> None:
    assert svc.client.post("/datasets", json={"uri": "../../etc/passwd"}).status_code == 422
    assert svc.client.post("/datasets", json={"uri": "missing.parquet"}).status_code == 422
    assert svc.client.post("/datasets", json={"uri": "cities.csv", "surprise": 1}).status_code == 422
    assert svc.client.get("/datasets/0123456789abcdef0123456789abcdef").status_code == 404
    unreadable = svc.client.post("/datasets", json={"uri": "garbage.parquet"})
    assert unreadable.status_code == 422 and "cannot read" in unreadable.json()["detail"]
    empty = svc.client.post("/datasets", json={"uri": "empty.csv"}).json()
    assert empty["row_count"] == 0
    # a training request on a CSV declared as parquet: a 422 now, as at registration, not a failed job
    before = len(svc.client.get("/jobs").json()["items"])
    body = {"name": "wrong-format", "framework": "xgboost", "params": {"num_round": 2},
            "dataset": {"uri": "cities.csv", "format": "parquet", "label": "fare", "task": "regression"}}  # fmt: skip
    wrong = svc.client.post("/train", json=body)
    assert wrong.status_code == 422 and wrong.json()["errors"][0]["loc"] == "dataset.uri", wrong.text
    assert "cities.csv is not a parquet file" in wrong.json()["detail"], wrong.text
    assert len(svc.client.get("/jobs").json()["items"]) == before


def test_training_names_a_registered_dataset(svc: Service) -> None:
    train = svc.client.post("/datasets", json={"uri": "taxi/train.parquet"}).json()
    val = svc.client.post("/datasets", json={"uri": "taxi/eval.parquet"}).json()
    body = {
        "name": "by-id",
        "framework": "spark_ml",
        "dataset": {"uri": train["id"], "label": "fare_amount", "task": "regression",
                    "features": ["trip_distance", "h_distance"]},
        "validation": {"uri": val["id"]},
        "params": {"algorithm": "linear_regression"},
    }  # fmt: skip
    job = svc.wait(svc.train(body)["id"], {"SUCCEEDED", "FAILED"})
    assert job["status"] == "SUCCEEDED", job["error"]
    assert job["result"]["rows"]["train"] == 8000


@pytest.mark.parametrize(
    ("uri", "fmt", "words"),
    [
        ("taxi/train.parquet", "csv", "is parquet (it starts with PAR1), not csv"),
        ("taxi/train.parquet", "json", "is parquet (it starts with PAR1), not json"),
        ("zero.csv", None, "zero.csv is empty"),
        ("latin1.csv", None, "latin1.csv is not UTF-8 text (at byte offset 31): name its encoding"),
    ],
)
def test_text_that_is_not_text_is_named(svc: Service, uri: str, fmt: str | None, words: str) -> None:
    # a CSV reader listed 500 characters of parquet's binary as column names, a JSON one no columns, and an empty
    # file was a job that failed on "no column 'y' ...; columns: " (bad-input walkthrough)
    dataset = {"uri": uri, "features": ["trip_distance"], "label": "fare_amount", "task": "regression"}
    body = {"name": "not-text", "framework": "spark_ml", "dataset": {**dataset, **({"format": fmt} if fmt else {})},
            "params": {"algorithm": "linear_regression"}}  # fmt: skip
    response = svc.client.post("/train", json=body)
    assert response.status_code == 422 and words in response.json()["detail"], response.text
    assert len(response.json()["detail"]) < 400, response.text
    assert not svc.client.get("/jobs").json()["items"]
    registered = svc.client.post("/datasets", json={"uri": uri, **({"format": fmt} if fmt else {})})
    assert registered.status_code == 422 and words in registered.json()["detail"], registered.text


def test_text_in_a_named_encoding_or_compressed_is_left_to_spark(svc: Service, tmp_path: Path) -> None:
    import gzip

    data = tmp_path / "data"  # the fixture's data root
    (data / "named.csv").write_bytes("trip_distance,fare_amount\n1,2\n".encode("utf-16"))
    (data / "packed.csv.gz").write_bytes(gzip.compress(b"trip_distance,fare_amount\n1,2\n"))
    for body in ({"uri": "named.csv", "options": {"Encoding": "UTF-16"}}, {"uri": "packed.csv.gz", "format": "csv"}):
        response = svc.client.post("/datasets", json=body)  # option names know no case, as Spark's
        assert response.status_code == 201, response.text


def test_a_gzip_csv_trains_and_evaluates(svc: Service, tmp_path: Path) -> None:
    # train and evaluate answered 422 "no column 'species' in iris_train.csv.gz; columns: \x1f\x8b..." (the driver
    # read the compressed bytes as CSV); its format comes from the name too
    import gzip

    rows = [(4.3 + (i % 25) * 0.1, 2.0 + (i * 7 % 11) * 0.1) for i in range(60)]
    text = "sepal_length,sepal_width,species\n" + "".join(
        f"{length:.1f},{width:.1f},{'setosa' if length < 5.5 else 'versicolor'}\n" for length, width in rows
    )
    (tmp_path / "data" / "iris_train.csv.gz").write_bytes(gzip.compress(text.encode()))
    body = {"name": "iris-gz", "framework": "spark_ml", "params": {"algorithm": "logistic_regression"},
            "dataset": {"uri": "iris_train.csv.gz", "label": "species", "task": "classification"}}  # fmt: skip
    trained = svc.done("/train", body)
    assert sum(trained["result"]["rows"][k] for k in ("train", "validation")) == 60, trained["result"]
    evaluation = {"model": {"name": "iris-gz"}, "dataset": {"uri": "iris_train.csv.gz", "format": "csv"}}
    evaluated = svc.done("/evaluate", evaluation)
    assert evaluated["result"]["rows"] == 60 and evaluated["result"]["classification"]["accuracy"] > 0.9, evaluated


def test_a_quoted_line_break_names_multiline(svc: Service, tmp_path: Path) -> None:
    """The driver leaves a CSV whose quoted value holds a line break to Spark, which reads it line by line: the
    summary's error says to set options.multiLine, and with it the data registers."""
    import time

    (tmp_path / "data" / "notes.csv").write_text('id,note,fare\n1,"two\nlines",3.5\n2,plain,4.0\n')

    def summary(body: dict[str, Any]) -> dict[str, Any]:
        answer = svc.client.post("/datasets", json=body)
        assert answer.status_code == 201, answer.text
        deadline = time.monotonic() + 120
        while (found := svc.client.get(f"/datasets/{answer.json()['id']}").json())["summary"] == "pending":
            assert time.monotonic() < deadline, found
            time.sleep(0.2)
        return dict(found)

    failed = summary({"uri": "notes.csv"})
    assert failed["summary"] == "failed", failed
    assert 'Fix them, set options.multiLine "true" (a quoted value holds a line break)' in failed["summary_error"]
    read = summary({"uri": "notes.csv", "options": {"multiLine": "true"}})
    assert read["summary"] == "complete" and read["row_count"] == 2, read


def test_a_default_feature_with_a_few_tokens_is_said_in_the_202(svc: Service, tmp_path: Path) -> None:
    """distance (3 'n/a' among 600 fares) was left out of the default features without a word: it is a feature now,
    and the 202 says how it is read."""
    from tests.workers.data.test_clean import fare_lines, write

    write(tmp_path / "data" / "fares-default.csv", fare_lines())
    dataset = {"uri": "fares-default.csv", "label": "fare", "task": "regression", "bad_rows": "skip"}
    body = {"name": "fares-default", "framework": "xgboost", "params": {"num_round": 2}, "dataset": dataset}
    queued = svc.client.post("/train", json=body)
    assert queued.status_code == 202, queued.text
    said = [w for w in queued.json()["warnings"] if "'distance' is a default feature read as numbers" in w]
    assert said and "3 of its 600 values are not numbers (such as 'n/a')" in said[0], queued.json()["warnings"]
    svc.client.post(f"/jobs/{queued.json()['id']}/cancel")


def test_a_second_dataset_of_one_name_is_warned_about(svc: Service) -> None:
    # Names are labels (both are kept, the id is the key): the second registration under a name said nothing.
    first = svc.client.post("/datasets", json={"uri": "datasets/taxi/train.parquet", "name": "twice"})
    assert first.status_code == 201, first.text
    assert not any("another dataset is named" in w for w in first.json()["warnings"])
    second = svc.client.post("/datasets", json={"uri": "datasets/taxi/eval.parquet", "name": "twice"})
    assert second.status_code == 201, second.text
    said = [w for w in second.json()["warnings"] if "another dataset is named 'twice'" in w]
    assert said and first.json()["id"] in said[0], second.json()["warnings"]

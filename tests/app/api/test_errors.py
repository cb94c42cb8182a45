"""Bad input gets a clear 4xx as problem+json, and nothing is written."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest

from bench.chaos import digits_job
from tests.helpers import Service, taxi_request

RF = {"algorithm": "random_forest", "numTrees": 5}


def _job_count(service: Service) -> int:
    return len(service.client.get("/jobs", params={"limit": 500}).json()["items"])


def _problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = dict(response.json())
    assert {"type", "title", "status", "detail"} <= set(body)
    assert body["status"] == status
    assert response.headers.get("x-request-id")
    return body


def _with(path: str, value: Any) -> dict[str, Any]:
    body = taxi_request(**RF)
    node: Any = body
    keys = path.split(".")
    for key in keys[:-1]:
        node = node[key]
    if value is _DELETE:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return body


_DELETE = object()


@pytest.mark.parametrize(
    ("body", "loc", "words"),
    [
        (_with("framework", "caffe"), "framework", "Input should be"),
        (_with("framework", "xgbost"), "framework", "or 'spark_ml', got \"xgbost\""),  # pydantic's words + the value
        (_with("params.algorithm", "gbt"), "params.algorithm", "unknown algorithm"),
        (_with("dataset.label", "tip_amount"), "dataset.label", "no column 'tip_amount'"),
        (_with("dataset.label", _DELETE), "dataset.label", "required"),
        (_with("dataset.uri", "taxi/missing.parquet"), "dataset.uri", "does not exist"),
        (_with("dataset.uri", "../../etc/passwd"), "dataset.uri", "outside the configured data roots"),
        (_with("dataset.uri", "/etc/passwd"), "dataset.uri", "outside the configured data roots"),
        (_with("dataset.features", ["trip_distance", "fare_amount"]), "dataset.features[1]", "is the label"),
        (_with("dataset.features", ["trip_distnce"]), "dataset.features[0]", "no column 'trip_distnce'"),
        (_with("params.grid", {"maxDepht": [2, 7]}), "params.grid.maxDepht", "unknown parameter"),
        (_with("params.grid", {"maxDepth": [2, -7]}), "params.grid.maxDepth", "between 0 and 30"),
        (_with("training", {"epochs": -1}), "training.epochs", "greater than or equal to 1"),
        # it was refused at network, which the body did not have
        (_with("training", {"epochs": 5}), "training", "spark_ml takes params, not training (torch's)"),
        (_with("name", "no spaces/allowed"), "name", "pattern"),
        (_with("dataset.surprise", 1), "dataset.surprise", "Extra inputs"),
        (_with("validation", {"uri": "../secrets.parquet"}), "validation.uri", "outside"),
        # the whole folder trained on its own validation file, and the job reported r2 0.9987 (bad-input walkthrough)
        (_with("dataset.uri", "datasets/taxi"), "validation.uri", "lies inside the training data"),
        (_with("validation", {"uri": "datasets/taxi/train.parquet"}), "validation.uri", "is the training data"),
        (_with("dataset.split", {"seed": 10**20}), "dataset.split.seed", "less than or equal to"),
        (_with("dataset.options", {"Header": "maybe"}), "dataset.options", 'Header: true or false, got "maybe"'),
        # A number or a boolean written as text is refused wherever it is (it was taken for num_workers and
        # refused for the optimizer's learning_rate); 2.0 for an integer stays an integer, as JSON Schema says.
        (_with("training", {"num_workers": "2"}), "training.num_workers", 'got the text "2"'),
        (_with("training", {"epochs": True}), "training.epochs", "must be a whole number, got true"),
        # Spark takes path, paths and basePath as reader options: only the checked uri may name files (audit)
        (_with("dataset.options", {"path": "/etc/passwd"}), "dataset.options", "the uri says which files"),
        (
            _with("validation", {"uri": "taxi/eval.parquet", "options": {"basePath": "/"}}),
            "validation.options",
            "basePath",
        ),
        (_with("training", {"validation_fraction": "0.1"}), "training.validation_fraction", "must be a number"),
        (
            _with("training", {"early_stopping": {"restore_best": "yes"}}),
            "training.early_stopping.restore_best",
            "must be true or false",
        ),
        (
            _with("training", {"early_stopping": {"restore_best": 1}}),
            "training.early_stopping.restore_best",
            "must be true or false, got 1",
        ),
    ],
)
def test_bad_train_requests(service: Service, body: dict[str, Any], loc: str, words: str) -> None:
    before = _job_count(service)
    problem = _problem(service.client.post("/train", json=body), 422)
    assert any(e["loc"] == loc for e in problem["errors"]), problem
    assert words in problem["detail"] or any(words in e["msg"] for e in problem["errors"]), problem
    assert _job_count(service) == before


def _xgboost(**params: Any) -> dict[str, Any]:
    return {**taxi_request(), "framework": "xgboost", "params": {"num_round": 5, **params}}


def _torch(path: str, value: Any) -> dict[str, Any]:
    body = digits_job("huge", epochs=1, workers=1)
    node = body
    *keys, last = path.split(".")
    for key in keys:
        node = node.setdefault(key, {})
    node[last] = value
    return body


HUGE = 10**400  # a JSON integer no float holds: math.isfinite raised OverflowError, a 500 (bad-input walkthrough)


@pytest.mark.parametrize(
    ("path", "body", "loc", "words"),
    [
        ("/train", _xgboost(gamma=HUGE), "params.gamma", "must be a finite number, got 1000"),
        ("/train", _xgboost(learning_rate=HUGE), "params.learning_rate", "must be a finite number"),
        ("/train", taxi_request(algorithm="linear_regression", regParam=HUGE), "params.regParam", "finite number"),
        ("/train", _torch("training.optimizer", {"type": "sgd", "learning_rate": HUGE}),
         "training.optimizer.learning_rate", "finite"),
        ("/train", _torch("training.gradient_sharing.threshold_algorithm",
                          {"type": "adaptive", "initial_threshold": HUGE}),
         "training.gradient_sharing.threshold_algorithm.initial_threshold", "finite"),
        ("/tune", {"name": "huge", "base": _xgboost(gamma=HUGE, max_depth=2), "space": {"params.max_depth": {
            "type": "choice", "values": [2, 3]}}, "trials": 2}, "base.params.gamma", "finite number"),
        ("/tune", {"name": "huge", "base": _xgboost(gamma=1), "space": {"params.gamma": {
            "type": "choice", "values": [1, HUGE]}}, "trials": 2}, "space.params.gamma", "finite number"),
        # accepted before, then failed with a raw xgboost, C++ or Java error
        ("/train", _xgboost(seed=2**63), "params.seed", "at most 9223372036854775807"),
        ("/train", taxi_request(algorithm="linear_regression", seed=10**30), "params.seed", "at most"),
        ("/train", _xgboost(max_bin=2**31), "params.max_bin", "at most 2147483647"),
        ("/train", _xgboost(max_bin=70_000), "params.max_bin", "between 2 and 65536"),
        ("/train", taxi_request(algorithm="random_forest", maxBins=10**12), "params.maxBins", "at most"),
        ("/train", taxi_request(algorithm="random_forest", numTrees=10**9), "params.numTrees", "between 1 and 10000"),
        # pydantic said "Unable to parse input string as an integer, exceeded maximum size"
        ("/recipes/gpu-smoke", {"rows": 1e20}, "rows", "must be a whole number in the field's range, got 1e+20"),
        ("/tune", {"name": "huge", "base": _xgboost(max_depth=2), "space": {"params.max_depth": {
            "type": "choice", "values": [2, 3]}}, "trials": 1e30}, "trials", "whole number in the field's range"),
    ],
)  # fmt: skip
def test_numbers_too_large_are_422s(service: Service, path: str, body: dict[str, Any], loc: str, words: str) -> None:
    before = _job_count(service)
    problem = _problem(service.client.post(path, content=json.dumps(body), headers={"content-type":
                                           "application/json"}), 422)  # fmt: skip
    assert any(e["loc"] == loc for e in problem["errors"]), problem
    assert words in problem["detail"] or any(words in e["msg"] for e in problem["errors"]), problem
    assert len(problem["detail"]) < 600, problem  # the 400 digits are cut
    assert _job_count(service) == before


def test_a_tune_base_error_names_its_field_once(service: Service) -> None:
    body = {"name": "once", "base": {**_xgboost(max_depth=2), "dataset": {**taxi_request()["dataset"], "label": "tip"}},
            "space": {"params.max_depth": {"type": "choice", "values": [2, 3]}}, "trials": 2}  # fmt: skip
    problem = _problem(service.client.post("/tune", json=body), 422)
    assert problem["detail"].startswith("base.dataset.label: no column 'tip'"), problem  # was base.x: x: ...


def test_predicting_with_a_model_whose_training_ended_without_one_names_the_job(service: Service) -> None:
    # it said only "No model named ...", and users went looking for a typo (bad-input walkthrough)
    job = service.train(taxi_request("never-made", algorithm="random_forest", numTrees=300, maxDepth=12))
    assert service.client.post(f"/jobs/{job['id']}/cancel").status_code == 202
    assert service.wait(job["id"], {"SUCCEEDED", "FAILED", "CANCELLED"})["status"] == "CANCELLED"
    rows = {"inputs": [[1.0] * len(taxi_request()["dataset"]["features"])]}
    detail = _problem(service.client.post("/predict", json={"model": {"name": "never-made"}, **rows}), 404)["detail"]
    assert f"its training job {job['id']} ended CANCELLED" in detail and f"GET /jobs/{job['id']}" in detail, detail
    unknown = _problem(service.client.post("/predict", json={"model": {"name": "never-made-at-all"}, **rows}), 404)
    assert "training job" not in unknown["detail"], unknown


def test_the_optimizers_numbers_are_refused_as_text_too(service: Service) -> None:
    body = digits_job("text-rate", epochs=1, workers=1)
    body["training"]["optimizer"] = {"type": "adam", "learning_rate": "0.01"}
    problem = _problem(service.client.post("/train", json=body), 422)
    assert [e["loc"] for e in problem["errors"]] == ["training.optimizer.learning_rate"], problem
    assert 'got "0.01"' in problem["errors"][0]["msg"], problem


def test_an_integer_written_2_0_is_an_integer(service: Service) -> None:
    body = taxi_request(**RF)
    body["dataset"]["split"] = {"validation_fraction": 0.25, "seed": 3.0}
    response = service.client.post("/train", json=body)
    assert response.status_code == 202, response.text
    assert response.json()["request"]["dataset"]["split"]["seed"] == 3


def test_another_familys_params_are_named(service: Service) -> None:
    body = copy.deepcopy(taxi_request(**RF))
    body["framework"] = "xgboost"
    problem = _problem(service.client.post("/train", json=body), 422)
    assert "unknown xgboost parameter" in problem["detail"] and "'algorithm'" in problem["detail"], problem


def test_non_json_body(service: Service) -> None:
    before = _job_count(service)
    response = service.client.post("/train", content=b"{not json", headers={"content-type": "application/json"})
    assert "not valid JSON" in _problem(response, 400)["detail"]
    body = b'{"name": "x",\n "training": {"epochs": }}'
    response = service.client.post("/train", content=body, headers={"content-type": "application/json"})
    detail = _problem(response, 400)["detail"]  # where: the first character that does not parse, counted from 1
    assert detail.endswith(f"Expecting value at character {body.index(b'}') + 1}"), detail
    assert _job_count(service) == before


def test_a_body_that_is_not_utf8(service: Service) -> None:
    response = service.client.post(
        "/train", content=b'{"name": "\xff\xfe"}', headers={"content-type": "application/json"}
    )
    problem = _problem(response, 400)  # it said "There was an error parsing the body"
    assert problem["type"].endswith("/malformed-json") and "not UTF-8" in problem["detail"], problem
    digits = b'{"name": "x", "training": {"epochs": ' + b"9" * 5000 + b"}}"  # Python's limit on int() of text
    response = service.client.post("/train", content=digits, headers={"content-type": "application/json"})
    problem = _problem(response, 400)
    assert "not valid JSON" in problem["detail"] and "UTF-8" not in problem["detail"], problem


def test_wrong_content_type(service: Service) -> None:
    response = service.client.post("/train", content=b"name=x", headers={"content-type": "text/plain"})
    assert "application/json" in _problem(response, 415)["detail"]


def test_body_too_large(service: Service) -> None:
    response = service.client.post(
        "/train", content=b"[" + b"0," * (5 * 1024 * 1024) + b"0]", headers={"content-type": "application/json"}
    )
    _problem(response, 413)


def test_not_found_everywhere(service: Service) -> None:
    assert "No job" in _problem(service.client.get("/jobs/nope"), 404)["detail"]
    assert "No job" in _problem(service.client.get("/jobs/nope/metrics"), 404)["detail"]
    assert "No job" in _problem(service.client.get("/jobs/nope/logs"), 404)["detail"]
    assert "No job" in _problem(service.client.post("/jobs/nope/cancel"), 404)["detail"]
    assert "No model" in _problem(service.client.get("/models/nope/versions/1"), 404)["detail"]
    assert "/docs" in _problem(service.client.get("/no/such/path"), 404)["detail"]
    _problem(service.client.delete("/train"), 405)
    _problem(service.client.get("/jobs", params={"limit": 0}), 422)
    _problem(service.client.get("/jobs", params={"cursor": "garbage!"}), 400)
    crafted = base64.urlsafe_b64encode(b"2026-01-01T00:00:00+00:00|abc\x00def").decode()
    _problem(service.client.get("/jobs", params={"cursor": crafted}), 400)  # a NUL reaching PostgreSQL was a 500
    naive = base64.urlsafe_b64encode(b"2020-01-01T00:00:00|" + b"0" * 32).decode()
    _problem(service.client.get("/jobs", params={"cursor": naive}), 400)  # a time without a zone was a 500
    _problem(service.client.get("/models/x/versions/0"), 422)


def test_request_id_is_echoed(service: Service) -> None:
    response = service.client.get("/jobs/nope", headers={"x-request-id": "abc-123"})
    assert response.headers["x-request-id"] == "abc-123"
    assert response.json()["request_id"] == "abc-123"


# --- found by the fuzzer (tests/e2e/test_fuzz.py): each of these was a 500 or an answer off the schema ---------


def test_nul_bytes_in_the_url(service: Service) -> None:
    # PostgreSQL refuses NUL in text: a path or query parameter holding one used to be a 500 there.
    for url in ["/jobs/%00", "/jobs/a%00b/logs", "/models/%00/versions/1", "/datasets/%00", "/jobs?cursor=%00"]:
        assert "NUL" in _problem(service.client.get(url), 400)["detail"], url
    _problem(service.client.put("/models/m/aliases/a%00", json={"version": 1}), 400)


def test_method_not_allowed_names_every_method_of_the_path(service: Service) -> None:
    # GET and POST /datasets are two routes: Starlette's 405 named only the first one's methods.
    response = service.client.request("OPTIONS", "/datasets")
    _problem(response, 405)
    assert {m.strip() for m in response.headers["allow"].split(",")} >= {"GET", "POST"}
    response = service.client.request("PATCH", "/models/m/aliases/a")
    _problem(response, 405)
    assert {m.strip() for m in response.headers["allow"].split(",")} == {"GET", "HEAD", "PUT", "DELETE"}


@pytest.mark.parametrize(
    ("method", "url", "body"),
    [
        ("GET", f"/models/m/versions/{2**31}", None),  # versions are a 32-bit column: an overflow in the database
        ("GET", f"/models/m/versions/{2**31}/artifact", None),
        ("PUT", "/models/m/aliases/champion", {"version": 2**31}),
        ("POST", "/predict", {"model": {"name": "m", "version": 2**31}, "instances": [[1]]}),
        ("GET", f"/jobs/nope/logs?after={2**31}", None),  # log ids and metric steps too
        ("GET", "/jobs/nope/logs?after=-1", None),
        ("GET", f"/jobs/nope/metrics?since_step={-(2**80)}", None),
    ],
)
def test_numbers_beyond_the_database_columns(service: Service, method: str, url: str, body: Any) -> None:
    _problem(service.client.request(method, url, json=body), 422)


def test_v2_model_names_and_versions_no_model_can_have(service: Service) -> None:
    # ModelSelector refused them with a pydantic error that escaped as a 500.
    urls = ["/v2/models/bad name", "/v2/models/m/versions/0", f"/v2/models/m/versions/{2**31}", "/v2/models/-x/ready"]
    for url in urls:
        body = _problem(service.client.get(url), 404)
        assert body["error"] == body["detail"]  # the V2 protocol's member
    _problem(service.client.get("/v2/models/m/versions/\u00b2"), 422)  # a digit to str.isdigit, not to int()


def test_v2_health_answers_have_no_body(service: Service) -> None:
    for url in ["/v2/health/live", "/v2/health/ready"]:
        response = service.client.get(url)
        assert response.status_code == 200 and response.content == b""
    paths = service.client.get("/openapi.json").json()["paths"]
    assert "content" not in paths["/v2/health/live"]["get"]["responses"]["200"]


@pytest.mark.parametrize(
    ("header_length", "parameters", "tail"),
    [
        ("-3", None, b""),
        ("100000", None, b""),
        (None, {"binary_data_size": "8"}, b"\x00" * 8),
        (None, {"binary_data_size": 9}, b"\x00" * 8),  # beyond the body
        (None, {"binary_data_size": 7}, b"\x00" * 8),  # not a whole number of FP32 values
        (None, {"binary_data_size": -1}, b"\x00" * 8),
    ],
)
def test_v2_binary_tensors_that_do_not_fit(
    service: Service, header_length: str | None, parameters: dict[str, Any] | None, tail: bytes
) -> None:
    head = json.dumps(
        {"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "parameters": parameters or {}}]}
    ).encode()
    headers = {"inference-header-content-length": header_length or str(len(head))}
    response = service.client.post("/v2/models/m/infer", content=head + tail, headers=headers)
    _problem(response, 422)


def test_a_column_name_spark_reads_as_a_path_is_a_422_naming_it(service: Service) -> None:
    """R's iris names its columns ``Sepal.Length``: every family's job failed with Spark's UNRESOLVED_COLUMN (a
    dotted name is a struct's field wherever a job names it)."""
    root = service.app.state.runtime.settings.data_roots[-1]
    root.mkdir(parents=True, exist_ok=True)
    (root / "iris-dotted.csv").write_text("Sepal.Length,width,Species\n5.1,3.5,setosa\n7.0,3.2,versicolor\n")
    dataset = {"uri": "iris-dotted.csv", "label": "Species", "task": "classification"}
    body = {"name": "dotted", "framework": "xgboost", "params": {"num_round": 2}, "dataset": dataset}
    cases = [
        ({}, "dataset.features", "'Sepal.Length': Spark reads '.' in a column name as a field of a struct, so jobs "
         "cannot name this column; rename it in the data (e.g. 'Sepal_Length'), or list dataset.features without it"),
        ({"features": ["width", "Sepal.Length"]}, "dataset.features[1]", "rename it in the data (e.g. 'Sepal_Length')"),
        ({"features": ["width"], "label": "Sepal.Length", "task": "regression"}, "dataset.label", "'Sepal.Length'"),
    ]  # fmt: skip
    before = _job_count(service)
    for given, loc, words in cases:
        problem = _problem(service.client.post("/train", json={**body, "dataset": {**dataset, **given}}), 422)
        assert [e["loc"] for e in problem["errors"]] == [loc] and words in problem["detail"], problem
    assert _job_count(service) == before
    listed = service.client.post("/train", json={**body, "dataset": {**dataset, "features": ["width"]}})
    assert listed.status_code == 202, listed.text  # the other columns are never named


def test_a_feature_name_xgboost_refuses_is_a_422_naming_it(service: Service) -> None:
    """xgboost refuses '[', ']' and '<' in feature names: the job failed in its workers with a 40-line traceback."""
    root = service.app.state.runtime.settings.data_roots[-1]
    root.mkdir(parents=True, exist_ok=True)
    (root / "bracketed.csv").write_text("size[cm],weight,y\n5.1,3.5,1\n7.0,3.2,2\n6.0,3.0,3\n")
    dataset = {"uri": "bracketed.csv", "label": "y", "task": "regression"}
    body = {"name": "bracketed", "framework": "xgboost", "params": {"num_round": 2}, "dataset": dataset}
    before = _job_count(service)
    for given, loc, words in [
        ({}, "dataset.features", "'size[cm]': xgboost refuses '[', ']' and '<' in a feature's name; rename the "
         "column in the data (e.g. 'size_cm_'), or list dataset.features without it"),
        ({"features": ["weight", "size[cm]"]}, "dataset.features[1]", "(e.g. 'size_cm_')"),
    ]:  # fmt: skip
        problem = _problem(service.client.post("/train", json={**body, "dataset": {**dataset, **given}}), 422)
        assert [e["loc"] for e in problem["errors"]] == [loc] and words in problem["detail"], problem
    assert _job_count(service) == before
    spark_ml = {**body, "framework": "spark_ml", "params": {"algorithm": "linear_regression"}}
    accepted = service.client.post("/train", json=spark_ml)  # another family takes the name
    assert accepted.status_code == 202, accepted.text
    service.client.post(f"/jobs/{accepted.json()['id']}/cancel")


def test_every_bad_xgboost_parameter_is_in_one_422(service: Service) -> None:
    """Three bad parameters took three requests to find (one field per 422); as in pydantic's 422s, ``errors``
    names each and the detail counts the rest. The same inside a tune's base."""
    before = _job_count(service)
    problem = _problem(service.client.post("/train", json=_xgboost(eta=-1, max_depth="3", subsample=2)), 422)
    assert [e["loc"] for e in problem["errors"]] == ["params.eta", "params.max_depth", "params.subsample"], problem
    assert problem["detail"].startswith("params.eta: eta (learning_rate) must be") and problem["detail"].endswith(
        "got -1 (and 2 more)"
    ), problem
    body = {"name": "many", "base": _xgboost(eta=-1, max_depth="3"), "trials": 2,
            "space": {"params.num_round": {"type": "int", "low": 5, "high": 10}}}  # fmt: skip
    problem = _problem(service.client.post("/tune", json=body), 422)
    assert [e["loc"] for e in problem["errors"]] == ["base.params.eta", "base.params.max_depth"], problem
    assert problem["detail"].startswith("base.params.eta: eta") and problem["detail"].endswith("(and 1 more)")
    assert _job_count(service) == before


def test_a_file_name_sent_as_the_body_says_how_to_send_the_file(service: Service) -> None:
    # curl -d examples/xgboost-taxi.json (the @ forgotten) sends the name as the body: "Expecting value" alone left
    # a newcomer guessing.
    response = service.client.post(
        "/train", content=b"examples/xgboost-taxi.json", headers={"content-type": "application/json"}
    )
    detail = _problem(response, 400)["detail"]
    assert "-d @examples/xgboost-taxi.json" in detail


def test_an_empty_body_says_the_request_has_none(service: Service) -> None:
    # "body: Field required" read like a missing field called "body".
    response = service.client.post("/train", content=b"", headers={"content-type": "application/json"})
    problem = _problem(response, 422)
    assert problem["detail"].startswith("The request has no body")
    assert problem["errors"][0]["loc"] == "body"


def test_data_outside_the_roots_says_where_to_put_it(service: Service) -> None:
    body = taxi_request()
    body["dataset"]["uri"] = "/nowhere-sparktrain/fares.csv"
    detail = _problem(service.client.post("/train", json=body), 422)["detail"]
    assert "lies outside the configured data roots" in detail
    assert "give its path relative to that root" in detail and "SPARKTRAIN_DATA_ROOTS" in detail

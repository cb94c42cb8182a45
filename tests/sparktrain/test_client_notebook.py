"""The Python client as a notebook uses it, against the real service: predictions from a pandas DataFrame, a numpy
array (numpy cells too) and lists; a body JSON cannot carry said as a usage error; the registry's methods (model,
version, alias, tags, deletes, datasets, checkpoints); the refusal's field errors one per line; ``wait`` with a
timeout and raising on failure; ``help()``'s docstrings, the repr and the version."""

from __future__ import annotations

import inspect
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import sparktrain
from bench.chaos import digits_job
from sparktrain.client import (
    ApiError,
    Client,
    JobFailed,
    JobTimeout,
    ModelRef,
    SparktrainError,
    UsageError,
)
from tests.helpers import TAXI_FEATURES, Service, running_service, taxi_request

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def svc(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with running_service(spark, tmp_path_factory.mktemp("notebook")) as service:
        yield service


@pytest.fixture(scope="module")
def taxi(svc: Service) -> dict[str, Any]:
    """nb-taxi version 1, trained and waited for through the client, as the notebook page does."""
    with Client(svc.url) as api:
        job = api.train(taxi_request("nb-taxi"))
        return api.wait(job["id"], raise_on_failure=True, timeout=600)


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    return pd.read_parquet(REPO / "datasets/taxi/eval.parquet", columns=TAXI_FEATURES).head(5)


def _made(svc: Service, status: str, name: str, **fields: Any) -> str:
    """A job written straight into the service's database, in ``status``: nothing runs it (no broker message)."""
    from app.db.session import transaction
    from app.services import jobs

    with transaction(svc.runtime.db) as session:
        row, _ = jobs.create_job(session=session, job_type="train", request={}, framework="torch", name=name)
        row.status = status
        for key, value in fields.items():
            setattr(row, key, value)
        return str(row.id)


def test_predict_takes_a_dataframe_an_array_and_lists(svc: Service, taxi: dict[str, Any], rows: pd.DataFrame) -> None:
    """The same five rows as a DataFrame, a numpy array, a list of dicts and the body form give the same answers;
    the model as "NAME", "NAME:1", "NAME@ALIAS" or a ModelRef."""
    with Client(svc.url) as api:
        api.set_alias("nb-taxi", "champion", 1)
        wanted = api.predict("nb-taxi", rows)["predictions"]
        assert len(wanted) == 5 and all(isinstance(p, float) for p in wanted), wanted
        assert api.predict("nb-taxi:1", rows.to_numpy())["predictions"] == pytest.approx(wanted)
        assert api.predict("nb-taxi@champion", rows.to_dict("records"))["predictions"] == pytest.approx(wanted)
        assert api.predict(ModelRef("nb-taxi", 1), rows.to_numpy().tolist())["predictions"] == pytest.approx(wanted)
        assert api.predict("nb-taxi", rows.to_dict("list"))["predictions"] == pytest.approx(wanted)  # columns
        body = {"model": {"name": "nb-taxi"}, "dataframe_records": rows.to_dict("records")}
        assert api.predict(body)["predictions"] == pytest.approx(wanted)  # the body form, as the CLI sends it
        assert api.predict(body=body)["predictions"] == pytest.approx(wanted)  # its name before predict(model, rows)
        with pytest.raises(UsageError, match="takes nothing else"):
            api.predict("nb-taxi", rows, body=body)
        with pytest.raises(ApiError) as missing:
            api.predict("nb-taxi@nope", rows)
        assert missing.value.status == 404 and "nope" in str(missing.value)
        with pytest.raises(UsageError, match="NAME, NAME:VERSION or NAME@ALIAS"):
            api.predict("nb-taxi:x:y", rows)
        with pytest.raises(UsageError, match="needs rows"):
            api.predict("nb-taxi")
        with pytest.raises(UsageError, match="Series"):
            api.predict("nb-taxi", rows["hour"])


def test_a_body_json_cannot_carry_is_a_usage_error_that_says_the_fix(svc: Service, rows: pd.DataFrame) -> None:
    """It was a bare ``TypeError: Object of type DataFrame is not JSON serializable``; nothing is sent."""
    with Client(svc.url) as api:
        with pytest.raises(UsageError) as frame:
            api.predict({"model": {"name": "nb-taxi"}, "dataframe_split": rows})
        assert "DataFrame" in str(frame.value) and "predict(model, df)" in str(frame.value), frame.value
        with pytest.raises(UsageError) as array:
            api.train({"name": "nb-x", "params": {"depth": np.int64(3)}})
        assert "int64" in str(array.value) and "int(x)" in str(array.value), array.value
        with pytest.raises(UsageError, match="ndarray"):
            api.request("POST", "/predict", json={"instances": np.zeros((2, 2))})


def test_the_rows_go_exactly_and_nan_reaches_the_service_as_null(
    svc: Service, taxi: dict[str, Any], rows: pd.DataFrame
) -> None:
    """The body on the wire holds every float's every digit (``to_json`` sent 0.123456789 for 0.12345678901234567);
    NaN in an array, which the client refused ("Out of range float values"), goes as null as from a DataFrame, and
    the service names the column it refuses."""
    sent: list[bytes] = []
    exact = rows.copy()
    exact["trip_distance"] = [0.12345678901234567, 1e-13, 1 / 3, 2.5, 10.0]
    with Client(svc.url) as api:
        api._http.event_hooks["request"] = [lambda request: sent.append(request.read())]
        assert len(api.predict("nb-taxi", exact)["predictions"]) == 5
        split = json.loads(sent[-1])["dataframe_split"]
        assert split["columns"] == list(exact.columns)
        at = split["columns"].index("trip_distance")
        assert [row[at] for row in split["data"]] == exact["trip_distance"].tolist()  # Python floats: bit-exact
        gap = exact.to_numpy()
        gap[2, at] = np.nan
        for given in (gap, gap.tolist(), pd.DataFrame(gap, columns=exact.columns)):
            with pytest.raises(ApiError) as refused:
                api.predict("nb-taxi", given)
            assert refused.value.status == 422 and "trip_distance" in str(refused.value), refused.value
            assert b"null" in sent[-1] and b"NaN" not in sent[-1]


def test_a_dataframe_with_numpy_array_cells_is_predicted(svc: Service) -> None:
    """The digits model's one input, pixels, is an array: ``df.to_dict("records")`` keeps ndarray cells (not JSON),
    the DataFrame form sends them as lists."""
    with Client(svc.url) as api:
        api.wait(api.train(digits_job("nb-digits", epochs=1, workers=1))["id"], raise_on_failure=True)
        frame = pd.DataFrame({"pixels": [np.arange(64, dtype=np.float64) / 4, np.zeros(64)]})
        answer = api.predict("nb-digits", frame)
        assert len(answer["predictions"]) == 2, answer
        with pytest.raises(UsageError, match="ndarray"):
            api.predict({"model": {"name": "nb-digits"}, "dataframe_records": frame.to_dict("records")})


def test_the_registry_methods(svc: Service, taxi: dict[str, Any], tmp_path: Path) -> None:
    with Client(svc.url) as api:
        model = api.model("nb-taxi")
        assert model["name"] == "nb-taxi" and model["latest_version"] >= 1
        version = api.version("nb-taxi", 1)
        assert version["version"] == 1 and version["job_id"] == taxi["id"]
        assert api.set_alias("nb-taxi", "staging", 1)["version"] == 1
        assert api.alias("nb-taxi", "staging")["version"] == 1
        api.delete_alias("nb-taxi", "staging")
        with pytest.raises(ApiError) as gone:
            api.alias("nb-taxi", "staging")
        assert gone.value.status == 404
        assert api.tag("nb-taxi", "team", "fares")["value"] == "fares"
        assert api.tag("nb-taxi", "checked", "yes", version=1)["version"] == 1
        assert api.model("nb-taxi")["tags"] == {"team": "fares"}
        assert api.version("nb-taxi", 1)["tags"] == {"checked": "yes"}
        api.untag("nb-taxi", "team")
        api.untag("nb-taxi", "checked", version=1)
        assert not api.model("nb-taxi")["tags"] and not api.version("nb-taxi", 1)["tags"]
        with pytest.raises(UsageError, match="only dots"):
            api.untag("nb-taxi", "..")  # would be DELETE /models/nb-taxi
        with pytest.raises(UsageError, match="no model is named"):
            api.model("a/b")
        names = [spec["name"] for spec in api.signature("nb-taxi")["inputs"]]
        assert set(names) == set(TAXI_FEATURES)
        assert api.signature(ModelRef("nb-taxi", 1)) == api.signature("nb-taxi:1") == api.signature("nb-taxi")
        saved = api.download("nb-taxi:1", str(tmp_path) + "/")
        assert saved.name == "nb-taxi-v1.tar.gz" and tarfile.is_tarfile(saved)
        assert api.checkpoints(taxi["id"]) == []  # spark_ml writes none
        dataset = api.register_dataset({"uri": "datasets/taxi/eval.parquet", "format": "parquet", "name": "nb-eval"})
        assert api.dataset(dataset["id"])["uri"] == dataset["uri"]
        assert dataset["id"] in [d["id"] for d in api.datasets()]


def test_delete_model_and_version(svc: Service) -> None:
    from app.db.session import transaction
    from app.services import models

    with transaction(svc.runtime.db) as session:
        for _ in range(2):
            models.register_version(session=session, name="nb-gone", framework="torch", artifact_uri="file:///x",
                                    metrics={}, params={}, job_id=None)  # fmt: skip
    with Client(svc.url) as api:
        api.delete_version("nb-gone", 1)
        assert [v["version"] for v in api.model("nb-gone")["versions"]] == [2]
        api.delete_model("nb-gone")
        with pytest.raises(ApiError) as gone:
            api.model("nb-gone")
        assert gone.value.status == 404


def test_a_refusal_says_every_field_error_on_a_line_of_its_own(svc: Service) -> None:
    """A notebook's traceback showed the first field error and "(and 2 more)"."""
    body = {"name": "nb-bad", "framework": "spark_ml", "dataset": {"uri": "", "features": [], "label": ""}}
    with Client(svc.url) as api, pytest.raises(ApiError) as refused:
        api.train(body)
    exc = refused.value
    assert exc.status == 422 and len(exc.errors) > 1, exc.problem
    lines = str(exc).splitlines()
    assert lines[0] == exc.summary and exc.detail is not None and exc.detail in lines[0]
    assert lines[1:] == [f"  {e['loc']}: {e['msg']}" for e in exc.errors], lines
    assert exc.request_id == exc.problem["request_id"] and exc.problem["status"] == 422


def test_a_refusal_with_many_field_errors_is_cut_at_twenty_lines() -> None:
    errors = [{"loc": f"body.f{i}", "msg": "bad"} for i in range(30)]
    exc = ApiError(422, {"title": "Unprocessable", "detail": "body.f0: bad (and 29 more)", "errors": errors})
    lines = str(exc).splitlines()
    assert len(lines) == 1 + 20 + 1 and lines[-1] == "  ... and 10 more (all of them: .errors)", lines
    assert len(exc.errors) == 30 and exc.request_id is None
    one = ApiError(404, {"title": "Not found", "detail": "no job x"})
    assert str(one) == one.summary == "404 Not found: no job x" and one.errors == []


def test_wait_with_a_timeout_names_the_job_and_its_status(svc: Service) -> None:
    """A job nothing runs (QUEUED without a message on the embedded broker): the stream gives its state, then
    nothing; past the timeout the read ends and JobTimeout says the job is QUEUED."""
    queued = _made(svc, "QUEUED", "nb-queued")
    with Client(svc.url) as api:
        with pytest.raises(JobTimeout) as late:
            api.wait(queued, timeout=1)
        assert isinstance(late.value, TimeoutError) and isinstance(late.value, SparktrainError)
        assert queued in str(late.value) and "QUEUED" in str(late.value) and late.value.job is not None
        with pytest.raises(JobTimeout):
            api.wait(queued, timeout=0)
        api.cancel(queued)
        assert api.wait(queued, timeout=600)["status"] == "CANCELLED"


def test_wait_returns_a_job_that_has_ended_however_short_the_timeout(svc: Service) -> None:
    """A finished job with a timeout shorter than one round trip raised "did not end within 0.01 s (it is
    SUCCEEDED)"."""
    done = _made(svc, "SUCCEEDED", "nb-done")
    failed = _made(svc, "FAILED", "nb-failed-late", error_reason="BAD_ROWS", error_message="row 1")
    with Client(svc.url) as api:
        for timeout in (0, 0.001):
            assert api.wait(done, timeout=timeout)["status"] == "SUCCEEDED"
            assert api.wait(failed, timeout=timeout)["status"] == "FAILED"
            with pytest.raises(JobFailed, match="BAD_ROWS"):
                api.wait(failed, timeout=timeout, raise_on_failure=True)


def test_wait_raises_on_failure_only_when_asked(svc: Service) -> None:
    failed = _made(svc, "FAILED", "nb-failed", error_reason="BAD_ROWS", error_message="row 3: not a number")
    with Client(svc.url) as api:
        assert api.wait(failed)["status"] == "FAILED"  # today's behaviour: the job is returned
        with pytest.raises(JobFailed) as ended:
            api.wait(failed, raise_on_failure=True)
        assert (ended.value.reason, ended.value.message, ended.value.status) == ("BAD_ROWS", "row 3: not a number",
                                                                                 "FAILED")  # fmt: skip
        assert "BAD_ROWS" in str(ended.value) and failed in str(ended.value)
        cancelled = _made(svc, "CANCELLED", "nb-cancelled")
        with pytest.raises(JobFailed, match="CANCELLED"):
            api.wait(cancelled, raise_on_failure=True)


def test_help_repr_version_and_types() -> None:
    public = [name for name, _ in inspect.getmembers(Client, inspect.isfunction) if not name.startswith("_")]
    assert {"predict", "register_dataset", "dataset", "model", "version", "alias", "tag", "untag", "delete_model",
            "delete_version", "checkpoints"} <= set(public)  # fmt: skip
    undocumented = [name for name in public if not (getattr(Client, name).__doc__ or "").strip()]
    assert undocumented == [], undocumented
    for word in ("url", "api_key", "timeout", "SPARKTRAIN_URL", "SPARKTRAIN_API_KEY"):
        assert word in (Client.__init__.__doc__ or ""), word
    assert "idempotency_key" in inspect.signature(Client.train).parameters
    assert inspect.signature(Client.predict).parameters["body"].kind is inspect.Parameter.KEYWORD_ONLY
    with Client("http://127.0.0.1:9", api_key="s3cret-key") as api:
        assert "s3cret" not in repr(api) and "http://127.0.0.1:9" in repr(api) and "set" in repr(api)
    with Client("http://127.0.0.1:9", api_key="") as api:
        assert "not set" in repr(api)
    assert sparktrain.__version__ and sparktrain.__version__[0].isdigit()
    assert (Path(sparktrain.__file__).parent / "py.typed").is_file()


def test_the_cli_says_a_refusals_field_errors_once() -> None:
    """The message now holds the field errors; the CLI's stderr still says the first line, then each error once."""
    import io

    from rich.console import Console

    from sparktrain._exits import USAGE, reported

    errors = [{"loc": f"body.f{i}", "msg": "bad"} for i in range(3)]
    exc = ApiError(422, {"title": "Unprocessable", "detail": "body.f0: bad (and 2 more)", "errors": errors,
                         "request_id": "r-1"})  # fmt: skip
    buffer = io.StringIO()
    assert reported(exc, Console(file=buffer, width=300, color_system=None)) == USAGE
    assert buffer.getvalue().splitlines() == [
        "refused: 422 Unprocessable: body.f0: bad (and 2 more) (request id r-1)",
        "  body.f0: bad",
        "  body.f1: bad",
        "  body.f2: bad",
    ]

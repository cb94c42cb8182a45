"""The sparktrain CLI against the real service (subprocesses, real HTTP): exit codes, --wait, logs -f, downloads,
job id prefixes, filters, batch predictions, the progress line and the help."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.chaos import digits_job
from sparktrain._csv import model_columns, read_rows, typed_rows
from sparktrain._progress import final_line
from tests.helpers import TAXI_FEATURES, Service, running_service, taxi_request

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"  # rich's "dots" frames


@pytest.fixture(scope="module")
def svc(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with running_service(spark, tmp_path_factory.mktemp("cli")) as service:
        yield service


@pytest.fixture(scope="module")
def linear(svc: Service) -> dict[str, Any]:
    """A model of its own for the tests below: cli-lr version 1, a linear regression (seconds to train)."""
    return svc.done("/train", taxi_request("cli-lr"))


def cli(
    svc: Service | None, *args: str, url: str | None = None, columns: int = 200
) -> subprocess.CompletedProcess[str]:
    env = {"SPARKTRAIN_URL": url or (svc.url if svc else ""), "PATH": "/usr/bin:/bin", "COLUMNS": str(columns)}
    return subprocess.run(
        [sys.executable, "-m", "sparktrain", *args],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=REPO,
    )


def _body(tmp_path: Path, body: dict[str, Any]) -> str:
    path = tmp_path / "body.json"
    path.write_text(json.dumps(body))
    return str(path)


def test_submit_wait_ends_0_with_the_model_and_the_model_can_be_used(svc: Service, tmp_path: Path) -> None:
    body = json.loads((REPO / "examples" / "xgboost-taxi.json").read_text())
    body["name"] = "cli-xgb"
    body["params"]["num_round"] = 20
    done = cli(svc, "submit", _body(tmp_path, body), "--wait", columns=80)
    assert done.returncode == 0, done.stderr
    assert "model cli-xgb version 1" in done.stdout
    # The progress bar's last line, at 80 columns and not on a terminal: the state whole, no spinner.
    finals = [line for line in done.stderr.splitlines() if line.startswith("SUCCEEDED ")]
    assert len(finals) == 1 and "100%" in finals[0] and len(finals[0]) <= 80, done.stderr
    assert not set(SPINNER) & set(done.stderr), done.stderr
    assert "" not in done.stderr.splitlines(), done.stderr  # the live line left an empty line when piped

    listed = json.loads(cli(svc, "--json", "jobs", "--limit", "5").stdout)
    assert listed[0]["name"] == "cli-xgb" and listed[0]["status"] == "SUCCEEDED"
    assert svc.client.put("/models/cli-xgb/aliases/champion", json={"version": 1}).status_code == 200
    fetched = cli(svc, "download", "cli-xgb@champion", "-o", str(tmp_path))
    assert fetched.returncode == 0, fetched.stderr
    with tarfile.open(fetched.stdout.strip()) as archive:
        assert any(name.endswith(".json") for name in archive.getnames()), archive.getnames()

    rows = tmp_path / "rows.csv"
    with rows.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(TAXI_FEATURES)
        for distance in (1.0, 5.0, 12.0):
            writer.writerow([1, distance, -73.98, 40.75, 1, -73.96, 40.77, 9, 2, 0, distance * 1.2])
    predicted = cli(svc, "predict", "cli-xgb:1", "--csv", str(rows))
    assert predicted.returncode == 0, predicted.stderr
    fares = [float(line) for line in predicted.stdout.split()]
    assert len(fares) == 3 and fares[0] < fares[1] < fares[2]
    metrics = svc.client.get("/metrics").text
    assert 'sparktrain_online_predict_duration_seconds_count{route="/predict"} 1.0' in metrics
    assert "sparktrain_model_cache_misses_total 1.0" in metrics


def test_a_failing_job_ends_1_with_its_reason_and_logs_f_ends_with_the_job(svc: Service, tmp_path: Path) -> None:
    nan = digits_job("cli-nan", epochs=2, workers=1)
    nan["training"].update(mode="allreduce", optimizer={"type": "sgd", "learning_rate": 1e30})
    submitted = cli(svc, "--json", "submit", _body(tmp_path, nan))
    assert submitted.returncode == 0, submitted.stderr
    job_id = json.loads(submitted.stdout)["id"]
    followed = cli(svc, "logs", "-f", job_id)
    assert followed.returncode == 1, followed.stderr  # how the job ended
    assert "failed: NAN_LOSS" in followed.stdout.splitlines()[-1]
    waited = cli(svc, "submit", _body(tmp_path, {**nan, "name": "cli-nan-2"}), "--wait", columns=80)
    assert waited.returncode == 1
    assert "FAILED" in waited.stderr and "NAN_LOSS" in waited.stderr
    assert any(line.startswith("FAILED ") and "%" in line for line in waited.stderr.splitlines()), waited.stderr
    assert not set(SPINNER) & set(waited.stderr), waited.stderr  # an ended job's line has no spinner
    quiet = cli(svc, "--json", "submit", _body(tmp_path, {**nan, "name": "cli-nan-3"}), "--wait")
    assert quiet.returncode == 1 and json.loads(quiet.stdout)["status"] == "FAILED"
    assert "NAN_LOSS" in quiet.stderr, quiet.stderr  # the reason of exit 1 is on stderr with --json too (audit)


def test_exit_codes_for_refusals_usage_and_an_unreachable_service(svc: Service, tmp_path: Path) -> None:
    refused = cli(svc, "submit", _body(tmp_path, {"name": "x", "framework": "torch"}))
    assert refused.returncode == 2 and "refused: 422" in refused.stderr and "request id" in refused.stderr
    one = cli(svc, "submit", _body(tmp_path, {**taxi_request("x"), "training": {"epochs": 0}}))
    assert one.returncode == 2 and one.stderr.count("training.epochs") == 1, one.stderr  # it was printed twice
    assert cli(svc, "show", "0" * 32).returncode == 2
    assert cli(svc, "frobnicate").returncode == 2
    assert cli(svc, "download", "a:b:c").returncode == 2
    down = cli(None, "jobs", url="http://127.0.0.1:9")
    assert down.returncode == 4 and "unreachable" in down.stderr
    # audit (2026-12-06): each of these was a usage block, a traceback, an HTML page or "unreachable"
    late = cli(None, "jobs", "--json", url="http://127.0.0.1:9")
    assert late.returncode == 2 and "--json is a global option: it comes before the command" in late.stderr, late
    schemeless = cli(None, "jobs", url="127.0.0.1:9")
    assert schemeless.returncode == 2 and "needs http:// or https://" in schemeless.stderr, schemeless.stderr
    missing = cli(svc, "submit", str(tmp_path / "nope.json"))
    assert missing.returncode == 2 and missing.stderr.strip().endswith("nope.json: No such file or directory")
    assert len(missing.stderr.strip().splitlines()) == 1, missing.stderr
    (tmp_path / "broken.json").write_text("{'name': 1}")
    broken = cli(svc, "submit", str(tmp_path / "broken.json"))
    assert broken.returncode == 2 and "not JSON" in broken.stderr and "Usage" not in broken.stderr, broken.stderr
    with _not_a_sparktrain_service(tmp_path) as other:
        for command in ("jobs", "models"):
            answered = cli(None, command, url=other)
            assert answered.returncode == 2 and "not as a sparktrain service does" in answered.stderr, answered
            assert "Traceback" not in answered.stderr and "<html" not in answered.stderr.lower()
    finished = json.loads(cli(svc, "--json", "jobs", "--status", "SUCCEEDED").stdout)
    if finished:  # cancelling a finished job is a 409
        assert cli(svc, "cancel", finished[0]["id"]).returncode == 2


def test_version_prints_the_installed_package_and_needs_no_service() -> None:
    from importlib.metadata import version

    shown = cli(None, "--version", url="http://127.0.0.1:9")  # nothing listens there
    assert shown.returncode == 0 and shown.stdout == f"sparktrain {version('sparktrain')}\n", shown


def test_names_and_messages_print_as_written_never_as_console_markup() -> None:
    from sparktrain import cli as module

    for console in (module.out, module.err):
        with console.capture() as captured:
            console.print("job [/oops] [bold]x[/bold]")  # a user's job name, a server message: not markup
        assert captured.get().strip() == "job [/oops] [bold]x[/bold]"


@pytest.mark.parametrize("width", [80, 40, 12, 3])
def test_a_final_line_cuts_the_message_and_metrics_never_the_state(width: int) -> None:
    metrics = "loss 0.1234 · samples_per_s 1.234e+04 · validation_mae 2.345 · validation_rmse 3.456"
    line = final_line("CANCELLING", 0.5, "training epoch 3 of 5 on 2 workers", metrics, width=width).plain
    assert line.startswith("CANCELLING") and len(line) <= max(width, len("CANCELLING"))
    assert line == "CANCELLING" or line.endswith("…")
    assert final_line("FAILED", 0.0, "reading data", "", width=80).plain == "FAILED       0%  reading data"


def test_download_into_a_folder_that_is_not_there_yet_and_to_a_new_path_in_one_that_is(
    svc: Service, linear: dict[str, Any], tmp_path: Path
) -> None:
    into = cli(svc, "download", "cli-lr:1", "-o", f"{tmp_path / 'models'}/")
    assert into.returncode == 0, into.stderr
    saved = tmp_path / "models" / "cli-lr-v1.tar.gz"  # named as the service names it (Content-Disposition)
    assert Path(into.stdout.strip()) == saved and tarfile.is_tarfile(saved)
    again = cli(svc, "download", "cli-lr", "-o", str(tmp_path / "models"))  # an existing folder, no slash
    assert again.returncode == 0 and Path(again.stdout.strip()) == saved, again.stderr

    named = tmp_path / "models" / "x.tar.gz"
    made = cli(svc, "download", "cli-lr:1", "-o", str(named))
    assert made.returncode == 0 and Path(made.stdout.strip()) == named and tarfile.is_tarfile(named), made.stderr
    # A file's folder is not made (only a PATH ending in /): a typo made every folder of the path (audit)
    nested = tmp_path / "nodir" / "sub" / "x.tar.gz"
    refused = cli(svc, "download", "cli-lr:1", "-o", str(nested))
    assert refused.returncode == 2 and "does not exist" in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and not (tmp_path / "nodir").exists(), refused.stderr


def test_a_local_file_that_cannot_be_written_is_one_line_and_exit_2(
    svc: Service, linear: dict[str, Any], tmp_path: Path
) -> None:
    (tmp_path / "a-file").write_text("")
    (tmp_path / "busy.tar.gz.part").mkdir()  # where the download is written before it is renamed
    for target in (f"{tmp_path / 'a-file'}/", str(tmp_path / "a-file" / "x.tar.gz"), str(tmp_path / "busy.tar.gz")):
        failed = cli(svc, "download", "cli-lr:1", "-o", target)
        assert failed.returncode == 2, failed.stderr
        assert "Traceback" not in failed.stderr and len(failed.stderr.strip().splitlines()) == 1, failed.stderr
        assert "a-file" in failed.stderr or "busy.tar.gz" in failed.stderr
    assert (tmp_path / "busy.tar.gz.part").is_dir() and not (tmp_path / "busy.tar.gz").exists()
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        denied = cli(svc, "download", "cli-lr:1", "-o", str(locked / "x.tar.gz"))
        assert denied.returncode == 2 and "Permission denied" in denied.stderr, denied.stderr
        assert "Traceback" not in denied.stderr and not list(locked.iterdir())


def test_job_filters_take_any_case_and_an_empty_filtered_list_names_the_filters(
    svc: Service, linear: dict[str, Any]
) -> None:
    none = cli(svc, "jobs", "--status", "running", "--type", "TRAIN")
    assert none.returncode == 0, none.stderr
    assert "No RUNNING train jobs" in none.stderr and "No jobs yet" not in none.stderr
    listed = json.loads(cli(svc, "--json", "jobs", "--status", "Succeeded", "--type", "Train").stdout)
    assert linear["id"] in [j["id"] for j in listed]
    assert all(j["status"] == "SUCCEEDED" and j["type"] == "train" for j in listed)


def test_show_logs_and_cancel_take_a_unique_prefix_of_a_job_id(svc: Service, linear: dict[str, Any]) -> None:
    from app.db.session import transaction
    from app.services import jobs

    job_id = linear["id"]
    shown = cli(svc, "--json", "show", job_id[:8])
    assert shown.returncode == 0 and json.loads(shown.stdout)["id"] == job_id, shown.stderr
    assert cli(svc, "logs", job_id[:6].upper()).returncode == 0
    finished = cli(svc, "cancel", job_id[:10])  # found, and a finished job is not cancelled: 409
    assert finished.returncode == 2 and "409" in finished.stderr, finished.stderr

    ids = [j["id"] for j in json.loads(cli(svc, "--json", "jobs", "--limit", "500").stdout)]
    unused = next(p for p in (f"{n:06x}" for n in range(1 << 24)) if not any(i.startswith(p) for i in ids))
    missing = cli(svc, "show", unused)
    assert missing.returncode == 2 and "404" in missing.stderr, missing.stderr
    short = cli(svc, "show", "abc")  # too short to be a prefix, refused before any request
    assert short.returncode == 2 and "give at least 6 characters of the id" in short.stderr, short.stderr

    twins = ["c0ffee" + "0" * 26, "c0ffee" + "1" * 26]  # two jobs whose ids share their first 6 characters
    with transaction(svc.runtime.db) as session:
        for twin in twins:
            row, _ = jobs.create_job(session=session, job_type="train", request={}, name="cli-twin")
            row.id, row.status = twin, "CANCELLED"
    ambiguous = cli(svc, "show", "c0ffee")
    assert ambiguous.returncode == 2 and "starts 2 job ids" in ambiguous.stderr, ambiguous.stderr
    assert all(twin in ambiguous.stderr for twin in twins)
    assert json.loads(cli(svc, "--json", "show", "c0ffee1").stdout)["id"] == twins[1]


def _requests(svc: Service) -> dict[tuple[str, str, str], float]:
    """How many requests the service has answered, by method, route template and status (its GET /metrics)."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (sample.labels["method"], sample.labels["route"], sample.labels["status"]): sample.value
        for family in text_string_to_metric_families(svc.client.get("/metrics").text)
        if family.name == "sparktrain_http_request_duration_seconds"
        for sample in family.samples
        if sample.name.endswith("_count")
    }


def test_the_jobs_table_prints_ids_whole_so_one_can_be_copied_into_another_command(
    svc: Service, linear: dict[str, Any]
) -> None:
    ids = [j["id"] for j in json.loads(cli(svc, "--json", "jobs", "--limit", "5").stdout)]
    assert linear["id"] in ids
    for columns in (80, 50, 200):  # the usual terminal, a narrow one, a wide one
        table = cli(svc, "jobs", "--limit", "5", columns=columns)
        assert table.returncode == 0, table.stderr
        assert [job_id for job_id in ids if job_id not in table.stdout] == [], table.stdout
        header, *rows = table.stdout.splitlines()  # plain columns, one job a line: its id first
        assert header.split()[0] == "id" and [row.split()[0] for row in rows] == ids, table.stdout
        if columns == 200:
            assert all(re.search(r" \d{4}-\d\d-\d\dT\d\d:\d\dZ$", row) for row in rows), table.stdout
    copied = cli(svc, "jobs", "--limit", "5", columns=80).stdout.splitlines()[ids.index(linear["id"]) + 1].split()[0]
    shown = cli(svc, "--json", "show", copied)
    assert shown.returncode == 0 and json.loads(shown.stdout)["id"] == linear["id"], shown.stderr
    fields = [line.split()[0] for line in cli(svc, "show", copied).stdout.splitlines() if line[:1].isalpha()]
    assert fields[:11] == ["id", "name", "type", "framework", "status", "progress", "progress_message", "attempt",
                           "created_at", "started_at", "finished_at"], fields  # fmt: skip


def test_jobs_by_name_in_any_case(svc: Service, linear: dict[str, Any]) -> None:
    """``jobs --name`` asks the service for the jobs whose job or model name contains the text (GET /jobs?name=)."""
    found = cli(svc, "--json", "jobs", "--name", "CLI-L", "--limit", "500")
    assert found.returncode == 0, found.stderr
    listed = json.loads(found.stdout)
    assert linear["id"] in [j["id"] for j in listed]
    assert all("cli-l" in ((j["name"] or "") + " " + ((j["model"] or {}).get("name") or "")).lower() for j in listed)
    none = cli(svc, "jobs", "--status", "succeeded", "--name", "no-such-job")
    assert none.returncode == 0 and none.stdout == "", none.stdout
    assert none.stderr.strip() == "No SUCCEEDED jobs named 'no-such-job'", none.stderr


def test_a_prefix_is_looked_up_in_the_list_and_a_whole_id_with_one_request(
    svc: Service, linear: dict[str, Any]
) -> None:
    one, missing, listing = ("GET", "/jobs/{job_id}", "200"), ("GET", "/jobs/{job_id}", "404"), ("GET", "/jobs", "200")

    def asked(*args: str) -> tuple[subprocess.CompletedProcess[str], dict[tuple[str, str, str], float]]:
        before = _requests(svc)
        done = cli(svc, *args)
        after = _requests(svc)
        return done, {key: after.get(key, 0) - before.get(key, 0) for key in (one, missing, listing)}

    job_id = linear["id"]
    shown, counts = asked("--json", "show", job_id[:8])  # the list, then the job: no GET /jobs/{prefix} (a 404)
    assert shown.returncode == 0 and json.loads(shown.stdout)["id"] == job_id, shown.stderr
    assert counts == {one: 1, missing: 0, listing: 1}
    shown, counts = asked("--json", "show", job_id.upper())  # a whole id, in any case: the job alone
    assert shown.returncode == 0 and json.loads(shown.stdout)["id"] == job_id, shown.stderr
    assert counts == {one: 1, missing: 0, listing: 0}

    ids = [j["id"] for j in json.loads(cli(svc, "--json", "jobs", "--limit", "500").stdout)]
    unused = next(p for p in (f"{n:06x}" for n in range(1 << 24)) if not any(i.startswith(p) for i in ids))
    unknown, counts = asked("logs", unused)  # the list only, and the same refusal as before: 404, exit 2
    assert unknown.returncode == 2 and "404" in unknown.stderr and unused in unknown.stderr, unknown.stderr
    assert counts == {one: 0, missing: 0, listing: 1}
    unknown, counts = asked("show", "0" * 32)  # a whole id no job has: the service's own 404
    assert unknown.returncode == 2 and "404" in unknown.stderr, unknown.stderr
    assert counts == {one: 0, missing: 1, listing: 0}


def test_a_batch_prediction_with_wait_says_where_its_output_went(
    svc: Service, linear: dict[str, Any], tmp_path: Path
) -> None:
    data = Path(svc.runtime.settings.data_roots[-1])  # the file must be inside the service's data roots
    data.mkdir(parents=True, exist_ok=True)
    rows = data / "cli-rows.csv"
    with rows.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["trip_id", *TAXI_FEATURES])
        for trip, distance in enumerate((1.0, 5.0, 12.0)):
            writer.writerow([trip, 1, distance, -73.98, 40.75, 1, -73.96, 40.77, 9, 2, 0, distance * 1.2])
    done = cli(svc, "predict", "cli-lr:1", "--csv", str(rows), "--max-inline", "1", "--key", "trip_id", "--wait")
    assert done.returncode == 0, done.stderr
    output = [line for line in done.stdout.splitlines() if line.startswith("output ")]
    assert len(output) == 1 and output[0].endswith(" (3 rows)"), done.stdout
    assert Path(output[0].removeprefix("output ").removesuffix(" (3 rows)")).is_dir()
    assert "warning:" not in done.stderr, done.stderr
    # keyed by a column that repeats: the job's warning reaches the user (the CLI printed none of a job's warnings)
    hours = cli(svc, "predict", "cli-lr:1", "--csv", str(rows), "--max-inline", "1", "--key", "hour", "--wait")
    assert hours.returncode == 0, hours.stderr
    said = "warning: the key 'hour' is not unique: 2 of the 3 output rows repeat the key of an earlier row"
    assert said in hours.stderr, hours.stderr
    job_id = next(line.split()[1] for line in hours.stderr.splitlines() if line.startswith("job "))
    shown = cli(svc, "show", job_id)
    assert any(
        line.startswith("warning          the key 'hour' is not unique") for line in shown.stdout.splitlines()
    ), (shown.stdout, hours.stderr)


def test_help_shows_flags_without_a_value_and_arguments_by_name() -> None:
    for command, usage in [
        ((), "Usage: sparktrain [OPTIONS] COMMAND [ARGS]..."),
        (("download",), "Usage: sparktrain download [OPTIONS] MODEL"),
        (("submit",), "Usage: sparktrain submit [OPTIONS] BODY"),
        (("logs",), "Usage: sparktrain logs [OPTIONS] JOB"),
    ]:
        shown = cli(None, *command, "--help", columns=100)
        assert shown.returncode == 0, shown.stderr
        assert usage in shown.stdout, shown.stdout
        assert "<bool>" not in shown.stdout and "{" not in shown.stdout, shown.stdout


def test_a_csv_reads_as_spark_reads_it_empty_cells_null_and_true_false_booleans(tmp_path: Path) -> None:
    """``predict --csv`` sends what Spark's CSV inference would make of each cell: a boolean column of True/False
    was sent as strings, and the service refused it ("'True' is not a boolean")."""
    path = tmp_path / "rows.csv"
    path.write_text('has_garden,sqft,rooms,city\nTrue,1200.5,3,"Oslo, N"\nfalse,,4,x\n')
    columns, rows = read_rows(path)
    assert columns == ["has_garden", "sqft", "rooms", "city"]
    assert typed_rows(columns, rows, {}) == [[True, 1200.5, 3, "Oslo, N"], [False, None, 4, "x"]]


def test_a_text_column_of_the_models_signature_stays_text() -> None:
    """A categorical zip code ``007`` was sent as the number 7, which is another category (walkthrough)."""
    columns, rows = ["zip", "member", "size"], [["007", "true", "2"], ["", "no", "3.5"]]
    typed = typed_rows(columns, rows, {"zip": "string", "member": "string", "size": "double"})
    assert typed == [["007", "true", 2], [None, "no", 3.5]]


def test_only_the_models_columns_are_kept_in_the_files_order_and_a_row_of_another_length_is_left_whole() -> None:
    columns, rows = ["id", "b", "label", "a"], [[1, 2.0, 0, 3.0], [2, 4.0, 1]]
    assert model_columns(columns, rows, ["a", "b"]) == (["b", "a"], [[2.0, 3.0], [2, 4.0, 1]], ["id", "label"])
    assert model_columns(columns, rows, ["a", "b", "id", "label"]) == (columns, rows, [])
    assert model_columns(columns, rows, []) == (columns, rows, [])  # no names to go by: everything is sent
    assert model_columns(["id", "b"], [[1, 2.0]], ["a", "b"]) == (["b"], [[2.0]], ["id"])  # "a" stays missing


def test_predict_csv_leaves_out_ids_and_labels_and_says_so(
    svc: Service, linear: dict[str, Any], tmp_path: Path
) -> None:
    """A file with an id and the label beside the features (what a held-out split looks like) was refused
    inline: the service takes only the model's columns. The CLI sends those and names the rest on stderr."""
    rows = tmp_path / "held-out.csv"
    with rows.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["trip_id", *reversed(TAXI_FEATURES), "fare_amount"])
        for trip, distance in enumerate((1.0, 5.0, 12.0)):
            features = [1, distance, -73.98, 40.75, 1, -73.96, 40.77, 9, 2, 0, distance * 1.2]
            writer.writerow([trip, *reversed(features), 10.0])
    done = cli(svc, "predict", "cli-lr", "--csv", str(rows))
    assert done.returncode == 0, done.stderr
    assert "not sent (the model does not take them): trip_id, fare_amount" in done.stderr, done.stderr
    fares = [float(line) for line in done.stdout.split()]
    assert len(fares) == 3 and fares[0] < fares[1] < fares[2], done.stdout
    missing = tmp_path / "missing.csv"
    missing.write_text("trip_id,trip_distance\n1,2.5\n")
    refused = cli(svc, "predict", "cli-lr", "--csv", str(missing))
    assert refused.returncode == 2 and "passenger_count" in refused.stderr, refused.stderr
    # a misspelt column: left out as not the model's, and the model's own missing; the two are put together
    misspelt = tmp_path / "misspelt.csv"
    header = [("h_dist" if f == "h_distance" else f) for f in TAXI_FEATURES]
    misspelt.write_text(",".join(header) + "\n" + ",".join(["1"] * len(header)) + "\n")
    refused = cli(svc, "predict", "cli-lr", "--csv", str(misspelt))
    assert refused.returncode == 2, refused.stderr
    assert f"{misspelt} has no column h_distance, which the model takes: is one of h_dist misspelt?" in " ".join(
        refused.stderr.split()
    ), refused.stderr


@contextlib.contextmanager
def _not_a_sparktrain_service(root: Path) -> Iterator[str]:
    """Python's own file server on loopback: an HTML 404 for /models, a file (not JSON) for /jobs."""
    import functools
    import http.server
    import threading

    (root / "served").mkdir()
    (root / "served" / "jobs").write_text("not json")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root / "served"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_csv_with_a_byte_order_mark_reads_its_first_column_by_name(tmp_path: Path) -> None:
    """Excel's "CSV UTF-8" starts with a BOM, which stuck to the first column's name (audit)."""
    path = tmp_path / "excel.csv"
    path.write_bytes("\ufeffpassenger_count,trip_distance\n1,2.5\n".encode())
    assert read_rows(path) == (["passenger_count", "trip_distance"], [["1", "2.5"]])
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(ValueError, match="empty; a CSV file with a header line is needed"):
        read_rows(tmp_path / "empty.csv")


def test_logs_prints_every_line_and_jobs_piped_cuts_nothing(svc: Service, linear: dict[str, Any]) -> None:
    """`logs JOB` printed the newest 200 lines without a word; `jobs` piped cut type and time to 80 columns, and a
    long name pushed the status out of the table (audit, 2026-12-06)."""
    from app.db.session import transaction
    from app.services import jobs

    with transaction(svc.runtime.db) as s:
        job, _ = jobs.create_job(session=s, job_type="train", request={"name": "x"}, framework="torch", name="n" * 150)
        long_id = job.id
        for i in range(450):
            jobs.add_log(session=s, job_id=long_id, message=f"line {i}")
    printed = cli(svc, "logs", long_id).stdout.splitlines()
    assert len(printed) == 450 and printed[0].endswith("line 0") and printed[-1].endswith("line 449"), printed[:2]
    table = cli(svc, "jobs", "--limit", "3", columns=80).stdout.splitlines()
    row = next(line for line in table if line.startswith(long_id))
    assert "n" * 150 in row and "train/torch" in row and "QUEUED" in row, row
    assert "…" not in "\n".join(table), table
    assert "progress         0%" in cli(svc, "show", long_id).stdout  # show had no progress (audit)


@pytest.mark.parametrize("args", [["logs", "-f"], ["--json", "logs", "-f"]])
def test_ctrl_c_while_following_says_the_job_goes_on_and_how_to_follow_it(svc: Service, args: list[str]) -> None:
    """Ctrl-C (SIGINT) ends the following with status 130 and a line: typer turned it into a silent Exit(130)."""
    from datetime import timedelta

    from app.core.jobstates import JobStatus
    from app.db.base import utcnow
    from app.db.session import transaction
    from app.services import jobs

    with transaction(svc.runtime.db) as s:  # a job some driver runs (its heartbeat an hour ahead: never taken as lost)
        row, _ = jobs.create_job(session=s, job_type="train", request={}, framework="torch", name="followed")
        for source, target in ((JobStatus.QUEUED, JobStatus.STARTING), (JobStatus.STARTING, JobStatus.RUNNING)):
            jobs.transition(session=s, job_id=row.id, sources=[source], target=target, started_at=utcnow(),
                            heartbeat_at=utcnow() + timedelta(hours=1), worker_id="elsewhere:1:x")  # fmt: skip
        jobs.add_log(session=s, job_id=row.id, message="epoch 1 done")
        job_id = row.id
    env = {"SPARKTRAIN_URL": svc.url, "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"}
    # as from a terminal: a run in the background (CI's `&`) starts its children with SIGINT ignored, and Python
    # then installs no KeyboardInterrupt for it
    as_in_a_terminal = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
                        "sys.argv[0] = 'sparktrain'; runpy.run_module('sparktrain', run_name='__main__')")  # fmt: skip
    process = subprocess.Popen([sys.executable, "-c", as_in_a_terminal, *args, job_id], cwd=REPO, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert process.stdout is not None
        assert "epoch 1 done" in process.stdout.readline()  # following now
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
        with transaction(svc.runtime.db) as s:
            jobs.transition(session=s, job_id=job_id, sources=[JobStatus.RUNNING], target=JobStatus.SUCCEEDED,
                            finished_at=utcnow())  # fmt: skip
    assert process.returncode == 130, stderr
    assert stderr.strip() == (f"interrupted: job {job_id} goes on in the service; follow it again with: "
                              f"sparktrain logs -f {job_id}"), stderr  # fmt: skip


def test_a_tune_body_without_a_space_goes_to_tune_which_says_what_it_lacks(svc: Service, tmp_path: Path) -> None:
    """A body with ``base`` went to /train unless it had ``space`` too: 11 errors about /train's fields."""
    refused = cli(svc, "submit", _body(tmp_path, {"name": "no-space", "base": taxi_request("no-space-base")}))
    assert refused.returncode == 2, refused.stderr
    assert "space" in refused.stderr and "framework" not in refused.stderr, refused.stderr

"""The commands a Livy or MLflow CLI user looks for, against the real service: wait, metrics, alias, datasets,
submit --idempotency-key, bodies on stdin, jobs --all, array cells for predict --csv, and the tables piped."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.chaos import digits_job
from sparktrain.client import Client
from tests.helpers import Service, running_service, taxi_request
from tests.sparktrain.test_cli import REPO, cli

pytestmark = pytest.mark.slow
BOXES = set("─│┃━┏┓┗┛┡┩└┘├┤┬┴┼╭╮╯╰")


@pytest.fixture(scope="module")
def svc(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with running_service(spark, tmp_path_factory.mktemp("cli-cmd")) as service:
        yield service


@pytest.fixture(scope="module")
def digits(svc: Service) -> dict[str, Any]:
    """cmd-digits version 1: a torch network on the shipped digits, whose one input, pixels, is an array."""
    return svc.done("/train", digits_job("cmd-digits", epochs=1, workers=1))


def _piped(*args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparktrain", *args], input=stdin, capture_output=True, text=True,
                          check=False, timeout=300, cwd=REPO)  # fmt: skip


def _made(svc: Service, status: str, name: str = "cmd-made") -> str:
    """A job written straight into the service's database, in ``status``; its id."""
    from app.db.session import transaction
    from app.services import jobs

    with transaction(svc.runtime.db) as session:
        row, _ = jobs.create_job(session=session, job_type="train", request={}, framework="torch", name=name)
        row.status = status
        return str(row.id)


def test_models_are_read_page_by_page_from_the_service(svc: Service) -> None:
    """GET /models cut at its limit with no next page; the client follows ``next_cursor`` to the last model."""
    from app.db.session import transaction
    from app.services import models

    with transaction(svc.runtime.db) as session:
        for name in ("pg-c", "pg-a", "pg-b"):
            models.register_version(session=session, name=name, framework="torch", artifact_uri="file:///x",
                                    metrics={}, params={}, job_id=None)  # fmt: skip
    with Client(svc.url) as api:
        every = [m["name"] for m in api.models()]
        assert [m["name"] for m in api.models(page_size=1)] == every == sorted(every)
    assert {"pg-a", "pg-b", "pg-c"} <= set(every)


def test_predict_csv_reads_an_array_cell_as_a_json_array(svc: Service, digits: dict[str, Any], tmp_path: Path) -> None:
    """The digits model's pixels could not be given: the cell's text was sent as a string (walkthrough)."""
    pixels = [float(i % 16) for i in range(64)]
    rows = tmp_path / "digits.csv"
    rows.write_text(f'id,pixels\n1,"{json.dumps(pixels)}"\n2,"{json.dumps(pixels[::-1])}"\n')
    done = cli(svc, "predict", "cmd-digits", "--csv", str(rows))
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.split()) == 2 and all(line.isdigit() for line in done.stdout.split()), done.stdout
    unquoted = tmp_path / "unquoted.csv"
    unquoted.write_text("pixels\n" + json.dumps(pixels) + "\n")  # the array's commas split it into 64 cells
    refused = cli(svc, "predict", "cmd-digits", "--csv", str(unquoted))
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert f"{unquoted} line 2: column 'pixels' takes an array, written as a JSON array in the cell, quoted: " \
           '"[0, 1.5, 3]"' in refused.stderr, refused.stderr  # fmt: skip


def test_metrics_lists_points_as_a_plain_table_or_json(svc: Service) -> None:
    from datetime import UTC, datetime

    from app.db.models import Job
    from app.db.session import transaction
    from app.services import jobs

    job_id = _made(svc, "SUCCEEDED", "cmd-metrics")
    points = [{"key": "loss", "step": s, "epoch": 0, "value": 1.0 / s, "worker": w} for s in (1, 2, 3) for w in (0, 1)]
    with transaction(svc.runtime.db) as session:
        jobs.add_metrics(session=session, job_id=job_id, points=[*points, {"key": "validation_mae", "step": 3,
                                                                           "value": 2.5}])  # fmt: skip
    table = cli(svc, "metrics", job_id[:8])
    assert table.returncode == 0, table.stderr
    header, *lines = table.stdout.splitlines()
    assert header.split() == ["key", "step", "epoch", "value", "worker"] and len(lines) == 7, table.stdout
    assert lines[0].split() == ["loss", "1", "0", "1", "0"], table.stdout
    assert lines[-1].split() == ["validation_mae", "3", "-", "2.5", "-"], table.stdout
    assert not BOXES & set(table.stdout), table.stdout
    only = json.loads(cli(svc, "--json", "metrics", job_id, "--key", "loss").stdout)
    assert [(p["step"], p["worker"]) for p in only] == [(s, w) for s in (1, 2, 3) for w in (0, 1)], only
    assert set(only[0]) >= {"key", "step", "epoch", "value", "worker", "time"}
    paged = Client(svc.url).metrics(job_id, page_size=2)  # every point once, across four pages
    assert len(paged) == 7 and [p["step"] for p in paged] == sorted(p["step"] for p in paged)
    none = cli(svc, "metrics", job_id, "--key", "nothing")
    assert none.returncode == 0 and none.stdout == "" and "No nothing metrics" in none.stderr, none.stderr
    assert "(yet)" not in none.stderr, none.stderr  # the job has ended: none will come
    running_id = _made(svc, "RUNNING", "cmd-metrics-running")
    with transaction(svc.runtime.db) as session:  # a live heartbeat: no reconciler pass takes it for lost meanwhile
        session.get(Job, running_id).heartbeat_at = datetime.now(UTC)
    running = cli(svc, "metrics", running_id)
    assert running.returncode == 0 and "No metrics for job" in running.stderr and "(yet)" in running.stderr


def test_wait_ends_with_the_jobs_code_and_prints_no_logs(svc: Service, tmp_path: Path) -> None:
    body = tmp_path / "train.json"
    body.write_text(json.dumps(taxi_request("cmd-wait")))
    job_id = json.loads(cli(svc, "--json", "submit", str(body)).stdout)["id"]
    waited = cli(svc, "wait", job_id)
    assert waited.returncode == 0, waited.stderr
    said = waited.stdout.splitlines()
    assert said[:2] == [f"SUCCEEDED job {job_id}", "model cmd-wait version 1"] and "INFO" not in waited.stdout, said
    assert waited.stderr == "", waited.stderr  # no progress bar, no log lines
    as_json = cli(svc, "--json", "wait", job_id[:7])
    assert as_json.returncode == 0 and json.loads(as_json.stdout)["status"] == "SUCCEEDED", as_json.stderr
    failed, cancelled = _made(svc, "FAILED"), _made(svc, "QUEUED")
    assert cli(svc, "cancel", cancelled).returncode == 0
    assert cli(svc, "wait", failed).returncode == 1
    ended = cli(svc, "--json", "wait", cancelled)
    assert ended.returncode == 3 and json.loads(ended.stdout)["status"] == "CANCELLED", ended.stderr


def test_submit_with_an_idempotency_key_and_bodies_from_stdin(svc: Service) -> None:
    """The same key and body give the same job; another body with the key is refused (409)."""
    body = json.dumps(taxi_request("cmd-idem"))
    first = _piped("--url", svc.url, "--json", "submit", "-", "--idempotency-key", "cmd-1", stdin=body)
    assert first.returncode == 0, first.stderr
    again = _piped("--url", svc.url, "--json", "submit", "-", "--idempotency-key", "cmd-1", stdin=body)
    assert again.returncode == 0 and json.loads(again.stdout)["id"] == json.loads(first.stdout)["id"], again.stderr
    other = _piped("--url", svc.url, "submit", "-", "--idempotency-key", "cmd-1",
                   stdin=json.dumps(taxi_request("cmd-idem-2")))  # fmt: skip
    assert other.returncode == 2 and "409" in other.stderr, other.stderr
    evaluate = {"model": {"name": "cmd-idem", "version": 99}, "dataset": {"uri": "datasets/taxi/eval.parquet"},
                "metrics": ["regression"]}  # fmt: skip
    refused = _piped("--url", svc.url, "evaluate", "-", stdin=json.dumps(evaluate))  # read, sent, refused: no v99
    assert refused.returncode == 2 and "refused: 404" in refused.stderr, refused.stderr


def test_alias_set_and_delete_and_models_piped_is_a_plain_table(svc: Service, tmp_path: Path) -> None:
    svc.done("/train", taxi_request("cmd-alias"))
    set_ = cli(svc, "alias", "cmd-alias:1", "champion")
    assert set_.returncode == 0 and set_.stdout.strip() == "alias champion of cmd-alias names version 1", set_.stderr
    table = cli(svc, "models", columns=80)
    assert table.returncode == 0 and not BOXES & set(table.stdout), table.stdout
    header, *lines = table.stdout.splitlines()
    assert header.split() == ["name", "versions", "latest", "aliases", "framework"], table.stdout
    assert "cmd-alias 1 1 champion=v1 spark_ml" in [" ".join(line.split()) for line in lines], table.stdout
    assert cli(svc, "download", "cmd-alias@champion", "-o", f"{tmp_path}/").returncode == 0
    # the other formats (the CLI fetched only the archive)
    mlflow = cli(svc, "download", "cmd-alias@champion", "--format", "mlflow", "-o", f"{tmp_path}/")
    assert mlflow.returncode == 0 and mlflow.stdout.strip() == f"{tmp_path}/cmd-alias-v1-mlflow.zip", mlflow.stderr
    assert zipfile.is_zipfile(tmp_path / "cmd-alias-v1-mlflow.zip")
    bad = cli(svc, "download", "cmd-alias@champion", "--format", "pickle")
    assert bad.returncode == 2 and "pickle" in bad.stderr, bad.stderr
    deleted = cli(svc, "--json", "alias", "--delete", "cmd-alias", "champion")
    assert deleted.returncode == 0 and json.loads(deleted.stdout)["deleted"] is True, deleted.stderr
    listed = {m["name"]: m for m in json.loads(cli(svc, "--json", "models").stdout)}
    assert listed["cmd-alias"]["aliases"] == {}, listed
    for args in (("cmd-alias", "x"), ("cmd-alias@champion", "x"), ("--delete", "cmd-alias:1", "x")):
        assert cli(svc, "alias", *args).returncode == 2  # a version to name; with --delete, a name alone
    missing = cli(svc, "alias", "--delete", "cmd-alias", "champion")
    assert missing.returncode == 2 and "404" in missing.stderr, missing.stderr


def test_datasets_lists_the_registered_ones_plain_when_piped(svc: Service) -> None:
    made = svc.client.post("/datasets", json={"uri": "datasets/taxi/eval.parquet", "name": "cmd-taxi"})
    assert made.status_code == 201, made.text
    listed = cli(svc, "datasets")
    assert listed.returncode == 0 and not BOXES & set(listed.stdout), listed.stderr
    header, *lines = listed.stdout.splitlines()
    assert header.split()[:3] == ["id", "name", "format"], listed.stdout
    assert lines[0].split()[:3] == [made.json()["id"], "cmd-taxi", "parquet"], listed.stdout
    assert json.loads(cli(svc, "--json", "datasets").stdout)[0]["id"] == made.json()["id"]


def test_jobs_all_follows_every_page_and_a_prefix_that_starts_no_id_is_worded_as_the_service(svc: Service) -> None:
    from app.db.session import transaction
    from app.services import jobs

    with transaction(svc.runtime.db) as session:
        for n in range(520):  # more than one page of 500
            row, _ = jobs.create_job(session=session, job_type="train", request={}, name=f"cmd-bulk-{n}")
            row.status = "CANCELLED"
    every = cli(svc, "--json", "jobs", "--all")
    assert every.returncode == 0, every.stderr
    ids = [job["id"] for job in json.loads(every.stdout)]
    assert len(ids) == len(set(ids)) > 520, len(ids)
    assert len(json.loads(cli(svc, "--json", "jobs", "--limit", "500").stdout)) == 500
    named = cli(svc, "jobs", "--all", "--name", "cmd-bulk-51")  # cmd-bulk-51 and cmd-bulk-510 to 519
    assert named.returncode == 0 and len(named.stdout.splitlines()) == 12, named.stdout
    both = cli(svc, "jobs", "--all", "--limit", "5")
    assert both.returncode == 2 and "give --all or --limit N, not both" in both.stderr, both.stderr
    unused = next(p for p in (f"{n:06x}" for n in range(1 << 24)) if not any(i.startswith(p) for i in ids))
    missing = cli(svc, "show", unused)
    assert missing.returncode == 2, missing.stderr
    assert missing.stderr.startswith(f"refused: 404 Not found: no job id starts with '{unused}'"), missing.stderr


def test_a_second_ctrl_c_while_the_first_is_said_is_ignored(svc: Service) -> None:
    """A KeyboardInterrupt traceback came with a second SIGINT while "interrupted: ..." was being printed."""
    from datetime import timedelta

    from app.core.jobstates import JobStatus
    from app.db.base import utcnow
    from app.db.session import transaction
    from app.services import jobs

    with transaction(svc.runtime.db) as s:  # a job some driver runs (its heartbeat an hour ahead)
        row, _ = jobs.create_job(session=s, job_type="train", request={}, framework="torch", name="cmd-followed")
        for source, target in ((JobStatus.QUEUED, JobStatus.STARTING), (JobStatus.STARTING, JobStatus.RUNNING)):
            jobs.transition(session=s, job_id=row.id, sources=[source], target=target, started_at=utcnow(),
                            heartbeat_at=utcnow() + timedelta(hours=1), worker_id="elsewhere:1:x")  # fmt: skip
        jobs.add_log(session=s, job_id=row.id, message="epoch 1 done")
        job_id = row.id
    env = {"SPARKTRAIN_URL": svc.url, "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"}
    as_in_a_terminal = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
                        "sys.argv[0] = 'sparktrain'; runpy.run_module('sparktrain', run_name='__main__')")  # fmt: skip
    try:
        for _ in range(3):
            process = subprocess.Popen([sys.executable, "-c", as_in_a_terminal, "logs", "-f", job_id], cwd=REPO,
                                       env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
            assert process.stdout is not None
            assert "epoch 1 done" in process.stdout.readline()  # following now
            while process.poll() is None:  # Ctrl-C held down
                process.send_signal(signal.SIGINT)
            _, stderr = process.communicate(timeout=60)
            assert process.returncode == 130 and "Traceback" not in stderr, stderr
            assert stderr.startswith(f"interrupted: job {job_id} goes on in the service"), stderr
    finally:
        with transaction(svc.runtime.db) as s:
            jobs.transition(session=s, job_id=job_id, sources=[JobStatus.RUNNING], target=JobStatus.SUCCEEDED,
                            finished_at=utcnow())  # fmt: skip


def test_show_prints_a_dash_for_what_a_job_has_not_got_yet(svc: Service) -> None:
    """A queued job has no progress message, start or end: ``show`` printed Python's ``None`` for each."""
    job_id = _made(svc, "CANCELLED", "cmd-show-none")
    shown = cli(svc, "show", job_id)
    assert shown.returncode == 0, shown.stderr
    lines = {line.split(None, 1)[0]: line.split(None, 1)[1:] for line in shown.stdout.splitlines() if line.strip()}
    assert lines["progress_message"] == ["-"] and lines["started_at"] == ["-"], shown.stdout
    assert "None" not in shown.stdout, shown.stdout

"""The sparktrain CLI against the real service (subprocesses, real HTTP): exit codes, --wait, logs -f, downloads."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.chaos import digits_job
from tests.helpers import TAXI_FEATURES, Service, running_service

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def svc(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with running_service(spark, tmp_path_factory.mktemp("cli")) as service:
        yield service


def cli(svc: Service | None, *args: str, url: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {"SPARKTRAIN_URL": url or (svc.url if svc else ""), "PATH": "/usr/bin:/bin", "COLUMNS": "200"}
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
    done = cli(svc, "submit", _body(tmp_path, body), "--wait")
    assert done.returncode == 0, done.stderr
    assert "model cli-xgb version 1" in done.stdout
    assert "SUCCEEDED" in done.stderr  # the progress bar's last state

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
    waited = cli(svc, "submit", _body(tmp_path, {**nan, "name": "cli-nan-2"}), "--wait")
    assert waited.returncode == 1
    assert "FAILED" in waited.stderr and "NAN_LOSS" in waited.stderr


def test_exit_codes_for_refusals_usage_and_an_unreachable_service(svc: Service, tmp_path: Path) -> None:
    refused = cli(svc, "submit", _body(tmp_path, {"name": "x", "framework": "torch"}))
    assert refused.returncode == 2 and "refused: 422" in refused.stderr and "request id" in refused.stderr
    assert cli(svc, "show", "0" * 32).returncode == 2
    assert cli(svc, "frobnicate").returncode == 2
    assert cli(svc, "download", "a:b:c").returncode == 2
    down = cli(None, "jobs", url="http://127.0.0.1:9")
    assert down.returncode == 4 and "unreachable" in down.stderr
    finished = json.loads(cli(svc, "--json", "jobs", "--status", "SUCCEEDED").stdout)
    if finished:  # cancelling a finished job is a 409
        assert cli(svc, "cancel", finished[0]["id"]).returncode == 2


def test_names_and_messages_print_as_written_never_as_console_markup() -> None:
    from sparktrain import cli as module

    for console in (module.out, module.err):
        with console.capture() as captured:
            console.print("job [/oops] [bold]x[/bold]")  # a user's job name, a server message: not markup
        assert captured.get().strip() == "job [/oops] [bold]x[/bold]"

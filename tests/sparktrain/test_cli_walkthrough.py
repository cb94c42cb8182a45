"""The CLI as a demanding user's walkthrough found it, against the real service: non-finite cells, the service's own
reasons for a model it cannot use, output for pipes (plain labels, JSON alone on stdout, a reader that goes away),
rows named by their line in the file, stdin, tune bodies and repeated cancels."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Service, running_service
from tests.sparktrain.test_cli import REPO, cli

pytestmark = pytest.mark.slow
BAND = "x1,x2,band\n" + "".join(f"{i % 10 / 2},{i % 3},{'cheap' if i % 10 < 5 else 'expensive'}\n" for i in range(60))
"""60 rows: ``band`` (a string label) follows ``x1``; ``x2`` is a whole-number column."""


@pytest.fixture(scope="module")
def svc(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with running_service(spark, tmp_path_factory.mktemp("cli-walk")) as service:
        yield service


@pytest.fixture(scope="module")
def band(svc: Service) -> Path:
    """walk-band version 1: an xgboost classifier whose classes are the strings cheap and expensive; its data."""
    data = Path(svc.runtime.settings.data_roots[-1])
    data.mkdir(parents=True, exist_ok=True)
    (data / "walk-band.csv").write_text(BAND)
    dataset = {"uri": str(data / "walk-band.csv"), "features": ["x1", "x2"], "label": "band",
               "task": "classification", "num_classes": 2}  # fmt: skip
    body = {"name": "walk-band", "framework": "xgboost", "dataset": dataset, "params": {"num_round": 10}}
    svc.done("/train", body)
    return data / "walk-band.csv"


def _piped(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparktrain", *args], input=stdin, capture_output=True, text=True,
                          check=False, timeout=120, cwd=REPO)  # fmt: skip


def test_string_labels_print_plain_and_non_finite_cells_are_refused_by_column(
    svc: Service, band: Path, tmp_path: Path
) -> None:
    """Labels printed JSON-quoted ("cheap"); a NaN cell ended in a traceback (Out of range float values are not
    JSON compliant), exit 1 (walkthrough)."""
    rows = tmp_path / "rows.csv"
    rows.write_text("x1,x2\n0.5,1\n4.5,2\n")
    done = cli(svc, "predict", "walk-band", "--csv", str(rows))
    assert done.returncode == 0 and done.stdout.split() == ["cheap", "expensive"], (done.stdout, done.stderr)
    for bad in ("NaN", "Nan", "inf", "-Infinity"):
        rows.write_text(f"x1,x2\n0.5,1\n{bad},2\n")
        refused = cli(svc, "predict", "walk-band", "--csv", str(rows))
        assert refused.returncode == 2 and "422" in refused.stderr and "'x1'" in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr and f"{rows} line 3" in refused.stderr, refused.stderr


def test_a_bad_row_is_named_by_its_line_in_the_file_and_stdin_is_read_for_inline_rows(
    svc: Service, band: Path, tmp_path: Path
) -> None:
    """The service's dataframe_split.data[1] was printed as it is; --csv - read a file named -."""
    rows = tmp_path / "rows.csv"
    rows.write_text("x1,x2\n\n0.5,1\n\n4.5,one\n")  # blank lines are skipped: row 1 is line 5
    refused = cli(svc, "predict", "walk-band", "--csv", str(rows))
    assert refused.returncode == 2, refused.stderr
    assert f"{rows} line 5: column 'x2' takes whole numbers" in refused.stderr, refused.stderr
    assert "dataframe_split" not in refused.stderr, refused.stderr
    read = _piped("--url", svc.url, "predict", "walk-band", "--csv", "-", stdin="x1,x2\n4.5,2\n0.5,1\n")
    assert read.returncode == 0 and read.stdout.split() == ["expensive", "cheap"], read.stderr
    named = _piped("--url", svc.url, "predict", "walk-band", "--csv", "-", stdin="x1,x2\n4.5,two\n")
    assert named.returncode == 2 and "stdin line 2: column 'x2'" in named.stderr, named.stderr
    batch = _piped("--url", svc.url, "predict", "walk-band", "--csv", "-", "--max-inline", "0", "--key", "x1",
                   stdin="x1,x2\n4.5,2\n")  # fmt: skip
    assert batch.returncode == 2 and "a batch job reads a file the service can read" in batch.stderr, batch.stderr
    assert len(batch.stderr.strip().splitlines()) == 1 and not (REPO / "-").exists(), batch.stderr


def test_predict_and_download_say_why_the_service_has_no_such_model(svc: Service, band: Path, tmp_path: Path) -> None:
    """Both said "no model named ... (or it has no version)" where the service says the first training job is still
    running (409), or suggests the name meant (walkthrough)."""
    from app.db.session import transaction
    from app.services import jobs

    with transaction(svc.runtime.db) as session:
        row, _ = jobs.create_job(session=session, job_type="train", request={}, name="walk-fresh")
        row.status = "RUNNING"
    rows = tmp_path / "rows.csv"
    rows.write_text("x1,x2\n0.5,1\n")
    for args in (("predict", "walk-fresh", "--csv", str(rows)), ("download", "walk-fresh", "-o", f"{tmp_path}/")):
        running = cli(svc, *args)
        assert running.returncode == 2 and "409" in running.stderr, running.stderr
        assert f"its training job {row.id} is RUNNING. Wait for it to succeed." in running.stderr, running.stderr
    for args in (("predict", "walk-bnad", "--csv", str(rows)), ("download", "walk-bnad@x", "-o", f"{tmp_path}/")):
        typo = cli(svc, *args)
        assert typo.returncode == 2 and "Did you mean 'walk-band'?" in typo.stderr, typo.stderr
    alias = cli(svc, "download", "walk-band@champion", "-o", f"{tmp_path}/")
    assert alias.returncode == 2 and "has no alias 'champion' (aliases: none)" in alias.stderr, alias.stderr


def test_evaluate_wait_prints_only_the_metrics_on_stdout(svc: Service, band: Path, tmp_path: Path) -> None:
    """`SUCCEEDED job ...` and `model ... version 1` came before the JSON: `| python -m json.tool` failed."""
    body = tmp_path / "evaluate.json"
    body.write_text(json.dumps({"model": {"name": "walk-band", "version": 1}, "dataset": {"uri": str(band)},
                                "metrics": ["classification"]}))  # fmt: skip
    done = cli(svc, "evaluate", str(body), "--wait")
    assert done.returncode == 0, done.stderr
    assert "accuracy" in json.loads(done.stdout)["classification"], done.stdout
    assert "SUCCEEDED job" in done.stderr and "model walk-band version 1" in done.stderr, done.stderr


def test_a_tune_body_goes_to_tune_and_a_cancelled_job_cancels_again(svc: Service, band: Path, tmp_path: Path) -> None:
    """A /tune body was posted to /train (8 "Extra inputs are not permitted"); cancelling a cancelled job exited 0
    where the help said exit 2 (now the help says so)."""
    from app.db.session import transaction
    from app.services import jobs

    base = {"name": "x", "framework": "xgboost", "params": {"num_round": 10},
            "dataset": {"uri": str(band), "features": ["x1", "x2"], "label": "band", "task": "classification",
                        "num_classes": 2}}  # fmt: skip
    space = {"params.max_depth": {"type": "int", "low": 2, "high": 4}}
    (tmp_path / "tune.json").write_text(json.dumps({"name": "walk-tune", "base": base, "space": space, "trials": 0}))
    refused = cli(svc, "submit", str(tmp_path / "tune.json"))
    assert refused.returncode == 2 and "trials" in refused.stderr, refused.stderr
    assert "Extra inputs" not in refused.stderr and "base:" not in refused.stderr, refused.stderr

    with transaction(svc.runtime.db) as session:
        job_id = jobs.create_job(session=session, job_type="train", request={}, name="walk-queued")[0].id
    for _ in range(2):
        again = cli(svc, "cancel", job_id)
        assert again.returncode == 0 and again.stdout.strip() == f"CANCELLED job {job_id}", again
    assert "a cancelled one stays so (exit 0)" in " ".join(cli(None, "cancel", "--help", columns=200).stdout.split())


@pytest.mark.parametrize(
    "args",
    [("jobs",), ("--json", "jobs"), ("show", "JOB"), ("--json", "show", "JOB"), ("logs", "JOB"), ("logs", "-f", "JOB"),
     ("predict", "CSV"), ("evaluate", "EVAL", "--wait")],
)  # fmt: skip
def test_a_closed_stdout_ends_quietly_with_141(svc: Service, band: Path, tmp_path: Path, args: tuple[str, ...]) -> None:
    """`sparktrain jobs | head -1` exited 1 (the job failed), with "Exception ignored" at exit (walkthrough); --json
    output and evaluate's metrics still did, exit 120: PYTHONUNBUFFERED (inherited from the environment) hid it."""
    trained = svc.client.get("/jobs", params={"type": "train", "limit": 100}).json()["items"]
    job_id = next(job["id"] for job in trained if job["name"] == "walk-band")  # it has log lines
    rows = tmp_path / "rows.csv"
    rows.write_text("x1,x2\n" + "0.5,1\n" * 50)
    body = tmp_path / "evaluate.json"
    body.write_text(json.dumps({"model": {"name": "walk-band", "version": 1}, "dataset": {"uri": str(band)},
                                "metrics": ["classification"]}))  # fmt: skip
    argv = [{"JOB": job_id, "CSV": str(rows), "EVAL": str(body)}.get(a, a) for a in args]
    if argv[0] == "predict":
        argv = ["predict", "walk-band", "--csv", argv[1]]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # block-buffered, as in a shell's pipe
    read, write = os.pipe()
    os.close(read)  # the reader goes away before the first line is written
    try:
        process = subprocess.Popen([sys.executable, "-m", "sparktrain", "--url", svc.url, *argv], cwd=REPO, env=env,
                                   stdout=write, stderr=subprocess.PIPE, text=True)  # fmt: skip
    finally:
        os.close(write)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 141, (process.returncode, stderr)
    assert stderr == "" or (argv[0] == "evaluate" and "BrokenPipe" not in stderr), stderr  # its "queued" line

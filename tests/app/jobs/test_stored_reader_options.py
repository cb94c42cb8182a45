"""Reader options are an allow-list (workers/data/reader_options.py), checked when a request is validated; a job
queued before that check existed runs the plan stored with it, options included. The job's reader checks them again
(workers/data/spec.py ``read_dataframe``): a stored plan carrying a Hadoop setting fails INVALID_REQUEST naming it
and the options taken, before Spark reads anything with it. On a real local Spark, with the row as an earlier
release stored it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.core.jobstates import JobStatus
from app.core.settings import Settings
from app.db.session import transaction
from app.jobs.runner import run_job
from app.jobs.runtime import JobRuntime
from app.schemas.train import TrainRequest
from app.services import jobs
from app.services.training import submit_training

REPO = Path(__file__).resolve().parents[3]
BODY = json.loads((REPO / "examples/linear-regression-spark-ml.json").read_text())


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_stored_plan_with_a_hadoop_setting_fails_when_it_runs(db: Any, spark: Any, tmp_path: Path) -> None:
    settings = Settings(var_dir=tmp_path / "var", artifact_root=tmp_path / "artifacts", data_roots=[REPO / "datasets"])
    job, _ = submit_training(db=db, settings=settings, spark=spark, enqueue=lambda *_: None,
                             request=TrainRequest.model_validate(BODY))  # fmt: skip
    with transaction(db) as s:  # what a release without the allow-list stored for {"options": {...}}
        row = jobs.get_job(session=s, job_id=job.id)
        plan = dict(row.plan or {})
        plan["train"] = {**plan["train"], "options": {"fs.file.impl.disable.cache": "true"}}
        row.plan = plan
    run_job(JobRuntime(settings=settings, db=db, spark=spark), job.id)
    with db() as s:
        done = jobs.get_job(session=s, job_id=job.id)
    assert (done.status, done.error_reason) == (JobStatus.FAILED, "INVALID_REQUEST"), done.error_message
    message = done.error_message or ""
    assert message.startswith('dataset.options: "fs.file.impl.disable.cache" is not a reader option of parquet '
                              "data (a Hadoop or Spark setting"), message  # fmt: skip
    assert "the options taken: datetimeRebaseMode, " in message and "mergeSchema" in message, message
    assert "submit it again" in message, message
    assert done.model_version is None

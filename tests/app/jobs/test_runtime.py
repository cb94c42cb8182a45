"""Runs that leave their consumer thread (tune jobs): each on a thread of its own with the job's log scope, and a
stopping process waits for them, two attempts of one job included."""

from __future__ import annotations

import threading

from app.core.logging import JOB_ID, job_scope
from app.jobs.runtime import DetachedRuns


def test_runs_keep_the_job_scope_and_are_waited_for() -> None:
    runs = DetachedRuns()
    release = threading.Event()
    seen: list[str | None] = []

    def work() -> None:
        seen.append(JOB_ID.get())
        release.wait(10)

    with job_scope("job-a"):
        runs.start("job-a", work)
        runs.start("job-a", work)  # the next attempt while the handed-back one still unwinds
    assert runs.join(0.2) == ["job-a", "job-a"]
    release.set()
    assert runs.join(10) == []
    assert seen == ["job-a", "job-a"]
    runs.start("job-b", lambda: None)
    assert runs.join(10) == []

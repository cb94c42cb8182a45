"""A Spark Python worker running a barrier task of a torch job is killed with SIGKILL in epoch 2.

Spark fails the barrier stage at once (it kills the other tasks; a failed barrier result stage is not retried by
Spark itself), so nothing waits for gloo's collective timeout. The runner ends the attempt as WORKER_LOST and
queues attempt 2 from the newest checkpoint on the job's own queue; it finishes, and because resuming is exact,
with the very weights of an uninterrupted run of the same job.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from bench.chaos import busiest, digits_job, python_workers
from tests.e2e.chaos_support import (
    checkpoint_epochs,
    log_lines,
    model_weights,
    same_weights,
    wait_final,
    wait_for_epoch,
)

pytestmark = pytest.mark.slow

LOST_WORKER_MESSAGES = (
    "Python worker exited unexpectedly",
    "Connection reset by peer",
    "Connection closed by peer",
)


def test_a_killed_python_worker_fails_the_stage_and_the_job_resumes_from_its_checkpoint(
    make_service: Callable[..., Any],
) -> None:
    # batch 2: about a second per epoch here, so the kill lands in the middle of training (at batch 16 an epoch took
    # 0.16 s and the whole run could end between noticing epoch 2 and the kill, which then hit an idle worker)
    body = digits_job("worker-lost", epochs=5, units=256, batch=2)
    with make_service() as svc:
        job_id = svc.train(body)["id"]
        wait_for_epoch(svc.client, job_id, 2)
        victim = busiest(python_workers(os.getpid()), sample_s=0.5)
        assert max(checkpoint_epochs(svc.client, job_id)) < 4, "training got too far before the kill: make it longer"
        os.kill(victim, signal.SIGKILL)
        killed_at = time.time()

        job = wait_final(svc.client, job_id)
        assert job["status"] == "SUCCEEDED", job["error"]
        assert job["attempt"] == 2
        first, second = job["attempts"]
        assert (first["attempt"], first["status"], first["error_reason"]) == (1, "FAILED", "WORKER_LOST")
        # Spark reports the barrier stage's most recent task failure: the killed worker's crash, or the surviving
        # rank's gloo read failing on the dead peer ("reset" or "closed"), whichever ended last (all three were seen)
        message = first["error_message"]
        assert any(seen in message for seen in LOST_WORKER_MESSAGES), message
        # no hang: the stage failed long before the trainer's 300 s collective timeout could have ended it
        ended = datetime.fromisoformat(first["ended_at"]).timestamp()
        assert ended - killed_at < 120, f"the lost worker was noticed only after {ended - killed_at:.0f} s"
        assert second["attempt"] == 2 and second["queue"] == first["queue"] == svc.runtime.settings.queue
        resumed = job["request"]["training"]["resume_from"]
        checkpoints = svc.client.get(f"/jobs/{job_id}/checkpoints").json()["checkpoints"]
        by_id = {c["id"]: c for c in checkpoints}
        assert by_id[resumed]["attempt"] == 1 and by_id[resumed]["epoch"] >= 1
        assert sorted(c["epoch"] for c in checkpoints) == [1, 2, 3, 4, 5]
        after = [c for c in checkpoints if c["epoch"] > by_id[resumed]["epoch"]]
        assert after and all(c["attempt"] == 2 for c in after), "epochs after the resume point are attempt 2's"
        lines = log_lines(svc.client, job_id)
        assert sum(line.startswith("attempt 1 started") for line in lines) == 1
        assert sum(line.startswith("attempt 2 started") for line in lines) == 1

        straight = wait_final(svc.client, svc.train({**body, "name": "worker-kept"})["id"])
        assert straight["status"] == "SUCCEEDED", straight["error"]
        assert job["result"]["validation"] == straight["result"]["validation"]
        assert same_weights(model_weights(svc.client, job), model_weights(svc.client, straight))

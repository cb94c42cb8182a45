"""The executor environment check: the comparison rules, and the barrier stage on the real local[2] session."""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

import pytest

from workers.environment.driver import check_executors, mismatches
from workers.environment.remote import answer, describe

DRIVER = {"python": "3.11.7", "libraries": {"pyspark": "4.3.0", "torch": "2.13.0+cpu", "xgboost": "3.2.0"}}


def executor(**libraries: Any) -> dict[str, Any]:
    return {"python": "3.11.9", "executor": "10.0.0.7:41234", "libraries": {**DRIVER["libraries"], **libraries}}


def test_same_versions_match_even_with_other_local_builds() -> None:
    assert mismatches(DRIVER, [executor(torch="2.13.0+cu121"), executor()]) == []


@pytest.mark.parametrize(
    ("env", "says"),
    [
        (executor(pyspark="4.2.1"), "executor at 10.0.0.7:41234 has pyspark 4.2.1, the driver 4.3.0"),
        (executor(xgboost=None), "executor at 10.0.0.7:41234 has no xgboost (the driver has 3.2.0)"),
        (executor(torch="2.12.1+cu121"), "has torch 2.12.1+cu121, the driver 2.13.0+cpu"),
        ({**executor(), "python": "3.10.14"}, "runs Python 3.10.14, the driver 3.11.7"),
    ],
)
def test_each_difference_names_the_executor_and_both_versions(env: dict[str, Any], says: str) -> None:
    found = mismatches(DRIVER, [executor(), env])
    assert len(found) == 1 and says in found[0], found


def test_describe_reads_metadata() -> None:
    env = describe(("xgboost", "torch"), cuda=True)
    assert env["python"] == platform.python_version()
    assert env["libraries"]["xgboost"] and env["libraries"]["pyspark"] == "4.3.0"
    assert env["cuda"] in (True, False)


def test_each_task_answers_for_itself() -> None:
    """A task describes its own process at the address it is given, and waits for no other task: the check used
    Spark's allGather, and a task killed while it waited there (a cancel during "checking the executors") ended
    its executor's JVM (walkthrough on a standalone cluster, 2026-12-07)."""
    (line,) = answer(("numpy",), False, address="10.0.0.7:41234")
    said = json.loads(line)
    assert said["executor"] == "10.0.0.7:41234" and said["libraries"]["numpy"]


class Ctx:
    def __init__(self, spark: Any, tmp_path: Path) -> None:
        self.spark, self.work_dir, self.job_id, self.attempt, self.store = spark, tmp_path, "env-test", 1, None
        self.lines: list[str] = []

    def log(self, message: str, level: str = "INFO") -> None:
        self.lines.append(message)


def test_the_barrier_stage_asks_every_task(spark: Any, tmp_path: Path) -> None:
    ctx = Ctx(spark, tmp_path)
    check_executors(ctx, ("xgboost", "numpy"), 2)  # type: ignore[arg-type]
    assert any("executor environment matches the driver" in line for line in ctx.lines), ctx.lines
    ctx.lines.clear()
    check_executors(ctx, ("xgboost", "numpy"), 2)  # type: ignore[arg-type]
    assert ctx.lines == [], "the same executors are not asked twice"


def test_a_library_the_executors_lack_is_named(spark: Any, tmp_path: Path) -> None:
    """What a real executor process reports for a library it does not have."""
    real = describe(("no-such-lib",), cuda=False) | {"executor": "x:1"}
    problems = mismatches({**DRIVER, "libraries": {"pyspark": real["libraries"]["pyspark"], "no-such-lib": "1.0"}},
                          [real])  # fmt: skip
    assert problems == ["executor at x:1 has no no-such-lib (the driver has 1.0)"]

"""The GPU smoke test (the article's ``/gpu_test``, the RAPIDS documentation's first example): join two DataFrames
of ``rows`` rows, count the result, and report whether the RAPIDS Accelerator ran the join on GPUs.

Driver side only: the DataFrames come from ``spark.range``, so the whole query runs in the JVM (where RAPIDS can
take it over) and no Python function is shipped to executors.

The keys make the answer known in advance: the left side holds ``0 .. rows-1``, the right side the even numbers
``0, 2, .., 2(rows-1)``, so exactly the ``ceil(rows / 2)`` even left keys match, once each. The job fails when the
join's count (or the sum of its keys) differs.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any, Literal

from workers.cluster import gpu_addresses, rapids_status
from workers.context import JobContext, JobFailure, JobOutcome, MetricPoint

_MAX_PLAN_CHARS = 8000
_OPERATOR = re.compile(r"^[\s:|+-]*(?:\*\(\d+\)\s*)?([A-Z][A-Za-z0-9]*)")


@dataclass(frozen=True)
class GpuSmokePlan:
    """What the smoke test runs (the request's checked values)."""

    rows: int = 1_000_000
    partitions: int = 16
    device: Literal["auto", "cpu", "cuda"] = "auto"


def expected_join(rows: int) -> tuple[int, int]:
    """(matching rows, sum of their keys) of the join: the even keys ``2k`` for ``k < ceil(rows / 2)``."""
    matched = (rows + 1) // 2
    return matched, matched * (matched - 1)


def plan_operators(plan: str) -> list[str]:
    """Operator names of a physical plan's text (the final plan under adaptive execution), in plan order."""
    final = plan.split("== Final Plan ==", 1)[-1].split("== Initial Plan ==", 1)[0]
    names: dict[str, None] = {}
    for line in final.splitlines():
        match = _OPERATOR.match(line)
        if match and match.group(1) != "AdaptiveSparkPlan":
            names.setdefault(match.group(1), None)
    return list(names)


def explain(*, device: str, join: str | None, gpu_operators: list[str], rapids: dict[str, Any]) -> tuple[str, str]:
    """(``ran_on``, ``why``): GPU when the join itself ran as a Gpu* operator."""
    if join is not None and join.startswith("Gpu"):
        return "gpu", (
            f"the RAPIDS plugin ran the join on the GPU as {join} ({len(gpu_operators)} Gpu operators in the plan)"
        )
    if device == "cpu":
        return "cpu", "device 'cpu' was asked for: spark.rapids.sql.enabled was false for this job"
    if not rapids["active"]:
        return "cpu", str(rapids["reason"])
    also = f" (it did place {', '.join(gpu_operators)} on the GPU)" if gpu_operators else ""
    return "cpu", (
        f"the RAPIDS plugin is active but kept the join on the CPU as {join}{also}; with "
        "spark.rapids.sql.explain=NOT_ON_GPU the driver's log says why"
    )


def run(ctx: JobContext, spec: GpuSmokePlan) -> JobOutcome:
    from pyspark.sql import functions as F

    started = time.perf_counter()
    rapids = rapids_status(ctx.spark)
    gpus = gpu_addresses(ctx.spark)
    if spec.device == "cuda" and not (rapids["active"] and gpus):
        raise JobFailure(
            "NO_GPU", f"device 'cuda' but the cluster cannot run SQL on GPUs now: {rapids['reason'] or 'no GPUs'}"
        )
    # A session of its own (same SparkContext, same job group): these settings must not reach concurrent jobs.
    session = ctx.spark.newSession()
    session.conf.set("spark.sql.shuffle.partitions", str(spec.partitions))
    session.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")  # a shuffled join, as RAPIDS' own example
    if spec.device != "auto":
        session.conf.set("spark.rapids.sql.enabled", "false" if spec.device == "cpu" else "true")

    ctx.progress(0.05, f"building two {spec.rows:,}-row DataFrames in {spec.partitions} partitions")
    left = session.range(0, spec.rows, 1, spec.partitions).select(F.col("id").alias("a"))
    right = session.range(0, spec.rows, 1, spec.partitions).select((F.col("id") * 2).alias("b"))
    left_rows, right_rows = left.count(), right.count()
    ctx.check_cancelled()

    ctx.progress(0.3, "joining and counting")
    joined = left.join(right, F.col("a") == F.col("b")).agg(
        F.count(F.lit(1)).alias("rows"), F.sum("a").alias("key_sum")
    )
    t0 = time.perf_counter()
    row = joined.collect()[0]
    seconds = round(time.perf_counter() - t0, 3)
    plan = str(joined._jdf.queryExecution().executedPlan().toString())
    ctx.check_cancelled()

    ctx.progress(0.95, "checking the count")
    expected_rows, expected_sum = expected_join(spec.rows)
    operators = plan_operators(plan)
    gpu_operators = [op for op in operators if op.startswith("Gpu")]
    join = next((op for op in operators if op.endswith("Join")), None)
    ran_on, why = explain(device=spec.device, join=join, gpu_operators=gpu_operators, rapids=rapids)
    counts = {"left": left_rows, "right": right_rows, "joined": int(row["rows"]), "expected": expected_rows}
    if (left_rows, right_rows, counts["joined"]) != (spec.rows, spec.rows, expected_rows):
        raise JobFailure(
            "WRONG_RESULT",
            f"the smoke test counted {counts}; expected {spec.rows} rows per side and {expected_rows} joined rows "
            f"(the join ran as {join})",
        )
    if int(row["key_sum"] or 0) != expected_sum:
        raise JobFailure("WRONG_RESULT", f"the joined keys sum to {row['key_sum']}, not {expected_sum} ({join})")
    if spec.device == "cuda" and ran_on != "gpu":
        raise JobFailure("NOT_ON_GPU", f"device 'cuda' but {why}")

    ctx.metrics([MetricPoint(key="join_seconds", value=seconds, step=1)])
    ctx.progress(1.0, "done")  # as every other job ends (it kept "checking the count")
    ctx.log(f"gpu-smoke: {counts['joined']:,} joined rows in {seconds:.2f} s on the {ran_on.upper()}: {why}")
    return JobOutcome(
        result={
            "recipe": "gpu-smoke",
            "counts": counts,
            "key_sum": {"joined": int(row["key_sum"] or 0), "expected": expected_sum},
            "seconds": seconds,
            "total_seconds": round(time.perf_counter() - started, 3),
            "ran_on": ran_on,
            "why": why,
            "device": spec.device,
            "partitions": spec.partitions,
            "join": join,
            "gpu_operators": gpu_operators,
            "operators": operators,
            "gpu_addresses": gpus,
            "rapids": rapids,
            "plan": plan[:_MAX_PLAN_CHARS],
        }
    )

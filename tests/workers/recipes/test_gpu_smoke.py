"""The GPU smoke test's arithmetic and how it reads a physical plan."""

from __future__ import annotations

from typing import Any

from workers.recipes.gpu_smoke import expected_join, explain, plan_operators

CPU_PLAN = """AdaptiveSparkPlan isFinalPlan=true
+- == Final Plan ==
   ResultQueryStage 3
   +- *(6) HashAggregate(keys=[], functions=[count(1), sum(a#1L)], output=[rows#4L, key_sum#5L])
      +- ShuffleQueryStage 2
         +- Exchange SinglePartition, ENSURE_REQUIREMENTS, [plan_id=159]
            +- *(5) HashAggregate(keys=[], functions=[partial_count(1), partial_sum(a#1L)])
               +- *(5) Project [a#1L]
                  +- *(5) SortMergeJoin [a#1L], [b#3L], Inner
                     :- *(3) Sort [a#1L ASC NULLS FIRST], false, 0
                     :  +- AQEShuffleRead coalesced
                     :     +- ShuffleQueryStage 0
                     :        +- Exchange hashpartitioning(a#1L, 4), ENSURE_REQUIREMENTS, [plan_id=64]
                     :           +- *(1) Project [id#0L AS a#1L]
                     :              +- *(1) Range (0, 20000, step=1, splits=4)
                     +- *(4) Sort [b#3L ASC NULLS FIRST], false, 0
                        +- AQEShuffleRead coalesced
                           +- ShuffleQueryStage 1
                              +- Exchange hashpartitioning(b#3L, 4), ENSURE_REQUIREMENTS, [plan_id=71]
                                 +- *(2) Project [(id#2L * 2) AS b#3L]
                                    +- *(2) Range (0, 20000, step=1, splits=4)
+- == Initial Plan ==
   HashAggregate(keys=[], functions=[count(1), sum(a#1L)])
   +- BroadcastHashJoin [a#1L], [b#3L], Inner
"""

# Written in the shape RAPIDS prints, with its operator names: not captured from a GPU run (none here).
GPU_PLAN = """AdaptiveSparkPlan isFinalPlan=true
+- == Final Plan ==
   GpuColumnarToRow false
   +- GpuHashAggregate(keys=[], functions=[gpucount(1), gpusum(a#1L)])
      +- GpuShuffleCoalesce 1073741824
         +- ShuffleQueryStage 2
            +- GpuColumnarExchange gpusinglepartitioning$(), ENSURE_REQUIREMENTS
               +- GpuHashAggregate(keys=[], functions=[partial_gpucount(1), partial_gpusum(a#1L)])
                  +- GpuShuffledHashJoin [a#1L], [b#3L], Inner, GpuBuildRight, false
                     :- GpuShuffleCoalesce 1073741824
                     :  +- ShuffleQueryStage 0
                     :     +- GpuColumnarExchange gpuhashpartitioning(a#1L, 4), ENSURE_REQUIREMENTS
                     :        +- GpuProject [id#0L AS a#1L]
                     :           +- GpuRange (0, 20000, step=1, splits=4)
                     +- GpuShuffleCoalesce 1073741824
                        +- ShuffleQueryStage 1
                           +- GpuColumnarExchange gpuhashpartitioning(b#3L, 4), ENSURE_REQUIREMENTS
                              +- GpuProject [(id#2L * 2) AS b#3L]
                                 +- GpuRange (0, 20000, step=1, splits=4)
+- == Initial Plan ==
   GpuColumnarToRow false
"""

INACTIVE: dict[str, Any] = {"active": False, "reason": "the RAPIDS plugin is not configured (no jar found at /x)"}


def test_expected_join_matches_a_brute_force_join() -> None:
    for rows in [*range(1, 40), 999, 1000]:
        right = {2 * i for i in range(rows)}
        matched = [a for a in range(rows) if a in right]
        assert expected_join(rows) == (len(matched), sum(matched)), rows
    assert expected_join(1_000_000) == (500_000, 500_000 * 499_999)


def test_operators_of_the_final_plan() -> None:
    cpu = plan_operators(CPU_PLAN)
    assert "SortMergeJoin" in cpu and "BroadcastHashJoin" not in cpu  # the initial plan is not what ran
    assert cpu[:3] == ["ResultQueryStage", "HashAggregate", "ShuffleQueryStage"]
    assert [op for op in cpu if op.startswith("Gpu")] == []
    gpu = plan_operators(GPU_PLAN)
    assert [op for op in gpu if op.startswith("Gpu")] == [
        "GpuColumnarToRow",
        "GpuHashAggregate",
        "GpuShuffleCoalesce",
        "GpuColumnarExchange",
        "GpuShuffledHashJoin",
        "GpuProject",
        "GpuRange",
    ]
    # a plan without adaptive execution has no Final Plan section
    assert plan_operators("*(1) Project [id#0L]\n+- *(1) Range (0, 1, step=1, splits=1)\n") == ["Project", "Range"]


def test_explain() -> None:
    active: dict[str, Any] = {"active": True, "reason": None}
    assert (
        explain(device="auto", join="GpuShuffledHashJoin", gpu_operators=["GpuShuffledHashJoin"], rapids=active)[0]
        == "gpu"
    )
    assert explain(device="auto", join="SortMergeJoin", gpu_operators=[], rapids=INACTIVE) == (
        "cpu",
        INACTIVE["reason"],
    )
    ran_on, why = explain(device="cpu", join="SortMergeJoin", gpu_operators=[], rapids=active)
    assert ran_on == "cpu" and "device 'cpu'" in why
    ran_on, why = explain(device="auto", join="SortMergeJoin", gpu_operators=["GpuRange"], rapids=active)
    assert ran_on == "cpu" and "kept the join on the CPU" in why and "GpuRange" in why

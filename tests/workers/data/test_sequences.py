"""Sequence records (DataVec's sequence functions): grouping, alignment, truncation, bad rows, padding."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workers.context import JobFailure
from workers.data.sequences import (
    BAD,
    DUPLICATE_ID,
    DUPLICATE_STEP,
    LABEL_RANGE,
    LENGTH_MISMATCH,
    NO_FEATURES,
    NO_LABELS,
    NULL_FEATURE,
    NULL_ID,
    NULL_LABEL,
    NULL_STEP,
    RAGGED_FEATURES,
    SequenceArrays,
    SequenceSpec,
    pad_batch,
)
from workers.data.sequences.frame import check_sequences, to_sequence_frame

REPO = Path(__file__).resolve().parents[3]
ROWS = "sequence_id string, step int, f0 double, f1 double, label int"
LABEL_ROWS = "sequence_id string, step int, label double"
NAN = float("nan")


def spec(**overrides: Any) -> SequenceSpec:
    return SequenceSpec(**{"features": ("f0", "f1"), "label": "label", **overrides})


@pytest.fixture(scope="module", autouse=True)
def few_partitions(spark: Any) -> Iterator[None]:
    """Tiny frames: 2 shuffle partitions instead of 8 make each Spark job of this module faster."""
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    yield
    spark.conf.set("spark.sql.shuffle.partitions", before)


def fetch(frame: Any) -> pa.Table:
    """One Spark job: the frame as Arrow (as an executor sees it), in sequence-id order."""
    return frame.toArrow().sort_by("sequence_id")


def by_id(data: Any) -> dict[Any, dict[str, Any]]:
    table = data if isinstance(data, pa.Table) else fetch(data)
    return {r["sequence_id"]: r for r in table.to_pylist()}


def padded(data: Any, s: SequenceSpec, pad_to: int | None = None) -> SequenceArrays:
    """The usable sequences padded, in sequence-id order so the expected arrays can be written down."""
    table = data if isinstance(data, pa.Table) else fetch(data)
    if BAD in table.column_names:
        table = table.filter(pc.is_null(table[BAD]))
    arrays = pad_batch(table, s, pad_to=pad_to)
    assert_padding_is_never_real(arrays)
    return arrays


def assert_padding_is_never_real(a: SequenceArrays) -> None:
    """Masked-out positions hold zeros; every real step is inside the sequence's aligned window."""
    t = a.feature_mask.shape[1]
    assert a.x.dtype == np.float32 and a.feature_mask.dtype == bool and a.lengths.dtype == np.int64
    assert all(v.flags.writeable for v in (a.x, a.y, a.feature_mask, a.lengths))  # torch.from_numpy needs that
    assert not a.x[~a.feature_mask].any()

    def block(steps: np.ndarray) -> np.ndarray:
        """Where ``steps`` contiguous real steps belong: the end of the time axis (ALIGN_END) or its start."""
        window = np.arange(t)[None, :]
        return window >= (t - steps)[:, None] if a.alignment == "ALIGN_END" else window < steps[:, None]

    assert np.array_equal(a.feature_mask, block(a.feature_mask.sum(axis=1)))
    if a.label_mask is None:
        assert np.array_equal(a.feature_mask, block(a.lengths))
    else:
        assert not a.y[~a.label_mask].any()
        assert np.array_equal(a.label_mask, block(a.label_mask.sum(axis=1)))
        assert np.array_equal(a.feature_mask | a.label_mask, block(a.lengths))  # the window is exactly the union


# --- rows layout ---------------------------------------------------------------------------------------------


def test_rows_are_grouped_and_ordered_by_step(spark: Any) -> None:
    df = spark.createDataFrame(
        [
            ("b", 2, 5.0, 50.0, 0),
            ("a", 3, 3.0, 30.0, 2),
            ("a", 1, 1.0, 10.0, 0),
            ("b", 1, 4.0, 40.0, 1),
            ("a", 2, 2.0, 20.0, 1),
        ],
        ROWS,
    )
    s = spec(num_classes=3)
    frame = to_sequence_frame(df, s)
    assert frame.columns == ["sequence_id", "_x", "_y", "_len", "_bad"]
    assert dict(frame.dtypes) == {
        "sequence_id": "string",
        "_x": "array<array<double>>",
        "_y": "bigint",
        "_len": "int",
        "_bad": "string",
    }
    table = fetch(frame)
    rows = by_id(table)
    assert rows["a"] == {
        "sequence_id": "a",
        "_x": [[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]],
        "_y": 2,  # the label of the last step (step 3), not of the last row read
        "_len": 3,
        "_bad": None,
    }
    assert rows["b"]["_x"] == [[4.0, 40.0], [5.0, 50.0]] and rows["b"]["_y"] == 0 and rows["b"]["_len"] == 2

    end = padded(table, s)  # default alignment: ALIGN_END
    assert end.x.shape == (2, 3, 2)
    np.testing.assert_array_equal(end.x[:, :, 0], [[1, 2, 3], [0, 4, 5]])
    np.testing.assert_array_equal(end.x[:, :, 1], [[10, 20, 30], [0, 40, 50]])
    np.testing.assert_array_equal(end.feature_mask, [[True, True, True], [False, True, True]])
    np.testing.assert_array_equal(end.y, [2, 0])
    assert end.y.dtype == np.int64 and end.label_mask is None
    np.testing.assert_array_equal(end.lengths, [3, 2])
    np.testing.assert_array_equal(end.last_index, [2, 2])
    assert end.sequence_id is not None and list(end.sequence_id) == ["a", "b"]

    start = padded(to_sequence_frame(df, spec(alignment="ALIGN_START")), spec(alignment="ALIGN_START"), pad_to=4)
    np.testing.assert_array_equal(start.x[:, :, 0], [[1, 2, 3, 0], [4, 5, 0, 0]])
    np.testing.assert_array_equal(start.feature_mask, [[True, True, True, False], [True, True, False, False]])
    np.testing.assert_array_equal(start.last_index, [2, 1])


def test_per_step_labels_in_the_same_rows(spark: Any) -> None:
    df = spark.createDataFrame(
        [("a", 2, 2.0, 0.0, 7), ("a", 1, 1.0, 0.0, 6), ("b", 5, 3.0, 0.0, 8)],
        ROWS,
    )
    s = spec(labels="per_step", task="regression")
    frame = to_sequence_frame(df, s)
    assert dict(frame.dtypes)["_y"] == "array<double>"
    table = fetch(frame)
    rows = by_id(table)
    assert rows["a"]["_y"] == [6.0, 7.0] and rows["b"]["_y"] == [8.0]
    a = padded(table, s)
    np.testing.assert_array_equal(a.y, [[6, 7], [0, 8]])
    assert a.y.dtype == np.float32
    np.testing.assert_array_equal(a.label_mask, [[True, True], [False, True]])
    np.testing.assert_array_equal(a.label_mask, a.feature_mask)

    classes = to_sequence_frame(df, spec(labels="per_step"))
    assert dict(classes.dtypes)["_y"] == "array<bigint>"
    assert by_id(classes)["a"]["_y"] == [6, 7]


# --- separate label data and alignment -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def pair(spark: Any) -> tuple[Any, Any]:
    """Features: a = 3 steps (1, 2, 3), b = 2 steps (4, 5), c = 2 steps. Labels: a = 1 step, b = 3 steps, c = 2."""
    features = spark.createDataFrame(
        [
            ("a", 1, 1.0, 0.0, None),
            ("a", 3, 3.0, 0.0, None),
            ("a", 2, 2.0, 0.0, None),
            ("b", 2, 5.0, 0.0, None),
            ("b", 1, 4.0, 0.0, None),
            ("c", 1, 6.0, 0.0, None),
            ("c", 2, 7.0, 0.0, None),
        ],
        ROWS,
    ).drop("label")
    labels = spark.createDataFrame(
        [("a", 1, 10.0), ("b", 3, 22.0), ("b", 1, 20.0), ("b", 2, 21.0), ("c", 1, 30.0), ("c", 2, 31.0)],
        LABEL_ROWS,
    )
    return features, labels


def test_align_start_pads_the_shorter_side_at_its_end(pair: tuple[Any, Any]) -> None:
    s = spec(labels="per_step", task="regression", alignment="ALIGN_START")
    table = fetch(to_sequence_frame(pair[0], s, labels_df=pair[1]))
    rows = by_id(table)
    assert rows["a"]["_y"] == [10.0] and rows["a"]["_len"] == 3
    assert rows["b"]["_y"] == [20.0, 21.0, 22.0] and rows["b"]["_len"] == 3
    a = padded(table, s)
    np.testing.assert_array_equal(a.x[:, :, 0], [[1, 2, 3], [4, 5, 0], [6, 7, 0]])
    np.testing.assert_array_equal(a.feature_mask, [[1, 1, 1], [1, 1, 0], [1, 1, 0]])
    np.testing.assert_array_equal(a.y, [[10, 0, 0], [20, 21, 22], [30, 31, 0]])
    np.testing.assert_array_equal(a.label_mask, [[1, 0, 0], [1, 1, 1], [1, 1, 0]])
    np.testing.assert_array_equal(a.lengths, [3, 3, 2])


def test_align_end_pads_the_shorter_side_at_its_start(pair: tuple[Any, Any]) -> None:
    s = spec(labels="per_step", task="regression", alignment="ALIGN_END")
    a = padded(to_sequence_frame(pair[0], s, labels_df=pair[1]), s, pad_to=4)
    np.testing.assert_array_equal(a.x[:, :, 0], [[0, 1, 2, 3], [0, 0, 4, 5], [0, 0, 6, 7]])
    np.testing.assert_array_equal(a.feature_mask, [[0, 1, 1, 1], [0, 0, 1, 1], [0, 0, 1, 1]])
    # the single label of a belongs to its last feature step; b's labels start one step before its features
    np.testing.assert_array_equal(a.y, [[0, 0, 0, 10], [0, 20, 21, 22], [0, 0, 30, 31]])
    np.testing.assert_array_equal(a.label_mask, [[0, 0, 0, 1], [0, 1, 1, 1], [0, 0, 1, 1]])
    np.testing.assert_array_equal(a.last_index, [3, 3, 3])


def test_equal_length_mismatch_fails_naming_the_sequences(pair: tuple[Any, Any]) -> None:
    s = spec(labels="per_step", task="regression", alignment="EQUAL_LENGTH")
    frame = to_sequence_frame(pair[0], s, labels_df=pair[1])
    assert {k: v["_bad"] for k, v in by_id(frame).items()} == {"a": LENGTH_MISMATCH, "b": LENGTH_MISMATCH, "c": None}
    with pytest.raises(JobFailure) as err:
        check_sequences(frame, s, bad_rows="skip")  # a mismatch is not a row to skip
    assert err.value.reason == "SEQUENCE_LENGTH_MISMATCH"
    assert "'a' (3 feature steps, 1 label steps)" in err.value.message
    assert "'b' (2 feature steps, 3 label steps)" in err.value.message
    assert "'c'" not in err.value.message
    # the executor refuses such a batch too, should one get there unchecked
    table = pa.table(
        {"sequence_id": ["a", "c"], "_x": [[[1.0, 1.0]], [[2.0, 2.0], [3.0, 3.0]]], "_y": [[1.0, 2.0], [3.0, 4.0]]}
    )
    with pytest.raises(ValueError, match=r"EQUAL_LENGTH.*\['a'\]"):
        pad_batch(table, s)


def test_last_step_label_from_separate_data_and_missing_sides(spark: Any, pair: tuple[Any, Any]) -> None:
    s = spec(num_classes=3)
    labels = spark.createDataFrame(
        [("a", 1, 0.0), ("a", 2, 2.0), ("b", 7, 1.0), ("z", 1, 1.0)], LABEL_ROWS
    )  # c has no labels, z no features
    frame = to_sequence_frame(pair[0], s, labels_df=labels)
    table = fetch(frame)
    rows = by_id(table)
    assert rows["a"]["_y"] == 2 and rows["a"]["_len"] == 3 and rows["a"]["_bad"] is None
    assert rows["b"]["_y"] == 1 and rows["b"]["_bad"] is None
    assert rows["c"]["_bad"] == NO_LABELS and rows["z"]["_bad"] == NO_FEATURES
    _, report = check_sequences(frame, s, bad_rows="skip")
    assert (report.total, report.bad, report.usable) == (4, 2, 2)
    assert report.by_reason == {NO_FEATURES: 1, NO_LABELS: 1}
    assert report.examples == {NO_FEATURES: ["z"], NO_LABELS: ["c"]}
    a = padded(table, s)
    np.testing.assert_array_equal(a.x[:, :, 0], [[1, 2, 3], [0, 4, 5]])
    np.testing.assert_array_equal(a.y, [2, 1])


# --- truncation ----------------------------------------------------------------------------------------------


def test_max_length_keeps_the_end_for_align_end_and_the_start_otherwise(pair: tuple[Any, Any]) -> None:
    end = spec(labels="per_step", task="regression", alignment="ALIGN_END", max_length=2)
    rows = by_id(to_sequence_frame(pair[0], end, labels_df=pair[1]))
    assert rows["a"]["_x"] == [[2.0, 0.0], [3.0, 0.0]] and rows["a"]["_y"] == [10.0] and rows["a"]["_len"] == 2
    assert rows["b"]["_x"] == [[4.0, 0.0], [5.0, 0.0]] and rows["b"]["_y"] == [21.0, 22.0]

    start = spec(labels="per_step", task="regression", alignment="ALIGN_START", max_length=2)
    table = fetch(to_sequence_frame(pair[0], start, labels_df=pair[1]))
    rows = by_id(table)
    assert rows["a"]["_x"] == [[1.0, 0.0], [2.0, 0.0]] and rows["a"]["_y"] == [10.0]
    assert rows["b"]["_y"] == [20.0, 21.0] and rows["b"]["_len"] == 2
    assert padded(table, start).x.shape == (3, 2, 2)

    # a last-step label survives truncation: it is the label of the sequence
    last = spec(task="regression", max_length=1)
    rows = by_id(to_sequence_frame(pair[0], last, labels_df=pair[1]))
    assert rows["a"]["_x"] == [[3.0, 0.0]] and rows["a"]["_y"] == 10.0 and rows["b"]["_y"] == 22.0


# --- arrays layout -------------------------------------------------------------------------------------------


def test_arrays_layout_with_one_array_column_per_feature(spark: Any) -> None:
    df = spark.createDataFrame(
        [
            (1, [1.0, 2.0, 3.0], [10, 20, 30], 1, [0.5, 0.6, 0.7]),
            (2, [4.0], [40], 0, [0.8]),
            (3, [5.0, 6.0], [50], 0, [0.1, 0.2]),  # f1 is shorter than f0
        ],
        "sequence_id long, f0 array<double>, f1 array<int>, label int, steps array<double>",
    )
    s = spec(layout="arrays")
    table = fetch(to_sequence_frame(df, s))
    rows = by_id(table)
    assert rows[1]["_x"] == [[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]] and rows[1]["_y"] == 1
    assert rows[2]["_x"] == [[4.0, 40.0]] and rows[2]["_len"] == 1
    assert rows[3]["_bad"] == RAGGED_FEATURES
    a = padded(table, s)
    np.testing.assert_array_equal(a.x[:, :, 1], [[10, 20, 30], [0, 0, 40]])

    per_step = spec(layout="arrays", label="steps", labels="per_step", task="regression", alignment="ALIGN_START")
    rows = by_id(to_sequence_frame(df, per_step))
    assert rows[1]["_y"] == [0.5, 0.6, 0.7] and rows[2]["_y"] == [0.8]
    last_of_array = spec(layout="arrays", label="steps", task="regression")
    assert by_id(to_sequence_frame(df, last_of_array))[1]["_y"] == 0.7


def test_arrays_layout_with_one_nested_column(spark: Any) -> None:
    df = spark.createDataFrame(
        [
            ("p", [[1.0, 2.0], [3.0, 4.0]], 0),
            ("q", [[5.0, 6.0]], 1),
            ("r", [[7.0, 8.0], [9.0]], 1),  # a step of the wrong width
            ("s", [[1.0, 2.0, 3.0]], 1),  # every step 3 wide, but num_features says 2
        ],
        "sequence_id string, x array<array<double>>, label long",
    )
    s = SequenceSpec(features=("x",), label="label", layout="arrays", num_features=2, alignment="ALIGN_START")
    table = fetch(to_sequence_frame(df, s))
    rows = by_id(table)
    assert rows["p"]["_x"] == [[1.0, 2.0], [3.0, 4.0]] and rows["p"]["_bad"] is None
    assert rows["r"]["_bad"] == RAGGED_FEATURES and rows["s"]["_bad"] == RAGGED_FEATURES
    a = padded(table, s)
    np.testing.assert_array_equal(a.x, [[[1, 2], [3, 4]], [[5, 6], [0, 0]]])
    np.testing.assert_array_equal(a.y, [0, 1])

    unchecked = SequenceSpec(features=("x",), label="label", layout="arrays")  # width from each first step
    assert by_id(to_sequence_frame(df, unchecked))["s"]["_bad"] is None


# --- bad rows ------------------------------------------------------------------------------------------------


def test_bad_sequences_are_counted_and_the_policy_applied(spark: Any) -> None:
    df = spark.createDataFrame(
        [
            ("ok", 1, 1.0, 1.0, 0),
            ("ok", 2, 2.0, 2.0, 1),
            ("dup", 1, 1.0, 1.0, 0),
            ("dup", 1, 2.0, 2.0, 0),
            ("null", 1, None, 1.0, 0),
            ("nan", 1, 1.0, NAN, 0),
            ("nostep", None, 1.0, 1.0, 0),
            ("range", 1, 1.0, 1.0, 3),
            ("nolabel", 1, 1.0, 1.0, None),
            (None, 1, 1.0, 1.0, 0),
        ],
        ROWS,
    )
    s = spec(num_classes=3)
    frame = to_sequence_frame(df, s).cache()  # several actions follow
    assert {k: v["_bad"] for k, v in by_id(frame).items()} == {
        "ok": None,
        "dup": DUPLICATE_STEP,
        "null": NULL_FEATURE,
        "nan": NULL_FEATURE,
        "nostep": NULL_STEP,
        "range": LABEL_RANGE,
        "nolabel": NULL_LABEL,
        None: NULL_ID,
    }
    with pytest.raises(JobFailure) as err:
        check_sequences(frame, s, source="steps.parquet")
    assert err.value.reason == "BAD_ROWS"
    assert err.value.message.startswith("steps.parquet: 7 of 8 sequences are bad")
    assert "2 with null or NaN feature (e.g. ['nan', 'null'])" in err.value.message
    good, report = check_sequences(frame, s, bad_rows="skip")
    assert report.by_reason == {
        NULL_ID: 1,
        NULL_STEP: 1,
        DUPLICATE_STEP: 1,
        NULL_FEATURE: 2,
        NULL_LABEL: 1,
        LABEL_RANGE: 1,
    }
    assert BAD not in good.columns
    assert [r["sequence_id"] for r in good.collect()] == ["ok"]
    _, report = check_sequences(frame.where(frame[BAD].isNull()), s)  # nothing bad: "fail" passes
    assert (report.total, report.bad, report.by_reason) == (1, 0, {})
    frame.unpersist()

    # arrays layout: an empty sequence, a duplicated id, a fractional class label
    arrays = spark.createDataFrame(
        [
            (1, [], [], 0.0),
            (2, [1.0], [1.0], 0.0),
            (2, [2.0], [2.0], 0.0),
            (3, [1.0], [1.0], 0.5),
            (4, [1.0], [1.0], 1.0),
        ],
        "sequence_id int, f0 array<double>, f1 array<double>, label double",
    )
    found = {k: v["_bad"] for k, v in by_id(to_sequence_frame(arrays, spec(layout="arrays"))).items()}
    assert found == {1: NO_FEATURES, 2: DUPLICATE_ID, 3: LABEL_RANGE, 4: None}


def test_pad_batch_refuses_what_check_sequences_would_have_dropped() -> None:
    s = spec(num_classes=2)
    x = [[[1.0, 2.0]], [[3.0, 4.0]]]
    with pytest.raises(ValueError, match="marked bad"):
        pad_batch(pa.table({"_x": x, "_y": [0, 1], "_bad": [None, "duplicate step"]}), s)
    with pytest.raises(ValueError, match=r"outside 0\.\.1"):
        pad_batch(pa.table({"_x": x, "_y": [0, 2]}), s)
    with pytest.raises(ValueError, match="pad_to=0"):
        pad_batch(pa.table({"_x": x, "_y": [0, 1]}), s, pad_to=0)
    with pytest.raises(ValueError, match="3 values, expected 2"):
        pad_batch(pa.table({"_x": [[[1.0, 2.0, 3.0]]], "_y": [0]}), s)
    with pytest.raises(ValueError, match="_len disagrees"):
        pad_batch(pa.table({"_x": x, "_y": [0, 1], "_len": [1, 2]}), s)


# --- the spec ------------------------------------------------------------------------------------------------


def test_spec_round_trips_through_json_and_rejects_nonsense() -> None:
    s = spec(layout="arrays", labels="per_step", alignment="ALIGN_START", max_length=50, num_classes=4)
    assert SequenceSpec.from_dict(json.loads(json.dumps(s.to_dict()))) == s
    assert SequenceSpec(features=["a", "b"], label="y").features == ("a", "b")  # type: ignore[arg-type]
    for bad in (
        {"alignment": "ALIGN_MIDDLE"},
        {"max_length": 0},
        {"features": ()},
        {"label": "f0"},
        {"num_classes": 1},
        {"task": "regression", "num_classes": 3},
        {"num_features": 2},  # only for one nested column in the arrays layout
    ):
        with pytest.raises(ValueError):
            spec(**bad)
    with pytest.raises(ValueError, match="unknown sequence setting 'window'"):
        SequenceSpec.from_dict({**s.to_dict(), "window": 3})


# --- pad_batch on random ragged data -------------------------------------------------------------------------


@st.composite
def ragged(draw: st.DrawFn) -> dict[str, Any]:
    width = draw(st.integers(1, 3))
    alignment = draw(st.sampled_from(["ALIGN_START", "ALIGN_END", "EQUAL_LENGTH"]))
    per_step = draw(st.booleans())
    n = draw(st.integers(0, 8))
    value = st.floats(-1e3, 1e3, allow_nan=False, width=32).filter(lambda v: v != 0.0)  # 0 is the padding
    xs: list[Any] = []
    ys: list[Any] = []
    for _ in range(n):
        steps = draw(st.integers(0, 7))
        xs.append([[draw(value) for _ in range(width)] for _ in range(steps)])
        if per_step:
            label_steps = steps if alignment == "EQUAL_LENGTH" else draw(st.integers(0, 7))
            ys.append([draw(value) for _ in range(label_steps)])
        else:
            ys.append(draw(value))
    return {
        "width": width,
        "alignment": alignment,
        "per_step": per_step,
        "x": xs,
        "y": ys,
        "extra": draw(st.none() | st.integers(0, 3)),  # None: no pad_to, T is the longest
        "chunks": draw(st.integers(1, 3)),
        "skip": draw(st.integers(0, 2)),
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ragged())
def test_pad_batch_reproduces_every_sequence_under_its_mask(case: dict[str, Any]) -> None:
    s = spec(
        features=tuple(f"v{i}" for i in range(case["width"])),
        labels="per_step" if case["per_step"] else "last_step",
        task="regression",
        alignment=case["alignment"],
    )
    y_type = pa.list_(pa.float64()) if case["per_step"] else pa.float64()
    # sliced and split into several batches, as Arrow hands batches to a task: offsets do not start at 0
    padding_rows = case["skip"]
    dummy_x = [[[9.0] * case["width"]]] * padding_rows
    dummy_y = [[9.0]] * padding_rows if case["per_step"] else [9.0] * padding_rows
    table = pa.table(
        {
            "_x": pa.array(dummy_x + case["x"], pa.list_(pa.list_(pa.float64()))),
            "_y": pa.array(dummy_y + case["y"], y_type),
        }
    ).slice(padding_rows)
    n = len(case["x"])
    cuts = sorted({0, n, *np.linspace(0, n, case["chunks"] + 1).astype(int).tolist()})
    batches = [b for lo, hi in itertools.pairwise(cuts) for b in table.slice(lo, hi - lo).to_batches()]
    source: Any = batches if batches else table
    longest = max([len(x) for x in case["x"]] + ([len(y) for y in case["y"]] if case["per_step"] else []) + [0])
    a = pad_batch(source, s, pad_to=None if case["extra"] is None else longest + case["extra"])
    assert a.x.shape == (n, longest + (case["extra"] or 0), case["width"])
    assert_padding_is_never_real(a)
    for i in range(n):
        expected_x = np.array(case["x"][i], dtype=np.float32).reshape(-1, case["width"])
        np.testing.assert_array_equal(a.x[i][a.feature_mask[i]], expected_x)
        if case["per_step"]:
            assert a.label_mask is not None
            np.testing.assert_array_equal(a.y[i][a.label_mask[i]], np.array(case["y"][i], dtype=np.float32))
            expected_length = max(len(case["x"][i]), len(case["y"][i]))
        else:
            assert a.y[i] == np.float32(case["y"][i])
            expected_length = len(case["x"][i])
        assert a.lengths[i] == expected_length


# --- the shipped dataset -------------------------------------------------------------------------------------


def test_the_shipped_sequence_dataset_is_the_generators_and_clean(spark: Any) -> None:
    from datasets import sequences

    train, test = sequences.frames()
    shipped = REPO / "datasets" / "sequences"
    assert train.equals(sequences.generate(800, 0))
    assert pd.read_parquet(shipped / "train.parquet").equals(train)
    assert pd.read_parquet(shipped / "test.parquet").equals(test)
    s = SequenceSpec(features=sequences.FEATURES, label=sequences.LABEL, num_classes=sequences.NUM_CLASSES)
    frame = to_sequence_frame(spark.read.parquet(str(shipped / "test.parquet")), s)
    good, report = check_sequences(frame, s)
    assert (report.total, report.bad) == (200, 0)
    a = pad_batch(good.toArrow(), s)
    assert a.x.shape[1:] == (sequences.MAX_STEPS, 3)
    assert a.lengths.min() >= sequences.MIN_STEPS
    np.testing.assert_array_equal(np.bincount(a.y), [67, 67, 66])
    # the label is the sum of f0 over the whole sequence against the boundaries
    sums = a.x[:, :, 0].sum(axis=1)
    np.testing.assert_array_equal(np.digitize(sums, [-sequences.BOUNDARY, sequences.BOUNDARY]), a.y)
    assert np.abs(np.abs(sums) - sequences.BOUNDARY).min() > sequences.MARGIN - 1e-3

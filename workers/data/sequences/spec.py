"""What a sequence dataset looks like (:class:`SequenceSpec`, DataVec's sequence record settings) and the names
both halves share: the columns of the frame between them and the reasons a sequence is bad.

How ``alignment`` and ``max_length`` act is described where they act: truncation and the choice of the
``last_step`` label in :mod:`workers.data.sequences.frame`, padding in :mod:`workers.data.sequences.pad`.

stdlib only: the driver and the executors both import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

Layout = Literal["rows", "arrays"]
LabelKind = Literal["last_step", "per_step"]
Alignment = Literal["ALIGN_START", "ALIGN_END", "EQUAL_LENGTH"]
Task = Literal["classification", "regression"]
BadRows = Literal["fail", "skip"]

SEQUENCE_ID = "sequence_id"
X = "_x"
Y = "_y"
LENGTH = "_len"
BAD = "_bad"

NULL_ID = "null sequence id"
DUPLICATE_ID = "duplicate sequence id"
NULL_STEP = "null step"
DUPLICATE_STEP = "duplicate step"
NULL_FEATURE = "null or NaN feature"
RAGGED_FEATURES = "features of unequal length"
NULL_LABEL = "null or NaN label"
LABEL_RANGE = "label not a class index"
NO_FEATURES = "no feature steps"
NO_LABELS = "no label steps"
LENGTH_MISMATCH = "length mismatch"
BAD_REASONS = (
    NULL_ID,
    DUPLICATE_ID,
    NULL_STEP,
    DUPLICATE_STEP,
    NULL_FEATURE,
    RAGGED_FEATURES,
    NULL_LABEL,
    LABEL_RANGE,
    NO_FEATURES,
    NO_LABELS,
    LENGTH_MISMATCH,
)
"""Why a sequence is bad, in the order they are checked (a sequence reports the first that applies)."""

EXAMPLES = 5


@dataclass(frozen=True)
class SequenceSpec:
    """A sequence dataset: where the steps, features and labels are, and how features and labels align.

    ``layout="rows"``: one row per time step, keyed by ``sequence_id`` and ordered by ``step``; ``features`` are
    numeric columns and ``label`` a numeric column. ``layout="arrays"``: one row per sequence; ``features`` are
    ``array<numeric>`` columns of per-step values (equal lengths), or ONE ``array<array<numeric>>`` column
    (steps x features, each step ``num_features`` wide when given); ``label`` is a scalar or an array column.
    A separate label dataset (passed to :func:`to_sequence_frame`) has the same layout and names: rows
    ``(sequence_id, step, label)`` or ``(sequence_id, label)``.
    """

    features: tuple[str, ...]
    label: str
    layout: Layout = "rows"
    labels: LabelKind = "last_step"
    task: Task = "classification"
    num_classes: int | None = None
    alignment: Alignment = "ALIGN_END"
    max_length: int | None = None
    sequence_id: str = "sequence_id"
    step: str = "step"
    num_features: int | None = None
    """Width of a step in the nested arrays layout (one ``array<array<...>>`` column); None: not checked against
    a fixed width on the driver (every step of a sequence must still have the width of its first step)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "features", tuple(self.features))
        checks: list[tuple[bool, str]] = [
            (len(self.features) > 0, "features: at least one column"),
            (len(set(self.features)) == len(self.features), "features: a column appears twice"),
            (self.layout in ("rows", "arrays"), f"layout: rows or arrays, got {self.layout!r}"),
            (self.labels in ("last_step", "per_step"), f"labels: last_step or per_step, got {self.labels!r}"),
            (self.task in ("classification", "regression"), f"task: classification or regression, got {self.task!r}"),
            (
                self.alignment in ("ALIGN_START", "ALIGN_END", "EQUAL_LENGTH"),
                f"alignment: ALIGN_START, ALIGN_END or EQUAL_LENGTH, got {self.alignment!r}",
            ),
            (_positive(self.max_length), f"max_length: a positive integer, got {self.max_length!r}"),
            (_positive(self.num_features), f"num_features: a positive integer, got {self.num_features!r}"),
            (
                self.num_classes is None or (_positive(self.num_classes) and self.num_classes >= 2),
                f"num_classes: an integer of at least 2, got {self.num_classes!r}",
            ),
            (self.num_classes is None or self.task == "classification", "num_classes: only for classification"),
            (
                self.num_features is None or (self.layout == "arrays" and len(self.features) == 1),
                "num_features: only for one nested array column in the arrays layout",
            ),
            (
                self.label not in (*self.features, self.sequence_id, self.step),
                f"label: {self.label!r} is also a feature, the sequence id or the step",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @property
    def width(self) -> int | None:
        """Features per step when the spec alone tells (None for a nested arrays column without num_features)."""
        if self.num_features is not None:
            return self.num_features
        if self.layout == "rows" or len(self.features) > 1:
            return len(self.features)
        return None

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["features"] = list(self.features)
        return out

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> SequenceSpec:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(obj) - known)
        if unknown:
            raise ValueError(f"unknown sequence setting {unknown[0]!r}; known: {', '.join(sorted(known))}")
        values = dict(obj)
        if isinstance(values.get("features"), str):
            raise ValueError("features: a list of column names, not one string")
        values["features"] = tuple(values.get("features") or ())
        return cls(**values)


def _positive(value: int | None) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value > 0)

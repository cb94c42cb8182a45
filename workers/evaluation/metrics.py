"""Mergeable evaluation metric states: computed per partition on executors, merged exactly on the driver.

The counterpart of DL4J-on-Spark's ``doEvaluation`` (``Evaluation``, ``ROC``/``ROCMultiClass`` and
``RegressionEvaluation`` reduced across partitions). A *state* holds sufficient statistics, never rows:

- ``update(...)`` adds one numpy batch (call it as often as a partition has batches),
- ``merge(other)`` adds another state into this one and returns it; merging is associative and commutative,
  and merging partial states gives what one state fed all the rows would give,
- ``to_dict()`` / ``from_dict(d)`` convert to and from plain JSON-able values (lists, ints, floats, strings),
  which is how states travel from executors to the driver; ``json`` round-trips them exactly,
- ``result()`` gives the final metrics as a JSON-able dict.

Three groups, named as in a request's ``metrics`` list: ``"classification"`` (:class:`ClassificationState`),
``"roc"`` (:class:`RocState`) and ``"regression"`` (:class:`RegressionState`). :func:`make_states` builds a
group -> state dict for a request, :func:`update_states` feeds it a batch, :func:`merge_states` reduces the
partitions' dicts (states or their ``to_dict()`` forms or JSON strings), :func:`results` finishes.

Counts are int64 and merge bit-exactly. Float sums (weighted counts, regression sums) merge exactly up to the
order of float additions: merged results equal single-pass results to about 1e-12 relative, not bitwise.

One module per concern, all re-exported here (import from this module):

- :mod:`workers.evaluation.base`: the :class:`MetricState` interface and the input and state-field checks,
- :mod:`workers.evaluation.classification`: :class:`ClassificationState`,
- :mod:`workers.evaluation.roc`: :class:`RocState`,
- :mod:`workers.evaluation.regression`: :class:`RegressionState`,
- :mod:`workers.evaluation.groups`: the group functions (:func:`make_states` and the rest).

Only stdlib and numpy are imported: this module runs inside Spark executors.
"""

from __future__ import annotations

from workers.evaluation.base import STATE_VERSION, BoolArray, FloatArray, IntArray, MetricState  # noqa: F401
from workers.evaluation.classification import DEFAULT_TOP_K, ClassificationState
from workers.evaluation.groups import (
    GROUPS,
    make_states,
    merge_states,
    results,
    state_from_dict,
    states_from_dict,
    states_to_dict,
    update_states,
)
from workers.evaluation.regression import RegressionState
from workers.evaluation.roc import DEFAULT_ROC_THRESHOLD_STEPS, RocState

__all__ = [
    "DEFAULT_ROC_THRESHOLD_STEPS",
    "DEFAULT_TOP_K",
    "GROUPS",
    "ClassificationState",
    "MetricState",
    "RegressionState",
    "RocState",
    "make_states",
    "merge_states",
    "results",
    "state_from_dict",
    "states_from_dict",
    "states_to_dict",
    "update_states",
]

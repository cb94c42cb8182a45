"""A classifier's rounds carry its validation accuracy (1 - xgboost's ``error`` / ``merror``, evaluated each round
even when the request names other metrics), and at the kept round it is the accuracy of the fit's result; early
stopping still watches the requested metric."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from tests.workers.training.xgboost.recorded import Recorded
from workers.training.xgboost.remote import single_worker
from workers.training.xgboost.rounds import RoundReports
from workers.training.xgboost.spec import parse_xgboost_params


def _batch(classes: int) -> pa.RecordBatch:
    rng = np.random.default_rng(classes)
    x = rng.normal(size=(1200, 4))
    score = x @ rng.normal(size=(4, classes)) + rng.normal(scale=1.5, size=(1200, classes))  # noisy: it overfits
    y = score.argmax(axis=1) if classes > 2 else (score[:, 0] > 0).astype(np.int64)
    return pa.RecordBatch.from_arrays(
        [*(pa.array(x[:, i]) for i in range(4)), pa.array(y.astype(np.float64)), pa.array(np.arange(1200) >= 900)],
        names=["a", "b", "c", "d", "y", "v"],
    )


@pytest.mark.parametrize(
    ("classes", "eval_metric", "evaluated"),
    [(2, None, ["error", "logloss"]), (2, "auc", ["error", "auc"]), (4, None, ["merror", "mlogloss"]),
     (4, ["merror", "mlogloss"], ["merror", "mlogloss"])],
)  # fmt: skip
def test_each_round_reports_accuracy_and_the_kept_round_is_the_result(
    classes: int, eval_metric: str | list[str] | None, evaluated: list[str]
) -> None:
    raw = {"learning_rate": 0.5, "max_depth": 6, "num_round": 300, "early_stopping_rounds": 5}
    if eval_metric is not None:
        raw["eval_metric"] = eval_metric
    spec = parse_xgboost_params(raw, task="classification", num_classes=classes)
    params = {**spec.params, "objective": spec.objective, "eval_metric": list(spec.fit_eval_metrics())}
    if classes > 2:
        params["num_class"] = classes
    ctx = Recorded()
    with RoundReports(ctx, "127.0.0.1", num_round=spec.num_round) as reports:  # type: ignore[arg-type]
        train = single_worker(["a", "b", "c", "d"], "y", None, "v", "classification", params, spec.num_round,
                              spec.early_stopping_rounds, 1, None, None, reports.target)  # fmt: skip
        [out] = list(train(iter([_batch(classes)])))
    history = json.loads(out.column("history")[0].as_py())["validation"]
    result = json.loads(out.column("validation")[0].as_py())
    assert list(history) == evaluated  # the requested (or default) metric last: the one early stopping watches
    error = history[evaluated[0]]
    trained = len(error)
    assert trained < 300, "a learning rate of 0.5 on noisy labels stops early"
    accuracy = {p.step: p.value for p in ctx.points if p.key == "validation_accuracy"}
    assert sorted(accuracy) == list(range(1, trained + 1))
    assert [accuracy[n] for n in range(1, trained + 1)] == pytest.approx([1 - e for e in error], abs=1e-12)
    kept = trained - spec.early_stopping_rounds  # type: ignore[operator]
    assert accuracy[kept] == pytest.approx(result["accuracy"], abs=1e-12)
    assert len({round(v, 9) for v in accuracy.values()}) > 1  # it moves: a real per-round curve
    # early stopping ends the rounds: the progress stops at the last round trained, not at num_round
    assert ctx.shown[-1] == (pytest.approx(trained / 300), f"training: round {trained} of 300")

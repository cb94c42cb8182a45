"""One-worker xgboost training inside a single Spark task (executor-side: stdlib, numpy, pyarrow, xgboost).

With one worker, xgboost.spark's distributed machinery (a barrier stage, the rabit tracker, collective hist
building, a training-set evaluation every round) costs more than it brings: on 1,000,000 rows its fit took
about 2.5x plain ``xgboost.train`` on the same cores. This task receives every row in one partition as Arrow,
builds the matrices with numpy, and trains with xgboost's own API and every core the worker may use.

Checkpoints: every ``checkpoint_rounds`` rounds, rank 0 writes the booster so far (xgboost's JSON) as the directory
``round-<n>-<run>`` under the job's checkpoint directory, complete or not at all (workers/storage.py); the driver
registers what appears there (driver.py). A retried job continues from one (``xgb_model``): the booster is read
where the checkpoint is and boosting goes on for the rounds left.

Round reports: rank 0 sends each round's evaluation to the driver as the round ends (:func:`round_callback`), so
the validation metric can be read, the job's progress follows the rounds, and a tune job can prune the fit, while
it runs (driver side: rounds.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

TRAIN_SCHEMA = "model binary, history string, validation string"
MODEL_FILE = "model.json"
EVAL_PREFIXES = {"training": "train", "validation": "validation"}
"""xgboost's evaluation sets (xgboost.spark's names; one-worker training has only ``validation``) -> metric prefix."""
ReportTarget = tuple[str, int, str]
"""(host, port, token) of the driver's round reports listener."""


def checkpoint_name(rounds: int, run: str) -> str:
    return f"round-{rounds:06d}-{run}"


def parse_checkpoint_name(name: str) -> tuple[int, str] | None:
    """(rounds, run) of a complete checkpoint's directory name; None for anything else (a partial write)."""
    parts = name.split("-")
    if len(parts) != 3 or parts[0] != "round" or not parts[1].isdigit() or "." in parts[2]:
        return None
    return int(parts[1]), parts[2]


def checkpoint_callback(directory: str, every: int, run: str) -> Any:
    """An xgboost training callback that writes the booster every ``every`` rounds (rank 0 of a distributed fit
    only: every rank holds the same trees)."""
    import xgboost
    from xgboost import collective

    from workers import storage

    class RoundCheckpoints(xgboost.callback.TrainingCallback):
        def after_iteration(self, model: Any, epoch: int, evals_log: Any) -> bool:
            rounds = model.num_boosted_rounds()
            if rounds % every == 0 and collective.get_rank() == 0:
                raw = bytes(model.save_raw("json"))
                storage.publish_files(directory, checkpoint_name(rounds, run), {MODEL_FILE: raw})
            return False

    return RoundCheckpoints()


def accuracy_key(key: str) -> str | None:
    """``<prefix>_accuracy`` for xgboost's classification error ``<prefix>_error`` (threshold 0.5: the predicted
    class of :func:`single_worker` and of xgboost.spark) or ``<prefix>_merror`` (the argmax): accuracy = 1 - error
    on the same rows and trees. None for any other key (``error@0.7`` too)."""
    prefix, _, metric = key.partition("_")
    return f"{prefix}_accuracy" if metric in ("error", "merror") and prefix in EVAL_PREFIXES.values() else None


def round_metrics(evals_log: Any) -> dict[str, float]:
    """The last round's values in xgboost's evaluation log, as ``train_<metric>`` / ``validation_<metric>``, with
    the accuracy a classification error gives (:func:`accuracy_key`)."""
    out: dict[str, float] = {}
    for name, by_metric in evals_log.items():
        prefix = EVAL_PREFIXES.get(name)
        for metric, values in by_metric.items() if prefix else ():
            value = values[-1]
            out[f"{prefix}_{metric}"] = float(value[0] if isinstance(value, tuple) else value)
    for key, value in list(out.items()):
        if (accuracy := accuracy_key(key)) is not None:
            out[accuracy] = 1.0 - value
    return out


def round_callback(target: ReportTarget) -> Any:
    """An xgboost training callback with which rank 0 sends every round's evaluation to the driver as it ends:
    ``{"t": "round", "round": n, "metrics": {...}}`` (n counts the rounds of a checkpoint continued from, too).
    One line on a socket costs microseconds; the driver batches the writes. Training goes on if the driver cannot
    be reached: the history the fit returns carries every round anyway."""
    import xgboost
    from xgboost import collective

    host, port, token = target

    class RoundReporter(xgboost.callback.TrainingCallback):
        def __init__(self) -> None:
            super().__init__()
            self._reporter: Any = None

        def before_training(self, model: Any) -> Any:
            if collective.get_rank() == 0:
                from workers.training.torch.report import SocketReporter

                try:
                    self._reporter = SocketReporter(host, port, token, 0, timeout_s=10.0)
                except OSError:
                    self._reporter = None
            return model

        def after_iteration(self, model: Any, epoch: int, evals_log: Any) -> bool:
            if self._reporter is not None:
                event = {"t": "round", "round": model.num_boosted_rounds(), "metrics": round_metrics(evals_log)}
                self._reporter.send(event)
            return False

        def after_training(self, model: Any) -> Any:
            if self._reporter is not None:
                self._reporter.close()
                self._reporter = None
            return model

    return RoundReporter()


def initial_model(uri: str | None) -> str | None:
    """The local path of a checkpoint's booster to continue from (fetched once when it is on a store)."""
    if uri is None:
        return None
    from workers import storage

    return str(storage.attempt("reading the checkpoint", uri, lambda: storage.fetch_dir(uri)) / MODEL_FILE)


def _column(table: Any, name: str, dtype: Any) -> np.ndarray:
    return np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=dtype)


def validation_metrics(task: str, y: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
    """The metrics :func:`workers.training.validation.validation_metrics` gives, from numpy: rmse, mae, r2, mse;
    accuracy and Spark's weighted F1 (each class's F1 weighted by its share of the labels)."""
    if task == "regression":
        err = y - predicted
        mse = float(np.mean(err**2)) if len(y) else 0.0
        ss_tot = float(np.sum((y - y.mean()) ** 2)) if len(y) else 0.0
        return {"rmse": mse**0.5, "mae": float(np.mean(np.abs(err))) if len(y) else 0.0,
                "r2": 1.0 - float(np.sum(err**2)) / ss_tot if ss_tot > 0 else 0.0, "mse": mse}  # fmt: skip
    labels = y.astype(np.int64)
    f1 = 0.0
    for c in np.unique(labels):
        tp = float(np.sum((predicted == c) & (labels == c)))
        precision = tp / max(float(np.sum(predicted == c)), 1.0)
        recall = tp / float(np.sum(labels == c))
        if precision + recall > 0:
            f1 += float(np.mean(labels == c)) * 2 * precision * recall / (precision + recall)
    return {"accuracy": float(np.mean(predicted == labels)) if len(y) else 0.0, "f1": f1}


def single_worker(
    features: list[str],
    label: str,
    weight: str | None,
    validation_col: str,
    task: str,
    params: dict[str, Any],
    rounds: int,
    early_stopping: int | None,
    threads: int,
    checkpoints: tuple[str, int, str] | None = None,
    resume_uri: str | None = None,
    reports: ReportTarget | None = None,
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """``rounds`` rounds (more, after the ones of the checkpoint ``resume_uri``); ``checkpoints`` = (directory,
    every, run) writes one every ``every`` rounds; ``reports``: where each round's evaluation is sent."""

    def train_partition(batches: Iterator[Any]) -> Iterator[Any]:
        import os

        # Spark starts Python workers with OMP_NUM_THREADS = spark.task.cpus; xgboost caps its threads by it.
        os.environ["OMP_NUM_THREADS"] = str(threads)
        import pyarrow as pa
        import xgboost

        from workers.training.xgboost.remote import (
            _column,
            checkpoint_callback,
            initial_model,
            round_callback,
            validation_metrics,
        )

        table = pa.Table.from_batches(list(batches))
        if table.num_rows == 0:
            return
        valid = _column(table, validation_col, bool)
        x = np.column_stack([_column(table, c, np.float32) for c in features])
        y = _column(table, label, np.float64)
        w = _column(table, weight, np.float64) if weight else None
        names = list(features)
        train_w = None if w is None else w[~valid]
        dtrain = xgboost.QuantileDMatrix(x[~valid], label=y[~valid], weight=train_w, nthread=threads,
                                         feature_names=names, max_bin=params.get("max_bin", 256))  # fmt: skip
        dvalid = xgboost.QuantileDMatrix(x[valid], label=y[valid], ref=dtrain, nthread=threads, feature_names=names)
        history: dict[str, Any] = {}
        callbacks = [checkpoint_callback(*checkpoints)] if checkpoints and checkpoints[1] > 0 else []
        if reports is not None:
            callbacks.append(round_callback(reports))
        booster = xgboost.train({**params, "nthread": threads}, dtrain, num_boost_round=rounds,
                                evals=[(dvalid, "validation")], evals_result=history,
                                early_stopping_rounds=early_stopping, verbose_eval=False, callbacks=callbacks or None,
                                xgb_model=initial_model(resume_uri))  # fmt: skip
        best = booster.attr("best_iteration")  # the driver keeps the trees up to it
        kept = int(best) + 1 if best is not None else booster.num_boosted_rounds()
        out = booster.inplace_predict(x[valid], iteration_range=(0, kept))
        if task == "classification":
            out = np.asarray(out).reshape(int(valid.sum()), -1)
            predicted = out.argmax(axis=1) if out.shape[1] > 1 else (out[:, 0] > 0.5).astype(np.int64)
        else:
            predicted = np.asarray(out, dtype=np.float64).reshape(-1)
        metrics = validation_metrics(task, y[valid], predicted)
        yield pa.RecordBatch.from_arrays(
            [pa.array([bytes(booster.save_raw("json"))], pa.binary()), pa.array([json.dumps(history)]),
             pa.array([json.dumps(metrics)])],
            names=["model", "history", "validation"],
        )  # fmt: skip

    return train_partition

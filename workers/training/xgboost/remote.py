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
HISTORY_FILE = "history.json"
"""Beside a checkpoint's booster: xgboost's evaluation log of every round up to it (``{data: {metric: [...]}}``)."""
CARD_FILE = "card.json"
"""Beside a checkpoint's booster: what it was trained on (the model card's columns, task, classes, parameters), which
a new job that continues it (``training.resume_from``) is checked against."""
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


def checkpoint_callback(
    directory: str, every: int, run: str, card: str = "", earlier: dict[str, dict[str, list[float]]] | None = None
) -> Any:
    """An xgboost training callback that writes the booster every ``every`` rounds (rank 0 of a distributed fit
    only: every rank holds the same trees), with the evaluation history of every round so far (``earlier``: that
    of the checkpoint this fit continues from) and ``card`` (JSON). The booster carries early stopping's best round
    and score (its attributes): a fit continued from it goes on with them (:func:`continued_early_stopping`)."""
    import xgboost
    from xgboost import collective

    from workers import storage

    class RoundCheckpoints(xgboost.callback.TrainingCallback):
        def after_iteration(self, model: Any, epoch: int, evals_log: Any) -> bool:
            rounds = model.num_boosted_rounds()
            if rounds % every == 0 and collective.get_rank() == 0:
                raw = bytes(model.save_raw("json"))
                history = {name: _joined((earlier or {}).get(name, {}), log) for name, log in evals_log.items()}
                # the booster first: a directory on a store lists once its first object is there, and the driver
                # may register it then (a missing history only leaves the result's history out)
                files = {MODEL_FILE: raw, HISTORY_FILE: json.dumps(history).encode()}
                if card:
                    files[CARD_FILE] = card.encode()
                storage.publish_files(directory, checkpoint_name(rounds, run), files)
            return False

    return RoundCheckpoints()


def _joined(before: dict[str, list[float]], log: dict[str, list[Any]]) -> dict[str, list[float]]:
    """One evaluation set's log: the rounds of the checkpoint continued from, then this fit's."""
    return {metric: [*before.get(metric, []), *(float(v[0] if isinstance(v, tuple) else v) for v in values)]
            for metric, values in log.items()}  # fmt: skip


def continued_early_stopping(rounds: int) -> tuple[Any, Any]:
    """xgboost's EarlyStopping (as ``early_stopping_rounds`` adds it) that, on a booster continued from a checkpoint,
    goes on from the checkpoint's best round and score (the booster's ``best_iteration``/``best_score``) instead of
    starting afresh: the fit stops ``rounds`` rounds after the best one, whichever attempt trained it, as the
    uninterrupted fit would.

    Two callbacks, the first and the last of a fit's: the first keeps the best round (so a checkpoint of the round
    holds it), the last stops the fit (xgboost skips the callbacks after one that stops: the others see the round)."""
    import xgboost

    class ContinuedEarlyStopping(xgboost.callback.EarlyStopping):
        def __init__(self) -> None:
            super().__init__(rounds=rounds)
            self._best: tuple[float, int] | None = None
            self.stop = False

        def before_training(self, model: Any) -> Any:
            model = super().before_training(model)
            best, score = model.attr("best_iteration"), model.attr("best_score")
            if self.starting_round > 0 and best is not None and score is not None:
                self._best = (float(score), int(best))
            return model

        def after_iteration(self, model: Any, epoch: int, evals_log: Any) -> bool:
            self.stop = bool(super().after_iteration(model, epoch, evals_log))
            return False

        def _update_rounds(self, *, score: Any, name: str, metric: str, model: Any, epoch: int) -> bool:
            if self._best is not None and not self.stopping_history:
                best_score, best_round = self._best
                self.stopping_history = {name: {metric: [best_score]}}
                self.best_scores = {name: {metric: [best_score]}}
                self.current_rounds = epoch - 1 - best_round  # rounds without improvement before this one
            return bool(super()._update_rounds(score=score, name=name, metric=metric, model=model, epoch=epoch))

    class Stop(xgboost.callback.TrainingCallback):
        def __init__(self, watching: ContinuedEarlyStopping) -> None:
            super().__init__()
            self.watching = watching

        def after_iteration(self, model: Any, epoch: int, evals_log: Any) -> bool:
            return self.watching.stop

    watching = ContinuedEarlyStopping()
    return watching, Stop(watching)


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


def starting_booster(uri: str | None, keep_best: bool = True) -> Any:
    """The booster of a checkpoint to continue from (None without one); ``keep_best`` False drops early stopping's
    best round and score from it, so that a fit without early stopping keeps every round it trains, and one that
    watches another metric counts from its own first round."""
    path = initial_model(uri)
    if path is None:
        return None
    import xgboost

    booster = xgboost.Booster(model_file=path)
    if not keep_best:
        booster.set_attr(best_iteration=None, best_score=None)
    return booster


def initial_history(uri: str | None) -> dict[str, dict[str, list[float]]]:
    """The evaluation log of every round of a checkpoint (empty without one, or for a checkpoint without it)."""
    if uri is None:
        return {}
    from workers import storage

    path = storage.attempt("reading the checkpoint", uri, lambda: storage.fetch_dir(uri)) / HISTORY_FILE
    return dict(json.loads(path.read_text())) if path.exists() else {}


def matrices(xgboost: Any, x: np.ndarray, y: np.ndarray, w: np.ndarray | None, valid: np.ndarray,
             names: list[str], threads: int, params: dict[str, Any]) -> tuple[Any, Any]:  # fmt: skip
    """The training and validation matrices: quantised once (QuantileDMatrix, the validation one on the training
    one's bins, both with ``max_bin``) for the hist tree method, plain DMatrix for approx, which refuses the other."""
    train_w = None if w is None else w[~valid]
    if params.get("tree_method", "hist") != "hist":
        return (xgboost.DMatrix(x[~valid], label=y[~valid], weight=train_w, nthread=threads, feature_names=names),
                xgboost.DMatrix(x[valid], label=y[valid], nthread=threads, feature_names=names))  # fmt: skip
    bins = params.get("max_bin", 256)
    dtrain = xgboost.QuantileDMatrix(x[~valid], label=y[~valid], weight=train_w, nthread=threads,
                                     feature_names=names, max_bin=bins)  # fmt: skip
    dvalid = xgboost.QuantileDMatrix(x[valid], label=y[valid], ref=dtrain, nthread=threads, feature_names=names,
                                     max_bin=bins)  # fmt: skip
    return dtrain, dvalid


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
    checkpoints: tuple[str, int, str, str] | None = None,
    resume_uri: str | None = None,
    reports: ReportTarget | None = None,
    keep_best: bool = True,
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """``rounds`` rounds (more, after the ones of the checkpoint ``resume_uri``; ``keep_best``: see
    :func:`starting_booster`); ``checkpoints`` = (directory, every, run, card) writes one every ``every`` rounds;
    ``reports``: where each round's evaluation is sent."""

    stop_after = early_stopping

    def train_partition(batches: Iterator[Any]) -> Iterator[Any]:
        import os

        # Spark starts Python workers with OMP_NUM_THREADS = spark.task.cpus; xgboost caps its threads by it.
        os.environ["OMP_NUM_THREADS"] = str(threads)
        import pyarrow as pa
        import xgboost

        from workers.training.xgboost.remote import (
            _column,
            checkpoint_callback,
            continued_early_stopping,
            initial_history,
            matrices,
            round_callback,
            starting_booster,
            validation_metrics,
        )

        table = pa.Table.from_batches(list(batches))
        if table.num_rows == 0:
            return
        valid = _column(table, validation_col, bool)
        x = np.column_stack([_column(table, c, np.float32) for c in features])
        y = _column(table, label, np.float64)
        w = _column(table, weight, np.float64) if weight else None
        dtrain, dvalid = matrices(xgboost, x, y, w, valid, list(features), threads, params)
        history: dict[str, Any] = {}
        first, last = continued_early_stopping(stop_after) if stop_after is not None else (None, None)
        callbacks = [first] if first is not None else []
        if checkpoints and checkpoints[1] > 0:
            callbacks.append(checkpoint_callback(*checkpoints, earlier=initial_history(resume_uri)))
        if reports is not None:
            callbacks.append(round_callback(reports))
        if last is not None:
            callbacks.append(last)
        booster = xgboost.train({**params, "nthread": threads}, dtrain, num_boost_round=rounds,
                                evals=[(dvalid, "validation")], evals_result=history, verbose_eval=False,
                                callbacks=callbacks or None,
                                xgb_model=starting_booster(resume_uri, keep_best))  # fmt: skip
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

"""What evaluation tasks run on the executors: rows -> predictions -> mergeable metric states, one JSON row per
partition. Executor-side: stdlib, numpy, pyarrow, torch and this package's executor modules only."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from workers.inference.spec import ModelRef

STATE_SCHEMA = "states string, rows long, bad long"


def state_row(states: str, rows: int, bad: int) -> Any:
    """One partition's result: its merged metric states (JSON), rows seen and bad rows."""
    import pyarrow as pa

    return pa.RecordBatch.from_arrays(
        [pa.array([states]), pa.array([rows], pa.int64()), pa.array([bad], pa.int64())], names=["states", "rows", "bad"]
    )


def new_states(options: dict[str, Any]) -> Any:
    """Empty metric states for the requested groups (one set per partition, merged on the driver)."""
    from workers.evaluation.metrics import make_states

    return make_states(
        options["groups"],
        task=options["task"],
        num_classes=options["num_classes"],
        label_columns=options["label_columns"],
        roc_steps=options["roc_steps"],
        exact_auc=options["exact_auc"],
        top_k=tuple(options["top_k"]),
    )


def model_states(model: ModelRef, options: dict[str, Any], batch_size: int) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The function each task runs for a torch or xgboost model (closes over plain values only)."""
    uri, card, framework = model.uri, dict(model.card), model.framework
    features, labels, width = model.features, model.labels, model.width
    class_labels = model.class_labels

    def evaluate_partition(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        from workers.evaluation.metrics import states_to_dict, update_states
        from workers.inference import rows
        from workers.inference.remote import load_model

        net = load_model(framework, uri)
        cols = rows.Columns(features, bool(card.get("array_column")), width, labels,
                            options["task"] == "classification", card.get("num_classes"), class_labels)  # fmt: skip
        states = new_states(options)
        seen = bad_rows = 0
        for batch in batches:
            table = pa.Table.from_batches([batch])
            x, bad_x = rows.features(table, cols)
            y, bad_y = rows.labels(table, cols)
            keep = ~(bad_x | bad_y)
            seen, bad_rows = seen + len(keep), bad_rows + int((~keep).sum())
            if not keep.any():
                continue
            shape = card.get("input_shape") or [x.shape[1]]
            out = net.outputs(x[keep].reshape(-1, *shape), batch_size=batch_size)
            if options["task"] == "classification":
                update_states(states, y[keep], probabilities=out)
            else:
                update_states(states, y[keep], predictions=out)
        yield pa.RecordBatch.from_arrays(
            [
                pa.array([json.dumps(states_to_dict(states))]),
                pa.array([seen], pa.int64()),
                pa.array([bad_rows], pa.int64()),
            ],
            names=["states", "rows", "bad"],
        )

    return evaluate_partition


def sequence_states(
    model: ModelRef, sequence: dict[str, Any], options: dict[str, Any], batch_size: int
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The function each task runs for a sequence model: one row per sequence in, metric states out. A last_step
    model is scored once per sequence; a per_step model on every labelled step (padding never counts)."""
    uri = model.uri

    def evaluate_partition(batches: Iterator[Any]) -> Iterator[Any]:
        from workers.evaluation.metrics import states_to_dict, update_states
        from workers.inference.remote import load_model
        from workers.inference.sequences import run_batch, spec_of

        net = load_model("torch", uri)
        spec = spec_of(sequence, labelled=True)
        states = new_states(options)
        seen = 0
        for batch in batches:
            if batch.num_rows == 0:
                continue
            done = run_batch(net, batch, spec, batch_size)
            seen += batch.num_rows
            out, y = done.outputs, done.labels
            if done.mask is not None:  # per step: the labelled steps only
                out, y = out[done.mask], y[done.mask]
            if options["task"] == "classification":
                update_states(states, y, probabilities=out)
            else:
                update_states(states, y.reshape(len(y), -1), predictions=out.reshape(len(out), -1))
        yield state_row(json.dumps(states_to_dict(states)), seen, 0)

    return evaluate_partition


def spark_ml_states(model: ModelRef, options: dict[str, Any]) -> Callable[[Iterator[Any]], Iterator[Any]]:
    labels, class_labels = model.labels, model.class_labels

    def evaluate_partition(batches: Iterator[Any]) -> Iterator[Any]:
        import numpy as np
        import pyarrow as pa

        from workers.evaluation.metrics import states_to_dict, update_states
        from workers.evaluation.remote import state_row
        from workers.inference import rows

        cols = rows.Columns((), False, 0, labels, options["task"] == "classification", options["num_classes"],
                            class_labels)  # fmt: skip
        states = new_states(options)
        seen = bad = 0
        for batch in batches:
            table = pa.Table.from_batches([batch])
            y, bad_y = rows.labels(table, cols)  # a class the model does not know is a bad row, not class 0
            keep = ~bad_y
            seen, bad = seen + len(y), bad + int(bad_y.sum())
            if not keep.any():
                continue
            pred = table.column("prediction").to_numpy(zero_copy_only=False).astype(np.float64)
            if options["task"] == "classification":
                probs = table.column("_probability").combine_chunks()
                width = len(probs[0]) if len(probs) else 0
                p = probs.flatten().to_numpy(zero_copy_only=False).reshape(len(probs), width)
                # the model's own decision (a logistic regression's threshold), as /predict gives it; the
                # probabilities feed top-k, ROC and log-loss
                update_states(states, y[keep], probabilities=p[keep], predictions=pred[keep])
            else:
                update_states(states, y[keep], predictions=pred.reshape(-1, 1)[keep])
        yield state_row(json.dumps(states_to_dict(states)), seen, bad)

    return evaluate_partition

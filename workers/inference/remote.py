"""What batch-prediction tasks run on the executors: rows -> ``key`` + predictions, the model loaded once per
Python worker. Executor-side: stdlib, numpy, pyarrow, torch and this package's executor modules only."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from workers.inference.spec import ModelRef


def output_schema(model: ModelRef, key: str, key_type: str) -> str:
    """The prediction columns: ``prediction`` (class index or value), for classification ``label`` and
    ``probabilities``; several label columns give an array of values."""
    if model.task == "classification":
        label_type = "string" if model.class_labels else "bigint"
        return f"`{key}` {key_type}, prediction bigint, label {label_type}, probabilities array<double>"
    if len(model.labels) > 1:
        return f"`{key}` {key_type}, prediction array<double>"
    return f"`{key}` {key_type}, prediction double"


def model_predictions(model: ModelRef, key: str, batch_size: int) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The function each task runs for a torch or xgboost model (closes over plain values only)."""
    uri, card, framework = model.uri, dict(model.card), model.framework
    features, width, class_labels = model.features, model.width, model.class_labels
    classification, several = model.task == "classification", len(model.labels) > 1

    def predict_partition(batches: Iterator[Any]) -> Iterator[Any]:
        import numpy as np
        import pyarrow as pa

        from workers.inference import rows

        net = load_model(framework, uri)
        cols = rows.Columns(features, bool(card.get("array_column")), width)
        shape = card.get("input_shape") or [width]
        for batch in batches:
            table = pa.Table.from_batches([batch])
            x, _ = rows.features(table, cols)  # bad rows were dropped or refused on the driver
            out = net.outputs(x.reshape(-1, *shape), batch_size=batch_size)
            columns = [table.column(key).combine_chunks()]
            names = [key, "prediction"]
            if classification:
                probabilities = np.concatenate([1 - out, out], axis=1) if out.shape[1] == 1 else out
                index = probabilities.argmax(axis=1)
                label = np.asarray(class_labels, dtype=object)[index] if class_labels else index
                columns += [
                    pa.array(index, pa.int64()),
                    pa.array(label.tolist(), pa.string() if class_labels else pa.int64()),
                    pa.array(list(probabilities), pa.list_(pa.float64())),
                ]
                names += ["label", "probabilities"]
            elif several:
                columns.append(pa.array(list(out), pa.list_(pa.float64())))
            else:
                columns.append(pa.array(out[:, 0], pa.float64()))
            yield pa.RecordBatch.from_arrays(columns, names=names)

    return predict_partition


def sequence_output_schema(model: ModelRef, sequence: dict[str, Any], key: str, key_type: str) -> str:
    """A last_step model's columns are a tabular model's; a per_step model's are arrays with one element per
    step of the sequence."""
    if sequence["labels"] == "last_step":
        return output_schema(model, key, key_type)
    if model.task == "classification":
        label_type = "string" if model.class_labels else "bigint"
        return (
            f"`{key}` {key_type}, prediction array<bigint>, label array<{label_type}>, "
            "probabilities array<array<double>>"
        )
    return f"`{key}` {key_type}, prediction array<double>"


def sequence_predictions(
    model: ModelRef, sequence: dict[str, Any], key: str, batch_size: int
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The function each task runs for a sequence model: one row per sequence (``sequence_id``, ``_x``, ``_y``,
    ``_len``) in, ``key`` + predictions out."""
    uri, class_labels = model.uri, model.class_labels
    classification, per_step = model.task == "classification", sequence["labels"] == "per_step"

    def predict_partition(batches: Iterator[Any]) -> Iterator[Any]:
        import numpy as np
        import pyarrow as pa

        from workers.data.sequences.spec import SEQUENCE_ID
        from workers.inference.sequences import per_step_lists, run_batch, spec_of

        net = load_model("torch", uri)
        spec = spec_of(sequence, labelled=False)
        for batch in batches:
            if batch.num_rows == 0:
                continue
            done = run_batch(net, batch, spec, batch_size)
            out = done.outputs
            columns = [batch.column(SEQUENCE_ID)]
            names = [key, "prediction"]
            if classification:
                probabilities = np.concatenate([1 - out, out], axis=-1) if out.shape[-1] == 1 else out
                index = probabilities.argmax(axis=-1)
                label = np.asarray(class_labels, dtype=object)[index] if class_labels else index
                label_type = pa.string() if class_labels else pa.int64()
                if per_step:
                    columns += [
                        pa.array(per_step_lists(index, done.lengths), pa.list_(pa.int64())),
                        pa.array(per_step_lists(label, done.lengths), pa.list_(label_type)),
                        pa.array(per_step_lists(probabilities, done.lengths), pa.list_(pa.list_(pa.float64()))),
                    ]
                else:
                    columns += [
                        pa.array(index, pa.int64()),
                        pa.array(label.tolist(), label_type),
                        pa.array(list(probabilities), pa.list_(pa.float64())),
                    ]
                names += ["label", "probabilities"]
            elif per_step:
                columns.append(pa.array(per_step_lists(out[..., 0], done.lengths), pa.list_(pa.float64())))
            else:
                columns.append(pa.array(out[:, 0], pa.float64()))
            yield pa.RecordBatch.from_arrays(columns, names=names)

    return predict_partition


def load_model(framework: str, uri: str) -> Any:
    """The model, cached per Python worker; only the family's own library is imported."""
    if framework == "xgboost":
        from workers.inference.xgboost_model import cached as xgboost_cached

        return xgboost_cached(uri)
    from workers.inference.torch_model import cached as torch_cached

    return torch_cached(uri)

"""Wire models of ``POST /train`` (API.md). Fields named there are fixed; extra fields are ours."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator
from typing_extensions import TypeAliasType

from app.schemas.body import Body, not_text
from app.schemas.models import ALIAS_PATTERN, VERSION_MAX, Framework
from workers.training.torch.spec.optimizer import described as optimizers_described

# Named types (``TypeAliasType``): a schema of its own in the OpenAPI document, which a generated client names its
# enum after (``TrainingMode``, not ``Mode1``); what is accepted and the 422 a bad value gets are those of the Literal.
MetricMode = TypeAliasType("MetricMode", Literal["min", "max"])
"""Whether a metric improves as it falls (min) or as it rises (max)."""
EarlyStoppingMetric = TypeAliasType("EarlyStoppingMetric", Literal["val_loss", "val_accuracy", "val_rmse"])
TrainingMode = TypeAliasType("TrainingMode", Literal["gradient_sharing", "parameter_averaging", "allreduce"])
Task = Literal["classification", "regression"]
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$"
ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"  # job, checkpoint and dataset ids (hex uuids)


class Split(Body):
    validation_fraction: float = Field(0.2, gt=0, lt=1)
    seed: int = Field(7, ge=0, le=2**63 - 1)  # a Java long (Spark's rand) and numpy's int64


class SequenceOptions(Body):
    """Sequence data for lstm/gru networks (DataVec's sequence records)."""

    layout: Literal["rows", "arrays"] = Field(
        "rows",
        description="rows: one row per step keyed by sequence_id and ordered by step; arrays: one row per sequence "
        "whose feature columns are arrays of per-step values",
    )
    sequence_id: str = "sequence_id"
    step: str = "step"
    labels: Literal["last_step", "per_step"] = Field(
        "last_step", description="one label per sequence (many-to-one) or one per step (many-to-many)"
    )
    alignment: Literal["ALIGN_START", "ALIGN_END", "EQUAL_LENGTH"] = Field(
        "ALIGN_END", description="how features and labels of different lengths line up (DataVec's AlignmentMode)"
    )
    max_length: int | None = Field(None, ge=1, le=100_000, description="keep at most this many steps")
    labels_uri: str | None = Field(
        None, max_length=4096, description="labels in a separate dataset joined by sequence_id (same layout)"
    )


class DatasetRef(Body):
    """Where the rows are and what they mean."""

    uri: str = Field(
        min_length=1,
        max_length=4096,
        description="A path inside the configured data roots (relative paths resolve against them), "
        "or an allowed remote URI.",
        examples=["datasets/taxi/train.parquet"],
    )
    format: Literal["parquet", "csv", "json"] | None = Field(
        None,
        description="Default: from the file name (.parquet, .csv, .json/.jsonl); directories are parquet.",
    )
    features: list[str] | None = Field(
        None, min_length=1, description="Feature columns; default: every numeric column but the label."
    )
    label: str | list[str] | None = Field(
        None, description="The label column; several columns for a multi-output regression (a label range)."
    )
    input_shape: list[int] | None = Field(
        None,
        min_length=1,
        max_length=3,
        description="Shape of one example when the single feature is an array column (e.g. [1, 8, 8]).",
    )
    task: Task | None = None
    num_classes: int | None = Field(None, ge=2, le=100_000)
    bad_rows: Literal["fail", "skip"] = Field(
        "fail",
        description="Rows with null/NaN features or labels: fail the job (default) or drop and count them.",
    )
    options: dict[str, str] = Field(
        default_factory=dict, description="Reader options passed to Spark (e.g. CSV `sep`, `quote`)."
    )
    weight: str | None = Field(None, description="A numeric column (>= 0) that weights each row's loss.")
    normalize: Literal["standardize", "minmax", "image"] | None = Field(
        None,
        description="torch: fit a normalizer on the training rows (per feature; image = one scale into [0, 1]); "
        "it is stored with the model and applied in evaluation and prediction.",
    )
    split: Split | None = Field(None, description="Hold out a validation part when no validation set is given.")
    sequence: SequenceOptions | None = Field(None, description="torch: the rows form sequences (lstm/gru).")
    key: str | None = Field(None, description="Batch prediction: the id column copied into every output row.")
    categorical: list[str] | None = Field(
        None,
        min_length=1,
        description="xgboost and spark_ml training: features that are categories (text, whole numbers or "
        "booleans), each one-hot encoded by the categories of the training rows (at most 1000); stored with the "
        "model and applied wherever it sees rows, an unseen category as all zeros.",
    )


class ValidationRef(Body):
    """A validation set; columns and task default to the training dataset's."""

    uri: str = Field(min_length=1, max_length=4096, examples=["datasets/taxi/eval.parquet"])
    format: Literal["parquet", "csv", "json"] | None = None
    options: dict[str, str] = Field(default_factory=dict)


class EarlyStopping(Body):
    """torch: stop when a validation metric stops improving or time runs out (DL4J's EarlyStoppingTrainer)."""

    metric: EarlyStoppingMetric = Field(
        "val_loss", description="Computed after every epoch: val_loss; val_accuracy (classification), val_rmse."
    )
    mode: MetricMode | None = Field(None, description="Default: max for val_accuracy, else min.")
    patience: int = Field(5, ge=1, le=100_000, description="Epochs in a row without an improvement before stopping.")
    min_delta: float = Field(0.0, ge=0, description="An improvement beats the best score by more than this.")
    max_minutes: float | None = Field(
        None, gt=0, description="Stop after the first epoch that ends past this much training time (resumes count)."
    )
    restore_best: bool = Field(True, description="Register the best epoch's weights (from its checkpoint).")


class InitFrom(Body):
    """torch: start from a registered model version's weights instead of a fresh initialization (fine-tuning, DL4J's
    TransferLearning). A resumed run (``resume_from``, a retry) starts from its checkpoint instead."""

    name: str = Field(pattern=NAME_PATTERN, examples=["digits-mlp"])
    version: int | None = Field(None, ge=1, le=VERSION_MAX, description="Default: the newest version.")
    alias: str | None = Field(None, pattern=ALIAS_PATTERN, examples=["champion"])
    strict: bool = Field(
        True,
        description="Every tensor of the network must come from the model (the same layers and sizes). false: copy "
        "the tensors whose names and shapes match and keep the fresh initialization of the others (a new output "
        "layer for other classes); at least one must match.",
    )

    _an_object = model_validator(mode="before")(not_text)

    @model_validator(mode="after")
    def _one_version(self) -> InitFrom:
        if self.version is not None and self.alias is not None:
            raise ValueError("give a version or an alias, not both")
        return self


class TrainingOptions(Body):
    """torch only: how the network is trained across executors."""

    epochs: int = Field(5, ge=1, le=100_000)
    batch_size_per_worker: int = Field(64, ge=1, le=1_000_000)
    num_workers: int = Field(2, ge=1, le=10_000, description="Barrier tasks; all must fit in the cluster at once.")
    seed: int = Field(7, ge=0, le=2**31 - 1)
    optimizer: dict[str, Any] = Field(
        default_factory=lambda: {"type": "adam", "learning_rate": 0.001}, description=optimizers_described()
    )
    mode: TrainingMode = "gradient_sharing"
    gradient_sharing: dict[str, Any] | None = Field(
        None,
        description="threshold_algorithm ({type: adaptive, initial_threshold, min_sparsity, max_sparsity, decay}, "
        "{type: fixed, threshold} or {type: target_sparsity, initial_threshold, target_sparsity, decay}), "
        "residual_clipping, aggregation, index_coding, encoding_debug, "
        'bitmap_ratio, collective ("auto", "sparse" or "dense"), exact_below_bytes (32768: a model this small is '
        "exchanged exactly, no threshold: its gradients are all-reduced, as in allreduce mode)",
    )
    averaging_frequency: int = Field(5, ge=1, le=100_000, description="parameter_averaging: minibatches per average")
    resume_from: str | None = Field(None, pattern=ID_PATTERN, description="A checkpoint id to continue from.")
    init_from: InitFrom | None = Field(
        None, description="Start from a registered torch model version's weights (fine-tuning)."
    )
    data_path: Literal["direct", "export"] | None = Field(
        None, description="Override the service's data path setting for this job (DL4J's Direct / Export)."
    )
    validation_fraction: float = Field(
        0.1, gt=0, lt=1, description="Held out (seeded) for validation when no validation set is given."
    )
    early_stopping: EarlyStopping | None = Field(
        None, description="Stop before the last epoch on a validation metric's patience or a time limit."
    )


class TrainRequest(Body):
    name: str = Field(pattern=NAME_PATTERN, description="Model name; the trained model becomes its next version.")
    framework: Framework
    dataset: DatasetRef
    validation: ValidationRef | None = None
    network: dict[str, Any] | None = Field(None, description="torch only: the network spec.")
    training: TrainingOptions | None = Field(None, description="torch only.")
    params: dict[str, Any] | None = Field(
        None,
        description="xgboost / spark_ml: the estimator's parameters (spark_ml: algorithm, grid, num_folds).",
    )
    device: Literal["auto", "cpu", "cuda"] = "auto"


TAXI_FEATURES = (
    "passenger_count", "trip_distance", "pickup_longitude", "pickup_latitude", "rate_code", "dropoff_longitude",
    "dropoff_latitude", "hour", "day_of_week", "is_weekend", "h_distance",
)  # fmt: skip
"""The seed article's feature columns of the taxi data (datasets/taxi.py)."""

TRAIN_EXAMPLES: dict[str, dict[str, Any]] = {
    "digits_cnn_gradient_sharing": {
        "summary": "torch CNN on the digits images, threshold-encoded gradient sharing on 2 workers",
        "value": {
            "name": "digits-cnn",
            "framework": "torch",
            "dataset": {
                "uri": "datasets/digits/train.parquet",
                "features": ["pixels"],
                "label": "label",
                "task": "classification",
                "num_classes": 10,
            },
            "validation": {"uri": "datasets/digits/test.parquet"},
            "network": {
                "input_shape": [1, 8, 8],
                "layers": [
                    {"type": "conv2d", "filters": 16, "kernel_size": 3, "padding": 1, "activation": "relu"},
                    {"type": "max_pool2d", "kernel_size": 2},
                    {"type": "conv2d", "filters": 32, "kernel_size": 3, "padding": 1, "activation": "relu"},
                    {"type": "flatten"},
                    {"type": "output", "units": 10, "activation": "softmax", "loss": "cross_entropy"},
                ],
            },
            "training": {
                "epochs": 15,
                "batch_size_per_worker": 32,
                "num_workers": 2,
                "seed": 7,
                "optimizer": {"type": "adam", "learning_rate": 0.003},
                "mode": "gradient_sharing",
                "gradient_sharing": {
                    "threshold_algorithm": {"type": "adaptive", "initial_threshold": 0.003},
                    "residual_clipping": {"multiple": 5, "frequency": 5},
                },
            },
        },
    },
    "xgboost_taxi": {
        "summary": "XGBoost regressor with the seed article's parameters (GPU when the executors have one)",
        "value": {
            "name": "taxi-fare-xgboost",
            "framework": "xgboost",
            "dataset": {
                "uri": "datasets/taxi/train.parquet",
                "features": list(TAXI_FEATURES),
                "label": "fare_amount",
                "task": "regression",
            },
            "validation": {"uri": "datasets/taxi/eval.parquet"},
            "params": {
                "learning_rate": 0.05,
                "max_depth": 8,
                "subsample": 0.8,
                "gamma": 1,
                "num_round": 500,
                "tree_method": "hist",
                "eval_metric": "rmse",
            },
            "device": "auto",
        },
    },
    "linear_regression_torch": {
        "summary": "torch linear regression on y = Xw + b + noise; the result reports the error in w and b",
        "value": {
            "name": "linear-regression",
            "framework": "torch",
            "dataset": {
                "uri": "datasets/linear/train.parquet",
                "features": ["x1", "x2", "x3", "x4", "x5", "x6"],
                "label": "y",
                "task": "regression",
                "normalize": "standardize",
            },
            "validation": {"uri": "datasets/linear/eval.parquet"},
            "network": {"layers": [{"type": "output", "units": 1, "activation": "identity", "loss": "mse"}]},
            "training": {
                "epochs": 10,
                "batch_size_per_worker": 50,
                "num_workers": 2,
                "seed": 7,
                "mode": "gradient_sharing",
                "optimizer": {"type": "sgd", "learning_rate": 0.1},
            },
        },
    },
    "random_forest_cv": {
        "summary": "Spark ML random forest, the seed article's cross-validated grid",
        "value": {
            "name": "taxi-fare-rf",
            "framework": "spark_ml",
            "dataset": {
                "uri": "datasets/taxi/train.parquet",
                "features": list(TAXI_FEATURES),
                "label": "fare_amount",
                "task": "regression",
            },
            "validation": {"uri": "datasets/taxi/eval.parquet"},
            "params": {
                "algorithm": "random_forest",
                "grid": {"maxBins": [100, 200], "maxDepth": [2, 7, 10], "numTrees": [5, 20]},
                "num_folds": 3,
            },
        },
    },
    "linear_regression": {
        "summary": "Spark ML linear regression, no grid",
        "value": {
            "name": "taxi-fare-linear",
            "framework": "spark_ml",
            "dataset": {
                "uri": "datasets/taxi/train.parquet",
                "features": ["trip_distance", "h_distance", "passenger_count", "hour"],
                "label": "fare_amount",
                "task": "regression",
            },
            "validation": {"uri": "datasets/taxi/eval.parquet"},
            "params": {"algorithm": "linear_regression", "regParam": 0.01},
        },
    },
    "random_forest_classifier": {
        "summary": "Spark ML random forest classifier (a binary label of the taxi sample)",
        "value": {
            "name": "taxi-weekend-rf",
            "framework": "spark_ml",
            "dataset": {
                "uri": "datasets/taxi/train.parquet",
                "features": ["hour", "trip_distance", "passenger_count"],
                "label": "is_weekend",
                "task": "classification",
                "num_classes": 2,
            },
            "params": {"algorithm": "random_forest", "numTrees": 20, "maxDepth": 5},
        },
    },
}

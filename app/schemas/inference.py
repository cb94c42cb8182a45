"""Wire models of ``POST /evaluate`` and ``POST /predict`` (API.md), and the V2 inference protocol."""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator
from typing_extensions import TypeAliasType

from app.schemas.body import Body, not_text
from app.schemas.models import ALIAS_PATTERN, VERSION_MAX
from app.schemas.train import ID_PATTERN, NAME_PATTERN, DatasetRef

MetricGroup = TypeAliasType("MetricGroup", Literal["classification", "roc", "regression"])
PREDICT_BATCH_EXAMPLE: dict[str, Any] = {
    "summary": "Batch: every row of a dataset, keyed by a column unique in it, written as parquet by a job",
    "description": "The key is what joins each prediction back to its row, so it must be unique: your data's id "
    "column. The shipped taxi sample has none, and `pickup_longitude` is unique in its eval.parquet (3,000 values "
    "for 3,000 rows); a key that repeats (`hour`) makes the job warn, with `repeated_keys` in its result.",
    "value": {"model": {"name": "taxi-fare-rf"},
              "dataset": {"uri": "datasets/taxi/eval.parquet", "key": "pickup_longitude"}},
}  # fmt: skip
"""Swagger's batch prediction (app/api/openapi.py shows it in place of app/api/routes/inference.py's own)."""


class ModelSelector(Body):
    """A model version (by number, by alias, or the newest), or a training checkpoint."""

    name: str | None = Field(None, pattern=NAME_PATTERN, examples=["taxi-fare"])
    version: int | None = Field(None, ge=1, le=VERSION_MAX)
    alias: str | None = Field(None, pattern=ALIAS_PATTERN, examples=["champion"])
    checkpoint: str | None = Field(None, pattern=ID_PATTERN, description="A checkpoint id instead of a model version.")

    _an_object = model_validator(mode="before")(not_text)

    @model_validator(mode="after")
    def _one_target(self) -> ModelSelector:
        if (self.name is None) == (self.checkpoint is None):
            raise ValueError("give a model name or a checkpoint id")
        if self.version is not None and self.alias is not None:
            raise ValueError("give a version or an alias, not both")
        if self.checkpoint is not None and (self.version is not None or self.alias is not None):
            raise ValueError("a checkpoint has no version or alias")
        return self


class EvaluationDataset(DatasetRef):
    """As a training dataset; features and label default to the model's."""


class EvaluateRequest(Body):
    model: ModelSelector
    dataset: EvaluationDataset
    metrics: list[MetricGroup] | None = Field(
        None, min_length=1, description="Default: classification + roc, or regression, by the model's task."
    )
    batch_size: int = Field(1024, ge=1, le=1_000_000)
    eval_workers: int | None = Field(
        None, ge=1, le=256, description="At most this many model copies per executor at once (DL4J evalNumWorkers)."
    )
    roc_steps: int = Field(32, ge=2, le=100_000, description="Thresholds of the ROC curve (DL4J's default 32).")
    exact_auc: bool = Field(False, description="Exact ROC/PR AUC from every distinct score (more memory).")
    top_k: list[Annotated[int, Field(ge=1, le=100_000)]] = Field(
        default_factory=lambda: [1, 5], min_length=1, max_length=10,
        description="Top-k accuracies (classification): each k at least 1; a k above the model's classes is left out.",
    )  # fmt: skip


class DataframeSplit(Body):
    columns: list[str]
    data: list[list[Any]]
    index: list[Any] | None = None

    @field_validator("columns")
    @classmethod
    def _each_once(cls, columns: list[str]) -> list[str]:
        twice = sorted(c for c, n in Counter(columns).items() if n > 1)  # (linear: this runs on the event loop)
        if twice:  # (the last one's value was taken without a word)
            raise ValueError(f"{', '.join(map(repr, twice))} named more than once: name each column once")
        return columns


class PredictRequest(Body):
    """Inline rows in one of MLflow's body formats (answered now), or a dataset (a batch job)."""

    model: ModelSelector
    dataframe_records: list[dict[str, Any]] | None = None
    dataframe_split: DataframeSplit | None = None
    instances: list[Any] | None = Field(None, description="Rows as lists (in the model's feature order) or objects.")
    inputs: Any | None = Field(None, description="Column-oriented: {column: [values]} or a list of rows.")
    dataset: DatasetRef | None = Field(None, description="Batch: predict every row of a dataset on the executors.")
    output_uri: str | None = Field(
        None,
        min_length=1,
        max_length=4096,
        description="Batch: where the parquet output goes: a new path (or file: URI) inside the data roots.",
    )
    batch_size: int = Field(1024, ge=1, le=1_000_000)
    params: dict[str, Any] | None = Field(
        None,
        description="MLflow's inference parameters, taken so that MLflow clients' bodies work; no model here has "
        "any, so they change nothing (as MLflow's scoring server ignores them for a model without a params schema).",
    )

    @model_validator(mode="after")
    def _one_input(self) -> PredictRequest:
        given = [
            k
            for k in ("dataframe_records", "dataframe_split", "instances", "inputs", "dataset")
            if getattr(self, k) is not None
        ]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of dataframe_records, dataframe_split, instances, inputs (answered now) or "
                f"dataset (a batch job); got {', '.join(given) or 'none'}"
            )
        if self.output_uri is not None and self.dataset is None:
            raise ValueError("output_uri goes with dataset")
        return self


class PredictedBy(BaseModel):
    """The model that answered ``POST /predict`` (app/api/routes/inference.py, ``_predict_now``): a model version
    (``checkpoint`` null), or a training checkpoint (``version`` null; ``name`` is its job's)."""

    name: str | None = Field(examples=["taxi-fare-xgboost"])
    version: int | None = Field(examples=[3])
    checkpoint: str | None = Field(description="The checkpoint's id, when `model.checkpoint` chose one.")


class PredictResponse(BaseModel):
    predictions: list[Any]
    probabilities: list[list[float]] | None = None
    class_index: list[int] | None = None
    model: PredictedBy


class InferTensor(BaseModel):
    name: str
    shape: list[int]
    datatype: str
    data: list[Any] = Field(default_factory=list, description="Row-major values (absent with binary tensor data).")
    parameters: dict[str, Any] | None = None


class V2ServerMetadata(BaseModel):
    name: str
    version: str
    extensions: list[str]


class V2TensorMetadata(BaseModel):
    name: str
    datatype: str = Field(examples=["FP32"])
    shape: list[int] = Field(description="-1: any size (the batch, a sequence's steps)")
    parameters: dict[str, Any] | None = Field(None, description="`features`: the input's columns, in order.")


class V2ModelMetadata(BaseModel):
    name: str
    versions: list[str]
    platform: str = Field(examples=["sparktrain_torch"])
    inputs: list[V2TensorMetadata] = Field(description="Empty for a model with categorical columns (`parameters`).")
    outputs: list[V2TensorMetadata]
    parameters: dict[str, Any] | None = Field(None, description="`v2_infer`: why infer refuses the model, if it does.")


class InferRequest(BaseModel):
    id: str | None = None
    parameters: dict[str, Any] | None = None
    inputs: list[InferTensor] = Field(min_length=1)
    outputs: list[dict[str, Any]] | None = None


_TAXI_ROW = [1, 2.1, -73.98, 40.75, 1, -73.96, 40.77, 9, 2, 0, 2.7]
INFER_EXAMPLES: dict[str, dict[str, Any]] = {
    "rows": {
        "summary": "Whole rows: one tensor [rows, n], the features in the model metadata's order",
        "description": "Two rows of the taxi-fare models' 11 features (`GET /v2/models/{name}` lists them under "
        "`parameters.features`); `[n]` is one row.",
        "value": {"id": "fares-1", "inputs": [{"name": "input", "shape": [2, 11], "datatype": "FP32",
                                               "data": [_TAXI_ROW, [2, 7.5, -73.99, 40.73, 1, -73.87, 40.77, 18, 4,
                                                                    0, 11.2]]}]},
    },
    "features": {
        "summary": "One tensor per feature, named after it, each [rows]",
        "value": {"inputs": [{"name": name, "shape": [1], "datatype": "INT32" if isinstance(value, int) else "FP64",
                              "data": [value]}
                             for name, value in zip(
                                 ("passenger_count", "trip_distance", "pickup_longitude", "pickup_latitude",
                                  "rate_code", "dropoff_longitude", "dropoff_latitude", "hour", "day_of_week",
                                  "is_weekend", "h_distance"), _TAXI_ROW, strict=True)]},
    },
    "image": {
        "summary": "The digits CNN: one 8x8 image, asking for its probabilities only",
        "value": {"inputs": [{"name": "input", "shape": [1, 8, 8], "datatype": "FP32", "data": [0.0] * 64}],
                  "outputs": [{"name": "probabilities"}]},
    },
}  # fmt: skip
"""Swagger's V2 ``infer`` bodies (app/api/routes/v2.py: its body is read by hand, so the examples are given there)."""


class InferResponse(BaseModel):
    model_name: str
    model_version: str | None = None
    id: str | None = None
    parameters: dict[str, Any] | None = None
    outputs: list[InferTensor]

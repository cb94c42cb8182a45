"""Wire models of the model registry."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator
from typing_extensions import TypeAliasType

from app.schemas.body import Body

VERSION_MAX = 2**31 - 1  # model_versions.version is a 32-bit integer column
ALIAS_PATTERN = r"^[A-Za-z][A-Za-z0-9._-]{0,99}$"
TAG_KEY_MAX, TAG_VALUE_MAX = 250, 5000  # MLflow's limits for registry tags
# A key is a path segment: no '/', and not only dots ('.' and '..' are removed from a URL by HTTP clients, so
# DELETE /models/m/tags/.. would reach DELETE /models/m)
TAG_KEY_PATTERN = r"^(?!\.+$)[A-Za-z0-9_.-](?:[A-Za-z0-9_. -]{0,248}[A-Za-z0-9_.-])?$"
TAG_KEY_RULE = (
    f"1 to {TAG_KEY_MAX} letters, digits, '_', '.', '-' or spaces (no space first or last), not only dots: a key is "
    "a path segment, so no '/'"
)
TAG_FILTERS_MAX = 10
"""``GET /models?tag=``: at most this many filters (each is a subquery: 100 of them took 21 s on PostgreSQL)."""
Framework = TypeAliasType("Framework", Literal["torch", "xgboost", "spark_ml"])
"""The families a job trains (workers/families.py, ``FRAMEWORKS``); a job and a model version say which (a named
type: one ``Framework`` schema in the OpenAPI document, for requests and answers)."""
ArtifactFormat = TypeAliasType("ArtifactFormat", Literal["archive", "mlflow", "onnx"])
ARTIFACT_FORMATS: tuple[str, ...] = get_args(ArtifactFormat.__value__)
ModelVersionStatus = TypeAliasType(
    "ModelVersionStatus", Annotated[Literal["READY"], WithJsonSchema({"type": "string", "enum": ["READY"]})]
)
"""A version is registered READY (app/services/models.py, ``register_version``; the column's default) and stays so:
a deleted version's row is gone. An ``enum`` in the document, not a ``const``: a generated client's enum, which a
status added later extends."""
FAMILY_FORMATS: dict[str, tuple[str, ...]] = {
    "torch": ("archive", "mlflow", "onnx"),
    "xgboost": ("archive", "mlflow"),
    "spark_ml": ("archive", "mlflow"),
}


class TensorSpec(BaseModel):
    dtype: str = Field(examples=["float32"])
    shape: list[int] = Field(description="-1: any size (the batch, a sequence's steps)", examples=[[-1, -1, 3]])


def _null(value: object) -> bool:
    return value is None


class ColumnSpec(BaseModel):
    """One input or output of a model, in MLflow's schema format: a named column, or (``type: tensor``) a tensor."""

    model_config = ConfigDict(populate_by_name=True)

    name: str | None = Field(None, examples=["trip_distance"])
    type: str = Field(
        description="double, long, boolean, string, array (of ``items``) or tensor (``tensor-spec``)",
        examples=["double"],
    )
    # Members a column does not have are left out, as MLflow writes them (``mlflow.types.Schema.from_json`` refuses
    # ``"items": null``, an unexpected keyword).
    items: dict[str, Any] | None = Field(None, description="The element type of an array column.", exclude_if=_null)
    required: bool | None = Field(None, exclude_if=_null)
    tensor_spec: TensorSpec | None = Field(None, alias="tensor-spec", exclude_if=_null)
    categorical: bool | None = Field(
        None,
        description="A categorical feature: one-hot encoded by the model's categories (dataset.categorical).",
        exclude_if=_null,
    )


class ModelSignature(BaseModel):
    """What a model takes and answers. ``POST /predict``, V2 ``infer`` and batch prediction check requests against
    ``inputs`` before running anything (a missing, extra or mistyped column is a 422 naming it)."""

    inputs: list[ColumnSpec]
    outputs: list[ColumnSpec] = Field(description="What the model's MLflow python_function answers.")
    recorded: bool = Field(
        description="true: recorded from the training data's column types when the model was trained; false: a "
        "version trained before signatures were recorded, whose signature is derived from its feature names (every "
        "feature a number)"
    )


class ModelVersionRead(BaseModel):
    # Every member is in every answer: required in the document (a generated client's field is not ``Unset``).
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    name: str
    version: int
    framework: Framework
    status: ModelVersionStatus
    artifact_uri: str
    metrics: dict[str, Any]
    params: dict[str, Any] = Field(
        description="What the version was trained with (the family's parameters, features, label, classes, an input "
        "example). The signature the model was recorded with is `signature`, not repeated here; only a model with "
        "categorical features keeps its MLflow signature (of the one-hot columns) here too."
    )
    job_id: str | None
    created_at: datetime
    signature: ModelSignature | None = None
    formats: list[ArtifactFormat] = Field(
        default_factory=list, description="What GET .../artifact?format= can download for this version."
    )
    aliases: list[str] = Field(default_factory=list, description="The model's aliases that name this version.")
    tags: dict[str, str] = Field(default_factory=dict, description="The version's tags (PUT .../tags/{key}).")


class ModelRead(BaseModel):
    # Every member is in every answer: required in the document (a generated client's field is not ``Unset``).
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    name: str
    owner: str
    created_at: datetime
    latest_version: int | None
    aliases: dict[str, int] = {}
    tags: dict[str, str] = Field(default_factory=dict, description="The model's tags (PUT /models/{name}/tags/{key}).")
    versions: list[ModelVersionRead]


class ModelPage(BaseModel):
    items: list[ModelRead]
    next_cursor: str | None = Field(
        None, description="Pass as `cursor` for the next page (the models after these by name); null on the last page."
    )


class TagBody(Body):
    """``PUT /models/{name}/tags/{key}`` (and a version's): the tag's value, any text up to 5,000 characters."""

    value: str = Field(max_length=TAG_VALUE_MAX, examples=["fraud-team"])

    @field_validator("value")
    @classmethod
    def _text(cls, value: str) -> str:
        # PostgreSQL's text holds no NUL and no lone surrogate, and no other control character is one a person meant
        bad = next((c for c in value if _unstorable(c)), None)
        if bad is not None:
            raise ValueError(f"holds {bad!r}; a tag's value is text: no control character but tabs and line breaks")
        return value


class ModelTagRead(BaseModel):
    """What ``PUT /models/{name}/tags/{key}`` answers: the tag as set."""

    name: str
    key: str
    value: str


class VersionTagRead(ModelTagRead):
    """What ``PUT /models/{name}/versions/{version}/tags/{key}`` answers: the tag as set."""

    version: int


class AliasRead(BaseModel):
    """What ``PUT /models/{name}/aliases/{alias}`` answers: the version the alias now names."""

    name: str
    alias: str
    version: int


TAG_EXAMPLES: dict[str, dict[str, Any]] = {
    "team": {"summary": "Set the tag to a value", "value": {"value": "fraud-team"}},
    "empty": {"summary": "A tag whose value is empty: a label alone", "value": {"value": ""}},
}


def _unstorable(char: str) -> bool:
    code = ord(char)
    return (code < 32 and char not in "\t\n\r") or code == 127 or 0xD800 <= code <= 0xDFFF

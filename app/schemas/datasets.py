"""Wire models of registered datasets (``POST /datasets``, ``GET /datasets``, ``GET /datasets/{id}``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.schemas.body import Body
from app.schemas.train import NAME_PATTERN


class DatasetCreate(Body):
    uri: str = Field(
        min_length=1,
        max_length=4096,
        description="Parquet file or directory, CSV, or JSON lines, inside the data roots (or an allowed remote URI).",
        examples=["datasets/taxi/train.parquet"],
    )
    name: str | None = Field(None, pattern=NAME_PATTERN)
    format: Literal["parquet", "csv", "json"] | None = None
    options: dict[str, str] = Field(
        default_factory=dict,
        description="Reader options: for CSV `header` (default true), `sep`, `quote`, `escape`, `nullValue`, ...",
        examples=[{"sep": ";", "header": "true"}],
    )
    bad_rows: Literal["fail", "skip"] = Field(
        "fail", description="Malformed lines of CSV / JSON files: refuse the registration (default) or count them."
    )


class ColumnRead(BaseModel):
    name: str
    type: str
    nullable: bool
    not_numbers: int | None = Field(
        None,
        description="CSV / JSON: how many values of the column do not parse as numbers (0 for a numeric column; "
        "a string column declared numeric in a training request trains with these rows as bad rows); "
        "null where not counted (parquet, whose types are the file's own).",
    )


class DatasetRead(BaseModel):
    id: str
    name: str | None
    uri: str
    resolved_uri: str
    format: str
    options: dict[str, str]
    schema_: list[ColumnRead] = Field(alias="schema", serialization_alias="schema")
    row_count: int | None
    sample: list[dict[str, Any]]
    bad_rows: int = 0
    owner: str
    created_at: datetime
    summary: Literal["complete", "pending", "failed"] = Field(
        "complete",
        description="Whether `schema`, `row_count`, `sample` and `bad_rows` are read. `pending`: data the driver "
        "does not read itself (a remote URI, reader options, partition values Spark types, large text files) is "
        "registered at once, with `schema` and `sample` empty and `row_count` null, and Spark reads them after the "
        "answer; `failed`: that read failed, `summary_error` says why.",
    )
    summary_error: str | None = None
    warnings: list[str] = Field(
        default_factory=list,
        description="What the data will not be read as it looks: a CSV that writes a quote inside a quoted field by "
        'doubling it (pandas, Excel), which Spark reads only with `options.escape` set to `"`.',
    )

    model_config = ConfigDict(populate_by_name=True)


class DatasetPage(BaseModel):
    items: list[DatasetRead]
    next_cursor: str | None = Field(
        None, description="Pass as `cursor` for the next page (older datasets); null on the last page."
    )

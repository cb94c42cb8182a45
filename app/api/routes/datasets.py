"""Registered datasets: a URI Spark can read, with its schema, row count and a few sample rows (read on the driver,
or by Spark after the answer: ``summary``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from fastapi import APIRouter, Query, Response, status

from app.api.deps import CallerDep, RuntimeDep, SessionDep
from app.schemas.datasets import ColumnRead, DatasetCreate, DatasetPage, DatasetRead
from app.services import access, spaces
from app.services.datasets import registry

if TYPE_CHECKING:
    from app.db.models import Dataset

router = APIRouter(tags=["datasets"])


def to_dataset_read(row: Dataset) -> DatasetRead:
    return DatasetRead(
        id=row.id,
        name=row.name,
        uri=row.uri,
        resolved_uri=row.resolved_uri,
        format=row.format,
        options=row.options,
        schema_=[ColumnRead(**c) for c in row.schema],
        row_count=row.row_count,
        sample=row.sample,
        bad_rows=row.bad_rows,
        owner=row.owner,
        created_at=row.created_at,
        summary=row.summary,
        summary_error=row.summary_error,
        warnings=list(row.warnings or []),
    )


@router.post(
    "/datasets",
    response_model=DatasetRead,
    status_code=status.HTTP_201_CREATED,
    summary="Register a dataset: its schema, row count and sample rows",
    description="Local parquet, CSV and JSON lines are read on the driver, no Spark job in the request. Data the "
    "driver does not read itself (a remote URI, reader options, partition values Spark types, large text files) is "
    "registered at once with `summary` `pending` and read by Spark after the answer: `GET /datasets/{id}` shows "
    "it `complete`, or `failed` with `summary_error`. Afterwards a request may name the dataset by its `id` in "
    "`dataset.uri`.",
)
def register(
    body: DatasetCreate, session: SessionDep, rt: RuntimeDep, caller: CallerDep, response: Response
) -> DatasetRead:
    settings = spaces.for_caller(rt.settings, caller)
    access.check_registration(session=session, uri=body.uri, caller=caller, settings=settings)
    row = registry.register_dataset(session=session, spark=rt.spark, settings=settings, body=body, owner=caller.owner)
    session.commit()
    if row.summary == registry.PENDING:
        dataset_id = row.id

        def read() -> None:
            registry.read_summary(db=rt.db, spark=rt.spark, dataset_id=dataset_id, stopping=lambda: rt.jobs.stopping)

        rt.after_answer(read, f"reading the summary of dataset {dataset_id}")
    response.headers["Location"] = f"/datasets/{row.id}"
    return to_dataset_read(row)


@router.get(
    "/datasets",
    response_model=DatasetPage,
    summary="Registered datasets, newest first",
    description="At most `limit` datasets; `next_cursor` (null on the last page) passed as `cursor` gives the next "
    "ones, as `GET /jobs` pages. A cursor this service did not issue is a 400.",
    responses={400: {"description": "A `cursor` this service did not issue."}},
)
def list_datasets(
    session: SessionDep,
    caller: CallerDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> DatasetPage:
    rows, next_cursor = registry.page_datasets(session=session, limit=limit, cursor=cursor, owner=caller.scope)
    return DatasetPage(items=[to_dataset_read(r) for r in rows], next_cursor=next_cursor)


@router.get("/datasets/{dataset_id}", response_model=DatasetRead, summary="One dataset: schema, rows, samples")
def get_dataset(dataset_id: str, session: SessionDep, caller: CallerDep) -> DatasetRead:
    return to_dataset_read(registry.get_dataset(session=session, dataset_id=dataset_id, owner=caller.scope))

"""POST /evaluate and POST /predict (inline rows answered now; a dataset queues a batch job)."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Body, Request, Response, status
from fastapi.concurrency import run_in_threadpool

from app.api.deps import CallerDep, IdempotencyKey, RuntimeDep
from app.api.job_views import to_job_read
from app.api.json_body import OffLoopJsonRoute, Shape
from app.core.auth import Caller
from app.schemas.inference import PREDICT_BATCH_EXAMPLE, EvaluateRequest, PredictRequest, PredictResponse
from app.schemas.jobs import JobRead
from app.services import inference, online, spaces


class _InferenceRoute(OffLoopJsonRoute):
    """Large bodies parsed off the event loop (app/api/json_body.py); an inline ``/predict`` over
    SPARKTRAIN_MAX_PREDICT_ROWS is a 413 before its rows are parsed (2,000,000 rows took seconds to parse first)."""

    def check_raw(self, request: Request, shape: Shape) -> None:
        if self.path != "/predict":
            return
        settings = request.app.state.runtime.settings
        for where in (("instances",), ("dataframe_records",), ("dataframe_split", "data"), ("inputs",)):
            rows = shape.length(*where)
            if rows is not None and rows > settings.max_predict_rows:
                online.check_row_limit(rows, settings, ".".join(where))


router = APIRouter(tags=["inference"], route_class=_InferenceRoute)

EVALUATE_EXAMPLES: dict[str, dict[str, Any]] = {
    "classification": {
        "summary": "Accuracy, per-class precision/recall/F1, confusion matrix and ROC of the digits CNN, one pass",
        "value": {
            "model": {"name": "digits-cnn"},
            "dataset": {"uri": "datasets/digits/test.parquet"},
            "metrics": ["classification", "roc"],
        },
    },
    "regression": {
        "summary": "MSE, MAE, RMSE and R² of a taxi-fare model on the evaluation data",
        "value": {
            "model": {"name": "taxi-fare-rf", "alias": "champion"},
            "dataset": {"uri": "datasets/taxi/eval.parquet"},
        },
    },
}
PREDICT_EXAMPLES: dict[str, dict[str, Any]] = {
    "records": {
        "summary": "Online, MLflow dataframe_records",
        "value": {
            "model": {"name": "taxi-fare-rf"},
            "dataframe_records": [
                {"passenger_count": 1, "trip_distance": 2.1, "pickup_longitude": -73.98, "pickup_latitude": 40.75,
                 "rate_code": 1, "dropoff_longitude": -73.96, "dropoff_latitude": 40.77, "hour": 9,
                 "day_of_week": 2, "is_weekend": 0, "h_distance": 2.7}
            ],
        },
    },
    "batch": PREDICT_BATCH_EXAMPLE,  # keyed by a column whose values are unique
}  # fmt: skip


def _queued(job: Any, response: Response) -> JobRead:
    response.status_code = status.HTTP_202_ACCEPTED
    response.headers["Location"] = f"/jobs/{job.id}"
    return to_job_read(job)


@router.post(
    "/evaluate",
    response_model=JobRead,
    status_code=status.HTTP_202_ACCEPTED,
    summary="Queue an evaluation: every requested metric group in one pass over the data",
)
def evaluate(
    request: Annotated[EvaluateRequest, Body(openapi_examples=EVALUATE_EXAMPLES)],
    rt: RuntimeDep,
    caller: CallerDep,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> JobRead:
    job, _ = inference.submit_evaluation(
        db=rt.db,
        settings=spaces.for_caller(rt.settings, caller),
        spark=rt.spark,
        enqueue=rt.enqueue,
        request=request,
        owner=caller.owner,
        idempotency_key=idempotency_key,
        caller=caller,
    )
    return _queued(job, response)


@router.post(
    "/predict",
    response_model=PredictResponse | JobRead,
    summary="Predict: inline rows now (200), or a dataset as a batch job (202)",
    responses={
        200: {"description": "Inline rows: the predictions.", "model": PredictResponse},
        202: {"description": "A dataset: the queued batch job.", "model": JobRead},
    },
)
async def predict(
    request: Annotated[PredictRequest, Body(openapi_examples=PREDICT_EXAMPLES)],
    rt: RuntimeDep,
    caller: CallerDep,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> Any:
    if request.dataset is not None:
        return await run_in_threadpool(_submit_batch, request, rt, caller, idempotency_key, response)
    if _answer_in_loop(request, rt, caller):
        # A loaded torch model answers a small body in well under a millisecond of CPU: a hop to the thread
        # pool would cost more than it saves. Anything that may wait (a first load, Spark ML) goes to the pool.
        return _predict_now(request, rt, caller)
    return await run_in_threadpool(_predict_now, request, rt, caller)


SMALL_BODY_ROWS = 256


def _answer_in_loop(request: PredictRequest, rt: Any, caller: Caller) -> bool:
    key = (request.model.name, request.model.version, request.model.alias, request.model.checkpoint)
    model = rt.resolved_models.peek(key, owner=caller.scope)
    if model is None or model.framework not in ("torch", "xgboost") or model.uri not in rt.model_cache:
        return False
    rows = (
        request.instances
        or request.dataframe_records
        or (request.dataframe_split.data if request.dataframe_split else None)
    )
    return rows is not None and len(rows) <= SMALL_BODY_ROWS


def _submit_batch(request: PredictRequest, rt: Any, caller: Caller, key: str | None, response: Response) -> JobRead:
    job, _ = inference.submit_prediction(
        db=rt.db,
        settings=spaces.for_caller(rt.settings, caller),
        spark=rt.spark,
        enqueue=rt.enqueue,
        request=request,
        owner=caller.owner,
        idempotency_key=key,
        caller=caller,
    )
    return _queued(job, response)


def _predict_now(request: PredictRequest, rt: Any, caller: Caller) -> Response:
    model = rt.resolved_models.get(rt.db, request.model, owner=caller.scope)
    rows = online.inline_rows(request, model)
    where = online.rows_loc(request)
    online.check_row_limit(len(rows), rt.settings, where)
    if model.card.get("sequence"):
        out = online.predict_sequences(model=model, rows=rows, cache=rt.model_cache, loc=where)
    else:
        x = online.feature_matrix(rows, model, where)
        out = online.predict_rows(model=model, x=x, cache=rt.model_cache, spark=rt.spark, as_lists=False)
    body: dict[str, Any] = {
        "predictions": out.get("label", out.get("prediction")),
        "model": {"name": model.name, "version": model.version, "checkpoint": model.checkpoint_id},
    }
    if "probabilities" in out:
        body["probabilities"] = out["probabilities"]
        body["class_index"] = out["class_index"]
    # orjson writes numpy arrays directly: the per-request cost that grows with the rows
    return Response(orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY), media_type="application/json")

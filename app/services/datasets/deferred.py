"""Checks a request (``POST /train``, ``/tune``, ``/evaluate``, batch ``/predict``) leaves to its job, because they
need a Spark job to read the data.

A Spark job started from a request waits for a free task slot, and a training job's barrier stage holds every slot
while it trains (app/services/datasets/schema.py). So what the request cannot read on the driver (the schema of a
remote URI, of parquet with reader options, of CSV / JSON with options the sample reader does not know, of
partition values whose type Spark decides; the classes or an array's width of such data) is not read in the
request: planning runs under :func:`request_without_spark`, and the code that would start a Spark job calls
:func:`before_spark_job` first, which raises :class:`DeferredCheck` there. The request then stores a
:class:`workers.plans.DeferredPlan` (:func:`plan_or_defer`), and the job plans the request with Spark before it
runs: the same checks, failing with the same ``INVALID_REQUEST`` message the request would have answered with
(app/jobs/dispatch.py). ``POST /datasets`` likewise reads on the driver what it can, and leaves the rest to a reader
after the answer (app/services/datasets/registry.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")
D = TypeVar("D")
_IN_REQUEST: ContextVar[bool] = ContextVar("sparktrain_plan_without_spark", default=False)


class DeferredCheck(Exception):
    """Planning needs a Spark job (``what`` it would read), and runs where none may start."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


@contextmanager
def request_without_spark() -> Iterator[None]:
    """Plan without starting a Spark job: what needs one raises :class:`DeferredCheck`."""
    token = _IN_REQUEST.set(True)
    try:
        yield
    finally:
        _IN_REQUEST.reset(token)


def in_request() -> bool:
    """Whether planning runs in a request (where a Spark job may not start)."""
    return _IN_REQUEST.get()


def before_spark_job(what: str) -> None:
    """Called before planning starts a Spark job that reads the data; in a request, the check is deferred."""
    if _IN_REQUEST.get():
        raise DeferredCheck(what)


def plan_or_defer(plan: Callable[[], T], defer: Callable[[str], D]) -> T | D:
    """``plan()`` without a Spark job; when it needs one, ``defer(what it would read)``: the plan of a job that
    checks the rest itself (its data-independent checks made now, their errors still 422s)."""
    try:
        with request_without_spark():
            return plan()
    except DeferredCheck as deferred:
        return defer(deferred.what)

"""Checks a ``POST /train`` request leaves to its job, because they need a Spark job to read the data.

A Spark job started from a request waits for a free task slot, and a training job's barrier stage holds every slot
while it trains (app/services/datasets/schema.py). So what the request cannot read on the driver (the schema of a
remote URI, of parquet with reader options, of CSV / JSON with options the sample reader does not know, of
partition values whose type Spark decides; the classes or an array's width of such data) is not read in the
request: planning runs under :func:`request_without_spark`, and the code that would start a Spark job calls
:func:`before_spark_job` first, which raises :class:`DeferredCheck` there. The request then stores a
:class:`workers.plans.DeferredPlan`, and the job plans the request with Spark before it trains: the same checks,
failing with the same ``INVALID_REQUEST`` message the request would have answered with (app/jobs/dispatch.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

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


def before_spark_job(what: str) -> None:
    """Called before planning starts a Spark job that reads the data; in a request, the check is deferred."""
    if _IN_REQUEST.get():
        raise DeferredCheck(what)

"""Prometheus metrics of one app (``GET /metrics``): what this process measures as requests pass (HTTP latency by
route and status, online-predict latency) and what a scrape reads when it happens (jobs from the database, the
model cache, the cluster's executors, the event streams).

Each app has its own registry (tests run several apps in one process). Job figures come from the database, so every
driver sharing it reports the same job counts; HTTP and model-cache figures are this process's own.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.services import monitoring

ONLINE_PREDICT_ROUTES = frozenset({"/predict", "/v2/models/{name}/infer", "/v2/models/{name}/versions/{version}/infer"})
CLUSTER_TTL_S = 5.0
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class Telemetry:
    """The registry of one app and the measures its middleware feeds."""

    def __init__(self) -> None:
        disable_created_metrics()  # no *_created series: they double the output and nothing here reads them
        self.registry = CollectorRegistry(auto_describe=False)
        self.http = Histogram(
            "sparktrain_http_request_duration_seconds",
            "HTTP requests by method, route template and status; the time until the response ended (an event stream's "
            "whole life)",
            ["method", "route", "status"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.predict = Histogram(
            "sparktrain_online_predict_duration_seconds",
            "Online predictions answered (200) by POST /predict and the V2 infer routes, by route",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )

    def install(self, source: Callable[[], Any]) -> None:
        """Read jobs, the model cache, the cluster and the event hub from ``source()`` (the app) at each scrape."""
        self.registry.register(ServiceCollector(source))


class HttpMetrics:
    """Pure ASGI middleware: times every HTTP request and counts it by route template (never the raw path, which
    would make a series per job id) and status."""

    def __init__(self, app: ASGIApp, *, telemetry: Telemetry) -> None:
        self.app, self.telemetry = app, telemetry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def record_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, record_status)
        finally:
            elapsed = time.perf_counter() - started
            route = route_template(scope)
            method = scope["method"] if scope["method"] in KNOWN_METHODS else "other"  # a client names any method
            self.telemetry.http.labels(method, route, str(status)).observe(elapsed)
            if status == 200 and route in ONLINE_PREDICT_ROUTES and scope["method"] == "POST":
                self.telemetry.predict.labels(route).observe(elapsed)


def route_template(scope: Scope) -> str:
    """The path template that served (or would have served) the request: ``/jobs/{job_id}``, a mount's prefix, or
    ``<unmatched>``. A request refused before routing (a 401) is matched against the documented paths."""
    route = scope.get("route")
    if route is not None and hasattr(route, "path"):
        return str(route.path)
    app = scope.get("app")
    path = scope.get("path", "")
    for template, pattern in _templates(app):
        if pattern.fullmatch(path):
            return template
    for candidate in getattr(getattr(app, "router", None), "routes", []):
        if isinstance(candidate, Mount) and (path == candidate.path or path.startswith(candidate.path + "/")):
            return candidate.path
        if isinstance(candidate, Route) and candidate.path_regex.fullmatch(path):  # outside the schema: /openapi.json
            return candidate.path
    return "<unmatched>"


def _templates(app: Any) -> list[tuple[str, re.Pattern[str]]]:
    cached = getattr(getattr(app, "state", None), "route_patterns", None)
    if cached is None and app is not None:
        cached = [
            (template, re.compile(re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template))))
            for template in app.openapi().get("paths", {})
        ]
        app.state.route_patterns = cached
    return cached or []


class ServiceCollector(Collector):
    """Reads the figures that live outside this process's counters, at scrape time."""

    def __init__(self, source: Callable[[], Any]) -> None:
        self.source = source
        self._cluster: tuple[float, list[Metric]] = (0.0, [])

    def collect(self) -> Iterable[Metric]:
        app = self.source()
        rt = getattr(app.state, "runtime", None)
        if rt is None:  # not started yet
            return
        read = monitoring.job_figures(rt.db)  # None while the database is away: the driver's own figures still go out
        if read is not None:
            counts, durations, live = read
            yield from _job_metrics(counts, durations)
            yield from _torch_metrics(live)
        yield GaugeMetricFamily(
            "sparktrain_database_up",
            "1 when the database answered this scrape; 0: it did not, and the job figures (read there) are left out",
            value=0 if read is None else 1,
        )
        cache = rt.model_cache
        yield CounterMetricFamily(
            "sparktrain_model_cache_hits", "Online-predict model lookups answered from the cache", value=cache.hits
        )
        yield CounterMetricFamily(
            "sparktrain_model_cache_misses", "Online-predict model lookups that loaded the model", value=cache.misses
        )
        yield GaugeMetricFamily("sparktrain_model_cache_models", "Models loaded in the cache", value=len(cache))
        hub = getattr(app.state, "events", None)
        if hub is not None:
            yield GaugeMetricFamily("sparktrain_sse_clients", "Open event streams on this driver", value=hub.clients)
            yield GaugeMetricFamily(
                "sparktrain_sse_feeds", "Jobs this driver reads events of (one reader each)", value=len(hub.feeds)
            )
        yield from self._cluster_metrics(rt)

    def _cluster_metrics(self, rt: Any) -> list[Metric]:
        """Executors, cores, memory and GPUs from Spark's status store, read at most every CLUSTER_TTL_S (each read is
        a few calls into the JVM)."""
        read_at, metrics = self._cluster
        if metrics and time.monotonic() - read_at < CLUSTER_TTL_S:
            return metrics
        from workers import cluster

        executors = cluster.executors(rt.spark)
        workers = [e for e in executors if e["id"] != "driver"] or executors
        gpus = cluster.gpu_addresses(rt.spark)
        metrics = [
            GaugeMetricFamily(
                "sparktrain_executors", "Spark executors (the driver itself on a local master)", len(workers)
            ),
            GaugeMetricFamily("sparktrain_executor_cores", "Cores of the executors", sum(e["cores"] for e in workers)),
            GaugeMetricFamily(
                "sparktrain_executor_memory_bytes",
                "Storage memory of the executors",
                sum(e["max_memory_bytes"] for e in workers),
            ),
            GaugeMetricFamily("sparktrain_gpus", "GPU addresses Spark knows of", sum(len(v) for v in gpus.values())),
            GaugeMetricFamily("sparktrain_task_slots", "Tasks that can run at once", cluster.task_slots(rt.spark)),
        ]
        self._cluster = (time.monotonic(), metrics)
        return metrics


def _job_metrics(
    counts: list[tuple[str, str, str, int]], durations: dict[tuple[str, str], monitoring.DurationHistogram]
) -> Iterable[Metric]:
    jobs = GaugeMetricFamily(
        "sparktrain_jobs",
        "Jobs in the database by type, family (framework) and state",
        labels=["type", "family", "state"],
    )
    queued = 0
    for job_type, fam, state, n in counts:
        jobs.add_metric([job_type, fam, state], n)
        queued += n if state == "QUEUED" else 0
    yield jobs
    yield GaugeMetricFamily("sparktrain_queue_depth", "Jobs waiting for a driver (QUEUED)", value=queued)
    hist = HistogramMetricFamily(
        "sparktrain_job_duration_seconds",
        "Finished jobs from start to end, by type and family",
        labels=["type", "family"],
    )
    bounds = [str(b) for b in monitoring.DURATION_BUCKETS] + ["+Inf"]
    for (job_type, fam), h in sorted(durations.items()):
        hist.add_metric([job_type, fam], buckets=list(zip(bounds, h.buckets, strict=True)), sum_value=h.total)
    yield hist


def _torch_metrics(live: list[monitoring.TorchLive]) -> Iterable[Metric]:
    specs = (
        ("samples_per_s", "sparktrain_torch_samples_per_second", "Samples per second of a running torch job (workers)"),
        ("tau", "sparktrain_torch_tau", "Threshold τ of a running torch job (mean over workers)"),
        ("sparsity", "sparktrain_torch_sparsity", "Fraction of parameters sent per step (mean over workers)"),
        ("wire_bytes_per_s", "sparktrain_torch_wire_bytes_per_second", "Bytes a running torch job's workers send"),
    )
    for attr, name, doc in specs:
        family = GaugeMetricFamily(name, doc, labels=["job_id", "name"])
        for job in live:
            value = getattr(job, attr)
            if value is not None:
                family.add_metric([job.job_id, job.name or ""], value)
        yield family

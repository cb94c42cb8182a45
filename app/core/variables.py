"""``SPARKTRAIN_*`` environment variables that are not settings: a misspelt setting (``SPARKTRAIN_DATABSE_URL``)
is otherwise ignored without a word, and the driver runs on the default it was meant to replace."""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from app.core.settings import Settings

OTHER_VARIABLES = frozenset(
    {
        "SPARKTRAIN_URL",  # the CLI's service address
        "SPARKTRAIN_API_KEY",  # the CLI's key
        "SPARKTRAIN_DIRECT_IO",  # executor side: checkpoint writes (workers/training/torch/tensorfile.py)
        "SPARKTRAIN_NATIVE_CODEC",  # executor side: the compiled codec (workers/codecs/native.py)
        "SPARKTRAIN_NATIVE_CACHE",
        "SPARKTRAIN_KEEP_HEAP",  # executor side: workers/training/torch/heap.py
        "SPARKTRAIN_REQUIRE_SERVICES",  # the test suite's
        "SPARKTRAIN_TEST_REDIS",
        "SPARKTRAIN_TEST_PG",
        "SPARKTRAIN_WORKER_CORES",  # docker-compose.yml's Spark worker
        "SPARKTRAIN_WORKER_MEMORY",
        "SPARKTRAIN_GPU_WORKER_CORES",
        "SPARKTRAIN_GPU_WORKER_MEMORY",
        "SPARKTRAIN_GPU_WORKER_1_DEVICE",
        "SPARKTRAIN_GPU_WORKER_2_DEVICE",
    }
)
"""Variables of the same prefix read by other parts (the CLI, executors, tests, the compose file)."""


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """A line for each ``SPARKTRAIN_*`` variable that is neither a setting nor one of :data:`OTHER_VARIABLES`
    (names compared as the settings read them: in any case), with the setting it most resembles."""
    settings = sorted(f"SPARKTRAIN_{name.upper()}" for name in Settings.model_fields)
    known = set(settings) | OTHER_VARIABLES
    out = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith("SPARKTRAIN_") or upper in known:
            continue
        close = difflib.get_close_matches(upper, settings, n=1, cutoff=0.75)
        hint = f" (did you mean {close[0]}?)" if close else " (docs/configuration.md lists the settings)"
        out.append(f"{name} is not a setting, and is ignored{hint}")
    given = {name.upper(): value for name, value in environ.items()}
    if given.get("SPARKTRAIN_API_KEY", "").strip() and not given.get("SPARKTRAIN_API_KEYS", "").strip():
        out.append("SPARKTRAIN_API_KEY is the CLI's key and configures nothing here: the driver's keys are "
                   "SPARKTRAIN_API_KEYS (key:owner or key:owner:admin, comma-separated); without them every "
                   "request is allowed")  # fmt: skip
    return out

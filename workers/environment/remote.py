"""What every executor reports about its Python environment (executor-side: stdlib only, torch when asked).

Nothing here knows Spark: the barrier task's address comes from the function the driver ships
(:func:`workers.environment.driver.shipped_function`). Each task answers for itself and waits for no other task: the
driver collects the answers (no Spark ``allGather``, whose cancel can crash an executor: see that module).

Versions come from package metadata, so nothing heavy is imported to read them; CUDA availability needs torch
and is asked only by families that train with torch.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Iterator
from importlib import metadata
from typing import Any

DISTRIBUTIONS = {"pyspark": ("pyspark",), "torch": ("torch",), "xgboost": ("xgboost", "xgboost-cpu"),
                 "pyarrow": ("pyarrow",), "numpy": ("numpy",)}  # fmt: skip


def describe(libraries: tuple[str, ...], *, cuda: bool) -> dict[str, Any]:
    """This process's python, the libraries' versions (None when missing) and, with ``cuda``, torch's CUDA."""
    import workers

    env: dict[str, Any] = {"python": platform.python_version(), "libraries": {}, "code": workers.__path__[0]}
    for name in ("pyspark", *libraries):
        env["libraries"][name] = None
        for dist in DISTRIBUTIONS.get(name, (name,)):
            try:
                env["libraries"][name] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    if cuda and env["libraries"].get("torch"):
        import torch

        env["cuda"] = bool(torch.cuda.is_available())
        env["cuda_devices"] = int(torch.cuda.device_count()) if env["cuda"] else 0
    return env


def answer(libraries: tuple[str, ...], cuda: bool, *, address: str) -> Iterator[str]:
    """One barrier task's part: this process (at ``address``) described, as one JSON line."""
    yield json.dumps({**describe(libraries, cuda=cuda), "executor": address})

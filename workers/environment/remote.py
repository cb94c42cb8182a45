"""What every executor reports about its Python environment (executor-side: stdlib only, torch when asked).

Versions come from package metadata, so nothing heavy is imported to read them; CUDA availability needs torch
and is asked only by families that train with torch.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Callable, Iterable, Iterator
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


def gather(libraries: tuple[str, ...], cuda: bool) -> Callable[[Iterable[int]], Iterator[str]]:
    """The barrier task: every task describes its process, and task 0 returns what all of them said."""

    def describe_partition(_rows: Iterable[int]) -> Iterator[str]:
        from pyspark import BarrierTaskContext

        from workers.environment.remote import describe

        context = BarrierTaskContext.get()
        address = context.getTaskInfos()[context.partitionId()].address
        mine = {**describe(libraries, cuda=cuda), "executor": address}
        everyone = context.allGather(json.dumps(mine))
        if context.partitionId() == 0:
            yield from everyone

    return describe_partition

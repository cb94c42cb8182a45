"""What every executor reports about its Python environment (executor-side: stdlib only, torch when asked).

Nothing here knows Spark: the barrier task's rank, address and ``allGather`` come from the function the driver
ships (:func:`workers.environment.driver.shipped_function`).

Versions come from package metadata, so nothing heavy is imported to read them; CUDA availability needs torch
and is asked only by families that train with torch.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Callable, Iterator
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


def gather(
    libraries: tuple[str, ...], cuda: bool, *, rank: int, address: str, all_gather: Callable[[str], list[str]]
) -> Iterator[str]:
    """One barrier task's part: describe this process (at ``address``), share it with every task
    (``all_gather``, every task's string in rank order) and, on rank 0, return what all of them said."""
    mine = {**describe(libraries, cuda=cuda), "executor": address}
    everyone = all_gather(json.dumps(mine))
    if rank == 0:
        yield from everyone

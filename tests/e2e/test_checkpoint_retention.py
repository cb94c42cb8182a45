"""SPARKTRAIN_CHECKPOINT_RETENTION=K keeps a job's newest K checkpoints: older rows and their files go."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest


@pytest.mark.slow
def test_only_the_newest_checkpoints_stay(make_service: Callable[..., Any]) -> None:
    body = {
        "name": "kept",
        "framework": "torch",
        "dataset": {"uri": "datasets/digits/train.parquet", "features": ["pixels"], "label": "label",
                    "task": "classification", "num_classes": 10},
        "network": {"layers": [{"type": "dense", "units": 32, "activation": "relu"},
                               {"type": "output", "units": 10, "activation": "softmax", "loss": "cross_entropy"}]},
        "training": {"epochs": 4, "batch_size_per_worker": 64, "num_workers": 2, "seed": 3},
    }  # fmt: skip
    with make_service(checkpoint_retention=2) as svc:
        job = svc.wait(svc.train(body)["id"], {"SUCCEEDED", "FAILED"})
        assert job["status"] == "SUCCEEDED", job["error"]
        kept = svc.client.get(f"/jobs/{job['id']}/checkpoints").json()["checkpoints"]
        assert sorted(c["epoch"] for c in kept) == [3, 4]
        directory = Path(urlparse(kept[0]["uri"]).path).parent
        on_disk = sorted(p.name for p in directory.iterdir())
        assert on_disk == ["epoch-3", "epoch-4"], on_disk
        assert svc.client.get(f"/checkpoints/{kept[0]['id']}").status_code == 200

"""GPU scheduling on the standalone cluster with stand-in nvidia-smis: each worker offers a GPU of its own, the driver's
gpu profile asks one per executor and per task, and Spark hands every barrier task its GPU address. There is no
CUDA here, so torch's device "auto" falls back to CPU with a warning on the job and "cuda" fails clearly."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.cluster.conftest import cluster_driver, finish
from tests.helpers import TAXI_FEATURES

pytestmark = pytest.mark.slow

MLP = {"layers": [{"type": "dense", "units": 16, "activation": "relu"},
                  {"type": "output", "units": 1, "activation": "identity", "loss": "mse"}]}  # fmt: skip


@pytest.fixture(scope="module")
def gpu_driver(
    standalone_master: str, executor_python: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[httpx.Client]:
    work = tmp_path_factory.mktemp("gpu-driver")
    with cluster_driver(standalone_master, work, executor_python, SPARKTRAIN_SPARK_PROFILE="gpu") as client:
        yield client


def torch_body(device: str) -> dict[str, object]:
    return {
        "name": f"gpu-{device}",
        "framework": "torch",
        "dataset": {"uri": "taxi/train.parquet", "features": TAXI_FEATURES, "label": "fare_amount",
                    "task": "regression", "normalize": "standardize"},
        "network": MLP,
        "training": {"epochs": 1, "batch_size_per_worker": 256, "num_workers": 2},
        "device": device,
    }  # fmt: skip


def test_executors_carry_their_gpu_addresses(gpu_driver: httpx.Client) -> None:
    executors = [e for e in gpu_driver.get("/cluster").json()["executors"] if e["id"] != "driver"]
    assert len(executors) == 2
    # each worker's stand-in nvidia-smi reports its own GPU: one shared one gave both workers ['0', '1'] and both
    # executors GPU 0
    assert sorted(address for e in executors for address in e["resources"].get("gpu", [])) == ["0", "1"], executors


def test_auto_falls_back_to_cpu_with_a_warning(gpu_driver: httpx.Client) -> None:
    job = finish(gpu_driver, "/train", torch_body("auto"))
    assert job["status"] == "SUCCEEDED", job["error"]
    warnings = " ".join(str(w) for w in job["warnings"])
    assert "GPU" in warnings and "CUDA" in warnings, job["warnings"]


def test_cuda_without_cuda_fails_clearly(gpu_driver: httpx.Client) -> None:
    job = finish(gpu_driver, "/train", torch_body("cuda"))
    assert job["status"] == "FAILED"
    assert job["error"]["reason"] == "DEVICE_UNAVAILABLE", job["error"]
    message = job["error"]["message"]
    assert message.startswith("Spark gave this task GPU [") and "no usable CUDA" in message, job["error"]
    assert "Traceback" not in message and "\n" not in message, job["error"]


def test_xgboost_auto_trains_on_cpu_and_says_why(gpu_driver: httpx.Client) -> None:
    body = {
        "name": "gpu-xgb",
        "framework": "xgboost",
        "dataset": {"uri": "taxi/train.parquet", "features": TAXI_FEATURES, "label": "fare_amount",
                    "task": "regression"},
        "params": {"num_round": 10, "num_workers": 2},
    }  # fmt: skip
    job = finish(gpu_driver, "/train", body)
    assert job["status"] == "SUCCEEDED", job["error"]
    assert job["result"]["device"] == "cpu"
    assert any("xgboost-cpu" in str(w) for w in job["warnings"]), job["warnings"]

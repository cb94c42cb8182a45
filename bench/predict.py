"""Online and batch prediction against their peers, in one run on one machine.

Online: ``POST /predict`` of the running service (1 process, the model in the driver's cache) against MLflow's
scoring server (``mlflow models serve``, 1 uvicorn worker) serving the same network (a TorchScript trace of the
trained weights, saved with ``mlflow.pytorch``), each loaded by ``wrk`` on loopback with 1-row and 64-row
bodies at several concurrencies: p50 / p99 latency and requests/s.

Batch: a ``POST /predict`` batch job (keyed, parquet out, on Spark executors) against single-process torch on
the same rows: rows/s.

MLflow lives in its own virtual environment (``.bench/mlflow-venv``, made on first use: it pins its own
dependencies). ``wrk`` comes from the OS (``apt-get install wrk``). Run ``python -m bench.predict [--quick]``;
prints a table and, last, one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.common import free_port, save_results, stop, wait_ready

REPO = Path(__file__).resolve().parents[1]
MLFLOW_VENV = REPO / ".bench" / "mlflow-venv"
NETWORK = {
    "input_shape": [64],
    "layers": [
        {"type": "dense", "units": 128, "activation": "relu"},
        {"type": "output", "units": 10, "activation": "softmax", "loss": "cross_entropy"},
    ],
}


def ensure_mlflow() -> Path:
    python = MLFLOW_VENV / "bin" / "python"
    if not (MLFLOW_VENV / "bin" / "mlflow").exists():
        print("creating .bench/mlflow-venv (MLflow and its dependencies, a few minutes, once)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(MLFLOW_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "torch==2.13.0", "pandas<3", "mlflow"], check=True)
    return python


def wrk(url: str, body: str, connections: int, seconds: int, work: Path) -> dict[str, float]:
    script = work / "post.lua"
    script.write_text(
        f'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = {json.dumps(body)}\n'
    )
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(script), url],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip

    def latency(percent: str) -> float:
        match = re.search(rf"^\s+{percent}%\s+([\d.]+)(us|ms|s)\s*$", out, re.MULTILINE)
        if match is None:
            raise RuntimeError(f"wrk printed no {percent}% latency:\n{out}")
        value, unit = float(match.group(1)), match.group(2)
        return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value

    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "p50_ms": latency("50"),
        "p99_ms": latency("99"),
        "rps": rps,
        "errors": int(errors.group(1)) if errors else 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.predict")
    parser.add_argument("--quick", action="store_true", help="concurrency 1 and 8, 5 s each; 100,000 batch rows")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("bench.predict needs wrk on the PATH (apt-get install wrk)")
    concurrencies, seconds, batch_rows = ([1, 8], 5, 100_000) if args.quick else ([1, 4, 16, 64], 10, 1_000_000)
    work = Path(tempfile.mkdtemp(prefix="bench-predict-"))
    ours_port, theirs_port = free_port(), free_port()
    env = {**os.environ, "SPARKTRAIN_VAR_DIR": str(work / "var"), "SPARKTRAIN_SPARK_MASTER": "local[2]",
           "SPARKTRAIN_SPARK_CONF": '{"spark.ui.enabled":"false"}', "SPARKTRAIN_LOG_LEVEL": "WARNING"}  # fmt: skip
    ours = subprocess.Popen([sys.executable, "-m", "app", "--port", str(ours_port)], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    theirs: subprocess.Popen[bytes] | None = None
    base = f"http://127.0.0.1:{ours_port}"
    try:
        wait_ready(f"{base}/readyz", ours)
        client = httpx.Client(base_url=base, timeout=600)
        train = {
            "name": "bench-mlp",
            "framework": "torch",
            "dataset": {"uri": "datasets/digits/train.parquet", "features": ["pixels"], "label": "label",
                        "task": "classification", "num_classes": 10},
            "network": NETWORK,
            "training": {"epochs": 3, "num_workers": 2, "batch_size_per_worker": 32},
        }  # fmt: skip
        job = client.post("/train", json=train).json()
        while (job := client.get(f"/jobs/{job['id']}").json())["status"] not in ("SUCCEEDED", "FAILED"):
            time.sleep(0.5)
        if job["status"] != "SUCCEEDED":
            raise RuntimeError(f"training failed: {job['error']}")
        uri = client.get("/models/bench-mlp/versions/1").json()["artifact_uri"]

        import torch

        from workers.inference.torch_model import TorchModel

        model = TorchModel.load(uri)

        class Float32(torch.nn.Module):  # MLflow hands the model float64 tensors from JSON
            def __init__(self, inner: torch.nn.Module) -> None:
                super().__init__()
                self.inner = inner

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return self.inner(x.float())

        traced = torch.jit.trace(Float32(model.module), torch.zeros(1, 64), check_trace=False)
        traced.save(str(work / "model.pt"))
        python = ensure_mlflow()
        subprocess.run(
            [str(python), "-c", "import sys, torch, mlflow.pytorch; "
             "mlflow.pytorch.save_model(torch.jit.load(sys.argv[1]), sys.argv[2], serialization_format='pickle')",
             str(work / "model.pt"), str(work / "mlflow-model")],
            check=True, capture_output=True,
        )  # fmt: skip
        theirs = subprocess.Popen(
            [str(MLFLOW_VENV / "bin" / "mlflow"), "models", "serve", "-m", str(work / "mlflow-model"),
             "--env-manager", "local", "-p", str(theirs_port), "-h", "127.0.0.1", "-w", "1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, "PATH": f"{MLFLOW_VENV / 'bin'}:{os.environ.get('PATH', '')}"},
        )  # fmt: skip
        wait_ready(f"http://127.0.0.1:{theirs_port}/ping", theirs)

        rng = np.random.default_rng(0)
        rows = rng.uniform(0, 16, (64, 64)).round(2).tolist()
        started = {"date": time.strftime("%Y-%m-%d %H:%M"), "load_average_start": os.getloadavg()[0]}
        results: dict[str, Any] = {"online": {}, "concurrency": concurrencies, "seconds": seconds, **started}
        for size in (1, 64):
            ours_body = json.dumps({"model": {"name": "bench-mlp", "version": 1}, "instances": rows[:size]})
            theirs_body = json.dumps({"inputs": rows[:size]})
            mine = client.post("/predict", content=ours_body, headers={"content-type": "application/json"}).json()
            other = httpx.post(f"http://127.0.0.1:{theirs_port}/invocations", content=theirs_body,
                               headers={"content-type": "application/json"}, timeout=60).json()  # fmt: skip
            if mine["class_index"] != np.asarray(other["predictions"]).argmax(axis=1).tolist():
                raise RuntimeError("the two servers disagree on the predictions")
            for c in concurrencies:
                results["online"][f"sparktrain_{size}row_c{c}"] = wrk(f"{base}/predict", ours_body, c, seconds, work)
                results["online"][f"mlflow_{size}row_c{c}"] = wrk(
                    f"http://127.0.0.1:{theirs_port}/invocations", theirs_body, c, seconds, work
                )

        import pandas as pd

        pixels = rng.uniform(0, 16, (batch_rows, 64)).astype(np.float32)
        data = work / "var" / "data"
        data.mkdir(parents=True, exist_ok=True)
        pd.DataFrame({"id": np.arange(batch_rows), "pixels": list(pixels)}).to_parquet(data / "rows.parquet")
        t0 = time.perf_counter()
        batch = client.post("/predict", json={"model": {"name": "bench-mlp"},
                                              "dataset": {"uri": "rows.parquet", "key": "id"}}).json()  # fmt: skip
        while (batch := client.get(f"/jobs/{batch['id']}").json())["status"] not in ("SUCCEEDED", "FAILED"):
            time.sleep(0.2)
        batch_s = time.perf_counter() - t0
        if batch["status"] != "SUCCEEDED":
            raise RuntimeError(f"batch prediction failed: {batch['error']}")
        t0 = time.perf_counter()
        model.outputs(pixels)
        single_s = time.perf_counter() - t0
        results["batch"] = {
            "rows": batch_rows,
            "sparktrain_job_s": batch_s,
            "sparktrain_rows_per_s": batch_rows / batch_s,
            "single_process_s": single_s,
            "single_process_rows_per_s": batch_rows / single_s,
        }
    finally:
        if theirs is not None:
            stop(theirs)
        stop(ours)
        shutil.rmtree(work, ignore_errors=True)

    print(f"{'body':<8} {'clients':>7} {'server':<11} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>9}")
    for size in (1, 64):
        for c in concurrencies:
            for server in ("sparktrain", "mlflow"):
                r = results["online"][f"{server}_{size}row_c{c}"]
                print(f"{size:>3} rows {c:>7} {server:<11} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {r['rps']:>9.0f}")
    b = results["batch"]
    print(f"batch {b['rows']:,} rows: sparktrain job {b['sparktrain_rows_per_s']:,.0f} rows/s (POST to SUCCEEDED), "
          f"single-process torch {b['single_process_rows_per_s']:,.0f} rows/s")  # fmt: skip
    save_results("predict", results, quick=args.quick)


if __name__ == "__main__":
    main()

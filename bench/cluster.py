"""The trainer on a two-worker Spark standalone cluster against local[2]: the same gradient-sharing job.

The digits CNN of ``bench.trainer``, 2 workers, ``gradient_sharing``, run by the torch family's job driver in a
process of its own per master (Spark allows one session per process): once on ``local[2]`` and once on a
standalone cluster of two 1-core workers on this machine (``scripts/cluster.sh``), whose executors get the
sparktrain code shipped by the driver. A warm-up job runs first in each (executors start their Python workers
once). Reported: accuracy, wall time (data preparation + barrier stage) and samples/s, and the cluster/local
ratios.

Run: ``python -m bench.cluster [--quick]``; the last line printed is one JSON object (also written to
bench/results/cluster.json unless ``--quick``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import REPO, free_port

CLUSTER_CONF = {"spark.ui.enabled": "false", "spark.executor.cores": "1", "spark.executor.memory": "1g",
                "spark.cores.max": "2"}  # fmt: skip


def child(master: str, epochs: int) -> dict[str, Any]:
    from app.core.settings import Settings
    from app.spark.session import build_spark_session
    from bench.trainer import CNN, run_sparktrain

    conf = CLUSTER_CONF if master.startswith("spark://") else {"spark.ui.enabled": "false"}
    settings = Settings(
        var_dir=Path(tempfile.mkdtemp()), spark_master=master, data_roots=[REPO / "datasets"], spark_conf=conf
    )
    spark = build_spark_session(settings)
    run_sparktrain(spark, settings, CNN, 3e-3, 1, "allreduce")  # warm-up: executors' Python workers, torch import
    result = run_sparktrain(spark, settings, CNN, 3e-3, epochs, "gradient_sharing")
    spark.stop()
    return {k: result[k] for k in ("accuracy", "wall_s", "samples_per_s")}


def run_child(master: str, epochs: int) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "bench.cluster", "--child", master, "--epochs", str(epochs)],
                         cwd=REPO, capture_output=True, text=True, check=True, env={**os.environ})  # fmt: skip
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster")
    parser.add_argument("--quick", action="store_true", help="5 epochs instead of 14")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--epochs", type=int, default=None)
    args = parser.parse_args()
    epochs = args.epochs or (5 if args.quick else 14)
    if args.child:
        print(json.dumps(child(args.child, epochs)))
        return
    state = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    port = free_port()
    script = str(REPO / "scripts" / "cluster.sh")
    env = {**os.environ, "PYTHON": sys.executable}
    subprocess.run([script, "start", "--port", str(port), "--dir", str(state), "--memory", "1g"], check=True, env=env)
    try:
        local = run_child("local[2]", epochs)
        print(f"local[2]: acc {local['accuracy']:.4f}  wall {local['wall_s']:.1f} s  {local['samples_per_s']:.0f}/s")
        cluster = run_child(f"spark://127.0.0.1:{port}", epochs)
        print(f"cluster:  acc {cluster['accuracy']:.4f}  wall {cluster['wall_s']:.1f} s  "
              f"{cluster['samples_per_s']:.0f}/s")  # fmt: skip
    finally:
        subprocess.run([script, "stop", "--dir", str(state)], check=False, env=env)
    results = {
        "epochs": epochs,
        "local": local,
        "standalone_2x1": cluster,
        "wall_ratio": cluster["wall_s"] / local["wall_s"],
        "samples_per_s_ratio": cluster["samples_per_s"] / local["samples_per_s"],
    }
    if not args.quick:
        (REPO / "bench" / "results" / "cluster.json").write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results))


if __name__ == "__main__":
    main()

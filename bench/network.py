"""Gradient sharing where the network is the bottleneck: a Spark standalone cluster behind shaped links.

Each worker count gets its own network (:mod:`bench.netns`): the driver and the Spark master in one namespace, each
1-core Spark worker (and so its executor and training rank) in its own, joined by a veth shaped with ``tbf`` in
both directions — one full-duplex link per worker, as workers with one NIC each behind a switch have. The same
cluster and SparkSession run every link in turn: unshaped (a veth on this VM, ~10 Gbit/s, CPU-bound), 10 Gbit/s and
1 Gbit/s. Models: the digits CNN (9,930 parameters), a 1.1M MLP and a 9.7M MLP (a dense step moves 39 MB); modes:
sparktrain's ``gradient_sharing``, ``allreduce`` and ``parameter_averaging`` (the torch family's job driver, as
the service runs it) and pyspark's ``TorchDistributor`` running the equivalent DDP loop; same seed, same epochs.

Per run: validation accuracy, wall time (data preparation and the barrier stage; ``TorchDistributor.run``),
samples/s, the bytes each worker put on its link per step, measured from the kernel's counters of the veths
(everything the worker sent: collectives, and Spark's own traffic), the trainer's own count of its collectives'
bytes against that measurement, the wire compression (what a dense ring all-reduce step puts on the wire over what
the run put there: the trainer's count, and the link's), and samples/s against the same run unshaped. Beside each
1 Gbit/s ratio, a prediction from the unshaped runs: each step's unshaped time plus its measured link bytes at the
link rate.

Run (as root): ``python -m bench.network [--quick]``. ``--quick``: W=2 only, the two MLPs, unshaped and 1 Gbit/s,
without parameter averaging. Without network namespaces or ``tc`` it says so and runs nothing shaped. The last
line printed is one JSON object; the full run is saved as bench/results/network.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import netns
from bench.common import REPO, settle

LINKS = {"unshaped": None, "10gbit": 10e9, "1gbit": 1e9}
SHORT_S = 10.0
"""sparktrain runs shorter than this (wall seconds) are repeated three times and the median kept"""
MODES = ("gradient_sharing", "allreduce", "parameter_averaging", "torch_distributor")
LINK_MODEL = (
    "one veth per worker, tbf-shaped both ways (a full-duplex link per worker, as one NIC per worker behind a "
    "non-blocking switch); the driver and master sit on the unshaped bridge. Chosen over one shaped loopback shared "
    "by all ranks because that would make every rank share one link, which no real cluster does and which would "
    "favour sparse modes by a factor of W."
)


def _models() -> dict[str, tuple[dict[str, Any], float, int]]:
    from bench.trainer import CNN, WIDE, wide_mlp

    return {
        "cnn": (CNN, 3e-3, 5),
        "mlp_1m": (WIDE, 1e-3, 5),
        "mlp_10m": (wide_mlp(3072), 5e-4, 4),
    }  # network, lr, epochs


def child(workers: int, tag: str, links: list[str], models: list[str], modes: list[str]) -> dict[str, Any]:
    """Runs inside the driver namespace: starts the cluster, then every link, model and mode."""
    from app.core.settings import Settings
    from app.spark.session import build_spark_session
    from bench.trainer import BATCH, CNN, _parameters, run_sparktrain, run_torch_distributor
    from workers.training.torch.comm import dense_ring_total

    topology = netns.Topology(workers, tag)
    work = Path(tempfile.mkdtemp(prefix="bench-network-"))
    cluster = netns.Cluster(topology, sys.executable, work / "cluster")
    cluster.start()
    os.environ["SPARK_LOCAL_IP"] = netns.DRIVER_IP
    conf = {
        "spark.ui.enabled": "false",
        "spark.driver.host": netns.DRIVER_IP,
        "spark.executor.cores": "1",
        "spark.cores.max": str(workers),
        "spark.executor.memory": "2g",
        "spark.executorEnv.GLOO_SOCKET_IFNAME": netns.IFNAME,
    }
    settings = Settings(
        var_dir=work / "var", spark_master=cluster.master, data_roots=[REPO / "datasets"], spark_conf=conf
    )
    spark = build_spark_session(settings)
    deadline = time.monotonic() + 120  # every executor registered before a barrier stage asks for W slots
    while len(spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()) - 1 < workers:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{workers} executors did not register; see {work}/cluster/*.log")
        time.sleep(0.5)
    out: dict[str, Any] = {}
    try:
        # Warm-up, not measured: torchrun's first start, then the executors' Python workers and torch imports (after
        # TorchDistributor, see below) and the Export path's tensor shards of the digits (every later job reads them
        # from disk, so no run moves data over the links).
        if "torch_distributor" in modes:
            run_torch_distributor(CNN, 3e-3, 1, workers)
        run_sparktrain(spark, settings, CNN, 3e-3, 1, "allreduce", data_path="export", workers=workers)
        for link in links:
            topology.shape(LINKS[link])
            for model in models:
                network, lr, epochs = _models()[model]
                parameters = _parameters(network)
                for mode in modes:
                    tries: list[tuple[dict[str, Any], int]] = []
                    while True:
                        settle()
                        before = topology.sent_bytes()
                        if mode == "torch_distributor":
                            r = run_torch_distributor(network, lr, epochs, workers)
                            # TorchDistributor's tasks leave the executors without idle Python workers: the next
                            # stage would pay their start (10-15 s here), so a small stage, not measured, starts
                            # them again.
                            run_sparktrain(spark, settings, CNN, 3e-3, 1, "allreduce", data_path="export",
                                           workers=workers)  # fmt: skip
                        else:
                            r = run_sparktrain(
                                spark, settings, network, lr, epochs, mode, data_path="export", workers=workers
                            )
                        tries.append((r, sum(topology.sent_bytes()) - sum(before)))
                        # A job of a few seconds moves by ±0.5 s from one run to the next (stage start, the
                        # executors' Python workers): short sparktrain runs are measured three times, the median
                        # by wall time kept. TorchDistributor's runs (10 s and more, most of it its start) once.
                        if mode == "torch_distributor" or tries[0][0]["wall_s"] >= SHORT_S or len(tries) == 3:
                            break
                    r, link_bytes = sorted(tries, key=lambda t: t[0]["wall_s"])[len(tries) // 2]
                    r["walls_s"] = [t[0]["wall_s"] for t in tries]
                    steps = r["steps_per_worker"]
                    r["link_bytes_per_step"] = link_bytes / workers / steps
                    dense = dense_ring_total(4 * parameters, workers) / workers  # the trainer's model of a dense step
                    r["link_compression"] = dense / r["link_bytes_per_step"]
                    if mode == "torch_distributor":
                        r["wire_compression"] = r["link_compression"]  # DDP has no count of its own: the link's
                    else:
                        r["accounted_vs_link"] = r["wire_bytes_total"] / link_bytes
                    r["parameters"] = parameters
                    r["load_avg_1m"] = os.getloadavg()[0]  # on a shared machine, how busy it was
                    r["train_samples_per_s"] = r["steps_per_worker"] * workers * BATCH / r["train_s"]
                    out.setdefault(link, {}).setdefault(model, {})[mode] = r
                    print(
                        f"  w{workers} {link:<8} {model:<7} {mode:<19} acc {r['accuracy']:.4f} "
                        f"wall {r['wall_s']:6.1f} s  link {r['link_bytes_per_step']:>11,.0f} B/step  "
                        f"load {r['load_avg_1m']:.1f}",
                        flush=True,
                    )
    finally:
        spark.stop()
        cluster.stop()
    return out


def run_workers(workers: int, links: list[str], models: list[str], modes: list[str]) -> dict[str, Any]:
    """Builds the network for ``workers``, runs the child in the driver's namespace, always removes the network."""
    tag = f"{os.getpid() % 100000}{workers}"
    topology = netns.Topology(workers, tag)
    try:
        topology.up()
        argv = [sys.executable, "-m", "bench.network", "--child", "--workers", str(workers), "--tag", tag,
                "--links", ",".join(links), "--models", ",".join(models), "--modes", ",".join(modes)]  # fmt: skip
        proc = subprocess.Popen(netns.in_namespace(topology.driver_ns, argv), cwd=REPO, stdout=subprocess.PIPE,
                                text=True)  # fmt: skip
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:  # the child's progress as it happens; its last line is the JSON
            if line.startswith("{"):
                lines.append(line)
            else:
                print(line, end="", flush=True)
        if proc.wait() != 0 or not lines:
            raise RuntimeError(f"the W={workers} run failed (exit {proc.returncode})")
        result: dict[str, Any] = json.loads(lines[-1])
        return result
    finally:
        topology.down()


def _predict(unshaped: dict[str, Any], rate_bits: float) -> float:
    """A run's training-loop seconds at ``rate_bits``: the unshaped loop plus its link bytes at that rate."""
    return float(unshaped["train_s"] + unshaped["steps_per_worker"] * unshaped["link_bytes_per_step"] * 8 / rate_bits)


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def summarize(links: dict[str, Any]) -> list[str]:
    """The table; also sets each run's ``vs_unshaped``, ``vs_allreduce`` and ``predicted_vs_allreduce``."""
    lines = [
        f"{'W':>2} {'link':<8} {'model':<7} {'mode':<19} {'acc':>6} {'wall s':>6} {'samples/s':>9} {'loop/s':>7} "
        f"{'link B/step':>12} {'acct/link':>9} {'wire x':>7} {'vs unsh':>7} {'vs AR':>5} {'loop':>5} {'pred':>5}"
    ]
    for link, models in links.items():
        for model, by_w in models.items():
            for w, modes in by_w.items():
                base = links.get("unshaped", {}).get(model, {}).get(w, {})
                ar = modes.get("allreduce")
                for mode, r in modes.items():
                    unshaped, rate = base.get(mode), LINKS[link]
                    r["vs_unshaped"] = r["samples_per_s"] / unshaped["samples_per_s"] if unshaped else None
                    r["vs_allreduce"] = r["samples_per_s"] / ar["samples_per_s"] if ar else None
                    loop = r["train_samples_per_s"] / ar["train_samples_per_s"] if ar else None
                    r["predicted_vs_allreduce"] = None
                    if rate and unshaped and base.get("allreduce"):
                        r["predicted_vs_allreduce"] = _predict(base["allreduce"], rate) / _predict(unshaped, rate)
                    lines.append(
                        f"{w[1:]:>2} {link:<8} {model:<7} {mode:<19} {r['accuracy']:>6.4f} {r['wall_s']:>6.1f} "
                        f"{r['samples_per_s']:>9.0f} {r['train_samples_per_s']:>7.0f} "
                        f"{r['link_bytes_per_step']:>12,.0f} {_fmt(r.get('accounted_vs_link'), '.3f'):>9} "
                        f"{_fmt(r.get('wire_compression'), '.0f'):>7} {_fmt(r['vs_unshaped'], '.2f'):>7} "
                        f"{_fmt(r['vs_allreduce'], '.2f'):>5} {_fmt(loop, '.2f'):>5} "
                        f"{_fmt(r['predicted_vs_allreduce'], '.2f'):>5}"
                    )
    return lines


def scaling(out: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """Per-step bytes per rank, measured at W=2 (and 4) and modelled beyond: a sparse all-gather sends its padded
    message to W - 1 peers, so it grows with W - 1; a ring all-reduce sends 2 (W - 1) / W of the dense buffer,
    which tends to 8 bytes a parameter. The per-step choice switches to dense once W > 8 N / B, B being one rank's
    sparse bytes per step at W=2 (the modelled message size is held fixed as W grows)."""
    lines, model_out = (
        [f"{'model':<7} {'W':>3} {'sparse B/step':>14} {'dense B/step':>13} {'measured':>12} cheaper"],
        {},
    )
    for model, by_w in out.get("unshaped", {}).items():
        gs2 = by_w.get("w2", {}).get("gradient_sharing")
        if not gs2 or not gs2.get("wire_bytes_total"):
            continue
        n, b2 = gs2["parameters"], gs2["wire_bytes_total"] / (2 * gs2["steps_per_worker"])
        switch = int(8 * n / b2) + 1
        model_out[model] = {"parameters": n, "sparse_bytes_per_step_w2": b2, "dense_from_w": switch, "per_w": {}}
        for w in (2, 4, 8, 16, 64):
            sparse, dense = (w - 1) * b2, 2 * (w - 1) / w * 4 * n
            run = by_w.get(f"w{w}", {}).get("gradient_sharing")
            measured = run["wire_bytes_total"] / (w * run["steps_per_worker"]) if run else None
            model_out[model]["per_w"][w] = {"sparse": sparse, "dense": dense, "measured_sparse": measured}
            lines.append(f"{model:<7} {w:>3} {sparse:>14,.0f} {dense:>13,.0f} {_fmt(measured, ',.0f'):>12} "
                         f"{'sparse' if sparse <= dense else 'dense'}")  # fmt: skip
        lines.append(f"{model:<7} the per-step choice goes dense from W = {switch} (8 N / B, N = {n:,})")
    return lines, model_out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.network")
    parser.add_argument("--quick", action="store_true", help="W=2, the two MLPs, unshaped and 1 Gbit/s")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--workers", default=None, help="comma-separated worker counts (default 2,4)")
    parser.add_argument("--tag", default="", help=argparse.SUPPRESS)
    parser.add_argument("--links", default=None)
    parser.add_argument("--models", default=None)
    parser.add_argument("--modes", default=None)
    parser.add_argument("--out", default=str(REPO / "bench/results/network.json"), help="where a full run is saved")
    args = parser.parse_args()
    quick = args.quick
    links = (args.links or ("unshaped,1gbit" if quick else ",".join(LINKS))).split(",")
    models = (args.models or ("mlp_1m,mlp_10m" if quick else "cnn,mlp_1m,mlp_10m")).split(",")
    modes = (args.modes or ("gradient_sharing,allreduce,torch_distributor" if quick else ",".join(MODES))).split(",")
    if args.child:
        print(json.dumps(child(int(args.workers), args.tag, links, models, modes)))
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run still removes its namespaces
    why = netns.available()
    if why is not None:
        print(f"no shaped network here ({why}): every link is skipped", flush=True)
        print(json.dumps({"links": {}, "link_model": None, "skipped": why}))
        return
    counts = [int(w) for w in (args.workers or ("2" if quick else "2,4")).split(",")]
    print(f"link model: {LINK_MODEL}", flush=True)
    t0 = time.perf_counter()
    out: dict[str, Any] = {}
    for w in counts:
        for link, by_model in run_workers(w, links, models, modes).items():
            for model, by_mode in by_model.items():
                out.setdefault(link, {}).setdefault(model, {})[f"w{w}"] = by_mode
    print()
    for line in summarize(out):
        print(line)
    print(
        f"\n{time.perf_counter() - t0:.0f} s in all; acct/link: the trainer's count of its collectives' bytes over "
        f"the link's counters (Spark's own traffic is in the link's); wire x: dense ring all-reduce bytes over the "
        f"run's; loop/s: samples/s of the training loop alone (no data preparation or stage start); vs AR: samples/s "
        f"against allreduce on the same link, loop: the same for the loop; pred: the loop's ratio predicted from the "
        f"unshaped runs (each loop plus its link bytes at the link's rate)"
    )
    scaling_lines, scaling_model = scaling(out)
    print("\nScaling (the trainer's own count of one rank's collective bytes per step; W > 4 modelled):")
    for line in scaling_lines:
        print(line)
    keys = (
        "accuracy",
        "wall_s",
        "samples_per_s",
        "link_bytes_per_step",
        "wire_compression",
        "vs_unshaped",
        "vs_allreduce",
        "predicted_vs_allreduce",
    )
    summary = {
        "links": {
            link: {
                model: {
                    w: {mode: {k: r.get(k) for k in keys} for mode, r in modes_.items()} for w, modes_ in by_w.items()
                }
                for model, by_w in models_.items()
            }
            for link, models_ in out.items()
        },
        "link_model": LINK_MODEL,
        "scaling": scaling_model,
    }
    if not quick:
        Path(args.out).write_text(json.dumps({**summary, "all_runs": out}, indent=1) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()

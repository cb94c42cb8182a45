"""Gradient sharing's wire compression over longer runs than ``bench.network``'s, against ``allreduce``.

``bench.network`` trains each model for 4 or 5 epochs (88 to 110 steps per worker), where the first epoch, in which
the threshold starts at one optimizer step and most elements are sent, weighs on the whole run's ratio. This runs
the same two MLPs for longer on ``local[2]`` (no shaped link: the wire bytes are the trainer's own count of what
its collectives put on the wire, which ``bench.network`` checked against the link's byte counters at 0.96 to 0.99
for these models): the 1.1M MLP for 30 epochs and the 9.7M MLP for 20, 2 workers, each in ``gradient_sharing``
with the defaults (the first threshold picked from the planned length: 6.5 optimizer steps over the 9.7M MLP's 440
planned steps per worker, ten over the 1.1M MLP's 660; ``workers.training.torch.config.planned_threshold_multiple``),
``gradient_sharing`` with the first threshold at one step (``gradient_sharing_tau0_1lr``: the default before
2026-12-05, what a short run gets) and ``allreduce``, after one warm-up stage.

Reported per run: validation accuracy, wall time, the wire compression over the whole run (what a dense ring
all-reduce step puts on the wire over what the run put there), the codec's ratio over the run and after the first
epoch, and the share of the sent bytes that were bitmap messages. Targets it speaks to (issue 14): wire
compression over the full run at least 300x on the 1.1M MLP and at least 1,000x on the 10M model at W = 2.

Run: ``python -m bench.compression [--quick]`` (``--quick``: 6 and 4 epochs, not saved); the last line printed is
one JSON object, also written to bench/results/compression.json. About 6 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from bench.trainer import REPO, WIDE, run_sparktrain, warm_session, wide_mlp

MODES: dict[str, tuple[str, float | None]] = {
    "gradient_sharing": ("gradient_sharing", None),
    "gradient_sharing_tau0_1lr": ("gradient_sharing", 1.0),
    "allreduce": ("allreduce", None),
}
"""Run name -> (mode, the first threshold as a multiple of the learning rate; None: the defaults)."""


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.compression")
    parser.add_argument("--quick", action="store_true", help="6 and 4 epochs, not saved")
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    spark, settings = warm_session("local[2]")
    models = {
        "mlp_1m": (WIDE, 1e-3, 6 if args.quick else 30),
        "mlp_10m": (wide_mlp(3072), 5e-4, 4 if args.quick else 20),
    }
    out: dict[str, Any] = {"master": "local[2]", "workers": 2, "load_average_start": list(os.getloadavg())}
    print(f"{'model':<8} {'epochs':>6} {'run':<26} {'accuracy':>8} {'wall s':>7} {'wire x':>7} {'codec x':>8} "
          f"{'after ep1':>9} {'bitmap %':>8}", flush=True)  # fmt: skip
    for name, (network, lr, epochs) in models.items():
        out[name] = {"epochs": epochs}
        for run, (mode, tau0) in MODES.items():
            sharing = {"threshold_algorithm": {"initial_threshold": tau0 * lr}} if tau0 else None
            r = run_sparktrain(spark, settings, network, lr, epochs, mode, sharing=sharing)
            out[name][run] = {
                "accuracy": r["accuracy"], "wall_s": round(r["wall_s"], 2), "steps_per_worker": r["steps_per_worker"],
                "wire_compression": r["wire_compression"], "codec_compression": r["compression"],
                "codec_compression_after_epoch_1": r["compression_after_epoch_1"],
                "bitmap_byte_share": r["bitmap_byte_share"], "wire_bytes_total": r["wire_bytes_total"],
            }  # fmt: skip
            print(f"{name:<8} {epochs:>6} {run:<26} {r['accuracy']:>8.4f} {r['wall_s']:>7.1f} "
                  f"{r['wire_compression'] or 0:>7.0f} {r['compression']:>8.0f} {r['compression_after_epoch_1']:>9.0f} "
                  f"{100 * r['bitmap_byte_share']:>8.0f}", flush=True)  # fmt: skip
    out["load_average_end"] = list(os.getloadavg())
    spark.stop()
    if not args.quick:
        (REPO / "bench" / "results" / "compression.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out))


if __name__ == "__main__":
    main()

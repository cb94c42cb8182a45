"""Gradient sharing's accuracy against ``allreduce`` over short runs: the first threshold and the aggregation.

The executor-side trainer in W local processes joined by gloo on loopback (``workers.training.torch.local``, no
Spark: the figures here are about what reaches the parameters, not about time), Adam, batch 32 per worker, the
same seeds for every variant. Variants:

- ``allreduce``: the dense baseline.
- ``before``: the defaults up to 2026-12-01, tau0 = 1e-2 and the sum of the messages.
- ``now``: today's defaults, the mean of the messages and tau0 picked from the planned length: one optimizer step
  (Adam: the learning rate) up to 88 steps per worker, ten from 660, linear between
  (``workers.training.torch.config.planned_threshold_multiple``; until 2026-12-05 one step whatever the length).
- ``tau0_lr_sum``: today's tau0 with the sum of the messages (which aggregation goes with it; the name is from when
  today's tau0 was one step, lr).
- For the LSTM (4,835 parameters: small enough that ``now`` exchanges it exactly, every step a dense all-reduce of
  the workers' gradients before the optimizer, ``exact_below_bytes``): ``thresholded`` (the threshold all the
  same), ``exact_sum`` (exact, with the sum of the gradients), and what says where the thresholded gap comes
  from: residual clipping off, a fixed tau (no adaptation) at the learning rate and at a third of it, three times
  the epochs (thresholded), and one worker (thresholding without distribution).

Printed per model, W and variant: the validation accuracy per seed and its mean, the codec compression over the
run (dense bytes / the bytes of the messages) and tau at the end. Last line: one JSON object; the full run also
writes it to bench/results/sharing_accuracy.json.

Run: ``python -m bench.sharing_accuracy [--quick] [--set w4_10m]`` (about 5 minutes on 2 cores; ``--quick``: one
seed; ``--set w4_10m``: instead, ``bench.network``'s 9.7M MLP at W = 4 over 4, 8 and 12 epochs, ``allreduce``
against the defaults, 6 minutes, written to bench/results/sharing_accuracy_w4_10m.json; ``--set tau0_steps``: the
same model at W = 2 over 4, 10 and 20 epochs and the digits CNN over 10, the first threshold at explicit multiples
of the learning rate (``tau0_<m>lr``), what the planned-length rule was fitted on, 17 minutes,
bench/results/sharing_accuracy_tau0_steps.json; it replaces ``--set tau0_10m``, whose one and ten steps over 4
and 20 epochs it runs too, bench/results/sharing_accuracy_tau0_10m.json; ``--set early``: the digits CNN at batch 16
and 64 per worker over 1, 2, 4 and 20 epochs, tau0 one step against what the defaults plan for 20 epochs, what a
pruner sees of a trial in its first epochs, 2 minutes, bench/results/sharing_accuracy_early.json; ``--set
w4_planned``: the planned-length rule, fitted at W = 2, checked at W = 4 on the CNN and the 1.1M MLP over 20 and 40
epochs, the defaults against one step and ``allreduce``, bench/results/sharing_accuracy_w4_planned.json; ``--set
under_step``: tau0 at the learning rate against 63/64 of it, the CNN over 1, 2 and 4 epochs and the 1.1M MLP at W = 4,
3 minutes, bench/results/sharing_accuracy_under_step.json; ``--set rmsprop``: RMSprop, whose first step is about
lr / sqrt(1 - alpha), tau0 at one Adam step against one RMSprop first step and with residual clipping off, the
CNN over 1, 2, 4 and 20 epochs and the 1.1M MLP at W = 4, 12 minutes, bench/results/sharing_accuracy_rmsprop.json).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench.splits import LSTM, layout, splits_for
from bench.trainer import CNN, WIDE, wide_mlp
from workers.training.torch.config import ONE_STEP, TrainerConfig, parse_sharing, planned_threshold_multiple
from workers.training.torch.local import run_local_many
from workers.training.torch.spec import parse_optimizer

REPO = Path(__file__).resolve().parents[1]

SMALL_MLP = {  # tests/e2e/test_train_torch.py's digits MLP (9,610 parameters)
    "input_shape": [64],
    "layers": [
        {"type": "dense", "units": 128, "activation": "relu"},
        {"type": "output", "units": 10, "activation": "softmax", "loss": "cross_entropy"},
    ],
}
BEFORE = {"threshold_algorithm": {"initial_threshold": 1e-2}, "aggregation": "sum"}
THRESHOLDED = {"exact_below_bytes": 0}  # the threshold even on a model small enough to be exchanged exactly
# model: network, learning rate, epochs, workers
RUNS: list[tuple[str, dict[str, Any], float, int, int]] = [
    ("mlp_1m", WIDE, 1e-3, 5, 2),
    ("mlp_1m", WIDE, 1e-3, 5, 4),
    ("mlp_small", SMALL_MLP, 3e-3, 15, 2),
    ("cnn", CNN, 3e-3, 10, 2),
    ("lstm", LSTM, 1e-2, 10, 2),
    ("lstm", LSTM, 1e-2, 10, 4),
    ("lstm", LSTM, 1e-2, 10, 1),
]

# --set w4_10m: bench.network's 9.7M MLP at W = 4 (44 steps per worker over its 4 epochs), over more epochs
RUNS_W4_10M: list[tuple[str, dict[str, Any], float, int, int]] = [
    ("mlp_10m", wide_mlp(3072), 5e-4, epochs, 4) for epochs in (4, 8, 12)
]
# --set tau0_steps: the same model at W = 2 over 4, 10 and 20 epochs (88, 220 and 440 steps per worker), the
# first threshold at several multiples of the learning rate: which multiple each run length can afford
RUNS_TAU0_STEPS: list[tuple[str, dict[str, Any], float, int, int]] = [
    *(("mlp_10m_tau0steps", wide_mlp(3072), 5e-4, epochs, 2) for epochs in (4, 10, 20)),
    ("cnn_tau0steps", CNN, 3e-3, 10, 2),
]
TAU0_MULTIPLES = {
    ("mlp_10m_tau0steps", 4): (1, 2, 3, 10),
    ("mlp_10m_tau0steps", 10): (1, 3, 5, 10),
    ("mlp_10m_tau0steps", 20): (1, 5, 10),
    ("cnn_tau0steps", 10): (1, 2, 3, 4.4, 10),
}
# --set early: the digits CNN at batch 16 and 64 per worker over 1, 2, 4 and 20 epochs, the first threshold at one
# step and at what the defaults plan for 20 epochs: what a pruner (ASHA's rungs at epochs 1, 2, 4, ...) sees of a
# 20-epoch trial in its first epochs. A run of k epochs with an explicit tau0 is the first k epochs of the longer run.
EARLY_EPOCHS = (1, 2, 4, 20)
EARLY_PLANNED_EPOCHS = 20
RUNS_EARLY: list[tuple[str, dict[str, Any], float, int, int]] = [
    (f"cnn_early_b{batch}", CNN, 3e-3, epochs, 2) for batch in (16, 64) for epochs in EARLY_EPOCHS
]

# --set w4_planned: the planned-length rule (fitted at W = 2) checked at W = 4 on the CNN and the 1.1M MLP over 20 and
# 40 epochs (220 and 440 steps per worker at batch 32): the defaults against one step and allreduce
RUNS_W4_PLANNED: list[tuple[str, dict[str, Any], float, int, int]] = [
    (model, network, lr, epochs, 4)
    for model, network, lr in (("cnn_w4planned", CNN, 3e-3), ("mlp_1m_w4planned", WIDE, 1e-3))
    for epochs in (20, 40)
]


# --set under_step: the first threshold at the learning rate against just under it (ONE_STEP of it, the defaults'
# one step since 2026-12-07): Adam's first step is lr * |g| / (|g| + eps), a hair under lr, so tau0 = lr held back
# almost all of it. The CNN at batch 16 and 64 over 1, 2 and 4 epochs, the 1.1M MLP at W = 4 over 5 (55 steps per
# worker: what the defaults start at one step).
RUNS_UNDER_STEP: list[tuple[str, dict[str, Any], float, int, int]] = [
    *((f"cnn_under_b{batch}", CNN, 3e-3, epochs, 2) for batch in (16, 64) for epochs in (1, 2, 4)),
    ("mlp_1m_under", WIDE, 1e-3, 5, 4),
]

# --set rmsprop: torch's RMSprop has no bias correction, so its first step is lr * |g| / (sqrt(1 - alpha) * |g| + eps),
# about lr / sqrt(1 - alpha) (ten times lr at alpha 0.99), coming down towards lr over about 1 / (1 - alpha) steps.
# tau0 at one Adam step (ONE_STEP * lr, the defaults for RMSprop) against one RMSprop first step (ONE_STEP * lr /
# sqrt(1 - alpha)), each times what the defaults plan for the run's length, and the first with residual clipping off.
# under_step's CNN runs at RMSprop's usual lr (1e-3) and at under_step's (3e-3), the CNN at alpha 0.9 and over 20
# epochs at batch 32 (440 steps per worker: 6.5 steps planned), and under_step's 1.1M MLP at W = 4.
RMSPROP_ALPHA = {"cnn_rms_a0.9_lr0.001_b64": 0.9}
RUNS_RMSPROP: list[tuple[str, dict[str, Any], float, int, int]] = [
    *(
        (f"cnn_rms_lr{lr:g}_b{batch}", CNN, lr, epochs, 2)
        for lr in (1e-3, 3e-3)
        for batch in (16, 64)
        for epochs in (1, 2, 4)
    ),
    *(("cnn_rms_a0.9_lr0.001_b64", CNN, 1e-3, epochs, 2) for epochs in (1, 4)),
    ("cnn_rms_lr0.001_b32", CNN, 1e-3, 20, 2),
    ("mlp_1m_rms", WIDE, 1e-3, 5, 4),
]


def _optimizer(model: str, lr: float) -> dict[str, Any]:
    if "_rms" not in model:
        return {"type": "adam", "learning_rate": lr}
    return {"type": "rmsprop", "learning_rate": lr, "alpha": RMSPROP_ALPHA.get(model, 0.99)}


def _batch(model: str) -> int:
    return int(model.rsplit("_b", 1)[1]) if model.startswith(("cnn_early_b", "cnn_under_b", "cnn_rms_")) else 32


def _variants(model: str, lr: float, world: int, epochs: int, steps_per_epoch: int = 0,
              ) -> dict[str, tuple[str, dict[str, Any] | None]]:  # fmt: skip
    if model.startswith("cnn_early_b"):  # --set early
        planned = planned_threshold_multiple(steps_per_epoch * EARLY_PLANNED_EPOCHS)
        return {
            "allreduce": ("allreduce", None),
            "one_step": ("gradient_sharing", {"threshold_algorithm": {"initial_threshold": lr}}),
            f"planned_{EARLY_PLANNED_EPOCHS}_epochs": (
                "gradient_sharing",
                {"threshold_algorithm": {"initial_threshold": planned * lr}},
            ),
        }
    if model.startswith(("cnn_under_b", "mlp_1m_under")):  # --set under_step
        return {
            "allreduce": ("allreduce", None),
            "one_step": ("gradient_sharing", {"threshold_algorithm": {"initial_threshold": lr}}),
            "under_one_step": ("gradient_sharing", {"threshold_algorithm": {"initial_threshold": ONE_STEP * lr}}),
        }
    if "_rms" in model:  # --set rmsprop: tau0 times what the defaults plan for this length (1 up to 88 steps)
        planned = planned_threshold_multiple(steps_per_epoch * epochs)
        first = 1 / math.sqrt(1 - RMSPROP_ALPHA.get(model, 0.99))
        adam_step = {"threshold_algorithm": {"initial_threshold": planned * ONE_STEP * lr}}
        return {
            "allreduce": ("allreduce", None),
            "adam_step": ("gradient_sharing", adam_step),
            "adam_step_no_clipping": ("gradient_sharing", {**adam_step, "residual_clipping": False}),
            "rmsprop_step": (
                "gradient_sharing",
                {"threshold_algorithm": {"initial_threshold": planned * first * ONE_STEP * lr}},
            ),
        }
    if model.endswith("_w4planned"):  # --set w4_planned
        return {
            "allreduce": ("allreduce", None),
            "one_step": ("gradient_sharing", {"threshold_algorithm": {"initial_threshold": lr}}),
            "now": ("gradient_sharing", None),
        }
    if model.endswith("_tau0steps"):  # --set tau0_steps: explicit first thresholds, whatever the default is
        return {
            "allreduce": ("allreduce", None),
            **{
                f"tau0_{m}lr": ("gradient_sharing", {"threshold_algorithm": {"initial_threshold": m * lr}})
                for m in TAU0_MULTIPLES[model, epochs]
            },
        }
    variants: dict[str, tuple[str, dict[str, Any] | None]] = {
        "allreduce": ("allreduce", None),
        "before": ("gradient_sharing", BEFORE),
        "now": ("gradient_sharing", None),
    }
    if model == "lstm":  # small (19 kB): "now" exchanges it exactly; the rest say what thresholding it does
        variants["before"] = ("gradient_sharing", {**BEFORE, **THRESHOLDED})
        variants["thresholded"] = ("gradient_sharing", THRESHOLDED)
        variants["exact_sum"] = ("gradient_sharing", {"aggregation": "sum"})
    if world == 1:  # one worker: what thresholding alone does to Adam, with nothing to distribute
        del variants["before"], variants["exact_sum"]
    elif model == "lstm" and world == 2:
        fixed = {"type": "fixed", "threshold": lr}
        variants["no_clipping"] = ("gradient_sharing", {"residual_clipping": {"multiple": 1e6}, **THRESHOLDED})
        variants["fixed_tau_lr"] = ("gradient_sharing", {"threshold_algorithm": fixed, **THRESHOLDED})
        variants["fixed_tau_lr_over_3"] = (
            "gradient_sharing",
            {"threshold_algorithm": {**fixed, "threshold": lr / 3}, **THRESHOLDED},
        )
        variants["thresholded_3x_epochs"] = variants["thresholded"]
        variants["allreduce_3x_epochs"] = variants["allreduce"]
    elif model in ("lstm", "mlp_10m"):  # mlp_10m (--set w4_10m): how the gap closes with more steps, the defaults
        del variants["before"]
    else:
        variants["tau0_lr_sum"] = ("gradient_sharing", {"aggregation": "sum"})
    return variants


def _config(network: dict[str, Any], optimizer: dict[str, Any], mode: str, sharing: dict[str, Any] | None, *,
            epochs: int, world: int, seed: int, tmp: str, batch: int = 32) -> TrainerConfig:  # fmt: skip
    return TrainerConfig(
        job_id="sharing-accuracy",
        network=network,
        optimizer=optimizer,
        mode=mode,  # type: ignore[arg-type]
        sharing=parse_sharing(sharing, parse_optimizer(optimizer)),
        averaging_frequency=5,
        epochs=epochs,
        batch_size=batch,
        num_workers=world,
        seed=seed,
        device="cpu",
        data=layout(network),
        checkpoint_dir=f"{tmp}/checkpoints-{mode}-{seed}",
        model_dir=f"{tmp}/model-{mode}-{seed}",
        collective_timeout_s=300,
    )


def _summary(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    failed = [r for r in ranks if "exception" in r or "error" in r]
    if failed:
        raise RuntimeError(f"a run failed: {failed[0].get('exception') or failed[0].get('error')}")
    r0 = ranks[0]
    sent = sum(r["bytes_sent"] for r in ranks)
    dense = sum(r["dense_bytes_per_step"] * r["steps"] for r in ranks)
    tau = (r0.get("threshold") or {}).get("threshold")
    clipped = statistics.fmean(r.get("clipped_mass") or 0.0 for r in ranks)
    return {"accuracy": r0["validation"]["accuracy"], "compression": dense / max(1, sent), "tau_end": tau,
            "steps": r0["steps"], "clipped_mass": clipped}  # fmt: skip


def run(model: str, network: dict[str, Any], lr: float, epochs: int, world: int, seeds: list[int]) -> dict[str, Any]:
    """Every variant over every seed; one variant's seeds at a time in the same rank processes, each variant in a
    temporary directory of its own (a 9.7M-parameter run keeps about 0.2 GB of checkpoints per epoch: all the
    variants of a 20-epoch set at once filled 40 GB of /tmp)."""
    splits = splits_for(network, world)
    batch = _batch(model)
    steps_per_epoch = min(len(train.x) for train, _ in splits) // batch
    out: dict[str, Any] = {}
    for name, (mode, sharing) in _variants(model, lr, world, epochs, steps_per_epoch).items():
        with tempfile.TemporaryDirectory() as tmp:
            length = epochs * (3 if name.endswith("3x_epochs") else 1)
            configs = [
                _config(
                    network,
                    _optimizer(model, lr),
                    mode,
                    sharing,
                    epochs=length,
                    world=world,
                    seed=seed,
                    tmp=f"{tmp}/{name}",
                    batch=batch,
                )
                for seed in seeds
            ]
            runs = [_summary(ranks) for ranks in run_local_many(configs, splits)]
        accuracy = [r["accuracy"] for r in runs]
        out[name] = {
            "accuracy": [round(a, 4) for a in accuracy],
            "mean_accuracy": round(statistics.fmean(accuracy), 4),
            "compression": round(statistics.fmean(r["compression"] for r in runs), 1),
            "tau_end": runs[0]["tau_end"],
            "steps_per_worker": runs[0]["steps"],
            **(
                {"tau0": sharing["threshold_algorithm"]["initial_threshold"]}
                if model.startswith("cnn_early") and sharing
                else {}
            ),
            # the residual mass clipping discarded, per worker (L1, parameter units)
            **(
                {
                    "tau0": sharing["threshold_algorithm"]["initial_threshold"],
                    "clipped_mass": round(statistics.fmean(r["clipped_mass"] for r in runs), 2),
                }
                if "_rms" in model and sharing
                else {}
            ),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed")
    parser.add_argument(
        "--set",
        choices=["short", "w4_10m", "tau0_steps", "early", "w4_planned", "under_step", "rmsprop"],
        default="short",
        help="short: the runs above (default); w4_10m: the 9.7M MLP at W = 4 over 4, 8 and 12 epochs, allreduce "
        "against the defaults; tau0_steps: the 9.7M MLP at W = 2 over 4, 10 and 20 epochs and the CNN over 10, the "
        "first threshold at 1 to 10 steps; early: the CNN at batch 16 and 64 over 1, 2, 4 and 20 epochs, tau0 one "
        "step against what the defaults plan for 20 epochs; w4_planned: the CNN and the 1.1M MLP at W = 4 over 20 and "
        "40 epochs, the defaults against one step; under_step: tau0 at one step against just under it, the CNN over "
        "1, 2 and 4 epochs and the 1.1M MLP at W = 4; rmsprop: under_step's runs with RMSprop, and the CNN at alpha "
        "0.9 and over 20 epochs, tau0 at one Adam step against one RMSprop first step (lr / sqrt(1 - alpha)) "
        "(written to bench/results/sharing_accuracy_<set>.json)",
    )
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    runs = {
        "short": RUNS,
        "w4_10m": RUNS_W4_10M,
        "tau0_steps": RUNS_TAU0_STEPS,
        "early": RUNS_EARLY,
        "w4_planned": RUNS_W4_PLANNED,
        "under_step": RUNS_UNDER_STEP,
        "rmsprop": RUNS_RMSPROP,
    }[args.set]
    name = "sharing_accuracy" if args.set == "short" else f"sharing_accuracy_{args.set}"
    out = args.out or str(REPO / f"bench/results/{name}.json")
    seeds = [7] if args.quick else [7, 8, 9]
    report: dict[str, Any] = {"seeds": seeds, "runs": {}}
    print(f"{'model':<7} {'W':>2} {'variant':<22} {'steps':>5} {'accuracy (per seed)':<26} {'mean':>6} "
          f"{'vs allreduce':>12} {'codec x':>8} {'tau end':>9}")  # fmt: skip
    for model, network, lr, epochs, world in runs:
        figures = run(model, network, lr, epochs, world, seeds)
        key = f"{model}_w{world}" if args.set == "short" else f"{model}_w{world}_e{epochs}"
        report["runs"][key] = {"lr": lr, "epochs": epochs, "workers": world, "variants": figures}
        for name, f in figures.items():
            base = figures["allreduce_3x_epochs" if name.endswith("3x_epochs") else "allreduce"]["mean_accuracy"]
            tau = f"{f['tau_end']:.2e}" if f["tau_end"] else "-"
            tau += f" clipped {f['clipped_mass']:.3g}" if "clipped_mass" in f else ""
            per_seed = " ".join(f"{a:.4f}" for a in f["accuracy"])
            print(f"{model:<7} {world:>2} {name:<22} {f['steps_per_worker']:>5} {per_seed:<26} "
                  f"{f['mean_accuracy']:>6.4f} {100 * (f['mean_accuracy'] - base):>+11.2f}p {f['compression']:>8.1f} "
                  f"{tau:>9}", flush=True)  # fmt: skip
    if not args.quick:
        Path(out).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report))


if __name__ == "__main__":
    main()

"""The torch trainer's configuration: the ``training`` block of a request, checked in pure Python.

Everything a barrier task needs travels as one JSON-able :class:`TrainerConfig` (``to_dict`` on the driver,
``from_dict`` on the executor), so the function Spark ships closes over plain values only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from workers.data.categories import Categories
from workers.data.spec import ResolvedDataset
from workers.errors import SpecError
from workers.training.torch.residuals import make_residual_clipping
from workers.training.torch.spec import OptimizerSpec
from workers.training.torch.thresholds import TAU_CEILING, TAU_FLOOR, make_threshold_algorithm

Mode = Literal["gradient_sharing", "parameter_averaging", "allreduce"]
Aggregation = Literal["sum", "mean"]
_SHARING_KEYS = frozenset(
    {
        "threshold_algorithm",
        "residual_clipping",
        "aggregation",
        "index_coding",
        "encoding_debug",
        "bitmap_ratio",
        "collective",
        "exact_below_bytes",
    }
)
Collective = Literal["auto", "sparse", "dense"]
ADAM_FAMILY = ("adam", "adamw", "rmsprop")


@dataclass(frozen=True)
class SharingConfig:
    """Threshold-encoded update sharing (docs/torch-trainer.md). Defaults come from the measured simulation."""

    threshold_algorithm: dict[str, Any] = field(default_factory=lambda: {"type": "adaptive", "initial_threshold": 1e-2})
    residual_clipping: dict[str, Any] | None = field(default_factory=lambda: {"multiple": 5.0, "frequency": 5})
    """None: no clipping (``residual_clipping: false``)."""
    aggregation: Aggregation = "mean"
    index_coding: Literal["compact", "int32"] = "compact"
    encoding_debug: bool = False
    bitmap_ratio: int = 16
    collective: Collective = "auto"
    """Per step: the sparse all-gather of the messages or a dense all-reduce of the residuals (exact: a dense step
    sends everything); ``auto`` takes whichever puts fewer bytes on the wire
    (:func:`workers.training.torch.comm.dense_is_cheaper`), and always the dense one for a small model (below)."""
    exact_below_bytes: int = 0
    """With ``collective: auto``, a model whose dense update (4 bytes a parameter) is at most this many bytes is
    exchanged exactly on every step, by a dense all-reduce, with no threshold at all: such a step costs under
    0.3 ms on a 1 Gbit/s link at 32 KiB, and thresholding cost small recurrent networks accuracy (docs/torch-trainer.md
    #small-models-are-exchanged-exactly). 0 here (the trainer's unit tests exercise the codec on tiny models);
    requests get :data:`EXACT_BELOW_BYTES` unless they say otherwise."""
    planned_initial_threshold: bool = False
    """tau's first value from the run's planned length: the configured first value (one optimizer step) times
    :func:`planned_threshold_multiple` of the planned steps per worker. Set when a request leaves
    ``threshold_algorithm.initial_threshold`` out and the optimizer is Adam-family; False in stored configs from
    before it existed, which keep one step."""


EXACT_BELOW_BYTES = 32 * 1024
"""``training.gradient_sharing.exact_below_bytes`` when a request leaves it out: 8,192 parameters."""


ONE_STEP = 1 - 1 / 64
"""One optimizer step of an Adam-family optimizer as a first threshold: just under the learning rate. Adam's first
step is ``lr * |g| / (|g| + eps)``, a hair under ``lr``, so a first threshold of exactly ``lr`` held back almost all
of it (the digits CNN's first message: 1.7% of the elements; walkthrough). Measured against exactly ``lr``
(2026-12-07, ``bench.sharing_accuracy --set under_step``, seeds 7 to 9): the digits CNN at batch 64 after 1, 2 and 4
epochs 21, 11 and 2.7 points under ``allreduce`` against 12, 3.5 and 0.3; the 1.1M MLP at W = 4 over 55 steps 1.1
against 0.5; at the same compression."""


def default_initial_threshold(optimizer: OptimizerSpec) -> float:
    """tau's first value when the request leaves it out: one optimizer step for Adam-family optimizers (whose
    per-element step is at most about the learning rate: just under it, :data:`ONE_STEP`), 1e-2 for SGD (whose
    step scales with the gradient).

    Measured (2026-12-02, docs/torch-trainer.md#accuracy-and-the-first-threshold): on the 1.1M-parameter MLP over
    110 steps per worker, tau0 = lr with the mean of the messages reached allreduce's accuracy at W = 2
    (0.985 against 0.986; tau0 = 1e-2 with their sum: 0.967) and came within 0.8 point at W = 4 (0.974 against
    0.981; before: 0.897), at a fifth of the compression over so short a run (the adaptive rule raises tau
    afterwards).

    RMSprop keeps Adam's one step although torch's, with no bias correction, starts at about ``lr / sqrt(1 - alpha)``
    (ten times lr at alpha 0.99). A first threshold at that step was measured (2026-12-07, ``bench.sharing_accuracy
    --set rmsprop``, three seeds) and not taken: less accurate than one Adam step in 14 of 16 runs (the digits CNN at
    lr 1e-3 after 44 to 176 steps 0.7 to 3 points under ``allreduce``, against 0.3 under to 0.9 over), at 1.1 to 7.5
    times the compression; much better only over 11 steps at batch 64 (2.6 points under against 14.8). Residual
    clipping, which drops part of the first steps, is not what costs accuracy: off, 4 runs gained up to 0.5 point
    and 8 lost up to 1.5."""
    step = ONE_STEP * optimizer.learning_rate if optimizer.type in ADAM_FAMILY else 1e-2
    return min(max(step, TAU_FLOOR), TAU_CEILING / MAX_INITIAL_MULTIPLE)  # a learning rate of 1e30 is not a 422 here


SHORT_RUN_STEPS = 88
"""Up to this many planned steps per worker tau0 stays at one optimizer step (:func:`planned_threshold_multiple`)."""
LONG_RUN_STEPS = 660
"""From this many planned steps per worker tau0 is :data:`MAX_INITIAL_MULTIPLE` optimizer steps."""
MAX_INITIAL_MULTIPLE = 10.0


def planned_threshold_multiple(planned_steps: int) -> float:
    """How many optimizer steps tau0 holds back in a run of ``planned_steps`` per worker: 1 up to 88 steps, 10 from
    660, linear between. Over a short run a high first threshold delays a large share of the updates and costs
    accuracy; over a long one it costs nothing measurable and sends a fifth of the bytes. Measured at W = 2, three
    seeds (``bench.sharing_accuracy --set tau0_steps``, docs/torch-trainer.md#accuracy-and-the-first-threshold):
    on the 9.7M MLP two steps cost half a point over 88 steps, ten cost 0.3 over 220 and none over 440; on the
    digits CNN over 220 steps three cost nothing and ten 0.7 point."""
    between = (planned_steps - SHORT_RUN_STEPS) / (LONG_RUN_STEPS - SHORT_RUN_STEPS)
    return 1.0 + (MAX_INITIAL_MULTIPLE - 1.0) * min(1.0, max(0.0, between))


def _located(path: str, spec: Mapping[str, Any], message: str) -> str:
    """``path`` down to the setting a message starts with ("initial_threshold must be ..."), when it names one."""
    first = message.split(" ", 1)[0]
    return f"{path}.{first}" if first in spec and first != "type" else path


def parse_sharing(obj: Mapping[str, Any] | None, optimizer: OptimizerSpec) -> SharingConfig:
    """Check ``training.gradient_sharing``. Left out: tau0 from :func:`default_initial_threshold` and the mean of
    the messages (their sum applies W updates of a step's size at once)."""
    obj = dict(obj or {})
    path = "training.gradient_sharing"
    unknown = sorted(set(obj) - _SHARING_KEYS)
    if unknown:
        raise SpecError(f"{path}.{unknown[0]}", f"unknown setting; known: {', '.join(sorted(_SHARING_KEYS))}")
    defaults = SharingConfig()
    given_algorithm = obj.get("threshold_algorithm") or {}
    if not isinstance(given_algorithm, Mapping):  # dict() took a list of pairs, and a string was a 500
        raise SpecError(f"{path}.threshold_algorithm", f"an object such as {{\"type\": \"adaptive\"}} (adaptive, "
                        f"fixed or target_sparsity, with its settings), got {json.dumps(given_algorithm)}")  # fmt: skip
    algorithm = {"type": "adaptive", **given_algorithm}
    planned = False
    if algorithm["type"] != "fixed" and "initial_threshold" not in algorithm:  # fixed takes only "threshold"
        algorithm["initial_threshold"] = default_initial_threshold(optimizer)
        planned = optimizer.type in ADAM_FAMILY  # times the planned length's multiple, once it is known
    try:
        make_threshold_algorithm(algorithm)
    except (ValueError, TypeError) as exc:
        raise SpecError(_located(f"{path}.threshold_algorithm", algorithm, str(exc)), str(exc)) from exc
    given = obj.get("residual_clipping", {})
    clipping: dict[str, Any] | None = None  # false: no clipping (DL4J without a residual post-processor)
    if given is not False:
        if not isinstance(given, Mapping):
            raise SpecError(f"{path}.residual_clipping", f"an object {{multiple, frequency}}, or false for none; got "
                            f"{json.dumps(given)} (leave it out for the default: 5 tau every 5 steps)")  # fmt: skip
        clipping = {**(defaults.residual_clipping or {}), **dict(given)}
    try:
        make_residual_clipping(clipping)
    except (ValueError, TypeError) as exc:
        raise SpecError(_located(f"{path}.residual_clipping", clipping or {}, str(exc)), str(exc)) from exc
    aggregation = obj.get("aggregation", "mean")
    if aggregation not in ("sum", "mean"):
        raise SpecError(f"{path}.aggregation", f"sum or mean, got {aggregation!r}")
    coding = obj.get("index_coding", "compact")
    if coding not in ("compact", "int32"):
        raise SpecError(f"{path}.index_coding", f"compact or int32, got {coding!r}")
    debug = obj.get("encoding_debug", False)
    if not isinstance(debug, bool):
        raise SpecError(f"{path}.encoding_debug", f"true or false, got {debug!r}")
    ratio = obj.get("bitmap_ratio", 16)
    if not isinstance(ratio, int) or isinstance(ratio, bool) or not 2 <= ratio <= 64:
        raise SpecError(f"{path}.bitmap_ratio", f"an integer between 2 and 64, got {ratio!r}")
    collective = obj.get("collective", "auto")
    if collective not in ("auto", "sparse", "dense"):
        raise SpecError(f"{path}.collective", f"auto, sparse or dense, got {collective!r}")
    exact = obj.get("exact_below_bytes", EXACT_BELOW_BYTES)
    if not isinstance(exact, int) or isinstance(exact, bool) or exact < 0:
        raise SpecError(f"{path}.exact_below_bytes", f"a number of bytes, 0 or more, got {exact!r}")
    return SharingConfig(
        threshold_algorithm=algorithm,
        residual_clipping=clipping,
        aggregation=aggregation,
        index_coding=coding,
        encoding_debug=debug,
        bitmap_ratio=ratio,
        collective=collective,
        exact_below_bytes=exact,
        planned_initial_threshold=planned,
    )


@dataclass(frozen=True)
class DataLayout:
    """How a barrier task turns its Arrow batches into tensors."""

    features: tuple[str, ...]
    """Numeric columns, or a single array column."""
    array_column: bool
    labels: tuple[str, ...]
    """One class-index column, or one or more regression targets."""
    task: Literal["classification", "regression"]
    num_classes: int | None
    input_shape: tuple[int, ...]
    split_column: str = "_split"
    """0 = training row, 1 = validation row (both travel in one barrier stage)."""
    order_column: str = "_row"
    """A stable row id: each task sorts by it, so reruns see the same rows in the same order."""
    weight: str | None = None
    normalizer: dict[str, Any] | None = None
    """A fitted :class:`workers.data.normalize.Normalizer` as a dict, applied to the features on load."""
    sequence: dict[str, Any] | None = None
    """A :class:`workers.data.sequences.SequenceSpec` as a dict: rows are sequences (``_x``, ``_y``, ``_len``)."""
    source: dict[str, Any] | None = None
    """Set when each task reads its rows from the files itself (:func:`workers.data.arrow_read.read_share`); the
    stage's rows are then placeholders."""


@dataclass(frozen=True)
class TrainerConfig:
    job_id: str
    network: dict[str, Any]
    optimizer: dict[str, Any]
    mode: Mode
    sharing: SharingConfig
    averaging_frequency: int
    epochs: int
    batch_size: int
    num_workers: int
    seed: int
    device: Literal["auto", "cpu", "cuda"]
    data: DataLayout
    checkpoint_dir: str
    """Where the ranks write ``epoch-<n>/`` checkpoints (storage every executor reaches)."""
    model_dir: str
    """Where rank 0 writes the trained model (``spec.json`` + ``weights.safetensors``)."""
    resume_dir: str | None = None
    init_dir: str | None = None
    """A model version's directory whose weights the network starts from (not on a resumed run)."""
    init_fresh: tuple[str, ...] = ()
    start_epoch: int = 0
    """Epochs already done (from the resumed checkpoint)."""
    monitor: tuple[str, int, str] | None = None
    """(host, port, token) of the driver's event sink; None runs silently (tests, the GPU check)."""
    rendezvous: tuple[str, int] | None = None
    """(host, port) of the job's TCPStore, which the driver opens for the stage: every rank joins it, and the data
    check's exchange goes through it too, so the tasks need no Spark ``allGather`` (which waits in whole seconds).
    None: rank 0 opens the store and its port goes through ``all_gather`` (a task run by hand)."""
    collective_timeout_s: float = 300.0
    threads: int = 1
    metrics_every: int = 1
    metrics_interval_s: float = 0.2
    """A worker sends a step's figures at most this often (and always the first and last step of an epoch): at every
    step, two small-model trainings made their driver insert ~8,000 metric rows a second and its requests' p99 went
    from 340 to 770 ms (bench.load). 0 sends every ``metrics_every``-th step."""
    store: str | None = None
    """Publish checkpoints and the model under ``<store>/jobs/<job_id>/`` (see workers.storage)."""
    export_dir: str | None = None
    export_mode: Literal["write", "read"] | None = None
    """Export data path: ``write`` saves each rank's ready tensors under ``export_dir``; ``read`` trains from them
    without touching the source data (a later job on the same data, split, normalizer and worker count)."""
    run_id: str = ""
    """This training run (one per attempt): names its partial checkpoint directories (see checkpoint.py)."""
    model_card: dict[str, Any] = field(default_factory=dict)
    """What ``spec.json`` of the trained model says besides the network: task, columns, class labels,
    normalizer, so the artifact is usable without sparktrain."""
    early_stopping: dict[str, Any] | None = None
    """``training.early_stopping`` as parsed (:mod:`workers.training.torch.early_stopping`); None: every epoch."""

    def replace_threads(self, threads: int) -> TrainerConfig:
        return replace(self, threads=max(1, int(threads)))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrainerConfig:
        d = dict(d)
        d["sharing"] = SharingConfig(**d["sharing"])
        data = dict(d["data"])
        data["features"] = tuple(data["features"])
        data["labels"] = tuple(data["labels"])
        data["input_shape"] = tuple(data["input_shape"])
        d["data"] = DataLayout(**data)
        if d.get("monitor") is not None:
            d["monitor"] = tuple(d["monitor"])
        if d.get("rendezvous") is not None:
            d["rendezvous"] = tuple(d["rendezvous"])
        return cls(**d)


@dataclass(frozen=True)
class ResumePoint:
    checkpoint_id: str
    path: str
    epoch: int
    job_id: str


@dataclass(frozen=True)
class InitPoint:
    """``training.init_from`` as planned: the model version whose weights the network starts from."""

    name: str
    version: int
    uri: str
    fresh: tuple[str, ...] = ()
    """Tensors that keep their fresh initialization (``strict: false``; workers/training/torch/warm_start.py)."""
    copied: int = 0


@dataclass(frozen=True)
class TorchPlan:
    """What a torch job runs: checked datasets, specs and options (planned once, in the request; stored with the
    job, see workers/plans.py)."""

    train: ResolvedDataset
    validation: ResolvedDataset | None
    network: dict[str, Any]
    optimizer: dict[str, Any]
    sharing: SharingConfig
    mode: Mode
    epochs: int
    batch_size: int
    num_workers: int
    seed: int
    averaging_frequency: int
    device: Literal["auto", "cpu", "cuda"]
    input_shape: tuple[int, ...]
    array_column: bool
    resume: ResumePoint | None = None
    init: InitPoint | None = None
    validation_fraction: float = 0.1
    class_labels: tuple[str, ...] | None = None
    """String class labels in index order (the label column holds strings); None when labels are indices."""
    data_path: Literal["direct", "export"] = "direct"
    export_root: str | None = None
    early_stopping: dict[str, Any] | None = None
    """``training.early_stopping`` with every default spelled out (workers/training/torch/spec/early_stopping.py)."""
    warnings: tuple[str, ...] = ()
    """Settings of the request this job does not use (app/services/planning/torch_plan.py), said when it starts."""
    categorical: dict[str, Any] | None = None
    """The one-hot encoding of ``train.categorical`` (:meth:`Categories.to_dict`), its categories read from the
    training data when the request was planned; None without categorical features."""

    @property
    def categories(self) -> Categories | None:
        return Categories.from_dict(self.categorical) if self.categorical else None

    @property
    def features(self) -> tuple[str, ...]:
        """The columns the network takes: the training data's features, with the one-hot columns
        (``city=north``) in place of each categorical one."""
        categories = self.categories
        return categories.names if categories is not None else self.train.features

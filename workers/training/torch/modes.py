"""The three ways workers combine their work each step (docs/torch-trainer.md), behind one small interface.

- :class:`GradientSharing`: the optimizer's update goes into a residual; what passes the threshold is sent as
  ±tau messages (DL4J SharedTrainingMaster, Strom 2015); every worker applies every message in rank order.
- :class:`ParameterAveraging`: local steps; parameters and optimizer state averaged every k steps.
- :class:`AllReduce`: gradients averaged every step (the DDP baseline).

Parameters live in one flat float32 buffer (each parameter is a view into it), so encoding, averaging and
checksums touch one tensor. Executor-side: torch and the codec only.
"""

from __future__ import annotations

import bisect
import math
import time
from dataclasses import dataclass
from typing import Any

import torch

from workers.codecs.threshold import MessageKind, decode_accumulate, encode_threshold
from workers.training.torch.comm import Comm, dense_is_cheaper
from workers.training.torch.config import SharingConfig, planned_threshold_multiple
from workers.training.torch.residuals import make_residual_clipping, residual_stats
from workers.training.torch.thresholds import TAU_CEILING, make_threshold_algorithm


def flatten_parameters(model: torch.nn.Module) -> torch.Tensor:
    """Move every parameter into one contiguous buffer and make the parameters views of it."""
    params = list(model.parameters())
    flat = torch.cat([p.detach().reshape(-1) for p in params]).contiguous()
    offset = 0
    for p in params:
        n = p.numel()
        p.data = flat[offset : offset + n].view_as(p)
        offset += n
    return flat


class NonFiniteUpdate(RuntimeError):
    """A worker's update or residual holds NaN or inf: every rank raises it at the same step (the flag travels
    with the message lengths), and the trainer fails the job as ``NON_FINITE_UPDATE``."""

    def __init__(self, *, step: int, worker: int, parameter: str, kind: str) -> None:
        super().__init__(f"the {kind} update of parameter {parameter!r} on worker {worker} at step {step}")
        self.step, self.worker, self.parameter, self.kind = step, worker, parameter, kind


def take_optimizer_step_into(optimizer: Any, flat: torch.Tensor, owed: torch.Tensor) -> None:
    """Take the optimizer's step (its state moves on) with the parameters pointed at ``owed``, a buffer like
    ``flat``: ``owed`` moves by ``-u``, the update ``optimizer.step()`` would subtract from the parameters, and the
    parameters themselves do not change.

    ``θ_before - θ_after`` in float32 loses every update below half an ulp of its weight (θ = 1: 1e-8 reads
    as 0). Instead the step runs on the buffer the update is to land in; none of SGD, Adam, AdamW or RMSprop reads
    its parameters except for weight decay, so what it writes there is ``owed - u``, rounded once. The terms that
    do read θ are added explicitly: L2 (``weight_decay`` of SGD, Adam, RMSprop) into the gradients as torch would,
    AdamW's decoupled decay as ``-lr·wd·θ`` into ``owed``. The parameters (views of ``flat``) are pointed at the
    same places in ``owed`` for the step and back after it, so nothing is copied or zeroed: gradient sharing keeps
    its residual negated (``owed = -residual``) for this, 6 ms a step less on a 9.7M-parameter MLP on one core than
    a zeroed scratch buffer subtracted from the residual afterwards.
    """
    groups = optimizer.param_groups  # decoupled decay: AdamW's, or asked of Adam, NAdam or RAdam by their flag
    decoupled = isinstance(optimizer, torch.optim.AdamW) or any(g.get("decoupled_weight_decay") for g in groups)
    saved = []
    for group in optimizer.param_groups:
        decay = float(group.get("weight_decay", 0.0) or 0.0)
        saved.append(decay)
        if decay and not decoupled:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.add_(p, alpha=decay)
        group["weight_decay"] = 0.0
    views: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
    spans: list[list[slice]] = []  # per group, each parameter's place in flat (params are views of flat)
    try:
        for group in optimizer.param_groups:
            spans.append([])
            for p in group["params"]:
                start = (p.data_ptr() - flat.data_ptr()) // flat.element_size()
                spans[-1].append(slice(start, start + p.numel()))
                views.append((p, p.data))
                p.data = owed[spans[-1][-1]].view_as(p)
        optimizer.step()
    finally:
        for p, view in views:
            p.data = view
        for group, decay in zip(optimizer.param_groups, saved, strict=True):
            group["weight_decay"] = decay
    if decoupled:
        for group, decay, places in zip(optimizer.param_groups, saved, spans, strict=True):
            for place in places if decay else ():
                owed[place].sub_(flat[place], alpha=float(group["lr"]) * decay)


@dataclass
class StepStats:
    bytes_sent: int
    """The codec's size of what this worker contributed this step (its message, or its dense buffer): what a
    codec ratio compares with ``dense_bytes``."""
    dense_bytes: int
    clipped_mass: float = 0.0
    bitmap: bool = False
    tau: float | None = None
    sparsity: float | None = None
    debug: dict[str, float] | None = None
    collective: int | None = None
    """Gradient sharing: 0 when the step all-gathered the messages, 1 when it all-reduced their decoded sum."""
    phases: dict[str, float] | None = None
    """Milliseconds of this step's communication part by phase (``encode``, ``exchange``, ``apply``): the
    console's per-worker phase timeline, beside the trainer's own ``data`` and ``compute``."""


class Strategy:
    def __init__(self, model: torch.nn.Module, flat: torch.Tensor, optimizer: Any, comm: Comm) -> None:
        self.model, self.flat, self.optimizer, self.comm = model, flat, optimizer, comm
        self.params = list(model.parameters())
        self.dense_bytes = flat.numel() * 4

    def step(self, global_step: int) -> StepStats:
        raise NotImplementedError

    def plan(self, planned_steps: int) -> float | None:
        """Told the run's length (steps per worker) before its first step; gradient sharing picks its first
        threshold from it. Returns that threshold, or None when nothing was picked."""
        return None

    def flagged_step(self, global_step: int, *, stop: bool, nan_loss: bool) -> tuple[bool, bool, StepStats | None]:
        """Whether any rank asked to stop or saw a non-finite loss and, when none did, the step taken.

        Here the flags take an all-reduce of their own before the step; gradient sharing overrides this and
        carries them in its length exchange, one collective fewer per step."""
        stop, nan = self.comm.any_flags(stop, nan_loss)
        if stop or nan:
            return stop, nan, None
        return False, False, self.step(global_step)

    def gradients_into(self, buffer: torch.Tensor) -> torch.Tensor:
        """The parameters' gradients laid out as the flat buffer is (zeros where a parameter has none)."""
        offset = 0
        for p in self.params:
            n = p.numel()
            if p.grad is None:
                buffer[offset : offset + n].zero_()
            else:
                buffer[offset : offset + n].copy_(p.grad.reshape(-1))
            offset += n
        return buffer

    def set_gradients(self, flat_grads: torch.Tensor) -> None:
        """Each parameter's gradient from ``flat_grads`` (laid out as the flat buffer is)."""
        offset = 0
        for p in self.params:
            n = p.numel()
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            p.grad.copy_(flat_grads[offset : offset + n].view_as(p))
            offset += n

    def parameter_at(self, index: int) -> str:
        """The name of the parameter that element ``index`` of the flat buffer belongs to."""
        names, starts, start = [], [], 0
        for name, p in self.model.named_parameters():
            names.append(name)
            starts.append(start)
            start += p.numel()
        return names[bisect.bisect_right(starts, index) - 1]

    def residual_norm(self) -> float | None:
        """The L2 norm of what this worker holds back (gradient sharing's residual); None where nothing is."""
        return None

    def end_epoch(self) -> int:
        """Make the replicas identical where the mode lets them drift (buffers such as batch-norm statistics);
        returns the bytes this worker contributed (counted with the steps' exchanges: the mode needs them)."""
        sent = 0
        with torch.no_grad():
            for buffer in self.model.buffers():
                if buffer.is_floating_point():
                    self.comm.mean_(buffer)
                    sent += buffer.numel() * buffer.element_size()
        return sent

    def state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        return {}, {}

    def load_state(self, tensors: dict[str, torch.Tensor], extra: dict[str, Any]) -> None:
        return None


class AllReduce(Strategy):
    def step(self, global_step: int) -> StepStats:
        t0 = time.perf_counter()
        grads = self.gradients_into(torch.empty_like(self.flat))
        t1 = time.perf_counter()
        self.comm.mean_(grads)
        t2 = time.perf_counter()
        self.set_gradients(grads)
        self.optimizer.step()
        return StepStats(
            bytes_sent=self.dense_bytes, dense_bytes=self.dense_bytes, phases=_phases(t0, t1, t2, time.perf_counter())
        )


class ParameterAveraging(Strategy):
    def __init__(self, *args: Any, frequency: int) -> None:
        super().__init__(*args)
        self.frequency = frequency

    def _average(self) -> int:
        self.comm.mean_(self.flat)
        sent = self.dense_bytes
        for entries in self.optimizer.state.values():
            for name, value in entries.items():
                if isinstance(value, torch.Tensor) and value.is_floating_point() and name != "step":
                    self.comm.mean_(value)
                    sent += value.numel() * value.element_size()
        return sent

    def step(self, global_step: int) -> StepStats:
        t0 = time.perf_counter()
        self.optimizer.step()
        t1 = time.perf_counter()
        sent = self._average() if (global_step + 1) % self.frequency == 0 else 0
        t2 = time.perf_counter()
        phases = {"encode": 0.0, "exchange": (t2 - t1) * 1e3, "apply": (t1 - t0) * 1e3}
        return StepStats(bytes_sent=sent, dense_bytes=self.dense_bytes, phases=phases)

    def end_epoch(self) -> int:
        return self._average() + super().end_epoch()


class GradientSharing(Strategy):
    def __init__(self, *args: Any, sharing: SharingConfig) -> None:
        super().__init__(*args)
        self.sharing = sharing
        self.algorithm = make_threshold_algorithm(sharing.threshold_algorithm)
        self.clipping = make_residual_clipping(sharing.residual_clipping)
        self.owed = torch.zeros_like(self.flat)
        """The residual negated (:func:`take_optimizer_step_into` writes the optimizer's update straight into it); the
        codec, the clipping and the non-finite check are symmetric in the sign, so they run on it as it is, and every
        message carries minus what it would carry from the residual: the receivers add it (``scale``, not ``-scale``).
        Checkpoints hold the residual itself (:meth:`state`)."""
        self.clipped_mass = 0.0
        self._delta = torch.empty_like(self.flat)
        self.scale = 1.0 if sharing.aggregation == "sum" else 1.0 / self.comm.world_size
        self.encode_s = 0.0
        self.exchange_s = 0.0
        self.dense_steps = 0
        self.exact = sharing.collective == "auto" and self.dense_bytes <= sharing.exact_below_bytes
        """A small model: every step is a dense all-reduce of the whole residual, no threshold."""

    @property
    def residual(self) -> torch.Tensor:
        """What this worker has not sent yet (a copy: the strategy keeps it negated, :attr:`owed`)."""
        return torch.neg(self.owed)

    def plan(self, planned_steps: int) -> float | None:
        """tau's first value for a run of ``planned_steps`` per worker, when the request left it to the trainer
        (:attr:`SharingConfig.planned_initial_threshold`): the configured one step times
        :func:`planned_threshold_multiple`. None when it did not, the model is exchanged exactly, or the run
        resumed (its threshold comes from the checkpoint)."""
        if not self.sharing.planned_initial_threshold or self.exact or self.algorithm.threshold is not None:
            return None
        tau0 = float(self.sharing.threshold_algorithm["initial_threshold"]) * planned_threshold_multiple(planned_steps)
        tau0 = min(tau0, TAU_CEILING)  # a stored config from before the default was bounded (1e30 times 10)
        self.algorithm.start_at(tau0)
        return tau0

    def residual_norm(self) -> float | None:
        """Asked for only on the steps a worker reports (a pass over the residual: 3 ms on a 9.7M model); a model
        exchanged exactly keeps nothing back."""
        return 0.0 if self.exact else float(self.owed.norm())

    def _dense(self, longest: int) -> bool:
        """This step's collective, the same on every rank (every rank knows every message length)."""
        if self.sharing.collective != "auto":
            return self.sharing.collective == "dense"
        return dense_is_cheaper(longest, self.dense_bytes, self.comm.world_size)

    def _non_finite(self, values: torch.Tensor | None = None) -> int:
        """0 when ``values`` (the residual, negated, by default) are finite, else a code naming the first
        non-finite element: 2*index + 1 for NaN, 2*index + 2 for inf. One reduction on the fast path (a NaN or inf
        anywhere makes the sum non-finite; a finite sum that overflowed is checked element by element before being
        called bad)."""
        values = self.owed if values is None else values
        if math.isfinite(float(values.sum())):
            return 0
        bad = torch.nonzero(~torch.isfinite(values))
        if bad.numel() == 0:
            return 0
        index = int(bad[0, 0])
        return 2 * index + (1 if math.isnan(float(values[index])) else 2)

    def step(self, global_step: int) -> StepStats:
        stop, _, stats = self.flagged_step(global_step, stop=False, nan_loss=False)
        if stats is None:
            raise RuntimeError(f"another worker {'stopped' if stop else 'saw a non-finite loss'} at this step")
        return stats

    def flagged_step(self, global_step: int, *, stop: bool, nan_loss: bool) -> tuple[bool, bool, StepStats | None]:
        """The step, with this rank's flags in its length exchange: bit 0 stop, bit 1 a non-finite loss, the bits
        above the residual's :meth:`_non_finite` code. Any flag on any rank skips the payload on every rank."""
        with torch.no_grad():
            started = time.perf_counter()
            if self.exact:
                return self._exact_step(global_step, int(stop) | int(nan_loss) << 1, started)
            take_optimizer_step_into(self.optimizer, self.flat, self.owed)
            flag = int(stop) | int(nan_loss) << 1 | self._non_finite() << 2

            t0 = time.perf_counter()
            tau = self.algorithm.next_threshold()
            encoded = encode_threshold(  # of -residual: the message is minus the residual's
                self.owed, tau, index_coding=self.sharing.index_coding, bitmap_ratio=self.sharing.bitmap_ratio
            )
            t1 = time.perf_counter()
            sizes, flags = self.comm.exchange_lengths(encoded.nbytes, flag)
            exchange = time.perf_counter() - t1
            any_stop, any_nan = self._check_flags(flags, global_step)
            if any_stop or any_nan:
                return any_stop, any_nan, None
            dense = self._dense(max(sizes))
            if dense:
                # A ring all-reduce puts the same bytes on the wire whatever its values, so it carries the whole
                # residual, exactly: the message's ±tau put back, plus what the threshold held back. Nothing is
                # left behind on a dense step (and residual clipping has nothing to clip).
                decode_accumulate([encoded], self.owed)
                torch.mul(self.owed, self.scale, out=self._delta)  # -scale * the residual
                self.owed.zero_()
                t2 = time.perf_counter()
                self.comm.sum_(self._delta)
                exchange += time.perf_counter() - t2
            else:
                t2 = time.perf_counter()
                messages = self.comm.all_gather_padded(encoded.message, sizes)
                exchange += time.perf_counter() - t2
                own = [encoded if rank == self.comm.rank else m for rank, m in enumerate(messages)]
                # straight into the parameters, its own message without parsing it, in rank order; bitmaps summed
                # per element first and subtracted once (one rounding, as through a zeroed buffer; one pass in C)
                # (the messages are minus the residuals' messages: added, they take the update off)
                decode_accumulate(own, self.flat, scale=self.scale, sum_bitmaps=True)
            if dense:
                self.flat.add_(self._delta)
            self.dense_steps += dense
            self.algorithm.observe(encoded.count, encoded.n)
            clipped = self.clipping.apply(self.owed, encoded.tau, global_step)
            self.clipped_mass += clipped
            t3 = time.perf_counter()
            self.encode_s += t3 - t0 - exchange
            self.exchange_s += exchange
            debug = residual_stats(self.owed, encoded.tau) if self.sharing.encoding_debug else None
        return (
            False,
            False,
            StepStats(
                # a dense step carried the whole residual (4 bytes an element): the codec saved nothing on it
                bytes_sent=self.dense_bytes if dense else encoded.nbytes,
                dense_bytes=self.dense_bytes,
                clipped_mass=clipped,
                bitmap=encoded.kind == MessageKind.BITMAP,
                tau=encoded.tau,
                sparsity=1.0 if dense else encoded.count / encoded.n,
                debug=debug,
                collective=int(dense),
                # encode: the optimizer's update into the residual too; apply: decoding and applying the sum
                phases=_phases(started, t1, t1 + exchange, t3),
            ),
        )

    def _check_flags(self, flags: list[int], global_step: int) -> tuple[bool, bool]:
        """(any rank stopped, any rank saw a non-finite loss); raises :class:`NonFiniteUpdate` when a rank's
        residual went non-finite."""
        any_stop, any_nan = any(f & 1 for f in flags), any(f & 2 for f in flags)
        if any_stop or any_nan:
            return any_stop, any_nan
        bad = next(((rank, f >> 2) for rank, f in enumerate(flags) if f >> 2), None)
        if bad is not None:
            rank, code = bad
            raise NonFiniteUpdate(
                step=global_step + 1,
                worker=rank,
                parameter=self.parameter_at((code - 1) // 2),
                kind="NaN" if code % 2 else "infinite",
            )
        return False, False

    def _exact_step(self, global_step: int, flag: int, started: float) -> tuple[bool, bool, StepStats | None]:
        """A small model's step: the flags, then a ring all-reduce of every rank's gradients (their mean, or their
        sum with ``aggregation: "sum"``), then the optimizer's step on the result, the same on every rank.

        Exchanging the optimizers' updates instead (each worker's Adam normalizing its own gradient, the mean of
        those steps applied) cost the shipped LSTM 2.2 points against ``allreduce`` (bench.sharing_accuracy,
        2026-12-02): on a model this small nothing is saved by sharing updates, so the step is ``allreduce``'s.
        The residual stays empty; a non-finite gradient fails the step as a non-finite update would."""
        grads = self.gradients_into(self._delta)
        flag |= self._non_finite(grads) << 2
        t1 = time.perf_counter()
        _, flags = self.comm.exchange_lengths(0, flag)
        any_stop, any_nan = self._check_flags(flags, global_step)
        if any_stop or any_nan:
            return any_stop, any_nan, None
        if self.scale != 1.0:
            grads.mul_(self.scale)
        self.comm.sum_(grads)
        exchanged = time.perf_counter()
        self.set_gradients(grads)
        self.optimizer.step()
        self.dense_steps += 1
        done = time.perf_counter()
        self.exchange_s += exchanged - t1
        self.encode_s += t1 - started
        stats = StepStats(bytes_sent=self.dense_bytes, dense_bytes=self.dense_bytes, tau=0.0, sparsity=1.0,
                          collective=1, phases=_phases(started, t1, exchanged, done))  # fmt: skip
        return False, False, stats

    def state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        return {"residual": self.residual}, {"threshold": self.algorithm.state_dict()}  # the residual, not negated

    def load_state(self, tensors: dict[str, torch.Tensor], extra: dict[str, Any]) -> None:
        if "residual" in tensors:
            self.owed.copy_(tensors["residual"].to(self.owed.device)).neg_()
        if "threshold" in extra:
            self.algorithm.load_state_dict(extra["threshold"])


def make_strategy(
    mode: str,
    model: torch.nn.Module,
    flat: torch.Tensor,
    optimizer: Any,
    comm: Comm,
    *,
    sharing: SharingConfig,
    averaging_frequency: int,
) -> Strategy:
    if mode == "gradient_sharing":
        return GradientSharing(model, flat, optimizer, comm, sharing=sharing)
    if mode == "parameter_averaging":
        return ParameterAveraging(model, flat, optimizer, comm, frequency=averaging_frequency)
    if mode == "allreduce":
        return AllReduce(model, flat, optimizer, comm)
    raise ValueError(f"unknown mode {mode!r}")


def _phases(t0: float, t1: float, t2: float, t3: float) -> dict[str, float]:
    """Encode (t0..t1), exchange (t1..t2) and apply (t2..t3), in milliseconds."""
    return {"encode": (t1 - t0) * 1e3, "exchange": (t2 - t1) * 1e3, "apply": (t3 - t2) * 1e3}

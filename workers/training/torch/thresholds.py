"""Threshold algorithms for threshold-encoded update sharing (residual clipping and statistics: residuals.py).

Mirrors DL4J's ``encoding/threshold/*ThresholdAlgorithm`` and ``ResidualClippingPostProcessor``. Per worker and
step::

    tau = algorithm.next_threshold()
    encoded = encode_threshold(residual, tau)
    algorithm.observe(encoded.count, encoded.n)
    clipping.apply(residual, tau, step)

Sparsity is always *what was sent* divided by N: an empty message (fewer than 2 elements reached tau) counts
0, as in DL4J, and a bitmap message counts its true ``count / N``. DL4J feeds the adaptive rule 1/16 after a
bitmap step instead; since a bitmap is only chosen when ``count >= N/16`` and every sparsity band here must
stay below 1/16, both give the same decision, and the true figure is the one worth reporting.

State (``state_dict``) is a plain JSON-able dict that checkpoints store per worker. Each worker keeps its own
tau for the whole run: the workers live across epochs, so DL4J's between-epoch reduction of the workers'
states (mean threshold, mean sparsity), which re-seeds fresh workers, has nothing to re-seed here and is not
done. A resume with a different number of workers starts tau afresh.
"""

from __future__ import annotations

import operator
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from workers.numbers import is_finite_number, shown

if TYPE_CHECKING:  # torch is imported where tensors are touched: the API validates specs without it
    pass

__all__ = [
    "DEFAULT_DECAY",
    "MAX_SPARSITY_BAND",
    "TAU_CEILING",
    "TAU_FLOOR",
    "AdaptiveThreshold",
    "FixedThreshold",
    "TargetSparsityThreshold",
    "ThresholdAlgorithm",
    "make_threshold_algorithm",
]

DEFAULT_DECAY = 0.5 ** (1 / 20)
"""Per-step factor: tau can move by 2x in 20 steps (DL4J's default)."""

MAX_SPARSITY_BAND = 1 / 16
"""Sparsity targets must stay below the bitmap switch point (count >= N/16)."""

# tau is kept a normal float32 so an algorithm left to drift (e.g. all-zero updates, sparsity 0 forever)
# never hands the encoder 0 or inf.
TAU_FLOOR = 1e-30
TAU_CEILING = 1e30

_STATE_KEYS = frozenset({"type", "threshold", "last_sparsity", "steps"})


def number(name: str, value: Any) -> float:
    if not is_finite_number(value):
        raise ValueError(f"{name} must be a finite number, got {shown(value)}")
    return float(value)


def _positive_tau(name: str, value: Any) -> float:
    tau = number(name, value)
    if not TAU_FLOOR <= tau <= TAU_CEILING:
        raise ValueError(f"{name} must be in [{TAU_FLOOR:g}, {TAU_CEILING:g}], got {value!r}")
    return tau


def _decay(value: Any) -> float:
    decay = number("decay", value)
    if not 0.5 <= decay < 1:
        raise ValueError(f"decay must be in [0.5, 1), got {value!r}")
    return decay


def _sparsity(name: str, value: Any) -> float:
    sparsity = number(name, value)
    if not 0 < sparsity < MAX_SPARSITY_BAND:
        raise ValueError(f"{name} must be in (0, 1/16), got {value!r}")
    return sparsity


def _clamp_tau(tau: float) -> float:
    return min(max(tau, TAU_FLOOR), TAU_CEILING)


class ThresholdAlgorithm(ABC):
    """Chooses tau for each step from the sparsity of the previous message.

    ``next_threshold()`` is called once per step before encoding and ``observe()`` once after. Each
    observation is used by at most one adaptation; with none pending, tau stays where it is.
    """

    type_name: ClassVar[str]

    def __init__(self) -> None:
        self._threshold: float | None = None
        self._last_sparsity: float | None = None
        self._steps = 0
        self._first: float | None = None

    @property
    def threshold(self) -> float | None:
        """The last tau returned by :meth:`next_threshold` (None before the first call)."""
        return self._threshold

    @property
    def last_sparsity(self) -> float | None:
        """The observed sparsity not yet used for an adaptation."""
        return self._last_sparsity

    def next_threshold(self) -> float:
        """tau for the step about to be encoded."""
        if self._threshold is None:
            tau = self._first if self._first is not None else self._initial()
        elif self._last_sparsity is None:
            tau = self._threshold
        else:
            tau = _clamp_tau(self._adapt(self._threshold, self._last_sparsity))
        self._threshold = tau
        self._last_sparsity = None
        self._steps += 1
        return tau

    def observe(self, count: int, n: int) -> None:
        """Record the message just encoded with the last tau: ``count`` elements sent out of ``n``."""
        try:
            count, n = operator.index(count), operator.index(n)
        except TypeError:
            raise ValueError(f"count and n must be integers, got count={count!r}, n={n!r}") from None
        if not 0 <= count <= n:
            raise ValueError(f"count={count} must be in [0, n={n}]")
        self._last_sparsity = count / n if n else 0.0

    def start_at(self, tau: float) -> None:
        """Start from ``tau`` instead of the configured first value; only before the first step."""
        if self._threshold is not None:
            raise RuntimeError("the threshold has already started")
        self._first = _positive_tau("first threshold", tau)

    @abstractmethod
    def _initial(self) -> float: ...

    @abstractmethod
    def _adapt(self, tau: float, sparsity: float) -> float: ...

    @abstractmethod
    def spec(self) -> dict[str, Any]:
        """The configuration, in the form :func:`make_threshold_algorithm` accepts."""

    def state_dict(self) -> dict[str, Any]:
        return {
            "type": self.type_name,
            "threshold": self._threshold,
            "last_sparsity": self._last_sparsity,
            "steps": self._steps,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        threshold, last_sparsity, steps = _check_state(state, self.type_name)
        self._threshold = threshold
        self._last_sparsity = last_sparsity
        self._steps = steps

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.spec().items() if k != "type")
        return f"{type(self).__name__}({args})"


def _check_state(state: Mapping[str, Any], type_name: str | None) -> tuple[float | None, float | None, int]:
    if not isinstance(state, Mapping):
        raise ValueError(f"threshold state must be a mapping, got {type(state).__name__}")
    keys = set(state)
    if keys != _STATE_KEYS:
        problems = []
        if keys - _STATE_KEYS:
            problems.append(f"unknown keys {sorted(keys - _STATE_KEYS)}")
        if _STATE_KEYS - keys:
            problems.append(f"missing keys {sorted(_STATE_KEYS - keys)}")
        raise ValueError(f"threshold state: {'; '.join(problems)}")
    if type_name is not None and state["type"] != type_name:
        raise ValueError(f"threshold state is for type {state['type']!r}, not {type_name!r}")
    threshold = state["threshold"]
    if threshold is not None:
        threshold = _positive_tau("state threshold", threshold)
    last_sparsity = state["last_sparsity"]
    if last_sparsity is not None:
        last_sparsity = number("state last_sparsity", last_sparsity)
        if not 0 <= last_sparsity <= 1:
            raise ValueError(f"state last_sparsity must be in [0, 1], got {last_sparsity!r}")
    steps = state["steps"]
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"state steps must be an int >= 0, got {steps!r}")
    return threshold, last_sparsity, steps


class AdaptiveThreshold(ThresholdAlgorithm):
    """DL4J's AdaptiveThresholdAlgorithm: keep the sparsity within ``[min_sparsity, max_sparsity]``.

    Too sparse (``s < min``): ``tau *= decay``; too dense (``s > max``): ``tau /= decay``; otherwise keep.
    ``initial`` defaults to 1e-2 here; a request that leaves it out gets one optimizer step instead
    (:func:`workers.training.torch.config.default_initial_threshold`: just under Adam's learning rate). 1e-2 came
    from a CPU simulation run before the trainer was written (2026-11-29; the simulator was not kept), which found it as
    accurate as 1e-3 at 2-3x the compression; the trainer measured otherwise over short runs (110 steps per
    worker on the 1.1M-parameter MLP: 0.967 against 0.985 at W = 2 and 0.897 against 0.974 at W = 4).
    """

    type_name = "adaptive"

    def __init__(
        self,
        initial: float = 1e-2,
        min_sparsity: float = 1e-4,
        max_sparsity: float = 1e-2,
        decay: float = DEFAULT_DECAY,
    ) -> None:
        super().__init__()
        self.initial = _positive_tau("initial_threshold", initial)
        self.min_sparsity = _sparsity("min_sparsity", min_sparsity)
        self.max_sparsity = _sparsity("max_sparsity", max_sparsity)
        if self.min_sparsity >= self.max_sparsity:
            raise ValueError(f"min_sparsity ({min_sparsity!r}) must be < max_sparsity ({max_sparsity!r})")
        self.decay = _decay(decay)

    def _initial(self) -> float:
        return self.initial

    def _adapt(self, tau: float, sparsity: float) -> float:
        if sparsity < self.min_sparsity:
            return tau * self.decay
        if sparsity > self.max_sparsity:
            return tau / self.decay
        return tau

    def spec(self) -> dict[str, Any]:
        return {
            "type": self.type_name,
            "initial_threshold": self.initial,
            "min_sparsity": self.min_sparsity,
            "max_sparsity": self.max_sparsity,
            "decay": self.decay,
        }


class FixedThreshold(ThresholdAlgorithm):
    """A constant tau (observations are still recorded, for reporting)."""

    type_name = "fixed"

    def __init__(self, tau: float) -> None:
        super().__init__()
        self.tau = _positive_tau("threshold", tau)

    def _initial(self) -> float:
        return self.tau

    def _adapt(self, tau: float, sparsity: float) -> float:
        return self.tau

    def spec(self) -> dict[str, Any]:
        return {"type": self.type_name, "threshold": self.tau}


class TargetSparsityThreshold(ThresholdAlgorithm):
    """DL4J's TargetSparsityThresholdAlgorithm: move tau towards ``target`` each step unless exactly on it."""

    type_name = "target_sparsity"

    def __init__(self, initial: float = 1e-3, target: float = 1e-3, decay: float = DEFAULT_DECAY) -> None:
        super().__init__()
        self.initial = _positive_tau("initial_threshold", initial)
        self.target = _sparsity("target_sparsity", target)
        self.decay = _decay(decay)

    def _initial(self) -> float:
        return self.initial

    def _adapt(self, tau: float, sparsity: float) -> float:
        if sparsity < self.target:
            return tau * self.decay
        if sparsity > self.target:
            return tau / self.decay
        return tau

    def spec(self) -> dict[str, Any]:
        return {
            "type": self.type_name,
            "initial_threshold": self.initial,
            "target_sparsity": self.target,
            "decay": self.decay,
        }


_SPEC_KEYS: dict[str, dict[str, str]] = {
    # spec key -> constructor argument
    "adaptive": {
        "initial_threshold": "initial",
        "min_sparsity": "min_sparsity",
        "max_sparsity": "max_sparsity",
        "decay": "decay",
    },
    "fixed": {"threshold": "tau"},
    "target_sparsity": {"initial_threshold": "initial", "target_sparsity": "target", "decay": "decay"},
}
_ALGORITHMS: dict[str, type[ThresholdAlgorithm]] = {
    "adaptive": AdaptiveThreshold,
    "fixed": FixedThreshold,
    "target_sparsity": TargetSparsityThreshold,
}


def make_threshold_algorithm(spec: Mapping[str, Any]) -> ThresholdAlgorithm:
    """Build an algorithm from a plain dict such as ``{"type": "adaptive", "initial_threshold": 1e-2}``.

    Omitted keys take the class defaults (``fixed`` requires ``threshold``). Unknown types or keys and
    invalid values raise ValueError naming them.
    """
    if not isinstance(spec, Mapping):
        raise ValueError(f"threshold algorithm spec must be a mapping, got {type(spec).__name__}")
    kind = spec.get("type")
    if kind not in _SPEC_KEYS:
        raise ValueError(f"unknown threshold algorithm type {kind!r}; expected one of {sorted(_SPEC_KEYS)}")
    allowed = _SPEC_KEYS[kind]
    unknown = sorted(set(spec) - set(allowed) - {"type"})
    if unknown:
        raise ValueError(f"unknown keys for threshold algorithm {kind!r}: {unknown}; allowed: {sorted(allowed)}")
    if kind == "fixed" and "threshold" not in spec:
        raise ValueError("threshold algorithm 'fixed' needs 'threshold'")
    kwargs = {argument: spec[key] for key, argument in allowed.items() if key in spec}
    return _ALGORITHMS[kind](**kwargs)

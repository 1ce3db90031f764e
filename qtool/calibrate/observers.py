"""Observers record statistics of activation tensors as the engine produces them.

Statistics are mergeable (`merge`) and serialisable (`state` / `from_state`) so that calibration
can be sharded across machines and combined; the histogram calibrators (percentile, MSE, KL) plug
in as further `RangeObserver` subclasses with the same three operations.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from typing import Any

import numpy as np


class RangeObserver(abc.ABC):
    """Base: sees (tensor index, value) pairs, yields a (min, max) range per tensor."""

    kind = "base"

    def __init__(self, tensors: Iterable[int]) -> None:
        self.tensors = frozenset(tensors)

    def __call__(self, tensor_index: int, value: np.ndarray) -> None:
        if tensor_index in self.tensors and value.size:
            self.update(tensor_index, value)

    @abc.abstractmethod
    def update(self, tensor_index: int, value: np.ndarray) -> None:
        """Fold one produced value of a tensor (all samples of a chunk) into the statistic."""

    @abc.abstractmethod
    def ranges(self) -> dict[int, tuple[float, float]]:
        """The calibrated (min, max) of every observed tensor."""

    @abc.abstractmethod
    def merge(self, other: RangeObserver) -> None:
        """Combine the statistics of another shard of the same calibration."""

    @abc.abstractmethod
    def state(self) -> dict[str, Any]:
        """A JSON-ready form of the statistics, for sharded calibration."""


class MinMaxObserver(RangeObserver):
    """Global min/max over every sample: TensorFlow's calibrator rule, not a moving average."""

    kind = "minmax"

    def __init__(self, tensors: Iterable[int]) -> None:
        super().__init__(tensors)
        self._min: dict[int, float] = {}
        self._max: dict[int, float] = {}

    def update(self, tensor_index: int, value: np.ndarray) -> None:
        low = float(np.min(value))
        high = float(np.max(value))
        if not (np.isfinite(low) and np.isfinite(high)):
            finite = value[np.isfinite(value)]
            if not finite.size:
                return
            low, high = float(finite.min()), float(finite.max())
        self._min[tensor_index] = min(low, self._min.get(tensor_index, low))
        self._max[tensor_index] = max(high, self._max.get(tensor_index, high))

    def ranges(self) -> dict[int, tuple[float, float]]:
        return {t: (self._min[t], self._max[t]) for t in self._min}

    def merge(self, other: RangeObserver) -> None:
        for t, (low, high) in other.ranges().items():
            self._min[t] = min(low, self._min.get(t, low))
            self._max[t] = max(high, self._max.get(t, high))

    def state(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "ranges": {str(t): [lo, hi] for t, (lo, hi) in self.ranges().items()},
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> MinMaxObserver:
        observer = cls(int(t) for t in state["ranges"])
        for t, (low, high) in state["ranges"].items():
            observer._min[int(t)] = float(low)
            observer._max[int(t)] = float(high)
        return observer

"""Error metrics between a reference signal and its quantized approximation."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike


def sqnr_from_sums(signal: float, noise: float) -> float:
    """10 log10(signal / noise) in dB; inf when there is no noise at all."""
    if noise == 0:
        return float("inf")
    return float(10 * np.log10(max(signal, 1e-300) / noise))


def sqnr_db(reference: ArrayLike, test: ArrayLike) -> float:
    """Signal-to-quantization-noise ratio of `test` against `reference`, in dB (float64 sums)."""
    reference = np.asarray(reference, dtype=np.float64)
    noise = float(np.sum((reference - np.asarray(test, dtype=np.float64)) ** 2))
    return sqnr_from_sums(float(np.sum(reference**2)), noise)


@dataclass
class SqnrAccumulator:
    """SQNR over data seen a chunk at a time: the sums of squares add up exactly across chunks
    (and across shards, with `merge`)."""

    signal: float = 0.0
    noise: float = 0.0

    def add(self, reference: ArrayLike, test: ArrayLike) -> None:
        """Add one chunk's reference and test values (float64 sums of squares)."""
        reference = np.asarray(reference, dtype=np.float64)
        self.signal += float(np.sum(reference**2))
        self.noise += float(np.sum((reference - np.asarray(test, dtype=np.float64)) ** 2))

    def merge(self, other: SqnrAccumulator) -> None:
        """Add another accumulator's sums (another shard of the same data)."""
        self.signal += other.signal
        self.noise += other.noise

    @property
    def db(self) -> float:
        """The SQNR of everything added, in dB; inf when there is no noise."""
        return sqnr_from_sums(self.signal, self.noise)

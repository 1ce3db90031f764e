"""Inputs of the data-movement kernel tests (layout, joins, slicing, padding, generators).

Activations of shape (N, ...) are declared [1, ...]: the engine runs them as one batch when the
kernel's batch rule allows it, once per sample when the rule fails but the outputs keep a leading
1, and the whole graph sample by sample otherwise. Cases name which of these they reach.
"""

from __future__ import annotations

import numpy as np

N = 4  # samples per batched activation

i32 = np.int32
i64 = np.int64


def random_array(shape: tuple[int, ...], seed: int = 0, dtype=np.float32) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-50, 50, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)

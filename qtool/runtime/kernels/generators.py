"""Generators: SHAPE, FILL and RANGE build their output from argument values instead of moving
an input's elements. None is batch-safe: what they make describes one (declared batch-1) sample.
"""

from __future__ import annotations

import numpy as np

from qtool.model.types import numpy_dtype
from qtool.runtime.kernels.movement import ints
from qtool.runtime.registry import OpContext, kernel, never


@kernel("SHAPE", batch=never)
def shape(ctx: OpContext) -> np.ndarray:
    """SHAPE: the input's shape as a vector of `out_type`."""
    # Never batch-safe: the result describes one (declared batch-1) sample.
    return np.asarray(ctx.inputs[0].shape, dtype=numpy_dtype(ctx.option("out_type")))


@kernel("FILL", batch=never)
def fill(ctx: OpContext) -> np.ndarray:
    """FILL: an array of shape `dims` (input 0) holding the scalar value of input 1, in its type."""
    value = np.asarray(ctx.inputs[1])
    return np.full(ints(ctx.inputs[0]), value.reshape(()), dtype=value.dtype)


@kernel("RANGE", batch=never)
def range_(ctx: OpContext) -> np.ndarray:
    """RANGE: start, start + delta, ... up to but excluding limit, accumulated as TFLite adds
    (value += delta)."""
    start, limit, delta = (np.asarray(ctx.inputs[i]).reshape(()) for i in range(3))
    dtype = start.dtype
    if np.issubdtype(dtype, np.integer):
        count = (abs(int(limit) - int(start)) + abs(int(delta)) - 1) // abs(int(delta))
    else:
        count = int(np.ceil(np.abs((limit - start) / delta)))
    # TFLite accumulates `value += delta`; a sequential cumsum rounds the same way.
    steps = np.full(count, delta, dtype=dtype)
    if count:
        steps[0] = start
    return np.cumsum(steps, dtype=dtype)

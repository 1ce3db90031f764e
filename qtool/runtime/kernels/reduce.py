"""Reductions over axes (MEAN, SUM, REDUCE_*), ARG_MAX/ARG_MIN and CUMSUM.

Every op here takes its axes from input 1. TFLite normalises negative axes and ignores duplicates;
an empty axis list reduces nothing (the output is the input). The sample axis survives batching
exactly when the (constant) axes leave axis 0 alone.
"""

from __future__ import annotations

import numpy as np

from qtool.errors import ModelError, UnsupportedOpError
from qtool.model.types import TensorType, numpy_dtype
from qtool.runtime.registry import OpContext, kernel


def _rank(ctx: OpContext) -> int:
    x = ctx.inputs[0]
    return x.ndim if x is not None else len(ctx.input_shape(0))


def _axes(ctx: OpContext) -> tuple[int, ...]:
    """The axes of input 1, made non-negative and deduplicated (sorted)."""
    rank = _rank(ctx)
    axes = np.asarray(ctx.inputs[1]).reshape(-1).astype(np.int64)
    if np.any((axes < -rank) | (axes >= max(rank, 1))):
        raise ModelError(
            f"{ctx.op_type} (operator {ctx.index}): axis {axes.tolist()} out of "
            f"range for a tensor of rank {rank}"
        )
    return tuple(sorted({int(a) % rank for a in axes})) if rank else ()


def _single_axis(ctx: OpContext) -> int:
    axis = np.asarray(ctx.inputs[1])
    if axis.size != 1 or _rank(ctx) == 0:
        raise ModelError(
            f"{ctx.op_type} (operator {ctx.index}): needs one axis of a tensor of "
            f"rank >= 1, got axis {axis.tolist()} for rank {_rank(ctx)}"
        )
    return _axes(ctx)[0]


def sample_axis_kept(ctx: OpContext) -> bool:
    """Batch rule: the axis input is constant and does not name axis 0."""
    return ctx.inputs[1] is not None and 0 not in _axes(ctx)


_REDUCERS = {
    "SUM": np.sum,
    "REDUCE_PROD": np.prod,
    "REDUCE_MAX": np.max,
    "REDUCE_MIN": np.min,
    "REDUCE_ANY": np.any,
    "REDUCE_ALL": np.all,
}


@kernel(*_REDUCERS, batch=sample_axis_kept)
def reduce_axes(ctx: OpContext) -> np.ndarray:
    """SUM, REDUCE_PROD, REDUCE_MAX, REDUCE_MIN, REDUCE_ANY and REDUCE_ALL over the axes of input
    1, in the element type (integer sums wrap)."""
    x = ctx.inputs[0]
    fn = _REDUCERS[ctx.op_type]
    # TFLite accumulates sums and products in the element type (integers wrap around).
    extra = {"dtype": x.dtype} if fn in (np.sum, np.prod) else {}
    out = fn(x, axis=_axes(ctx), keepdims=bool(ctx.option("keep_dims")), **extra)
    return np.asarray(out, dtype=x.dtype)


@kernel("MEAN", batch=sample_axis_kept)
def mean(ctx: OpContext) -> np.ndarray:
    """MEAN over the axes of input 1: float in the element type; int32/int64 as an int64 sum
    divided with truncation toward zero. Other integer types are quantized means:
    UnsupportedOpError."""
    x = ctx.inputs[0]
    axes = _axes(ctx)
    keep = bool(ctx.option("keep_dims"))
    if np.issubdtype(x.dtype, np.floating):
        return np.asarray(np.mean(x, axis=axes, keepdims=keep, dtype=x.dtype), dtype=x.dtype)
    if x.dtype not in (np.int32, np.int64):
        raise UnsupportedOpError(
            f"MEAN (operator {ctx.index}) on {x.dtype} data is a quantized "
            "reduction, which the float engine does not run"
        )
    # Integer mean: an int64 sum divided by the count with C++'s truncation toward zero.
    total = np.sum(x, axis=axes, keepdims=keep, dtype=np.int64)
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    quotient = np.abs(total) // count
    return np.asarray(np.where(total < 0, -quotient, quotient), dtype=x.dtype)


@kernel("ARG_MAX", "ARG_MIN", batch=sample_axis_kept)
def arg_min_max(ctx: OpContext) -> np.ndarray:
    """ARG_MAX / ARG_MIN along the axis of input 1 (the first of ties), as output_type."""
    output_type = ctx.option("output_type")
    if output_type not in (TensorType.INT32, TensorType.INT64):
        raise ModelError(
            f"{ctx.op_type} (operator {ctx.index}): output_type must be INT32 or "
            f"INT64, not {output_type}"
        )
    fn = np.argmax if ctx.op_type == "ARG_MAX" else np.argmin  # both keep the first of ties
    return fn(ctx.inputs[0], axis=_single_axis(ctx)).astype(numpy_dtype(output_type))


@kernel("CUMSUM", batch=sample_axis_kept)
def cumsum(ctx: OpContext) -> np.ndarray:
    """CUMSUM along the axis of input 1, in the element type; `exclusive` leaves out each element
    itself, `reverse` sums from the end."""
    x = ctx.inputs[0]
    axis = _single_axis(ctx)
    reverse = bool(ctx.option("reverse"))
    if reverse:
        x = np.flip(x, axis)
    out = np.cumsum(x, axis=axis, dtype=x.dtype)
    if ctx.option("exclusive"):
        # Element i gets the sum of the elements before it: the inclusive sums shifted by one.
        lead = (slice(None),) * axis
        shifted = np.zeros_like(out)
        shifted[(*lead, slice(1, None))] = out[(*lead, slice(None, -1))]
        out = shifted
    return np.flip(out, axis) if reverse else out

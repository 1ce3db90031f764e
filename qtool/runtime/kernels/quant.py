"""DEQUANTIZE, QUANTIZE and DENSIFY as they appear in float models.

Float models carry float16 or int8/int4 weights that a DEQUANTIZE expands, sparse weights that a
DENSIFY expands (both folded once when the engine is built), and sometimes QUANTIZE/DEQUANTIZE
pairs around activations. The arithmetic follows TFLite's reference kernels: dequantization in
double precision rounded once to float32, quantization dividing in float32 and rounding half away
from zero with saturation, and requantization through TFLite's fixed-point multiplier.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from qtool.errors import ModelError
from qtool.model.graph import Tensor
from qtool.model.types import DimensionType, TensorType
from qtool.numerics import dequantize as affine_dequantize
from qtool.numerics import quantize as affine_quantize
from qtool.numerics import quantize_multiplier, unpack_int4
from qtool.runtime.registry import OpContext, kernel

_INT32_MIN = -(1 << 31)


def _where(ctx: OpContext) -> str:
    return f"{ctx.op_type} (operator {ctx.index})"


def _affine_params(tensor: Tensor, where: str) -> tuple[np.ndarray, np.ndarray, int | None]:
    """(scale, zero_point, axis) of a quantized tensor; axis None when per-tensor."""
    q = tensor.quantization
    if q is None or not q.is_quantized:
        raise ModelError(f"{where}: tensor {tensor.name!r} has no quantization parameters")
    # TFLite treats a one-element scale as per-tensor, whatever quantized_dimension says.
    axis = None if q.scale.size == 1 else q.quantized_dimension
    return q.scale, q.zero_point if q.zero_point.size else np.zeros(1, np.int64), axis


def _wrap_int32(x: np.ndarray) -> np.ndarray:
    return ((x - _INT32_MIN) & 0xFFFFFFFF) + _INT32_MIN


def _multiply_by_quantized_multiplier(x: np.ndarray, multiplier: int, shift: int) -> np.ndarray:
    """x * multiplier * 2**(shift - 31) with TFLite's two roundings, on an int64 array."""
    scaled = _wrap_int32(x << max(shift, 0))  # an int32 product in C++
    product = scaled * multiplier
    # SaturatingRoundingDoublingHighMul: add a nudge, then divide by 2^31 truncating toward 0.
    nudged = product + np.where(product >= 0, 1 << 30, 1 - (1 << 30))
    high = np.where(nudged >= 0, nudged >> 31, -((-nudged) >> 31))
    # RoundingDivideByPOT: round half away from zero.
    right = max(-shift, 0)
    mask = (1 << right) - 1
    return (high >> right) + ((high & mask) > (mask >> 1) + (high < 0))


@kernel("DEQUANTIZE")
def dequantize(ctx: OpContext) -> np.ndarray:
    """DEQUANTIZE: (q - zero_point) * scale per tensor or per axis, rounded once to float32; a
    float input (float16 weights) is only cast; constant INT4 is unpacked first."""
    x = ctx.inputs[0]
    tensor = ctx.input_tensor(0)
    if np.issubdtype(x.dtype, np.floating):
        return x.astype(np.float32)
    if tensor.dtype == TensorType.INT4 and ctx.model.is_constant(tensor):  # two values a byte
        x = unpack_int4(x, tensor.num_elements).reshape(tensor.shape)
    # Rounded once from float64, which matches TFLite's float and double formulations alike.
    return affine_dequantize(x, *_affine_params(tensor, _where(ctx)))


@kernel("QUANTIZE")
def quantize(ctx: OpContext) -> np.ndarray:
    """QUANTIZE: float to integer as TFLite's AffineQuantize (round half away from zero,
    saturate), or integer to integer by a fixed-point multiplier (per-tensor parameters only)."""
    x = ctx.inputs[0]
    out_dtype = ctx.output_dtype()
    out_scale, out_zero, out_axis = _affine_params(ctx.output_tensor(), _where(ctx))
    if np.issubdtype(x.dtype, np.floating):
        # float32 division, rounding half away from zero, saturation: TFLite's AffineQuantize.
        return affine_quantize(x, out_scale, out_zero, dtype=out_dtype, axis=out_axis)
    in_scale, in_zero, in_axis = _affine_params(ctx.input_tensor(0), _where(ctx))
    if in_axis is not None or out_axis is not None:
        raise ModelError(f"{_where(ctx)}: requantization takes per-tensor parameters only")
    multiplier, shift = quantize_multiplier(np.float64(in_scale[0]) / np.float64(out_scale[0]))
    q = (
        _multiply_by_quantized_multiplier(
            x.astype(np.int64) - in_zero[0], int(multiplier), int(shift)
        )
        + out_zero[0]
    )
    info = np.iinfo(out_dtype)
    return np.clip(q, info.min, info.max).astype(out_dtype)


def densify(values: np.ndarray, shape: Sequence[int], sparsity: dict[str, Any]) -> np.ndarray:
    """The dense array of `shape` that a TFLite sparse tensor encodes.

    `values` are the tensor's stored elements, `sparsity` its decoded SparsityParameters. The
    format: the dense tensor is viewed with each blocked dimension d (block_map) split into
    (d / block, block), giving rank + len(block_map) "expanded" dimensions, traversed as nested
    levels in `traversal_order` (original dimensions first, then the in-block ones). A DENSE level
    enumerates all its coordinates; a SPARSE_CSR level lists, for each position of its parent
    level, the coordinates present (array_indices[array_segments[p]:array_segments[p + 1]]).
    A DENSE level's positions number its parent's positions times its size plus the coordinate;
    a CSR level's positions are indices into its array_indices. The leaves in traversal order
    take the stored values in turn; all other elements are zero.
    """
    shape = [int(d) for d in shape]
    rank = len(shape)
    order = [int(d) for d in sparsity["traversal_order"]]
    block_map = [
        int(d) for d in (() if sparsity.get("block_map") is None else sparsity["block_map"])
    ]
    levels = sparsity["dim_metadata"] or []
    if (
        sorted(order[:rank]) != list(range(rank))
        or sorted(order) != list(range(rank + len(block_map)))
        or len(levels) != len(order)
        or len(set(block_map)) != len(block_map)
        or not all(0 <= d < rank for d in block_map)
    ):
        raise ModelError(
            f"sparse tensor of shape {shape}: inconsistent traversal_order {order}, "
            f"block_map {block_map} and {len(levels)} dim_metadata levels"
        )
    level_of = {dim: level for level, dim in enumerate(order)}
    block_size = {d: int(levels[level_of[rank + k]]["dense_size"]) for k, d in enumerate(block_map)}
    if any(size <= 0 or shape[d] % size for d, size in block_size.items()):
        raise ModelError(
            f"sparse tensor of shape {shape}: block sizes {block_size} do not "
            "divide their dimensions"
        )
    strides = [int(np.prod(shape[d + 1 :], dtype=np.int64)) for d in range(rank)]
    # Per level: how many coordinates it has, and how far one step moves in the dense array.
    extents, steps = [], []
    for dim in order:
        if dim < rank:
            extents.append(shape[dim] // block_size.get(dim, 1))
            steps.append(strides[dim] * block_size.get(dim, 1))
        else:
            extents.append(block_size[block_map[dim - rank]])
            steps.append(strides[block_map[dim - rank]])

    offset = np.zeros(1, np.int64)  # dense offset of every node of the current level
    position = np.zeros(1, np.int64)  # its position in the level's storage
    for level, (meta, extent, step) in enumerate(zip(levels, extents, steps, strict=True)):
        where = f"sparse tensor of shape {shape}, level {level}"
        if meta["format"] == DimensionType.DENSE:
            if int(meta["dense_size"]) != extent:
                raise ModelError(f"{where}: dense_size {meta['dense_size']} != {extent}")
            coords = np.tile(np.arange(extent, dtype=np.int64), offset.size)
            position = np.repeat(position * extent, extent) + coords
            offset = np.repeat(offset, extent)
        elif meta["format"] == DimensionType.SPARSE_CSR:
            segments = _index_vector(meta["array_segments"], where)
            indices = _index_vector(meta["array_indices"], where)
            if position.size and position[-1] + 1 >= segments.size:
                raise ModelError(
                    f"{where}: {segments.size} segment bounds for "
                    f"{position[-1] + 1} parent positions"
                )
            starts = segments[position]
            counts = segments[position + 1] - starts
            if np.any(counts < 0) or (starts.size and np.max(starts + counts) > indices.size):
                raise ModelError(f"{where}: array_segments do not index array_indices")
            # Child j of a parent sits at its parent's start + j in array_indices.
            first_child = np.repeat(np.cumsum(counts) - counts, counts)
            position = np.repeat(starts, counts) + np.arange(first_child.size) - first_child
            coords = indices[position]
            if np.any((coords < 0) | (coords >= extent)):
                raise ModelError(f"{where}: array_indices out of [0, {extent})")
            offset = np.repeat(offset, counts)
        else:
            raise ModelError(f"{where}: unknown dimension format {meta['format']}")
        offset = offset + coords * step
    values = np.asarray(values).reshape(-1)
    if values.size < offset.size:
        raise ModelError(
            f"sparse tensor of shape {shape}: {values.size} stored values for "
            f"{offset.size} encoded elements"
        )
    dense = np.zeros(int(np.prod(shape, dtype=np.int64)), values.dtype)
    dense[offset] = values[: offset.size]
    return dense.reshape(shape)


def _index_vector(vector: dict[str, Any] | None, where: str) -> np.ndarray:
    if vector is None or vector.get("values") is None:
        raise ModelError(f"{where}: a SPARSE_CSR level lacks array_segments or array_indices")
    return np.asarray(vector["values"], np.int64)


@kernel("DENSIFY")
def densify_op(ctx: OpContext) -> np.ndarray:
    """DENSIFY: a sparse constant's stored values expanded to its dense shape; ModelError when
    the input is not sparse."""
    tensor = ctx.input_tensor(0)
    if tensor.sparsity is None:
        raise ModelError(f"{_where(ctx)}: input {tensor.name!r} is not a sparse tensor")
    return densify(ctx.inputs[0], tensor.shape, tensor.sparsity)

"""DEQUANTIZE, QUANTIZE and DENSIFY as they appear in float models.

Float models carry float16 or int8/int4 weights that a DEQUANTIZE expands, sparse weights that a
DENSIFY expands (both folded once when the engine is built), and sometimes QUANTIZE/DEQUANTIZE
pairs around activations. The arithmetic follows TFLite's reference kernels: dequantization in
double precision rounded once to float32, quantization dividing in float32 and rounding half away
from zero with saturation, and requantization through TFLite's fixed-point multiplier.
"""

from __future__ import annotations

import numpy as np

from qtool.errors import ModelError
from qtool.model.graph import Tensor
from qtool.model.sparsity import densify
from qtool.model.types import TensorType
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


@kernel("DENSIFY")
def densify_op(ctx: OpContext) -> np.ndarray:
    """DENSIFY: a sparse constant's stored values expanded to its dense shape; ModelError when
    the input is not sparse."""
    tensor = ctx.input_tensor(0)
    if tensor.sparsity is None:
        raise ModelError(f"{_where(ctx)}: input {tensor.name!r} is not a sparse tensor")
    return densify(ctx.inputs[0], tensor.shape, tensor.sparsity)

"""Integer weights and biases of the operators that have them (CONV_2D, DEPTHWISE_CONV_2D,
TRANSPOSE_CONV, FULLY_CONNECTED...).

Weights are symmetric per axis (zero point 0, [-127, 127]); the bias is int32 (int64 under
int16x8 where the spec says so) at `input_scale * weight_scale[c]`. A channel whose bias would
overflow gets a larger weight scale. Two optional refinements change which integers are stored,
never the scheme: a rounding choice other than round-to-nearest (`rounding.py`) and a bias that
compensates the expected output error of the rounded weights (`bias_correction.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from qtool.errors import ModelError
from qtool.model import Model, Operator, Subgraph
from qtool.model.source import drop_pages
from qtool.numerics import (
    AffineParams,
    bias_overflow,
    bias_scale,
    dequantize,
    largest_products,
    quantize,
    quantize_bias,
    symmetric_params,
)
from qtool.spec import OpRule, kernel_contracts

# Integer weights for given real weights and per-channel scales: round to nearest by default.
Rounder = Callable[[np.ndarray, np.ndarray, int | None], np.ndarray]
# The change of a layer's float bias that compensates its rounded weights: (real weights, the
# layer's integer weights and scales) -> per-output-channel shift.
Corrector = Callable[[np.ndarray, "LayerWeights"], np.ndarray]


@dataclass
class LayerWeights:
    """What the rewriter stores for one operator's weight and bias operands."""

    weight_position: int
    values: np.ndarray  # int8, the weight tensor's shape
    scale: np.ndarray  # float32: one per slice along `axis`, or one for the tensor
    axis: int | None
    bias_position: int | None = None
    bias: np.ndarray | None = None  # int32, or int64 where the spec's bias is int64
    bias_scale: np.ndarray | None = None
    bias_shift: np.ndarray | None = None  # float correction added to the bias (per channel)
    enlarged_channels: list[int] = field(default_factory=list)
    bits: int = 8  # 4: int4 weights (in int8 storage here; packed when written)

    @property
    def quantized_dimension(self) -> int:
        """The axis of per-axis scales, as the model's quantization writes it (0 for per-tensor)."""
        return 0 if self.axis is None else self.axis

    def real_weights(self) -> np.ndarray:
        """The weights as the integer model means them: values * scale (float32)."""
        zero = np.zeros(self.scale.shape, np.int64)
        return dequantize(self.values, self.scale, zero, axis=self.axis)

    def real_bias(self) -> np.ndarray | None:
        """The bias as the integer model means it: bias * bias_scale (float32); None when there
        is no bias."""
        if self.bias is None:
            return None
        return (self.bias.astype(np.float64) * self.bias_scale.astype(np.float64)).astype(
            np.float32
        )


@dataclass
class RoundingCache:
    """Weight scales by (weight tensor, axis, rounder) and the rounded (integer) weights by
    that and the scale. Not their dequantized form: a float copy of every weight (the model's
    size, held across a search's plans) is what a bias correction reads once per layer, so it
    is made for that read and dropped (`LayerWeights.real_weights`)."""

    _scales: dict[tuple, np.ndarray] = field(default_factory=dict)
    _rounded: dict[tuple, np.ndarray] = field(default_factory=dict)

    def scale(self, identity: tuple, compute: Callable[[], np.ndarray]) -> np.ndarray:
        """The weight scale of `identity`, computed once."""
        if identity not in self._scales:
            self._scales[identity] = compute()
        return self._scales[identity]

    def rounded(
        self, identity: tuple, scale: np.ndarray, compute: Callable[[np.ndarray], np.ndarray]
    ) -> np.ndarray:
        """The integer weights of `identity` at `scale`, computed once and read-only (every
        plan shares them)."""
        key = (*identity, scale.tobytes())
        if key not in self._rounded:
            values = compute(scale)
            values.setflags(write=False)
            self._rounded[key] = values
        return self._rounded[key]


def nearest(weights: np.ndarray, scale: np.ndarray, axis: int | None) -> np.ndarray:
    """Round to nearest (half away from zero), saturating to [-127, 127]."""
    zero = np.zeros(scale.shape, np.int64)
    return quantize(weights, scale, zero, dtype=np.int8, axis=axis, narrow_range=True)


def nearest_int4(weights: np.ndarray, scale: np.ndarray, axis: int | None) -> np.ndarray:
    """Round to nearest, saturating to [-7, 7] (int4 weights: LiteRT's optimized 4-bit
    FULLY_CONNECTED misreads -8, `schemas/weight_modes.json`)."""
    return np.clip(nearest(weights, scale, axis), -INT4_MAX, INT4_MAX).astype(np.int8)


INT4_MAX = 7


def _bias_limit_dtype(bias_rule) -> type:
    return np.int64 if bias_rule is not None and bias_rule.dtype == "int64" else np.int32


def _accumulator_reserve(
    op_type: str, values: np.ndarray, axis: int | None, input_params: AffineParams
) -> np.ndarray | int:
    """Per output channel, the largest |sum of products| the kernel's int32 accumulator adds to
    the bias (kernel_contracts.accumulator): max|input - zero point| * sum|weight codes|."""
    if op_type not in kernel_contracts().accumulator_ops:
        return 0
    return largest_products(values, axis, int(input_params.zero_point[0]))


def quantize_layer(
    model: Model,
    subgraph: Subgraph,
    op: Operator,
    rule: OpRule,
    input_params: AffineParams,
    rounder: Rounder = nearest,
    corrector: Corrector | None = None,
    cache: RoundingCache | None = None,
    bits: int = 8,
) -> LayerWeights:
    """Quantize an operator's constant weights (and bias, present or created by a correction).

    `cache` keeps the weight scales and rounded weights across calls: they depend on the
    weights, the rounder and the scale, not on the activation ranges that differ between
    the plans of a search. `bits` 4: int4 weights (scale from [-7, 7]; `rounder` must
    saturate there too)."""
    weight_rule = rule.weight_rule()
    position = weight_rule.index
    weights = np.asarray(model.tensor_data(subgraph.tensors[op.inputs[position]]), np.float32)
    axis = weight_rule.axis if weight_rule.granularity == "per-axis" else None
    cache = RoundingCache() if cache is None else cache
    identity = (op.inputs[position], axis, rounder)
    qmax = INT4_MAX if bits == 4 else 127
    scale = cache.scale(identity, lambda: symmetric_params(weights, axis=axis, qmax=qmax).scale)
    bias_rule = rule.bias_rule()
    bias_position = bias_rule.index if bias_rule is not None else None
    bias = None
    if (
        bias_position is not None
        and bias_position < len(op.inputs)
        and op.inputs[bias_position] >= 0
    ):
        bias = np.asarray(model.tensor_data(subgraph.tensors[op.inputs[bias_position]]), np.float32)
        if bias.ndim != 1:
            raise ModelError(f"bias of shape {list(bias.shape)} is not one value per channel")
    wide_bias = _bias_limit_dtype(bias_rule) is np.int64
    enlarged: list[int] = []
    shift = None
    # A corrected bias may overflow where the original did not, and enlarged scales change the
    # products the accumulator must hold: a few rounds.
    for _ in range(4):
        values = cache.rounded(identity, scale, lambda s: rounder(weights, s, axis))
        layer = LayerWeights(position, values, scale, axis, bias_position)
        shift = None
        if corrector is not None:
            shift = corrector(weights, layer)
        total = bias if shift is None else (0 if bias is None else bias) + shift
        if total is None or wide_bias:
            break
        reserved = _accumulator_reserve(model.op_type(op), values, weight_rule.axis, input_params)
        overflow, fitted = bias_overflow(total, input_params.scale, scale, reserved=reserved)
        if not overflow.any():
            break
        enlarged = sorted(set(enlarged) | set(np.flatnonzero(overflow).tolist()))
        scale = fitted
    layer.enlarged_channels = enlarged
    layer.bits = bits
    if total is not None and bias_position is not None:
        layer.bias_shift = None if shift is None else np.asarray(shift, np.float32)
        layer.bias_scale = bias_scale(input_params.scale, scale)
        total = np.asarray(total, np.float32)
        if wide_bias:
            # int64 biases (16x8 kernels) hold any realistic value: rounded, never clamped.
            real = total.astype(np.float64) / layer.bias_scale.astype(np.float64)
            layer.bias = np.trunc(real + np.copysign(0.5, real)).astype(np.int64)
        else:
            layer.bias = quantize_bias(total, input_params.scale, scale)
    # The float weights were read from a large model's mapped copy: their pages go back now,
    # or every layer's stays resident through the search's plans (a model's size while the
    # calibration's XNNPACK copy is alive).
    drop_pages(model.source_data)
    return layer

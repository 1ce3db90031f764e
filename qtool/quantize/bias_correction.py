"""Bias correction: a layer's bias absorbs the mean output error of its rounded weights.

Rounding weights to int8 shifts each output channel of a layer by `(W - Wq) x` on average over
the data, a systematic error that adds up through the network and dominates outputs that are
small differences of large terms (landmark regressions). The layer is linear in its input, so
the mean shift over samples and positions is the layer applied to the *mean input* with
`W - Wq` as weights: one run of the layer's own kernel per layer, from statistics gathered
during calibration. The shift is added to the float bias before the bias is quantized.
"""

from __future__ import annotations

import copy

import numpy as np

from qtool.model import Model, Operator, Subgraph
from qtool.model.types import ActivationFunctionType
from qtool.runtime import OpContext
from qtool.runtime.registry import lookup


def mean_output_error(
    model: Model,
    subgraph: Subgraph,
    op_index: int,
    activation_position: int,
    mean_input: np.ndarray,
    weight_position: int,
    weight_error: np.ndarray,
    bias_position: int | None,
) -> np.ndarray:
    """The mean over data and positions of the layer's output computed with `weight_error` as
    its weights (no bias, no fused activation), per output channel (last axis)."""
    op = subgraph.operators[op_index]
    if _reads_each_position_once(model, op, weight_error, np.shape(mean_input)):
        # A matrix product per position (FULLY_CONNECTED, a 1x1 unstrided CONV_2D): its mean
        # over positions is the product with the input's mean over positions, 20-100x cheaper
        # than the layer itself on an image-sized mean input.
        channels = weight_error.shape[-1]
        mean_row = np.asarray(mean_input, np.float64).reshape(-1, channels).mean(axis=0)
        return weight_error.reshape(-1, channels).astype(np.float64) @ mean_row
    linear = _without_activation(op)
    inputs: list[np.ndarray | None] = [
        model.tensor_data(subgraph.tensors[t]) if t >= 0 else None for t in op.inputs
    ]
    declared = subgraph.tensors[op.inputs[activation_position]].shape
    inputs[activation_position] = np.asarray(mean_input, np.float32).reshape(declared)
    inputs[weight_position] = np.asarray(weight_error, np.float32)
    if bias_position is not None and bias_position < len(inputs):
        inputs[bias_position] = None
    kernel = lookup(model.op_type(op), False)
    out = np.asarray(kernel.fn(OpContext(model, subgraph, op_index, linear, inputs)))
    return out.reshape(-1, out.shape[-1]).astype(np.float64).mean(axis=0)


def _reads_each_position_once(
    model: Model, op: Operator, weight_error: np.ndarray, input_shape: tuple[int, ...]
) -> bool:
    op_type = model.op_type(op)
    size = int(np.prod(input_shape))
    if op_type == "FULLY_CONNECTED":
        return weight_error.ndim == 2 and size % weight_error.shape[1] == 0
    if op_type != "CONV_2D" or weight_error.ndim != 4 or weight_error.shape[1:3] != (1, 1):
        return False
    if not input_shape or input_shape[-1] != weight_error.shape[3]:  # grouped
        return False
    strides = (op.option("stride_h", "Conv2DOptions"), op.option("stride_w", "Conv2DOptions"))
    return strides == (1, 1)


def _without_activation(op: Operator) -> Operator:
    if op.options_type is None or "fused_activation_function" not in op.options:
        return op
    linear = copy.copy(op)
    linear.options = {**op.options, "fused_activation_function": ActivationFunctionType.NONE}
    return linear

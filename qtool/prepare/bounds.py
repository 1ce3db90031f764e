"""Guaranteed bounds of activations, per channel, from bounds of the model's inputs.

Interval arithmetic through the operators whose bounds follow from their inputs' (weighted
layers, ADD, PAD, pooling, clamps, channel concatenation); anything else is unbounded. A
weighted layer's output channel o lies within b_o + sum of max(w * low, w * high) over its
taps, with zero (padding) counted as a possible input. Equalization (equalize.py) scales a
channel up only as far as these bounds allow, so a rescaled RELU6 never reaches its clamp
for any input within the input bounds.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from qtool.model import Model, Subgraph
from qtool.model.types import ActivationFunctionType

Bounds = tuple[np.ndarray, np.ndarray]  # per channel (last axis): lowest, highest

_CLAMPS = {
    ActivationFunctionType.RELU: (0.0, np.inf),
    ActivationFunctionType.RELU_N1_TO_1: (-1.0, 1.0),
    ActivationFunctionType.RELU6: (0.0, 6.0),
}
_CLAMP_OPS = {"RELU": (0.0, np.inf), "RELU6": (0.0, 6.0), "RELU_N1_TO_1": (-1.0, 1.0)}
_RANGE_OPS = {"LOGISTIC": (0.0, 1.0), "TANH": (-1.0, 1.0)}
_SAME_OPS = ("MAX_POOL_2D", "AVERAGE_POOL_2D", "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR")


def _with_zero(bounds: Bounds) -> Bounds:
    return np.minimum(bounds[0], 0.0), np.maximum(bounds[1], 0.0)


def _weighted(op_type: str, weights: np.ndarray, bias, x: Bounds) -> Bounds | None:
    """Bounds of a weighted layer's output channels: the positive taps times the input's
    highest value plus the negative taps times its lowest, plus the bias."""
    low, high = _with_zero(x)
    w = weights.astype(np.float64)
    if op_type == "DEPTHWISE_CONV_2D":  # [1, H, W, C * multiplier]: channel c * m + k reads c
        if w.shape[3] % low.size:
            return None
        low, high = (np.repeat(v, w.shape[3] // low.size) for v in (low, high))
        pos, neg = np.clip(w, 0, None).sum((0, 1, 2)), np.clip(w, None, 0).sum((0, 1, 2))
        return pos * low + neg * high + bias, pos * high + neg * low + bias
    if op_type == "CONV_2D":  # [O, H, W, I]: the taps of each (output, input) pair summed
        pos, neg = np.clip(w, 0, None).sum((1, 2)), np.clip(w, None, 0).sum((1, 2))
    else:  # FULLY_CONNECTED [O, I]
        pos, neg = np.clip(w, 0, None), np.clip(w, None, 0)
    if low.size == 1:  # one bound for every input channel
        pos, neg = pos.sum(1, keepdims=True), neg.sum(1, keepdims=True)
    elif low.size != pos.shape[1]:
        return None
    return pos @ low + neg @ high + bias, pos @ high + neg @ low + bias


def _clamped(bounds: Bounds, clamp: tuple[float, float]) -> Bounds:
    return np.clip(bounds[0], *clamp), np.clip(bounds[1], *clamp)


def activation_bounds(
    model: Model, subgraph_index: int, inputs: Mapping[int, tuple[float, float]]
) -> dict[int, Bounds]:
    """Per-channel bounds of every tensor they follow for, given bounds of graph inputs."""
    subgraph: Subgraph = model.subgraphs[subgraph_index]
    known: dict[int, Bounds] = {
        t: (np.array([lo], np.float64), np.array([hi], np.float64))
        for t, (lo, hi) in inputs.items()
    }
    for op in subgraph.operators:
        if len(op.outputs) != 1:
            continue
        result = _op_bounds(model, subgraph, op, known)
        if result is None:
            continue
        activation = op.options.get("fused_activation_function", ActivationFunctionType.NONE)
        if activation in _CLAMPS:
            result = _clamped(result, _CLAMPS[activation])
        elif activation != ActivationFunctionType.NONE:
            continue
        if (np.all(np.isfinite(result[0])) and np.all(np.isfinite(result[1]))) or True:
            known[op.outputs[0]] = result
    return known


def _op_bounds(model: Model, subgraph: Subgraph, op, known: dict[int, Bounds]) -> Bounds | None:
    op_type = model.op_type(op)
    first = known.get(op.inputs[0]) if op.inputs and op.inputs[0] >= 0 else None
    if op_type in _RANGE_OPS:
        lo, hi = _RANGE_OPS[op_type]
        return np.array([lo]), np.array([hi])
    if first is None:
        return None
    if op_type in _CLAMP_OPS:
        return _clamped(first, _CLAMP_OPS[op_type])
    if op_type in _SAME_OPS:
        return first
    if op_type == "PAD":
        return _with_zero(first)
    if op_type == "PRELU":
        slope = model.tensor_data(subgraph.tensors[op.inputs[1]])
        if slope is None:
            return None
        slope = np.asarray(slope, np.float64).reshape(-1)
        ends = [np.where(v > 0, v, slope * v) for v in first]
        low, high = np.minimum(*ends), np.maximum(*ends)
        return np.minimum(low, 0.0), np.maximum(high, 0.0)
    if op_type in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"):
        weights = model.tensor_data(subgraph.tensors[op.inputs[1]])
        if weights is None or weights.dtype != np.float32:
            return None
        bias = 0.0
        if len(op.inputs) > 2 and op.inputs[2] >= 0:
            bias = model.tensor_data(subgraph.tensors[op.inputs[2]])
            if bias is None:
                return None
            bias = bias.astype(np.float64)
        return _weighted(op_type, weights, bias, first)
    if op_type == "ADD" and len(op.inputs) == 2:
        second = known.get(op.inputs[1])
        if second is None:
            constant = model.tensor_data(subgraph.tensors[op.inputs[1]])
            if constant is None or constant.size != 1:
                return None
            second = (np.array([float(constant)]), np.array([float(constant)]))
        try:
            return first[0] + second[0], first[1] + second[1]
        except ValueError:
            return None
    if op_type == "CONCATENATION" and _last_axis(op.option("axis"), subgraph, op):
        parts = [known.get(t) for t in op.inputs]
        if any(p is None for p in parts):
            return None
        sizes = [subgraph.tensors[t].shape[-1] for t in op.inputs]
        low, high = (
            np.concatenate(
                [np.broadcast_to(p[end], (n,)) for p, n in zip(parts, sizes, strict=True)]
            )
            for end in (0, 1)
        )
        return low, high
    return None


def _last_axis(axis: int, subgraph: Subgraph, op) -> bool:
    return axis in (-1, len(subgraph.tensors[op.outputs[0]].shape) - 1)

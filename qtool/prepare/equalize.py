"""Cross-layer equalization: near-empty channels of an activation scaled up before calibration.

An int8 activation has one scale for all its channels. A channel whose values span a small
part of the tensor's range (pose_landmark_full: one channel of the first convolution spans
0..0.021 of 0..6, less than one int8 step) is rounded to a step or two, and the next layer may
read it with large taps (±504 there), which multiplies that rounding error. Such a channel c of
a producer (CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED with no activation, RELU or RELU6)
whose output only a weighted consumer reads (possibly through a RELU, PRELU or RELU6 operator
and a zero PAD) can be rescaled: the producer's weights and bias for c are multiplied by a_c,
the consumer's taps reading c divided by a_c. ReLU and PReLU are positively homogeneous, so
the float model computes the same; the rounding error of channel c, relative to its values,
drops by a_c. Nagel et al. 2019 ("Data-Free Quantization Through Weight Equalization and Bias
Correction") balance per-tensor weight ranges with a_c = sqrt(r2/r1); TFLite's weights are per
output channel, which makes a producer's weights indifferent to a_c and a depthwise consumer's
too: what is left to balance is the activation's one scale.

How far a channel is scaled up comes from guaranteed bounds (bounds.py: interval arithmetic
from the range of the model's inputs on the samples), not from the channel's values on a few
samples (on pose_landmark_full, channels near zero on 16 photographs reach 115x more on
others; scaling the openWakeWord alexa head's sparse ReLU channels by their sample ranges cost
14.6 dB on held-out data): the channel's bound is scaled up to the tensor's largest value on
the samples, so it never leaves the range calibration will find. A RELU6
channel is scaled only where its bound stays below 6, so its clamp is never reached before or
after, and the function is unchanged for every input within the inputs' range.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from qtool.errors import UnsupportedOpError
from qtool.model import Model, Subgraph, TensorType
from qtool.model.calls import call_sites
from qtool.model.types import ActivationFunctionType
from qtool.prepare.bounds import activation_bounds
from qtool.runtime.engine import Engine
from qtool.runtime.litert import XnnpackRunner, litert_available, litert_can_run, run_preserved
from qtool.runtime.state import keeps_state

# Where a producer's output channels are along its weights' axes, and a consumer's input
# channels (DEPTHWISE_CONV_2D: output channel c * multiplier + m reads input channel c).
_PRODUCERS = {"CONV_2D": 0, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": 0}
_CONSUMERS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")
# Activations f with f(a x) = a f(x) for a > 0 on every channel (PRELU: its slope per channel).
_EXACT = (ActivationFunctionType.NONE, ActivationFunctionType.RELU)
_EXACT_OPS = ("RELU", "PRELU")
# RELU6 only where the channel's bound stays below the clamp (module docstring).
_CLAMPED, _CLAMPED_OP = ActivationFunctionType.RELU6, "RELU6"
# A channel is scaled up when its range is at most this share of the tensor's (a smaller gain
# buys little and moves the consumer's weights for nothing).
MIN_GAIN = 4.0
MAX_GAIN = 1024.0  # an almost dead channel is not blown up without limit
SAMPLES = 16  # calibration samples that measure the channels' ranges


@dataclass(frozen=True)
class Pair:
    """A producer whose output channels may be rescaled, and the weighted consumer reading
    them (through an activation operator and a zero PAD, or directly); operator indices in the
    prepared subgraph."""

    producer: int
    consumer: int
    tensors: tuple[int, ...]  # the activations whose channels are rescaled (the first produced)


@dataclass(frozen=True)
class EqualizedPair:
    """Channels of one activation scaled up, with the inverse scale in its consumer."""

    subgraph: int
    producer: int  # operator index in the input model
    consumer: int  # operator index in the input model
    tensor: str  # the activation rescaled
    channels: int  # how many of its channels were scaled up
    of: int  # its channels
    max_gain: float  # the largest factor applied to a channel

    def to_dict(self) -> dict:
        """The pair as the report's JSON."""
        return {
            "subgraph": self.subgraph,
            "producer": self.producer,
            "consumer": self.consumer,
            "tensor": self.tensor,
            "channels": self.channels,
            "of": self.of,
            "max_gain": round(self.max_gain, 2),
        }


def _float_constant(model: Model, subgraph: Subgraph, t: int) -> bool:
    tensor = subgraph.tensors[t]
    return (
        tensor.dtype == TensorType.FLOAT32
        and tensor.sparsity is None
        and not tensor.quantized
        and model.is_constant(tensor)
    )


def _only_reader(subgraph: Subgraph, t: int, readers: dict) -> int | None:
    """The single operator reading t, when t is no output of the subgraph."""
    found = readers.get(t, [])
    return found[0] if len(found) == 1 and t not in subgraph.outputs else None


def _zero_pad_keeping_channels(model: Model, subgraph: Subgraph, op) -> bool:
    """A PAD (zeros) that pads no channel: channel c stays channel c."""
    if model.op_type(op) != "PAD" or len(op.inputs) != 2:
        return False
    paddings = model.tensor_data(subgraph.tensors[op.inputs[1]])
    return paddings is not None and paddings.ndim == 2 and not np.any(paddings[-1])


def _producer(model: Model, subgraph: Subgraph, op) -> bool:
    """A weighted layer whose float weights (and bias) have one slice per output channel."""
    op_type = model.op_type(op)
    if op_type not in _PRODUCERS or len(op.outputs) != 1 or len(op.inputs) < 2:
        return False
    weights, bias = op.inputs[1], op.inputs[2] if len(op.inputs) > 2 else -1
    if weights < 0 or not _float_constant(model, subgraph, weights):
        return False
    if bias >= 0 and not _float_constant(model, subgraph, bias):
        return False
    produced = model.tensor_data(subgraph.tensors[weights]).shape[_PRODUCERS[op_type]]
    return subgraph.tensors[op.outputs[0]].shape[-1:] == [produced]


def find_pairs(model: Model, subgraph_index: int = 0) -> list[Pair]:
    """Every producer -> weighted consumer whose channels can be rescaled exactly."""
    subgraph = model.subgraphs[subgraph_index]
    readers = subgraph.consumers()
    pairs = []
    for i, op in enumerate(subgraph.operators):
        if not _producer(model, subgraph, op):
            continue
        activation = op.options.get("fused_activation_function", ActivationFunctionType.NONE)
        if activation not in (*_EXACT, _CLAMPED):
            continue
        tensors = [op.outputs[0]]
        reader = _only_reader(subgraph, tensors[-1], readers)
        if reader is not None and activation == ActivationFunctionType.NONE:
            between = subgraph.operators[reader]
            kind = model.op_type(between)
            if kind in (*_EXACT_OPS, _CLAMPED_OP) and len(between.outputs) == 1:
                tensors.append(between.outputs[0])
                reader = _only_reader(subgraph, tensors[-1], readers)
        if reader is not None and _zero_pad_keeping_channels(
            model, subgraph, subgraph.operators[reader]
        ):
            reader = _only_reader(subgraph, subgraph.operators[reader].outputs[0], readers)
        channels = subgraph.tensors[tensors[0]].shape[-1]
        if reader is None or not _reads_channels(model, subgraph, reader, channels, readers):
            continue
        pairs.append(Pair(i, reader, tuple(tensors)))
    return pairs


def _reads_channels(model: Model, subgraph: Subgraph, index: int, channels: int, readers) -> bool:
    """Whether operator `index` is a weighted consumer whose taps for each input channel can be
    scaled (its float weights its own, one input channel per producer channel)."""
    op = subgraph.operators[index]
    op_type = model.op_type(op)
    if op_type not in _CONSUMERS or len(op.inputs) < 2 or op.inputs[1] < 0:
        return False
    if not _float_constant(model, subgraph, op.inputs[1]):
        return False
    shape = model.tensor_data(subgraph.tensors[op.inputs[1]]).shape
    if op_type == "DEPTHWISE_CONV_2D":
        return shape[3] % channels == 0
    return shape[-1] == channels  # CONV_2D [O, H, W, I] (no groups), FULLY_CONNECTED [O, I]


def channel_ranges(
    model: Model, subgraph_index: int, tensors: Sequence[int], samples: Sequence[np.ndarray]
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per channel (last axis), the smallest and largest value of each tensor on the samples,
    computed by LiteRT with XNNPACK where it runs the model (the calibration's engine; 3-6x
    the numpy engine's speed on MediaPipe's models), else by the numpy engine, else by LiteRT's
    builtin kernels (a custom op without a numpy kernel)."""
    ranges: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    wanted = set(tensors)

    def observe(t: int, value: np.ndarray) -> None:
        if t not in wanted:
            return
        low, high = channel_extremes(value)
        if t in ranges:
            low, high = np.minimum(ranges[t][0], low), np.maximum(ranges[t][1], high)
        ranges[t] = (low, high)

    if _xnnpack_runs(model, subgraph_index):
        try:
            # Every tensor in its own place (`ordered`): a channel is the last axis as declared.
            runner = XnnpackRunner(model, sorted(wanted), ordered=wanted)
        except UnsupportedOpError:
            pass
        else:
            runner.run(list(samples), [observe])
            return ranges
    try:
        engine = Engine(model, subgraph_index)
    except UnsupportedOpError:  # a custom op without a numpy kernel: LiteRT may run it
        if not litert_available() or not litert_can_run(model, xnnpack=False):
            raise
        run_preserved(model, list(samples), observe, sorted(wanted), subgraph_index)
    else:
        engine.run(list(samples), observers=[observe])
    return ranges


# Values per row when a tensor's channels are reduced in two steps (`channel_extremes`): long
# enough for numpy's vector loops, short enough to stay in the first-level cache.
_ROW = 4096


def channel_extremes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The smallest and largest value of each channel (last axis) of `values`.

    numpy reduces an (n, c) array along its first axis row by row, a loop of c values each: on
    pose_landmark_full's narrow activations (8-48 channels) that took 22 ms a sample, more than
    LiteRT's inference. Rows are joined into rows of about `_ROW` values first (each holding
    whole pixels), reduced, and the few rows left reduced per channel: 10-40x faster, and the
    same values (min and max do not depend on the order; NaN stays NaN either way)."""
    channels = values.shape[-1] if values.ndim else 1
    flat = values.reshape(-1, channels)
    per = max(1, _ROW // max(channels, 1))
    whole = flat.shape[0] // per * per
    parts = []
    if whole:
        joined = flat[:whole].reshape(-1, per * channels)
        parts.append(
            (
                joined.min(axis=0).reshape(per, channels).min(axis=0),
                joined.max(axis=0).reshape(per, channels).max(axis=0),
            )
        )
    if whole < flat.shape[0] or not parts:
        parts.append((flat[whole:].min(axis=0), flat[whole:].max(axis=0)))
    if len(parts) == 1:
        return parts[0]
    (low, high), (rest_low, rest_high) = parts
    return np.minimum(low, rest_low), np.maximum(high, rest_high)


def _xnnpack_runs(model: Model, subgraph_index: int) -> bool:
    """Whether LiteRT's XNNPACK runner may compute the ranges: subgraph 0, installed, no
    control flow (only the numpy engine shows the subgraphs it runs) and no state (samples
    are independent)."""
    return (
        subgraph_index == 0
        and litert_available()
        and not call_sites(model, 0)
        and not keeps_state(model, 0)
    )


def channel_gains(top: float, bottom: float, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """The factor each channel is scaled up by: the tensor's largest (smallest) value on the
    samples, `top` (`bottom`), over the channel's guaranteed bounds [low, high], where that is
    at least MIN_GAIN (else 1), at most MAX_GAIN. A channel scaled so never leaves the range
    the tensor has on the samples, and a RELU6 channel (high <= 6 before, top <= 6) never
    reaches the clamp."""
    low, high = np.asarray(low, np.float64), np.asarray(high, np.float64)
    top, bottom = max(top, 0.0), min(bottom, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        up = np.where(high > 0, top / high, np.inf)
        down = np.where(low < 0, bottom / low, np.inf)
    gain = np.minimum(up, down)
    dead = (high <= 0) & (low >= 0)  # zero whatever the input: nothing to rescale
    gain = np.where(dead | ~np.isfinite(gain) | (gain < MIN_GAIN), 1.0, gain)
    return np.minimum(gain, MAX_GAIN)


def _own_tensor(model: Model, subgraph: Subgraph, op, position: int, readers: dict) -> int:
    """The operand at `position` of `op`, copied first when another operator reads it too
    (converters share equal constants, such as zero biases, between layers)."""
    t = op.inputs[position]
    if len(readers.get(t, [])) > 1 or op.inputs.count(t) > 1:
        tensor = subgraph.tensors[t]
        t = subgraph.add_tensor(replace(tensor, name=f"{tensor.name}/equalized", extra={}))
        op.inputs[position] = t
    return t


def _scaled(model: Model, subgraph: Subgraph, op, position: int, factor, readers) -> None:
    t = _own_tensor(model, subgraph, op, position, readers)
    values = model.tensor_data(subgraph.tensors[t]).astype(np.float64)
    model.set_tensor_data(subgraph, t, (values * factor).astype(np.float32))


def _apply(model: Model, subgraph: Subgraph, pair: Pair, gain: np.ndarray) -> None:
    """Producer channel c times gain[c], the consumer's taps reading c divided by it."""
    readers = subgraph.consumers()
    producer = subgraph.operators[pair.producer]
    axis = _PRODUCERS[model.op_type(producer)]
    shape = [1] * len(subgraph.tensors[producer.inputs[1]].shape)
    shape[axis] = -1
    _scaled(model, subgraph, producer, 1, gain.reshape(shape), readers)
    if len(producer.inputs) > 2 and producer.inputs[2] >= 0:
        _scaled(model, subgraph, producer, 2, gain, readers)
    consumer = subgraph.operators[pair.consumer]
    taps = subgraph.tensors[consumer.inputs[1]].shape[-1]
    # DEPTHWISE_CONV_2D: channel multiplier outputs per input channel, on the last axis.
    per_input = np.repeat(gain, taps // gain.size)
    _scaled(model, subgraph, consumer, 1, 1.0 / per_input, readers)


def pair_gains(
    pair: Pair,
    ranges: dict[int, tuple[np.ndarray, np.ndarray]],
    bounds: dict[int, tuple[np.ndarray, np.ndarray]],
) -> np.ndarray | None:
    """Each channel's factor: the smallest that `channel_gains` allows on the tensors of the
    pair; None when one of them has no bounds or was not measured."""
    if any(t not in ranges or t not in bounds for t in pair.tensors):
        return None
    return np.minimum.reduce(
        [
            channel_gains(float(ranges[t][1].max()), float(ranges[t][0].min()), *bounds[t])
            for t in pair.tensors
        ]
    )


def equalize(
    model: Model,
    subgraph_index: int,
    samples: Sequence[np.ndarray],
    source_index: Sequence[int] | None = None,
) -> list[EqualizedPair]:
    """Scale up, in place, the narrow channels of every rescalable activation, measured on
    `samples` (one array per input, samples stacked); return the pairs changed. `source_index`
    maps operator indices to the input model's (for the report)."""
    subgraph = model.subgraphs[subgraph_index]
    pairs = find_pairs(model, subgraph_index)
    if not pairs or not samples or samples[0].shape[0] == 0:
        return []
    measured = [t for p in pairs for t in p.tensors]
    ranges = channel_ranges(model, subgraph_index, measured, samples)
    given = {
        t: (float(values.min()), float(values.max()))
        for t, values in zip(subgraph.inputs, samples, strict=True)
        if values.dtype == np.float32 and values.size
    }
    bounds = activation_bounds(model, subgraph_index, given)
    named = source_index if source_index is not None else range(len(subgraph.operators))
    done = []
    for pair in pairs:
        gain = pair_gains(pair, ranges, bounds)
        if gain is None or not (gain > 1.0).any():
            continue
        _apply(model, subgraph, pair, gain)
        done.append(
            EqualizedPair(
                subgraph_index,
                named[pair.producer],
                named[pair.consumer],
                subgraph.tensors[pair.tensors[-1]].name,
                int((gain > 1.0).sum()),
                int(gain.size),
                float(gain.max()),
            )
        )
    return done

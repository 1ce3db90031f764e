"""One-op models with weights stored every way LiteRT might read them (hybrid, behind DEQUANTIZE,
int8 or int4, per axis, per tensor, in blocks), built independently of qtool's quantizer: the
oracle of tests/quantize/test_weight_kernels.py, and base models for the weight modes' tests."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType

from qtool.model import Model, QuantParams, TensorType, model_to_bytes
from qtool.model.build import GraphBuilder
from qtool.model.lowbit import blockwise_params
from qtool.numerics import pack_int4, sqnr_db
from qtool.numerics.lowbit import round_to_mantissa

RNG = np.random.default_rng(24)
KERNELS = {
    "builtin": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
    "reference": OpResolverType.BUILTIN_REF,
    "xnnpack": OpResolverType.AUTO,
}


@dataclass(frozen=True)
class Stored:
    """How a test stores weights: read directly (hybrid) or behind a DEQUANTIZE, int8 or int4,
    per-axis (along `axis`), per-tensor or blockwise."""

    bits: int
    granularity: str  # per-axis, per-tensor, blockwise
    dequantized: bool = False
    block_size: int = 32
    bf16_scales: bool = True  # blockwise scales rounded to bfloat16's mantissa


def stored_weights(weights: np.ndarray, stored: Stored, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """(integer values, scales) of symmetric max-scaled weights in `stored`'s form."""
    qmax = 127 if stored.bits == 8 else 7
    if stored.granularity == "blockwise":
        rows = weights.reshape(weights.shape[0], -1, stored.block_size)
        scale = np.abs(rows).max(axis=2) / qmax
        if stored.bf16_scales:
            scale = round_to_mantissa(scale.astype(np.float32), 7)
        scale = scale.astype(np.float16).astype(np.float32)
        values = np.clip(np.round(rows / scale[..., None]), -qmax - 1, qmax)
        return values.astype(np.int8).reshape(weights.shape), scale
    if stored.granularity == "per-axis":
        others = tuple(d for d in range(weights.ndim) if d != axis)
        scale = (np.abs(weights).max(axis=others) / qmax).astype(np.float32)
        shape = [1] * weights.ndim
        shape[axis] = -1
        values = np.clip(np.round(weights / scale.reshape(shape)), -qmax, qmax)
        return values.astype(np.int8), scale
    scale = np.array([np.abs(weights).max() / qmax], np.float32)
    return np.clip(np.round(weights / scale[0]), -qmax, qmax).astype(np.int8), scale


def real(values: np.ndarray, scale: np.ndarray, stored: Stored, axis: int) -> np.ndarray:
    """The float weights the stored integers stand for."""
    if stored.granularity == "blockwise":
        rows = values.reshape(values.shape[0], -1, stored.block_size)
        return (rows * scale[..., None]).reshape(values.shape).astype(np.float32)
    if stored.granularity == "per-axis":
        shape = [1] * values.ndim
        shape[axis] = -1
        return (values * scale.reshape(shape)).astype(np.float32)
    return (values * scale[0]).astype(np.float32)


def add_weights(b: GraphBuilder, weights: np.ndarray, stored: Stored | None, axis: int) -> int:
    """The tensor an op reads as its weights: float, integer (hybrid) or a DEQUANTIZE of it."""
    if stored is None:
        return b.constant("w", weights.astype(np.float32))
    values, scale = stored_weights(weights, stored, axis)
    if stored.granularity == "blockwise":
        scales = b.constant("w_scales", scale.astype(np.float16))
        params = blockwise_params(scales, stored.block_size)
    else:
        params = QuantParams.of(scale, 0, axis if stored.granularity == "per-axis" else 0)
    data = pack_int4(values) if stored.bits == 4 else values
    kind = TensorType.INT4 if stored.bits == 4 else TensorType.INT8
    w = b.tensor("w_q", list(weights.shape), kind, params, buffer=b.model.add_buffer(data))
    if stored.dequantized:
        return b.op("DEQUANTIZE", [w], output_shape=list(weights.shape), name="w")
    return w


@dataclass
class OneOp:
    """A one-op model builder: its weights, the channel axis, and how to build it."""

    op_type: str
    weights: np.ndarray
    axis: int
    feed: np.ndarray

    def model(self, stored: Stored | None) -> Model:
        b = GraphBuilder()
        x = b.input("x", list(self.feed.shape), self.feed.dtype)
        w = add_weights(b, self.weights, stored, self.axis)
        return b.finish([_OPS[self.op_type](b, x, w, self)])

    def reference(self, stored: Stored) -> np.ndarray:
        """The float op's output on the weights the stored integers stand for."""
        values, scale = stored_weights(self.weights, stored, self.axis)
        exact = OneOp(self.op_type, real(values, scale, stored, self.axis), self.axis, self.feed)
        return run(model_to_bytes(exact.model(None)), self.feed, "builtin")[0]


def _fc(b, x, w, spec):
    return b.op(
        "FULLY_CONNECTED",
        [x, w, -1],
        output_shape=[spec.feed.shape[0], spec.weights.shape[0]],
        options_type="FullyConnectedOptions",
        options={"asymmetric_quantize_inputs": True},
    )


def _conv(b, x, w, spec):
    bias = b.constant("bias", np.full(spec.weights.shape[0], 0.1, np.float32))
    return b.op(
        "CONV_2D",
        [x, w, bias],
        output_shape=[1, 8, 8, spec.weights.shape[0]],
        options_type="Conv2DOptions",
        options={"padding": 0, "stride_w": 1, "stride_h": 1},
    )


def _depthwise(b, x, w, spec):
    bias = b.constant("bias", np.full(spec.weights.shape[3], 0.1, np.float32))
    return b.op(
        "DEPTHWISE_CONV_2D",
        [x, w, bias],
        output_shape=[1, 8, 8, spec.weights.shape[3]],
        options_type="DepthwiseConv2DOptions",
        options={"padding": 0, "stride_w": 1, "stride_h": 1, "depth_multiplier": 1},
    )


def _transpose_conv(b, x, w, spec):
    shape = b.constant("shape", np.array([1, 16, 16, spec.weights.shape[0]], np.int32))
    return b.op(
        "TRANSPOSE_CONV",
        [shape, w, x, -1],
        output_shape=[1, 16, 16, spec.weights.shape[0]],
        options_type="TransposeConvOptions",
        options={"padding": 0, "stride_w": 2, "stride_h": 2},
    )


def _batch_matmul(b, x, w, spec):
    return b.op(
        "BATCH_MATMUL",
        [x, w],
        output_shape=[1, spec.feed.shape[1], spec.weights.shape[1]],
        options_type="BatchMatMulOptions",
        options={"asymmetric_quantize_inputs": True},
    )


def _embedding(b, x, w, spec):
    return b.op(
        "EMBEDDING_LOOKUP", [x, w], output_shape=[spec.feed.shape[0], spec.weights.shape[1]]
    )


_OPS = {
    "FULLY_CONNECTED": _fc,
    "CONV_2D": _conv,
    "DEPTHWISE_CONV_2D": _depthwise,
    "TRANSPOSE_CONV": _transpose_conv,
    "BATCH_MATMUL": _batch_matmul,
    "EMBEDDING_LOOKUP": _embedding,
}


def one_op(op_type: str, outputs: int = 64, depth: int = 128) -> OneOp:
    """A one-op model of `op_type` with random weights and a random input."""
    if op_type == "FULLY_CONNECTED":
        weights, axis = RNG.normal(0, 0.1, (outputs, depth)), 0
        feed = RNG.normal(0, 1, (3, depth))
    elif op_type == "CONV_2D":
        weights, axis, feed = RNG.normal(0, 0.1, (16, 3, 3, 8)), 0, RNG.normal(0, 1, (1, 8, 8, 8))
    elif op_type == "DEPTHWISE_CONV_2D":
        weights, axis, feed = RNG.normal(0, 0.3, (1, 3, 3, 8)), 3, RNG.normal(0, 1, (1, 8, 8, 8))
    elif op_type == "TRANSPOSE_CONV":
        weights, axis, feed = RNG.normal(0, 0.1, (16, 3, 3, 8)), 0, RNG.normal(0, 1, (1, 8, 8, 8))
    elif op_type == "BATCH_MATMUL":
        weights, axis, feed = RNG.normal(0, 0.1, (32, 16)), 1, RNG.normal(0, 1, (1, 4, 32))
    else:
        weights, axis = RNG.normal(0, 1, (50, 32)), 0
        return OneOp(op_type, weights.astype(np.float32), axis, np.array([3, 7, 49, 0], np.int32))
    return OneOp(op_type, weights.astype(np.float32), axis, feed.astype(np.float32))


def run(blob: bytes, feed: np.ndarray, kernels: str) -> tuple[np.ndarray, bool]:
    """The output of one invocation on `kernels` (builtin, reference, xnnpack), and whether
    XNNPACK took any op."""
    interpreter = Interpreter(model_content=blob, experimental_op_resolver_type=KERNELS[kernels])
    interpreter.allocate_tensors()
    delegated = any(o["op_name"] == "DELEGATE" for o in interpreter._get_ops_details())
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], feed)
    interpreter.invoke()
    return interpreter.get_tensor(interpreter.get_output_details()[0]["index"]).copy(), delegated


def accuracy(spec: OneOp, stored: Stored, kernels: str) -> tuple[float, bool]:
    """The stored model's SQNR (dB) on `kernels` against the float op on the weights the
    integers stand for, and whether XNNPACK took the op."""
    found, delegated = run(model_to_bytes(spec.model(stored)), spec.feed, kernels)
    return sqnr_db(spec.reference(stored), found), delegated


def lstm_model(steps: int = 6, features: int = 16, cells: int = 32) -> Model:
    """A float UNIDIRECTIONAL_SEQUENCE_LSTM (no peephole, no projection): input [1, steps,
    features], state in two variable tensors, as TensorFlow's converter writes Keras's LSTM."""
    b = GraphBuilder()
    x = b.input("x", [1, steps, features])
    inputs = [x]
    for gate in ("i", "f", "c", "o"):
        inputs.append(b.constant(f"w_{gate}", RNG.normal(0, 0.2, (cells, features)), np.float32))
    for gate in ("i", "f", "c", "o"):
        inputs.append(b.constant(f"r_{gate}", RNG.normal(0, 0.2, (cells, cells)), np.float32))
    inputs += [-1, -1, -1]
    for gate in ("i", "f", "c", "o"):
        inputs.append(b.constant(f"b_{gate}", RNG.normal(0, 0.1, cells), np.float32))
    inputs += [-1, -1]
    for name in ("output_state", "cell_state"):
        state = b.tensor(name, [1, cells])
        b.subgraph.tensors[state].is_variable = True
        inputs.append(state)
    inputs += [-1, -1, -1, -1]
    y = b.op(
        "UNIDIRECTIONAL_SEQUENCE_LSTM",
        inputs,
        output_shape=[1, steps, cells],
        options_type="UnidirectionalSequenceLSTMOptions",
        options={"fused_activation_function": 4, "time_major": False},
    )
    return b.finish([y])


def int8_model(spec: OneOp, values: np.ndarray, scale: np.ndarray, bits: int) -> Model:
    """`spec`'s op in int8 (input scale 0.05, output scale 0.1, zero points 0) reading the
    integer weights `values` (per axis, `scale`) stored as int8 or packed int4."""
    b = GraphBuilder()
    x = b.input("x", list(spec.feed.shape), np.int8, QuantParams.of(0.05, 0))
    params = QuantParams.of(scale, 0, spec.axis)
    data = pack_int4(values) if bits == 4 else values
    kind = TensorType.INT4 if bits == 4 else TensorType.INT8
    w = b.tensor("w_q", list(values.shape), kind, params, buffer=b.model.add_buffer(data))
    channels = values.shape[spec.axis]
    bias = b.constant(
        "bias", np.zeros(channels, np.int32), quantization=QuantParams.of(scale * 0.05, 0, 0)
    )
    y = _OPS[spec.op_type](b, x, w, spec)
    op = b.subgraph.operators[-1]
    op.inputs[2] = bias
    output = b.subgraph.tensors[y]
    output.dtype = TensorType.INT8
    output.quantization = QuantParams.of(0.1, 0)
    if spec.op_type == "FULLY_CONNECTED":
        op.options = {}
    return b.finish([y])


def fc_model(depth: int = 128, hidden: int = 64, classes: int = 10) -> Model:
    """Two FULLY_CONNECTED layers (RELU between) on a [1, depth] input, with biases."""
    b = GraphBuilder()
    x = b.input("x", [1, depth])
    weights = RNG.normal(0, 0.1, (hidden, depth))
    h = b.fully_connected(x, weights, RNG.normal(0, 0.1, hidden), "fc1", activation=1)
    y = b.fully_connected(h, RNG.normal(0, 0.1, (classes, hidden)), None, "fc2")
    return b.finish([y])


def depthwise_fc_model() -> Model:
    """DEPTHWISE_CONV_2D (RELU6), RESHAPE to a vector, FULLY_CONNECTED: [1, 8, 8, 8] -> [1, 16]."""
    b = GraphBuilder()
    x = b.input("x", [1, 8, 8, 8])
    spec = OneOp("DEPTHWISE_CONV_2D", RNG.normal(0, 0.3, (1, 3, 3, 8)).astype(np.float32), 3, x)
    w = b.constant("dw/weights", spec.weights)
    h = _depthwise(b, x, w, spec)
    flat = b.op(
        "RESHAPE",
        [h, b.constant("shape", np.array([1, 512], np.int32))],
        output_shape=[1, 512],
        options_type="ReshapeOptions",
        options={"new_shape": [1, 512]},
    )
    y = b.fully_connected(flat, RNG.normal(0, 0.05, (16, 512)), RNG.normal(0, 0.1, 16), "fc")
    return b.finish([y])


def embedding_model(rows: int = 64, width: int = 64, classes: int = 16) -> Model:
    """EMBEDDING_LOOKUP of 4 ids in a [rows, width] table, then FULLY_CONNECTED on the 4 rows."""
    b = GraphBuilder()
    ids = b.input("ids", [4], np.int32)
    table = b.constant("table", RNG.normal(0, 1, (rows, width)).astype(np.float32))
    looked = b.op("EMBEDDING_LOOKUP", [ids, table], output_shape=[4, width], name="rows")
    weights = b.constant("head/weights", RNG.normal(0, 0.1, (classes, width)).astype(np.float32))
    y = b.op(
        "FULLY_CONNECTED",
        [looked, weights, -1],
        output_shape=[4, classes],
        options_type="FullyConnectedOptions",
        options={},
        name="head",
    )
    return b.finish([y])


def int4_fc(spec: OneOp, values: np.ndarray, scale: np.ndarray) -> Model:
    """`spec`'s FULLY_CONNECTED reading `values` as per-axis int4 weights of `scale`."""
    b = GraphBuilder()
    x = b.input("x", list(spec.feed.shape))
    data = b.model.add_buffer(pack_int4(values))
    params = QuantParams.of(scale, 0, 0)
    w = b.tensor("w_q", list(values.shape), TensorType.INT4, params, buffer=data)
    return b.finish([_fc(b, x, w, spec)])


def with_float16_bias(spec: OneOp, model: Model) -> Model:
    """`model` (a one-op model of `spec`) with its op's bias a float16 constant behind a
    DEQUANTIZE, the DEQUANTIZE first."""
    graph = model.subgraphs[0]
    channels = spec.weights.shape[spec.axis]
    b = GraphBuilder(model)
    stored = b.constant("bias_float16", np.full(channels, 0.1, np.float16))
    bias = b.op("DEQUANTIZE", [stored], output_shape=[channels], name="bias_float32")
    graph.operators.insert(0, graph.operators.pop())
    op = graph.operators[-1]
    op.inputs[2] = bias
    return model

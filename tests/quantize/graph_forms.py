"""Small float models of the graph forms exporters produce, and LiteRT as their judge.

Each builder returns a model (GraphBuilder, no TensorFlow) and calibration and held-out data;
`litert_sqnr` runs a produced model and its float original in LiteRT, sample by sample, with
the builtin kernels or XNNPACK, and gives each output's SQNR in dB.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType

from qtool.model import Model, Subgraph, model_to_bytes, parse_model
from qtool.model.build import GraphBuilder
from qtool.numerics import sqnr_db


@dataclass
class Form:
    """A float model and its data: `calibration` and `holdout` map input names to (N, ...)."""

    model: Model
    calibration: dict[str, np.ndarray]
    holdout: dict[str, np.ndarray]

    @property
    def blob(self) -> bytes:
        return model_to_bytes(self.model)


def _mul(b: GraphBuilder, x: int, y: int, shape: list[int], name: str) -> int:
    return b.op("MUL", [x, y], output_shape=shape, name=name, options_type="MulOptions")


def scalar_form(samples: int = 40) -> Form:
    """0-d activations as Keras' shape arithmetic and audio front-ends make them: a dense layer,
    its peak over every axis (a scalar), the peak minus a constant as a floor under the layer
    (MAXIMUM broadcasting a scalar), and the layer flattened to 1-d and squared."""
    rng = np.random.default_rng(0)
    b = GraphBuilder()
    x = b.input("x", [1, 16])
    h = b.fully_connected(x, rng.standard_normal((8, 16)) / 3, rng.standard_normal(8) / 10, "fc")
    axes = b.constant("axes", np.array([0, 1], np.int32))
    peak = b.op(
        "REDUCE_MAX",
        [h, axes],
        output_shape=[],
        name="peak",
        options_type="ReducerOptions",
        options={"keep_dims": False},
    )
    floor = b.op(
        "SUB",
        [peak, b.constant("depth", np.array(2.0, np.float32))],
        output_shape=[],
        name="floor",
        options_type="SubOptions",
    )
    clamped = b.op("MAXIMUM", [h, floor], output_shape=[1, 8], name="clamped")
    flat = b.op("RESHAPE", [h, b.constant("shape", np.array([8], np.int32))], output_shape=[8])
    squared = _mul(b, flat, flat, [8], "squared")
    model = parse_model(model_to_bytes(b.finish([clamped, squared, floor])))
    data = rng.uniform(-1, 1, (samples + 24, 16)).astype(np.float32)
    return Form(model, {"x": data[:samples]}, {"x": data[samples:]})


def vector_form(samples: int = 40) -> Form:
    """Inputs without a batch axis: a 1-d signal and a 0-d gain, an elementwise chain and a
    mean to a scalar output, and a dense layer on the 1-d signal."""
    rng = np.random.default_rng(1)
    b = GraphBuilder()
    x = b.input("x", [16])
    gain = b.input("gain", [])
    scaled = _mul(b, x, gain, [16], "scaled")
    offset = b.constant("offset", rng.uniform(0.2, 1.0, 16).astype(np.float32))
    shifted = b.op(
        "ADD", [scaled, offset], output_shape=[16], name="shifted", options_type="AddOptions"
    )
    squashed = b.op("TANH", [shifted], output_shape=[16], name="squashed")
    mean = b.op(
        "MEAN",
        [squashed, b.constant("axis", np.array([0], np.int32))],
        output_shape=[],
        name="mean",
        options_type="ReducerOptions",
        options={"keep_dims": False},
    )
    # A dense layer reading the 1-d signal (LiteRT flattens it to one row): bias correction
    # needs the mean of a 1-d input.
    dense = b.fully_connected(
        x, rng.standard_normal((8, 16)) / 3, rng.standard_normal(8) / 10, "dense"
    )
    model = parse_model(model_to_bytes(b.finish([squashed, mean, dense])))
    n = samples + 24
    x_data = rng.standard_normal((n, 16)).astype(np.float32)
    g_data = rng.uniform(0.5, 2.0, n).astype(np.float32)
    return Form(
        model,
        {"x": x_data[:samples], "gain": g_data[:samples]},
        {"x": x_data[samples:], "gain": g_data[samples:]},
    )


def _signed(b: GraphBuilder, t: int, signature: list[int]) -> int:
    b.subgraph.tensors[t].shape_signature = signature
    return t


def dynamic_form(samples: int = 40, width: int = 64) -> Form:
    """An audio front-end as exporters write it: input [1, 1] with signature [-1, -1] (the
    window length is the caller's), framed by a strided convolution, flattened by a RESHAPE to
    a shape computed at run time (SHAPE -> STRIDED_SLICE -> CONCATENATION, Keras' Flatten of
    a dynamic batch). The data holds windows of `width` samples."""
    rng = np.random.default_rng(2)
    b = GraphBuilder()
    x = _signed(b, b.input("audio", [1, 1]), [-1, -1])
    rows = _signed(
        b,
        b.op(
            "EXPAND_DIMS",
            [x, b.constant("axis1", np.array(1, np.int32))],
            output_shape=[1, 1, 1],
            options_type="ExpandDimsOptions",
        ),
        [-1, 1, -1],
    )
    image = _signed(
        b,
        b.op(
            "EXPAND_DIMS",
            [rows, b.constant("axis3", np.array(3, np.int32))],
            output_shape=[1, 1, 1, 1],
            options_type="ExpandDimsOptions",
        ),
        [-1, 1, -1, 1],
    )
    filters = b.constant("filters", (rng.standard_normal((4, 1, 8, 1)) / 3).astype(np.float32))
    frames = _signed(
        b,
        b.op(
            "CONV_2D",
            [image, filters, b.constant("bias", np.zeros(4, np.float32))],
            output_shape=[1, 1, 1, 4],
            name="frames",
            options_type="Conv2DOptions",
            options={"padding": 1, "stride_w": 4, "stride_h": 1, "fused_activation_function": 1},
        ),
        [-1, 1, -1, 4],
    )
    shape = b.shape(frames)
    batch = b.op(
        "STRIDED_SLICE",
        [shape]
        + [b.constant(n, np.array([v], np.int32)) for n, v in (("b", 0), ("e", 1), ("s", 1))],
        output_shape=[1],
        output_dtype=np.int32,
        options_type="StridedSliceOptions",
    )
    flat_shape = b.op(
        "CONCATENATION",
        [batch, b.constant("rest", np.array([-1], np.int32))],
        output_shape=[2],
        output_dtype=np.int32,
        options_type="ConcatenationOptions",
    )
    flat = _signed(
        b, b.op("RESHAPE", [frames, flat_shape], output_shape=[1, 4], name="flat"), [-1, -1]
    )
    model = parse_model(model_to_bytes(b.finish([flat])))
    t = np.arange(width) / width
    waves = np.sin(2 * np.pi * np.outer(rng.uniform(1, 6, samples + 24), t))
    data = (waves * rng.uniform(0.2, 1.0, (samples + 24, 1))).astype(np.float32)
    return Form(model, {"audio": data[:samples]}, {"audio": data[samples:]})


def _subgraph(b: GraphBuilder, name: str) -> GraphBuilder:
    """A builder of a new, empty subgraph of the model `b` builds."""
    b.model.subgraphs.append(Subgraph(tensors=[], inputs=[], outputs=[], operators=[], name=name))
    return GraphBuilder(b.model, len(b.model.subgraphs) - 1)


def counted_condition(b: GraphBuilder, steps: int, carried: list[tuple[str, list[int]]]) -> None:
    """The condition subgraph of a counted WHILE: input 0 the int32 step counter (`c_step`),
    then the other loop variables (name, shape); true while the counter is below `steps`."""
    condition = _subgraph(b, "condition")
    counter = condition.input("c_step", [], np.int32)
    for name, shape in carried:
        condition.input(name, shape)
    limit = condition.constant("steps", np.array(steps, np.int32))
    condition.finish(
        [condition.op("LESS", [counter, limit], output_shape=[], output_dtype=np.bool_)]
    )


def frame_at(body: GraphBuilder, sequence: int, step: int, features: int) -> int:
    """Frame `step` of a [1, steps, features] sequence (GATHER along axis 1)."""
    return body.op(
        "GATHER",
        [sequence, step],
        output_shape=[1, features],
        options_type="GatherOptions",
        options={"axis": 1},
    )


def next_step(body: GraphBuilder, step: int) -> int:
    """The counter plus one."""
    one = body.constant("one", np.array(1, np.int32))
    return body.op(
        "ADD", [step, one], output_shape=[], output_dtype=np.int32, options_type="AddOptions"
    )


def while_op(b: GraphBuilder, inputs: list[int], outputs: list[int]) -> None:
    """A WHILE running subgraph 1 as its condition and subgraph 2 as its body."""
    b.op(
        "WHILE",
        inputs,
        outputs,
        options_type="WhileOptions",
        options={"cond_subgraph_index": 1, "body_subgraph_index": 2},
    )


def _dense(b: GraphBuilder, x: int, rng: np.random.Generator, n_in: int, n_out: int, name: str):
    return b.fully_connected(
        x, rng.standard_normal((n_out, n_in)) / np.sqrt(n_in), rng.standard_normal(n_out) / 10, name
    )


def if_form(samples: int = 48) -> Form:
    """A dense layer whose peak picks one of two heads, as wake-word exporters write it: IF
    passes the layer (and the weights of one head, as ONNX converters do) to its branches.
    Output 0: then LOGISTIC, else TANH (fixed parameters that differ); output 1: then the layer
    passed through unchanged, else the layer halved."""
    rng = np.random.default_rng(3)
    b = GraphBuilder()
    x = b.input("x", [1, 8])
    h = _dense(b, x, rng, 8, 8, "layer")
    peak = b.op(
        "REDUCE_MAX",
        [h, b.constant("axes", np.array([0, 1], np.int32))],
        output_shape=[],
        options_type="ReducerOptions",
        options={"keep_dims": False},
    )
    condition = b.op(
        "GREATER",
        [peak, b.constant("threshold", np.array(0.9, np.float32))],
        output_shape=[],
        output_dtype=np.bool_,
    )
    weights = b.constant("then/weights", (rng.standard_normal((4, 8)) / 3).astype(np.float32))
    then = _subgraph(b, "then")
    t_h, t_w = then.input("then_h", [1, 8]), then.input("then_w", [4, 8])
    t_fc = then.op(
        "FULLY_CONNECTED", [t_h, t_w, -1], output_shape=[1, 4], options_type="FullyConnectedOptions"
    )
    then.finish([then.op("LOGISTIC", [t_fc], output_shape=[1, 4]), t_h])
    other = _subgraph(b, "else")
    e_h, _ = other.input("else_h", [1, 8]), other.input("else_w", [4, 8])
    e_out = other.op("TANH", [_dense(other, e_h, rng, 8, 4, "else_fc")], output_shape=[1, 4])
    half = other.constant("half", np.array(0.5, np.float32))
    other.finish([e_out, _mul(other, e_h, half, [1, 8], "halved")])
    outputs = [b.tensor("head", [1, 4]), b.tensor("layer_out", [1, 8])]
    b.op(
        "IF",
        [condition, h, weights],
        outputs,
        options_type="IfOptions",
        options={"then_subgraph_index": 1, "else_subgraph_index": 2},
    )
    model = parse_model(model_to_bytes(b.finish(outputs)))
    data = rng.uniform(-1, 1, (samples + 32, 8)).astype(np.float32)
    return Form(model, {"x": data[:samples]}, {"x": data[samples:]})


def while_form(samples: int = 40, steps: int = 6) -> Form:
    """A recurrent layer as Keras 3 lowers one: WHILE carries a step counter, the state
    (zeros at first), the input sequence and the recurrent weights U (a constant the loop
    passes through unchanged, as converters capture weights) through a condition (counter <
    steps) and a body (the state becomes TANH(W x_t + U h); the counter grows by one); a
    dense layer reads the last state."""
    rng = np.random.default_rng(4)
    b = GraphBuilder()
    x = b.input("sequence", [1, steps, 4])
    start = b.constant("start", np.array(0, np.int32))
    zeros = b.constant("zeros", np.zeros((1, 8), np.float32))
    recurrent = b.constant("recurrent", (rng.standard_normal((8, 8)) / 4).astype(np.float32))
    counted_condition(
        b, steps, [("c_state", [1, 8]), ("c_sequence", [1, steps, 4]), ("c_recurrent", [8, 8])]
    )
    body = _subgraph(b, "body")
    i = body.input("b_step", [], np.int32)
    state = body.input("b_state", [1, 8])
    sequence = body.input("b_sequence", [1, steps, 4])
    weights = body.input("b_recurrent", [8, 8])
    frame = frame_at(body, sequence, i, 4)
    mixed = body.op(
        "ADD",
        [
            _dense(body, frame, rng, 4, 8, "input_gate"),
            body.op(
                "FULLY_CONNECTED",
                [state, weights, -1],
                output_shape=[1, 8],
                options_type="FullyConnectedOptions",
            ),
        ],
        output_shape=[1, 8],
        options_type="AddOptions",
    )
    new_state = body.op("TANH", [mixed], output_shape=[1, 8], name="new_state")
    body.finish([next_step(body, i), new_state, sequence, weights])
    outputs = [
        b.tensor("last_step", [], np.int32),
        b.tensor("last_state", [1, 8]),
        b.tensor("sequence_out", [1, steps, 4]),
        b.tensor("recurrent_out", [8, 8]),
    ]
    while_op(b, [start, zeros, x, recurrent], outputs)
    logits = _dense(b, outputs[1], rng, 8, 3, "classifier")
    model = parse_model(model_to_bytes(b.finish([logits])))
    t = np.linspace(0, 1, steps)[None, :, None]
    data = np.sin(
        2
        * np.pi
        * (t * rng.uniform(0.5, 2, (samples + 24, 1, 4)) + rng.uniform(0, 1, (samples + 24, 1, 4)))
    )
    data = data.astype(np.float32)
    return Form(model, {"sequence": data[:samples]}, {"sequence": data[samples:]})


def litert_outputs(blob: bytes, feeds: Sequence[np.ndarray], xnnpack: bool) -> list[np.ndarray]:
    """Every sample of `feeds` (N, ...) through the model in LiteRT, one invoke per sample,
    the input resized to the sample's shape; each output's values stacked (N, ...)."""
    resolver = OpResolverType.AUTO if xnnpack else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    interpreter = Interpreter(model_content=blob, experimental_op_resolver_type=resolver)
    inputs = interpreter.get_input_details()
    shapes = [list(d["shape"]) for d in inputs]
    leading_one = all(s[:1] == [1] for s in shapes)
    samples = [f[:, None] if leading_one else f for f in feeds]
    for detail, sample in zip(inputs, samples, strict=True):
        interpreter.resize_tensor_input(detail["index"], list(sample.shape[1:]))
    interpreter.allocate_tensors()
    found: list[list[np.ndarray]] = [[] for _ in interpreter.get_output_details()]
    for i in range(len(samples[0])):
        for detail, sample in zip(inputs, samples, strict=True):
            interpreter.set_tensor(detail["index"], sample[i].astype(detail["dtype"]))
        interpreter.invoke()
        for k, detail in enumerate(interpreter.get_output_details()):
            found[k].append(interpreter.get_tensor(detail["index"]).copy())
    return [np.stack(values) for values in found]


def litert_sqnr(float_blob: bytes, quantized_blob: bytes, feeds, xnnpack: bool) -> list[float]:
    """Each output's SQNR (dB) of the quantized model against the float one, both in LiteRT."""
    reference = litert_outputs(float_blob, feeds, xnnpack)
    got = litert_outputs(quantized_blob, feeds, xnnpack)
    return [sqnr_db(r, g.reshape(r.shape)) for r, g in zip(reference, got, strict=True)]

"""Small recurrent and stateful float models built with GraphBuilder, and sequences to run them
on: an UNIDIRECTIONAL_SEQUENCE_LSTM in each variant LiteRT's full kernel has, and a streaming
cell that keeps its state in a resource variable initialised by CALL_ONCE."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qtool.model import Model, Subgraph, TensorType
from qtool.model.build import GraphBuilder
from qtool.model.types import ActivationFunctionType


@dataclass(frozen=True)
class LstmVariant:
    """Which optional parts an LSTM has."""

    name: str
    cifg: bool = False  # no input gate (1 - forget)
    peephole: bool = False
    projection: int | None = None  # output size of the projection
    projection_bias: bool = False
    layer_norm: bool = False
    cell_clip: float = 0.0
    proj_clip: float = 0.0
    activation: int = ActivationFunctionType.TANH


LSTM_VARIANTS = (
    LstmVariant("plain", cell_clip=10.0),
    LstmVariant("cifg_peephole", cifg=True, peephole=True),
    LstmVariant("projection", projection=8, projection_bias=True, proj_clip=3.0),
    LstmVariant("layer_norm", layer_norm=True),
)


def lstm_model(
    variant: LstmVariant, units: int = 16, features: int = 8, steps: int = 12, seed: int = 0
) -> Model:
    """[1, steps, features] -> UNIDIRECTIONAL_SEQUENCE_LSTM (the 24 inputs of the full kernel)
    -> [1, steps, outputs], weights drawn at random with a given seed."""
    rng = np.random.default_rng(seed)
    outputs = variant.projection or units
    b = GraphBuilder()
    x = b.input("x", [1, steps, features])

    def const(name: str, shape: list[int], spread: float, offset: float = 0.0) -> int:
        return b.constant(name, (rng.normal(offset, spread, shape)).astype(np.float32))

    gates = ("input", "forget", "cell", "output")
    inputs = [x]
    for source, depth in (("input", features), ("recurrent", outputs)):
        for gate in gates:
            absent = variant.cifg and gate == "input"
            inputs.append(-1 if absent else const(f"{source}_to_{gate}", [units, depth], 0.35))
    for gate in ("input", "forget", "output"):
        absent = not variant.peephole or (variant.cifg and gate == "input")
        inputs.append(-1 if absent else const(f"cell_to_{gate}", [units], 0.3))
    for gate in gates:
        if variant.cifg and gate == "input":
            inputs.append(-1)
        else:  # forget gates start open, as Keras initialises them
            inputs.append(const(f"{gate}_bias", [units], 0.2, 1.0 if gate == "forget" else 0.0))
    if variant.projection:
        inputs.append(const("projection", [outputs, units], 0.4))
        inputs.append(const("projection_bias", [outputs], 0.1) if variant.projection_bias else -1)
    else:
        inputs += [-1, -1]
    for name, size in (("output_state", outputs), ("cell_state", units)):
        state = b.tensor(name, [1, size])
        b.subgraph.tensors[state].is_variable = True
        inputs.append(state)
    for gate in gates:
        use = variant.layer_norm and not (variant.cifg and gate == "input")
        inputs.append(const(f"{gate}_layer_norm", [units], 0.1, 1.0) if use else -1)
    y = b.op(
        "UNIDIRECTIONAL_SEQUENCE_LSTM",
        inputs,
        output_shape=[1, steps, outputs],
        name="lstm",
        options_type="UnidirectionalSequenceLSTMOptions",
        options={
            "fused_activation_function": variant.activation,
            "cell_clip": variant.cell_clip,
            "proj_clip": variant.proj_clip,
            "time_major": False,
        },
    )
    return b.finish([y])


def sequences(count: int, steps: int, features: int, seed: int) -> np.ndarray:
    """`count` smooth random sequences [count, steps, features] (a sum of slow sines and
    noise, as audio features look)."""
    rng = np.random.default_rng(seed)
    t = np.arange(steps)[None, :, None]
    phase = rng.uniform(0, 2 * np.pi, (count, 1, features))
    rate = rng.uniform(0.1, 0.6, (count, 1, features))
    noise = rng.normal(0, 0.3, (count, steps, features))
    return (np.sin(rate * t + phase) + noise).astype(np.float32)


def stream_model(features: int = 8, units: int = 12, seed: int = 0) -> Model:
    """A streaming cell: one frame [1, features] per invocation, its state [1, units] in a
    resource variable that a CALL_ONCE subgraph initialises to a constant (not zero):
    state = tanh(frame @ Wx + state @ Ws + b); output = state @ Wo."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder()
    main = b.model.subgraphs[0]
    init = Subgraph(tensors=[], inputs=[], outputs=[], operators=[], name="init")
    b.model.subgraphs.append(init)
    frame = b.input("frame", [1, features])
    b.op("CALL_ONCE", [], [], options_type="CallOnceOptions", options={"init_subgraph_index": 1})
    handle = _var_handle(b, "state")
    state = b.op("READ_VARIABLE", [handle], output_shape=[1, units], name="state_read")
    a = b.fully_connected(frame, rng.normal(0, 0.4, (units, features)), np.zeros(units), "wx")
    r = b.fully_connected(
        state, rng.normal(0, 0.35, (units, units)), rng.normal(0, 0.1, units), "ws"
    )
    summed = b.op("ADD", [a, r], output_shape=[1, units], name="sum", options_type="AddOptions")
    new_state = b.op("TANH", [summed], output_shape=[1, units], name="new_state")
    b.op("ASSIGN_VARIABLE", [handle, new_state], [])
    out = b.fully_connected(new_state, rng.normal(0, 0.5, (4, units)), np.zeros(4), "head")
    b.finish([out])
    ib = GraphBuilder(b.model, 1)
    init_handle = _var_handle(ib, "state")
    initial = ib.constant("initial_state", rng.uniform(-0.5, 0.5, (1, units)).astype(np.float32))
    ib.op("ASSIGN_VARIABLE", [init_handle, initial], [])
    assert b.model.subgraphs[0] is main
    return b.model


def gated_stream_model(features: int = 8, units: int = 12, seed: int = 0) -> Model:
    """A GRU-like streaming cell, its state in a resource variable (initialised to zeros):
    z = sigmoid(frame @ Wz + state @ Uz), c = tanh(frame @ Wc + state @ Uc),
    state = z * state + (1 - z) * c; output = state @ Wo."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder()
    b.model.subgraphs.append(Subgraph(tensors=[], inputs=[], outputs=[], operators=[], name="init"))
    frame = b.input("frame", [1, features])
    b.op("CALL_ONCE", [], [], options_type="CallOnceOptions", options={"init_subgraph_index": 1})
    handle = _var_handle(b, "state")
    state = b.op("READ_VARIABLE", [handle], output_shape=[1, units], name="state_read")

    def gate(name: str, activation: str, bias: float) -> int:
        x = b.fully_connected(frame, rng.normal(0, 0.8, (units, features)), None, f"{name}_x")
        h = b.fully_connected(state, rng.normal(0, 0.4, (units, units)), None, f"{name}_h")
        total = b.fully_connected(
            b.op(
                "ADD",
                [x, h],
                output_shape=[1, units],
                name=f"{name}_sum",
                options_type="AddOptions",
            ),
            np.eye(units),
            np.full(units, bias),
            f"{name}_bias",
        )
        return b.op(activation, [total], output_shape=[1, units], name=name)

    z = gate("update", "LOGISTIC", 0.0)
    c = gate("candidate", "TANH", 0.0)
    one = b.constant("one", np.ones([], np.float32))
    keep = b.op("MUL", [z, state], output_shape=[1, units], name="kept", options_type="MulOptions")
    rest = b.op(
        "SUB", [one, z], output_shape=[1, units], name="one_minus_z", options_type="SubOptions"
    )
    new = b.op("MUL", [rest, c], output_shape=[1, units], name="taken", options_type="MulOptions")
    state_next = b.op(
        "ADD", [keep, new], output_shape=[1, units], name="next", options_type="AddOptions"
    )
    b.op("ASSIGN_VARIABLE", [handle, state_next], [])
    out = b.fully_connected(state_next, rng.normal(0, 0.5, (4, units)), np.zeros(4), "head")
    b.finish([out])
    ib = GraphBuilder(b.model, 1)
    ib.op(
        "ASSIGN_VARIABLE",
        [_var_handle(ib, "state"), ib.constant("zeros", np.zeros((1, units), np.float32))],
        [],
    )
    return b.model


def _var_handle(b: GraphBuilder, name: str) -> int:
    handle = b.tensor(f"{name}_handle", [], TensorType.RESOURCE)
    b.op(
        "VAR_HANDLE",
        [],
        [handle],
        options_type="VarHandleOptions",
        options={"container": "", "shared_name": name},
    )
    return handle

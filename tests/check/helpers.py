"""Shared helpers of the checker tests: fixtures, small int8 models, mutations, a LiteRT verdict."""

from __future__ import annotations

import faulthandler
import os
from collections.abc import Callable

import numpy as np
from ai_edge_litert.interpreter import Interpreter

from qtool.check import Finding, audit_model
from qtool.model import Model, QuantParams, load_model, model_to_bytes, parse_model
from qtool.model.build import GraphBuilder
from tests.conftest import MODELS

TF_INT8 = MODELS / "tf_int8"


def tf_model(name: str) -> Model:
    """A TensorFlow int8 conversion from the fixtures (e.g. "cnn_int8")."""
    return load_model(TF_INT8 / f"{name}.tflite")


def op_index(model: Model, op_type: str, nth: int = 0, subgraph: int = 0) -> int:
    """Index of the nth operator of type `op_type`."""
    found = [
        i
        for i, op in enumerate(model.subgraphs[subgraph].operators)
        if model.op_type(op) == op_type
    ]
    return found[nth]


def op_tensor(model: Model, op: int, kind: str, position: int, subgraph: int = 0) -> int:
    """Tensor index of input/output `position` of operator `op`."""
    operator = model.subgraphs[subgraph].operators[op]
    return (operator.inputs if kind == "input" else operator.outputs)[position]


def mutate(model: Model, edit: Callable[[Model], None]) -> tuple[Model, bytes]:
    """Apply `edit` to a copy of `model`, save it and parse it back (what a user would audit:
    `qtool check` reads invalid graphs too, and reports them as QT-MODEL-INVALID)."""
    copy = parse_model(model_to_bytes(model))
    edit(copy)
    data = model_to_bytes(copy)
    return parse_model(data, validate=False), data


def new_findings(base: Model, mutated: Model) -> list[Finding]:
    """Findings of `mutated` that `base` does not have (the base may have infos)."""

    def key(f: Finding) -> tuple:
        return f.rule, f.subgraph, f.op_index, f.role, f.tensor_index

    before = {key(f) for f in audit_model(base)}
    return [f for f in audit_model(mutated) if key(f) not in before]


def litert_verdict(data: bytes) -> str:
    """LiteRT's verdict: "ok", "error" (refuses the model) or "abort" (kills the process),
    loading the model and running it once on zeros.

    Loading runs in a forked child: TFLite's TFLITE_CHECK aborts the whole process, which must
    not take the test run with it.
    """
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 0
        try:
            faulthandler.disable()  # an expected abort needs no traceback
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            interpreter = Interpreter(model_content=bytes(data))
            interpreter.allocate_tensors()
            for detail in interpreter.get_input_details():  # some kernels abort only when run
                interpreter.set_tensor(detail["index"], np.zeros(detail["shape"], detail["dtype"]))
            interpreter.invoke()
        except BaseException:
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return "abort"
    return "ok" if os.WEXITSTATUS(status) == 0 else "error"


# --------------------------------------------------------------------------- small int8 models

CONV_OPTIONS = {
    "padding": 1,  # VALID
    "stride_w": 1,
    "stride_h": 1,
    "fused_activation_function": 0,
    "dilation_w_factor": 1,
    "dilation_h_factor": 1,
}
POOL_OPTIONS = {
    "padding": 1,  # VALID
    "stride_w": 1,
    "stride_h": 1,
    "filter_width": 2,
    "filter_height": 2,
    "fused_activation_function": 0,
}


def q(scale, zero_point=0) -> QuantParams:
    return QuantParams.of(scale, zero_point)


def int8_conv_model(
    weight_shape: tuple[int, ...] = (4, 3, 3, 3), per_tensor_weights: bool = False
) -> Model:
    """float input -> QUANTIZE -> CONV_2D (int8, valid spec params) -> DEQUANTIZE -> float.

    Weights are per-axis along dimension 0, or per-tensor (a spec warning) if asked.
    """
    rng = np.random.default_rng(0)
    out_channels = weight_shape[0]
    b = GraphBuilder()
    x = b.input("x", [1, 6, 6, weight_shape[3]])
    xq = b.tensor("x_q", [1, 6, 6, weight_shape[3]], np.int8, q(0.02, -3))
    b.op("QUANTIZE", [x], [xq])
    weights = rng.integers(-127, 128, size=weight_shape).astype(np.int8)
    n_scales = 1 if per_tensor_weights else out_channels
    w_scale = (
        np.full(n_scales, 0.01, np.float32)
        if per_tensor_weights
        else np.linspace(0.005, 0.02, n_scales, dtype=np.float32)
    )
    w = b.constant("w", weights, quantization=q(w_scale, 0))
    bias_scale = np.float32(0.02) * w_scale  # as granular as the weights
    bias = b.constant(
        "bias",
        rng.integers(-500, 500, out_channels).astype(np.int32),
        quantization=q(bias_scale, 0),
    )
    yq = b.tensor("y_q", [1, 4, 4, out_channels], np.int8, q(0.05, 7))
    b.op(
        "CONV_2D",
        [xq, w, bias],
        [yq],
        options_type="Conv2DOptions",
        options=CONV_OPTIONS,
        version=3,
    )
    y = b.tensor("y", [1, 4, 4, out_channels])
    b.op("DEQUANTIZE", [yq], [y])
    return b.finish([y])


def chain_model(ops: list[str], io_dtype=np.float32) -> Model:
    """input -> QUANTIZE -> each op of `ops` (1-input, same params) -> QUANTIZE/DEQUANTIZE -> out.

    `ops` are single-input elementwise or pooling ops; "MAX_POOL_2D" gets 2x2 pooling options.
    With `io_dtype` uint8 the model's input/output are uint8 (quantized) and the boundary ops are
    QUANTIZE in both directions.
    """
    b = GraphBuilder()
    shape, zero_point = [1, 4, 4, 2], -5
    io_q = q(0.04, 128 + zero_point) if io_dtype == np.uint8 else None
    x = b.input("x", shape, io_dtype, io_q)
    current = b.tensor("x_q", shape, np.int8, q(0.04, zero_point))
    b.op("QUANTIZE", [x], [current])
    for n, op_type in enumerate(ops):
        pool = op_type == "MAX_POOL_2D"
        out_shape = [1, 3, 3, 2] if pool else shape
        nxt = b.tensor(f"{op_type.lower()}_{n}", out_shape, np.int8, q(0.04, zero_point))
        b.op(
            op_type,
            [current],
            [nxt],
            options_type="Pool2DOptions" if pool else None,
            options=POOL_OPTIONS if pool else None,
        )
        current, shape = nxt, out_shape
    y = b.tensor("y", shape, io_dtype, io_q)
    b.op("DEQUANTIZE" if io_dtype == np.float32 else "QUANTIZE", [current], [y])
    return b.finish([y])


def large_int8_model(layers: int = 10, width: int = 1024) -> Model:
    """A chain of FULLY_CONNECTED layers with width x width int8 weights (10 MB by default)."""
    rng = np.random.default_rng(1)
    b = GraphBuilder()
    x = b.input("x", [1, width])
    current = b.tensor("x_q", [1, width], np.int8, q(0.05, 0))
    b.op("QUANTIZE", [x], [current])
    for n in range(layers):
        w_scale = rng.uniform(0.001, 0.01, width).astype(np.float32)
        w = b.constant(
            f"w{n}",
            rng.integers(-127, 128, (width, width), dtype=np.int8),
            quantization=q(w_scale, 0),
        )
        bias = b.constant(
            f"b{n}",
            rng.integers(-1000, 1000, width, dtype=np.int32),
            quantization=q(np.float32(0.05) * w_scale, 0),
        )
        out = b.tensor(f"fc{n}", [1, width], np.int8, q(0.05, 0))
        b.op(
            "FULLY_CONNECTED",
            [current, w, bias],
            [out],
            options_type="FullyConnectedOptions",
            options={"fused_activation_function": 0},
        )
        current = out
    y = b.tensor("y", [1, width])
    b.op("DEQUANTIZE", [current], [y])
    return b.finish([y])

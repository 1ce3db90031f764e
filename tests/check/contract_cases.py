"""Injection cases of the kernel-contract rules (registered in CASES on import): each puts one
operand just outside a limit of `kernel_contracts` in the spec file."""

from __future__ import annotations

import numpy as np

from qtool.model import Model
from qtool.model.build import GraphBuilder
from qtool.model.types import ActivationFunctionType
from tests.check.cases import Case, case, cnn, conv_operands, params, set_values
from tests.check.helpers import int8_conv_model, op_index, op_tensor, q


@case
def activation_bound() -> Case:
    base = int8_conv_model()
    conv = op_index(base, "CONV_2D")
    output = op_tensor(base, conv, "output", 0)

    def edit(m: Model) -> None:  # a fused RELU6 whose 6 is 6e9 codes at this scale
        m.subgraphs[0].operators[conv].options["fused_activation_function"] = (
            ActivationFunctionType.RELU6
        )
        params(m, output).scale = np.array([1e-9], np.float32)

    return Case(base, edit, [("QT-ACTIVATION-BOUND", "error", conv, "output 0")], litert="error")


@case
def accumulator_overflow() -> Case:
    op, _, _, bias = conv_operands(cnn())

    def edit(m: Model) -> None:  # below the int32 limit (not saturated), but with no headroom
        set_values(m, bias, lambda v: v.__setitem__(0, 2**31 - 1000))

    return Case(cnn(), edit, [("QT-ACCUMULATOR-OVERFLOW", "warning", op, "bias")], litert="ok")


def _threshold_model() -> Model:
    """float x -> QUANTIZE (scale 0.01) -> GREATER than an int8 constant 0.5 -> bool."""
    b = GraphBuilder()
    x = b.input("x", [1, 8])
    xq = b.tensor("x_q", [1, 8], np.int8, q(0.01, 0))
    b.op("QUANTIZE", [x], [xq])
    threshold = b.constant("threshold", np.full([1, 8], 50, np.int8), quantization=q(0.01, 0))
    above = b.op("GREATER", [xq, threshold], output_shape=[1, 8], output_dtype=np.bool_, version=2)
    return b.finish([above])


@case
def comparison_resolution() -> Case:
    base = _threshold_model()
    greater = op_index(base, "GREATER")
    live = op_tensor(base, greater, "input", 0)

    def edit(m: Model) -> None:  # 1e-3: about 4 codes per step of the kernel's 1/256
        params(m, live).scale = np.array([1e-3], np.float32)

    return Case(
        base, edit, [("QT-COMPARISON-RESOLUTION", "warning", greater, "input 0")], litert="ok"
    )


def _softmax_model() -> Model:
    """float x -> QUANTIZE (scale 0.05) -> SOFTMAX -> DEQUANTIZE."""
    b = GraphBuilder()
    x = b.input("x", [1, 8])
    xq = b.tensor("x_q", [1, 8], np.int8, q(0.05, 0))
    b.op("QUANTIZE", [x], [xq])
    yq = b.tensor("y_q", [1, 8], np.int8, q(1 / 256, -128))
    b.op("SOFTMAX", [xq], [yq], options_type="SoftmaxOptions", options={"beta": 1.0})
    y = b.tensor("y", [1, 8])
    b.op("DEQUANTIZE", [yq], [y])
    return b.finish([y])


@case
def softmax_input_scale() -> Case:
    base = _softmax_model()
    softmax = op_index(base, "SOFTMAX")
    live = op_tensor(base, softmax, "input", 0)

    def edit(m: Model) -> None:  # beta 1 * 1e-9 * 2^26 < 1
        params(m, live).scale = np.array([1e-9], np.float32)

    # LiteRT's optimized kernel (a lookup table) runs it; its reference kernel and TFLite Micro
    # abort the process at prepare (measured: TFLite Micro exits with SIGABRT).
    return Case(base, edit, [("QT-SOFTMAX-INPUT-SCALE", "error", softmax, "input 0")], litert="ok")

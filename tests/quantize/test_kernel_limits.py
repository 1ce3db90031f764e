"""The prepare-time limits of the integer kernels (spec `kernel_contracts`): quantize never
writes a scale a builtin kernel refuses (it widens the range and says so), check reports a
model outside them, and the read-back check loads with LiteRT's builtin kernels only."""

from __future__ import annotations

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter, OpResolverType

from qtool.check import audit_model
from qtool.model import QuantParams, model_to_bytes, parse_model
from qtool.model.types import ActivationFunctionType
from qtool.readback import litert_problem
from qtool.spec import kernel_contracts
from tests.check.oracles import tflm_run
from tests.quantize.op_cases import CASES, OpCase
from tests.quantize.op_contract import measure, quantized_case

RELU6 = ActivationFunctionType.RELU6
CONV_RELU6 = OpCase(
    "CONV_2D",
    CASES["CONV_2D"].operands,
    "Conv2DOptions",
    {**CASES["CONV_2D"].options, "fused_activation_function": RELU6},
)
ADD_RELU6 = OpCase("ADD", CASES["ADD"].operands, "AddOptions", {"fused_activation_function": RELU6})
# Activations of ~1e-12 (a Keras MobileNetV2's deep layers reach 1e-9): the output scale from
# the range alone puts 6 / scale past int32.
TINY = "tiny-1e-12"


def _op(model, op_type: str):
    subgraph = model.subgraphs[0]
    return next(op for op in subgraph.operators if model.op_type(op) == op_type), subgraph


def test_clamp_bound_widens_the_range_and_runs_in_builtin_kernels() -> None:
    _, result, _, _ = quantized_case(ADD_RELU6, TINY, ranges={TINY: (0.0, 2e-12)})
    op, subgraph = _op(result.model, "ADD")
    q = subgraph.tensors[op.outputs[0]].quantization
    floor = kernel_contracts().min_output_scale((0.0, 6.0), -128)
    assert q.scale[0] >= floor
    assert any("widened" in w for w in result.notes.warnings)
    assert litert_problem(model_to_bytes(result.model)) is None
    assert not [f for f in audit_model(result.model) if f.rule == "QT-ACTIVATION-BOUND"]


def _with_output_scale(model, op_type: str, scale: float) -> bytes:
    copy = parse_model(model_to_bytes(model))
    op, subgraph = _op(copy, op_type)
    zero = subgraph.tensors[op.outputs[0]].quantization.zero_point
    subgraph.tensors[op.outputs[0]].quantization = QuantParams.of(scale, zero)
    return model_to_bytes(copy)


def test_overflowing_clamp_bound_is_refused_by_readback_and_reported() -> None:
    measured = measure(CONV_RELU6, "asymmetric")
    data = _with_output_scale(parse_model(measured.quantized), "CONV_2D", 1.09e-9)
    # The builtin kernels refuse it at prepare (no_integer_overflow_from_quantization).
    with pytest.raises(RuntimeError):
        Interpreter(
            model_content=data,
            experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
        ).allocate_tensors()
    assert "refuses" in litert_problem(data)
    rules = {f.rule for f in audit_model(parse_model(data))}
    assert "QT-ACTIVATION-BOUND" in rules


def test_softmax_input_scale_floor_planned_and_reported() -> None:
    softmax = CASES["SOFTMAX"]
    _, result, _, _ = quantized_case(softmax, "tiny")
    op, subgraph = _op(result.model, "SOFTMAX")
    scale = subgraph.tensors[op.inputs[0]].quantization.scale[0]
    assert scale > kernel_contracts().softmax_min_beta_scale
    data = model_to_bytes(result.model)
    feeds = [np.zeros((1, 4, 4, 3), np.float32)]
    assert tflm_run(data, [feeds])["runs"]  # TFLite Micro prepares it (aborts below the floor)
    tiny = _set_input_scale(result.model, "SOFTMAX", 1e-9)
    assert "QT-SOFTMAX-INPUT-SCALE" in {f.rule for f in audit_model(parse_model(tiny))}
    assert not tflm_run(tiny, [feeds])["runs"]


def _set_input_scale(model, op_type: str, scale: float) -> bytes:
    copy = parse_model(model_to_bytes(model))
    op, subgraph = _op(copy, op_type)
    zero = subgraph.tensors[op.inputs[0]].quantization.zero_point
    subgraph.tensors[op.inputs[0]].quantization = QuantParams.of(scale, zero)
    return model_to_bytes(copy)


def test_accumulator_headroom_reported_when_the_bias_fills_it() -> None:
    measured = measure(CASES["FULLY_CONNECTED"], "tiny")
    assert max(measured.errors.values()) <= 1.0  # planned with headroom: no wrap-around
    model = parse_model(measured.quantized)
    assert not [f for f in audit_model(model) if f.rule == "QT-ACCUMULATOR-OVERFLOW"]
    op, subgraph = _op(model, "FULLY_CONNECTED")
    bias = subgraph.tensors[op.inputs[2]]
    values = np.full(model.tensor_data(bias).shape, 2**31 - 10, np.int32)
    model.buffers[bias.buffer].data = values.view(np.uint8)
    assert "QT-ACCUMULATOR-OVERFLOW" in {f.rule for f in audit_model(model)}


def test_comparison_outside_its_scale_window_stays_float_and_is_reported() -> None:
    measured = measure(CASES["GREATER"], "tiny")
    assert measured.kept_float is not None and "1/256" in measured.kept_float
    inside = measure(CASES["GREATER"], "asymmetric")
    data = _set_input_scale(parse_model(inside.quantized), "GREATER", 1e-4)
    assert "QT-COMPARISON-RESOLUTION" in {f.rule for f in audit_model(parse_model(data))}

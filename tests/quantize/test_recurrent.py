"""The integer UNIDIRECTIONAL_SEQUENCE_LSTM: the numpy engine against LiteRT's float kernel, and
qtool's int8 LSTM against the float model in LiteRT (builtin kernels and XNNPACK), in dB, for
each variant of the full kernel; the spec's integer_lstm facts in the written model and in
check."""

from __future__ import annotations

import math

import numpy as np
import pytest

import qtool
from qtool.check.audit import audit_model
from qtool.model import Model, TensorType, model_to_bytes, parse_model
from qtool.model.build import GraphBuilder
from qtool.model.types import ActivationFunctionType
from qtool.numerics import sqnr_db
from qtool.quantize.decisions import FLOAT, INT8, Precision, decide
from qtool.runtime import Engine
from qtool.spec import integer_lstm, load_spec
from tests.litert import make_interpreter
from tests.recurrent_models import LSTM_VARIANTS, LstmVariant, lstm_model, sequences

CALIBRATION = sequences(32, 12, 8, seed=1)
HOLDOUT = sequences(16, 12, 8, seed=2)
# Measured in LiteRT on HOLDOUT (builtin = XNNPACK, which leaves the LSTM to the builtin
# kernel): plain 37.5, cifg_peephole 38.3, projection 33.8, layer_norm 35.9 dB; TensorFlow's
# quantizer (tflite's calibrate_and_quantize on the same model and data): 37.1, 38.3, 33.6, -.
MIN_SQNR_DB = 32.0


def run_sequence(model: bytes, samples: np.ndarray, reference: bool) -> np.ndarray:
    """Every sample through one interpreter, in order (the state carries, as in LiteRT)."""
    interpreter = make_interpreter(model, reference)
    source = interpreter.get_input_details()[0]
    sink = interpreter.get_output_details()[0]
    found = []
    for sample in samples:
        interpreter.set_tensor(source["index"], sample[None].astype(source["dtype"]))
        interpreter.invoke()
        found.append(interpreter.get_tensor(sink["index"]).copy())
    return np.concatenate(found)


def lstm_op(model: Model):
    subgraph = model.subgraphs[0]
    return next(op for op in subgraph.operators if model.op_type(op) in integer_lstm().ops)


@pytest.mark.parametrize("variant", LSTM_VARIANTS, ids=lambda v: v.name)
def test_the_engine_runs_each_lstm_as_litert(variant: LstmVariant) -> None:
    model = lstm_model(variant)
    theirs = run_sequence(model_to_bytes(model), HOLDOUT, reference=False)
    ours = Engine(model).run([HOLDOUT])[0]
    assert sqnr_db(theirs, ours.reshape(theirs.shape)) > 110


def test_the_lstm_state_carries_from_sample_to_sample_until_reset() -> None:
    engine = Engine(lstm_model(LSTM_VARIANTS[0]))
    first = engine.run([HOLDOUT[:2]])[0]
    carried = engine.run([HOLDOUT[:2]])[0]
    engine.reset()
    again = engine.run([HOLDOUT[:2]])[0]
    assert np.array_equal(first, again)
    assert np.abs(first[0] - carried[0]).max() > 1e-3  # the second run starts from a state
    alone = Engine(lstm_model(LSTM_VARIANTS[0])).run([HOLDOUT[1:2]])[0]
    assert np.abs(first[1] - alone[0]).max() > 1e-3  # sample 1 continued from sample 0


@pytest.fixture(scope="module", params=LSTM_VARIANTS, ids=lambda v: v.name)
def quantized_lstm(request):
    float_model = lstm_model(request.param)
    result = qtool.quantize_model(model_to_bytes(float_model), CALIBRATION, holdout=HOLDOUT)
    return request.param, float_model, result


def test_the_lstm_is_fully_integer_and_close_to_float_in_litert(quantized_lstm) -> None:
    variant, float_model, result = quantized_lstm
    assert result.result.float_ops == []
    model = result.model
    assert [model.op_type(op) for op in model.subgraphs[0].operators] == [
        "QUANTIZE",
        "UNIDIRECTIONAL_SEQUENCE_LSTM",
        "DEQUANTIZE",
    ]
    reference = run_sequence(model_to_bytes(float_model), HOLDOUT, reference=False)
    for builtin in (True, False):
        got = run_sequence(result.model_bytes, HOLDOUT, reference=builtin)
        assert sqnr_db(reference, got) >= MIN_SQNR_DB, (variant.name, builtin)
    measured = sqnr_db(reference, run_sequence(result.model_bytes, HOLDOUT, reference=False))
    assert result.accuracy["lstm"] == pytest.approx(measured, abs=0.01)
    assert [
        f.rule for f in audit_model(parse_model(result.model_bytes)) if f.severity != "info"
    ] == []


def test_every_operand_has_the_type_and_parameters_the_kernel_reads(quantized_lstm) -> None:
    variant, _, result = quantized_lstm
    facts = integer_lstm()
    roles = facts.operands
    model = result.model
    subgraph = model.subgraphs[0]
    op = lstm_op(model)

    def at(position):
        return (
            None
            if position is None or op.inputs[position] < 0
            else subgraph.tensors[op.inputs[position]]
        )

    def scale(tensor) -> float:
        return float(tensor.quantization.scale[0])

    x, output = at(roles["input"]), subgraph.tensors[op.outputs[0]]
    assert (x.dtype, output.dtype) == (TensorType.INT8, TensorType.INT8)
    for role in ("input_weights", "recurrent_weights"):
        for tensor in filter(None, map(at, roles[role])):
            assert tensor.dtype == TensorType.INT8 and len(tensor.quantization.scale) == 1
            assert int(tensor.quantization.zero_point[0]) == 0
    for role in ("peephole_weights", "layer_norm_weights"):
        for tensor in filter(None, map(at, roles[role])):
            assert tensor.dtype == TensorType.INT16
    state, cell = at(roles["output_state"]), at(roles["cell_state"])
    assert state.is_variable and cell.is_variable and cell.dtype == TensorType.INT16
    exponent = math.log2(scale(cell))
    assert exponent == round(exponent) and facts.cell_state_log2_scale[0] <= exponent <= -9
    assert (scale(state), state.quantization.zero_point[0]) == (
        scale(output),
        output.quantization.zero_point[0],
    )
    hidden = subgraph.tensors[op.intermediates[facts.hidden_intermediate]]
    if variant.projection is None:
        assert scale(hidden) == scale(output)
    for k, position in enumerate(roles["gate_biases"]):
        bias = at(position)
        if bias is None:
            continue
        assert bias.dtype == TensorType.INT32
        if variant.layer_norm:
            wanted = scale(at(roles["layer_norm_weights"][k])) * facts.layer_norm_bias_factor
        else:
            wanted = scale(x) * scale(at(roles["input_weights"][k]))
        assert scale(bias) == pytest.approx(wanted, rel=1e-6)


def test_check_reports_an_lstm_outside_its_kernel_contract(quantized_lstm) -> None:
    _, _, result = quantized_lstm
    model = parse_model(result.model_bytes)
    subgraph = model.subgraphs[0]
    op = lstm_op(model)
    cell = subgraph.tensors[op.inputs[integer_lstm().operands["cell_state"]]]
    cell.quantization.scale = cell.quantization.scale * np.float32(1.5)  # not a power of two
    hidden = subgraph.tensors[op.intermediates[integer_lstm().hidden_intermediate]]
    hidden.quantization = None
    messages = [f.message for f in audit_model(model) if f.rule == "QT-LSTM-CONTRACT"]
    assert len(messages) == 2
    assert "not a power of two" in messages[1] or "not a power of two" in messages[0]
    assert any("has no quantization" in m for m in messages)


def test_an_activation_the_integer_kernel_lacks_keeps_the_lstm_float() -> None:
    variant = LstmVariant("relu", activation=ActivationFunctionType.RELU)
    result = qtool.quantize_model(model_to_bytes(lstm_model(variant)), CALIBRATION, holdout=HOLDOUT)
    (kept,) = result.result.float_ops
    assert kept.op_type == "UNIDIRECTIONAL_SEQUENCE_LSTM"
    assert "TANH only" in kept.reason
    run_sequence(result.model_bytes, HOLDOUT[:2], reference=True)


def test_recurrent_ops_without_an_integer_kernel_say_so() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 3])
    y = b.op("BIDIRECTIONAL_SEQUENCE_LSTM", [x], output_shape=[1, 4, 6])
    model = b.finish([y])
    precision = Precision({INT8: load_spec()})
    decision = decide(model, model.subgraphs[0], model.subgraphs[0].operators[0], precision, {}, ())
    assert decision.mode == FLOAT
    assert decision.reason == (
        "BIDIRECTIONAL_SEQUENCE_LSTM has no integer kernel in LiteRT "
        f"({integer_lstm().no_integer_kernel['BIDIRECTIONAL_SEQUENCE_LSTM']})"
    )

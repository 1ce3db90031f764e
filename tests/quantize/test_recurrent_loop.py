"""A WHILE loop carrying a recurrent cell state, as Keras lowers an LSTM: it runs in int16x8,
its loop variables and body (quantize/control_flow.py, `loop_recurrence`), judged against the
float model in LiteRT (builtin kernels and XNNPACK) in dB, run in TFLite Micro, and compared
with the same model with int8 loop variables."""

from __future__ import annotations

import numpy as np
import pytest

import qtool
from qtool.model import model_to_bytes, parse_model
from qtool.model.build import GraphBuilder
from qtool.quantize import planner
from tests.check.oracles import tflm_result
from tests.quantize.graph_forms import (
    Form,
    _dense,
    _subgraph,
    counted_condition,
    frame_at,
    litert_sqnr,
    next_step,
    while_op,
)

UNITS, FEATURES = 12, 4
# A forget gate near 1, as trained LSTMs learn for long memories: the cell state accumulates.
FORGET_BIAS = 3.0


def _gate(body: GraphBuilder, kind: str, x: int, h: int, rng, name: str, bias: float = 0.0) -> int:
    """kind(W x + U h + bias): a gate of the cell."""
    inputs = body.fully_connected(
        x, rng.standard_normal((UNITS, FEATURES)) / 2, np.full(UNITS, bias), f"{name}_x"
    )
    summed = body.op(
        "ADD",
        [inputs, _dense(body, h, rng, UNITS, UNITS, name)],
        output_shape=[1, UNITS],
        options_type="AddOptions",
    )
    return body.op(kind, [summed], output_shape=[1, UNITS], name=f"{name}_gate")


def cell_loop_form(steps: int = 64, samples: int = 32) -> Form:
    """WHILE over a sequence with a counter, the hidden state h and the cell state c (zeros at
    first): f, i = LOGISTIC gates, g = TANH candidate, c' = f c + i g, h' = TANH(c'); a dense
    layer reads the last h."""
    rng = np.random.default_rng(7)
    b = GraphBuilder()
    x = b.input("sequence", [1, steps, FEATURES])
    start = b.constant("start", np.array(0, np.int32))
    zeros = b.constant("zeros", np.zeros((1, UNITS), np.float32))
    counted_condition(
        b, steps, [("c_h", [1, UNITS]), ("c_c", [1, UNITS]), ("c_x", [1, steps, FEATURES])]
    )
    body = _subgraph(b, "body")
    i = body.input("b_step", [], np.int32)
    h = body.input("b_h", [1, UNITS])
    c = body.input("b_c", [1, UNITS])
    sequence = body.input("b_x", [1, steps, FEATURES])
    frame = frame_at(body, sequence, i, FEATURES)
    forget = _gate(body, "LOGISTIC", frame, h, rng, "forget", FORGET_BIAS)
    keep = _gate(body, "LOGISTIC", frame, h, rng, "input")
    candidate = _gate(body, "TANH", frame, h, rng, "candidate")
    shape = [1, UNITS]
    kept = body.op("MUL", [forget, c], output_shape=shape, options_type="MulOptions")
    added = body.op("MUL", [keep, candidate], output_shape=shape, options_type="MulOptions")
    new_c = body.op(
        "ADD", [kept, added], output_shape=shape, name="cell", options_type="AddOptions"
    )
    new_h = body.op("TANH", [new_c], output_shape=shape, name="hidden")
    body.finish([next_step(body, i), new_h, new_c, sequence])
    outputs = [
        b.tensor("last_step", [], np.int32),
        b.tensor("last_h", [1, UNITS]),
        b.tensor("last_c", [1, UNITS]),
        b.tensor("sequence_out", [1, steps, FEATURES]),
    ]
    while_op(b, [start, zeros, zeros, x], outputs)
    logits = _dense(b, outputs[1], rng, UNITS, 3, "classifier")
    model = parse_model(model_to_bytes(b.finish([logits])))
    n = samples + 16
    t = np.linspace(0, 4, steps)[None, :, None]
    data = np.sin(
        2
        * np.pi
        * (t * rng.uniform(0.2, 1, (n, 1, FEATURES)) + rng.uniform(0, 1, (n, 1, FEATURES)))
    )
    data = (data + 0.3 * rng.standard_normal(data.shape)).astype(np.float32)
    return Form(model, {"sequence": data[:samples]}, {"sequence": data[samples:]})


def _measured(form: Form, result, xnnpack: bool) -> float:
    return min(litert_sqnr(form.blob, result.model_bytes, [form.holdout["sequence"]], xnnpack))


@pytest.mark.parametrize("xnnpack", [False, True])
def test_a_recurrent_loop_runs_in_int16x8_its_loop_variables_included(xnnpack: bool) -> None:
    form = cell_loop_form()
    result = qtool.quantize_model(form.model, form.calibration, holdout=form.holdout)
    rows = {(row["subgraph"], row["op"]): row for row in result.report["ops"]}
    assert rows[(0, "WHILE")]["mode"] == "int16" and rows[(2, "MUL")]["mode"] == "int16"
    assert rows[(0, "WHILE")]["reason"].startswith(
        "int16x8: its body carries a recurrent state (loop variable 1, b_h)"
    )
    assert result.report["float_ops"] == []
    assert _measured(form, result, xnnpack) > 30


def test_a_recurrent_loop_for_tflite_micro_runs_there() -> None:
    """TFLite Micro has no int16 GATHER (the tflm profile's `without`): for `--target tflm`
    the loop's GATHER runs in int8, the rest of the loop in int16x8."""
    form = cell_loop_form()
    result = qtool.quantize_model(form.model, form.calibration, holdout=form.holdout, target="tflm")
    rows = {(row["subgraph"], row["op"]): row["mode"] for row in result.report["ops"]}
    assert rows[(0, "WHILE")] == "int16" and rows[(2, "GATHER")] == "int8"
    verdict = tflm_result(result.model_bytes)
    assert verdict["runs"], verdict
    assert qtool.check_model(result.model_bytes, target="tflm").passed


def test_check_for_tflite_micro_reports_an_int16_op_it_has_no_kernel_for() -> None:
    """The loop planned for LiteRT keeps its GATHER in int16, which TFLite Micro refuses at
    prepare: `check --target tflm` says so from the same fact the planner reads."""
    form = cell_loop_form()
    result = qtool.quantize_model(form.model, form.calibration, holdout=form.holdout)
    assert not tflm_result(result.model_bytes)["runs"]
    audit = qtool.check_model(result.model_bytes, target="tflm")
    (found,) = [f for f in audit.findings if f.rule == "QT-TARGET-UNSUPPORTED"]
    assert "GATHER" in found.message and "[int16-kernel]" in found.message
    assert not audit.passed


def test_a_recurrent_loop_kept_float_runs_its_body_in_int16x8() -> None:
    """`--keep-float WHILE`: the loop variables float between iterations, the body in int16x8
    all the same."""
    form = cell_loop_form()
    result = qtool.quantize_model(
        form.model, form.calibration, holdout=form.holdout, keep_float=("WHILE",)
    )
    rows = {(row["subgraph"], row["op"]): row for row in result.report["ops"]}
    assert rows[(0, "WHILE")]["mode"] == "float" and rows[(2, "MUL")]["mode"] == "int16"
    assert _measured(form, result, False) > 30


def test_int8_loop_variables_lose_what_the_rule_keeps(monkeypatch) -> None:
    """The same loop with the rule switched off (body and loop variables int8): the cell
    state's error compounds over the 64 steps."""
    form = cell_loop_form()
    kept = _measured(
        form, qtool.quantize_model(form.model, form.calibration, holdout=form.holdout), False
    )
    monkeypatch.setattr(planner, "loop_recurrence", lambda model, site: None)
    plain = qtool.quantize_model(form.model, form.calibration, holdout=form.holdout)
    assert not plain.report["float_ops"]
    assert kept > _measured(form, plain, False) + 6

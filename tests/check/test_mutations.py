"""One injected violation per rule: exactly that rule fires, on the right op and operand.

Each case starts from a valid int8 model (a TensorFlow conversion or a small built one), edits
it through the Model API, saves and re-parses it, and compares the audit with the base model's.
Where LiteRT refuses (or aborts on) the mutated model, the finding must be an error.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

import qtool
from qtool.check import RULES
from qtool.check.gates import accuracy_findings, target_findings
from qtool.model import Model, QuantParams, TensorType
from qtool.model.build import GraphBuilder
from tests.check import (  # noqa: F401  (register their cases)
    contract_cases,
    risk_cases,
    state_cases,
    weight_cases,
)
from tests.check.cases import CASES, Case, case, cnn, conv_operands, logits, params, set_values
from tests.check.helpers import (
    chain_model,
    int8_conv_model,
    litert_verdict,
    mutate,
    new_findings,
    op_index,
    op_tensor,
    tf_model,
)
from tests.quantize.graph_forms import if_form

# --------------------------------------------------------------------------- structure


@case
def invalid_graph() -> Case:
    op = op_index(cnn(), "CONV_2D")

    def edit(m: Model) -> None:  # a stride the declared output shape does not follow
        m.subgraphs[0].operators[op].options["stride_h"] = 2

    return Case(cnn(), edit, [("QT-MODEL-INVALID", "error", op, None)])


@case
def qparam_count() -> Case:
    op, _, w, _ = conv_operands(cnn())

    def edit(m: Model) -> None:
        params(m, w).zero_point = params(m, w).zero_point[:-1]

    return Case(cnn(), edit, [("QT-QPARAM-COUNT", "error", op, "weight")])


@case
def qparam_axis() -> Case:
    op = op_index(cnn(), "DEPTHWISE_CONV_2D")
    w = op_tensor(cnn(), op, "input", 1)

    def edit(m: Model) -> None:
        params(m, w).quantized_dimension = 4

    return Case(cnn(), edit, [("QT-QPARAM-AXIS", "error", op, "weight")], litert="error")


@case
def qparam_axis_size() -> Case:
    op, _, w, _ = conv_operands(cnn())

    def edit(m: Model) -> None:
        q = params(m, w)
        q.scale, q.zero_point = q.scale[:-1], q.zero_point[:-1]

    return Case(cnn(), edit, [("QT-QPARAM-AXIS-SIZE", "error", op, "weight")], litert="error")


def _logit_scale(value: float) -> Case:
    fc, _, tensor = logits(cnn())

    def edit(m: Model) -> None:
        params(m, tensor).scale = np.array([value], np.float32)

    return Case(cnn(), edit, [("QT-SCALE-INVALID", "error", fc, "output 0")])


@case
def scale_zero() -> Case:
    return _logit_scale(0.0)


@case
def scale_nan() -> Case:
    return _logit_scale(float("nan"))


@case
def zero_point_range() -> Case:
    fc, _, tensor = logits(cnn())

    def edit(m: Model) -> None:
        params(m, tensor).zero_point = np.array([200])

    return Case(cnn(), edit, [("QT-ZP-RANGE", "error", fc, "output 0")])


@case
def qparam_missing() -> Case:
    fc, _, tensor = logits(cnn())

    def edit(m: Model) -> None:
        m.subgraphs[0].tensors[tensor].quantization = None

    # Reported once, at the producer, although SOFTMAX reads the tensor too.
    return Case(cnn(), edit, [("QT-QPARAM-MISSING", "error", fc, "output 0")])


# --------------------------------------------------------------------------- the op table


@case
def bias_dtype() -> Case:
    op, _, _, bias = conv_operands(cnn())

    def edit(m: Model) -> None:
        values = m.tensor_data(m.subgraphs[0].tensors[bias]).astype(np.int64)
        m.set_tensor_data(m.subgraphs[0], bias, values)
        m.subgraphs[0].tensors[bias].dtype = TensorType.INT64

    return Case(cnn(), edit, [("QT-DTYPE", "error", op, "bias")])


@case
def per_axis_activation() -> Case:
    fc, _, tensor = logits(cnn())

    def edit(m: Model) -> None:
        q = params(m, tensor)
        m.subgraphs[0].tensors[tensor].quantization = QuantParams.of(
            np.repeat(q.scale, 10), int(q.zero_point[0]), 1
        )

    return Case(cnn(), edit, [("QT-GRANULARITY", "error", fc, "output 0")])


@case
def per_tensor_weights() -> Case:
    op, x, w, bias = conv_operands(cnn())

    def edit(m: Model) -> None:
        largest = params(m, w).scale.max()
        m.subgraphs[0].tensors[w].quantization = QuantParams.of(largest, 0)
        m.subgraphs[0].tensors[bias].quantization = QuantParams.of(
            params(m, x).scale[0] * largest, 0
        )

    return Case(cnn(), edit, [("QT-WEIGHT-PER-TENSOR", "warning", op, "weight")], litert="ok")


@case
def weight_axis() -> Case:
    base = int8_conv_model((4, 3, 3, 4))
    op, _, w, _ = conv_operands(base)

    def edit(m: Model) -> None:
        params(m, w).quantized_dimension = 3  # also 4 channels: structurally valid, wrong axis

    return Case(base, edit, [("QT-WEIGHT-AXIS", "error", op, "weight")])


@case
def weight_zero_point() -> Case:
    op, _, w, _ = conv_operands(cnn())

    def edit(m: Model) -> None:
        params(m, w).zero_point[3] = 1

    return Case(cnn(), edit, [("QT-ZERO-POINT", "error", op, "weight")], litert="error")


@case
def bias_zero_point() -> Case:
    op, _, _, bias = conv_operands(cnn())

    def edit(m: Model) -> None:
        params(m, bias).zero_point[:] = 5

    return Case(cnn(), edit, [("QT-ZERO-POINT", "error", op, "bias")])


@case
def weight_minus_128() -> Case:
    op, _, w, _ = conv_operands(cnn())

    def edit(m: Model) -> None:
        set_values(m, w, lambda v: v.flat.__setitem__(5, -128))

    return Case(cnn(), edit, [("QT-WEIGHT-RANGE", "error", op, "weight")])


@case
def bias_scale() -> Case:
    op, _, _, bias = conv_operands(cnn())

    def edit(m: Model) -> None:
        params(m, bias).scale[2] *= 1.01

    return Case(cnn(), edit, [("QT-BIAS-SCALE", "error", op, "bias")])


@case
def bias_scale_count() -> Case:
    op, _, w, _ = conv_operands(cnn())

    def edit(m: Model) -> None:  # per-tensor weights, bias left per-axis
        m.subgraphs[0].tensors[w].quantization = QuantParams.of(params(m, w).scale.max(), 0)

    return Case(
        cnn(),
        edit,
        [("QT-BIAS-SCALE", "error", op, "bias"), ("QT-WEIGHT-PER-TENSOR", "warning", op, "weight")],
    )


@case
def softmax_output() -> Case:
    _, softmax, _ = logits(cnn())
    out = op_tensor(cnn(), softmax, "output", 0)

    def edit(m: Model) -> None:
        params(m, out).scale = np.array([1 / 255], np.float32)

    return Case(cnn(), edit, [("QT-FIXED-OUTPUT", "error", softmax, "output 0")], litert="error")


@case
def tanh_output() -> Case:
    base = tf_model("mixed_ops_int8")
    tanh = op_index(base, "TANH")
    out = op_tensor(base, tanh, "output", 0)

    def edit(m: Model) -> None:
        params(m, out).zero_point = np.array([3])

    return Case(base, edit, [("QT-FIXED-OUTPUT", "error", tanh, "output 0")])


@case
def pooling_same_scale() -> Case:
    pool = op_index(cnn(), "MAX_POOL_2D")
    tensor = op_tensor(cnn(), pool, "input", 0)  # written by DEPTHWISE_CONV_2D, read only here

    def edit(m: Model) -> None:
        params(m, tensor).scale *= 1.5

    return Case(cnn(), edit, [("QT-SAME-SCALE", "error", pool, "input 0")])


@case
def concatenation_same_scale() -> Case:
    base = tf_model("spec_ops_int8")
    concat = next(
        i
        for i, op in enumerate(base.subgraphs[0].operators)
        if base.op_type(op) == "CONCATENATION"
        and any(
            base.op_type(p) == "QUANTIZE" and op.inputs[1] in p.outputs
            for p in base.subgraphs[0].operators
        )
    )
    tensor = op_tensor(base, concat, "input", 1)  # a requantized input: free to change

    def edit(m: Model) -> None:
        params(m, tensor).scale *= 1.25

    return Case(base, edit, [("QT-SAME-SCALE", "error", concat, "input 1")], litert="error")


# --------------------------------------------------------------------------- the graph


@case
def float_feed() -> Case:
    op, _, _, _ = conv_operands(cnn())
    quantize = op_index(cnn(), "QUANTIZE")

    def edit(m: Model) -> None:  # the float model input straight into the int8 CONV_2D
        m.subgraphs[0].operators[op].inputs[0] = op_tensor(m, quantize, "input", 0)

    return Case(cnn(), edit, [("QT-FLOAT-FEED", "error", op, "input 0")])


@case
def float_op() -> Case:
    base = int8_conv_model()

    def edit(m: Model) -> None:
        b = GraphBuilder(m)
        y = m.subgraphs[0].outputs[0]
        relu = b.op("RELU", [y], output_shape=list(m.subgraphs[0].tensors[y].shape))
        m.subgraphs[0].outputs = [relu]

    return Case(base, edit, [("QT-FLOAT-OP", "warning", 3, "output 0")], litert="ok")


def _to_uint8(model: Model, tensor: int) -> None:
    t = model.subgraphs[0].tensors[tensor]
    t.dtype = TensorType.UINT8
    t.quantization.zero_point = t.quantization.zero_point + 128


@case
def legacy_uint8() -> Case:
    base = chain_model(["MAX_POOL_2D"])

    def edit(m: Model) -> None:  # the whole pooling op in uint8, inside the graph
        for position, kind in ((0, "input"), (0, "output")):
            _to_uint8(m, op_tensor(m, 1, kind, position))

    return Case(
        base,
        edit,
        [
            ("QT-LEGACY-UINT8", "warning", 0, "output 0"),
            ("QT-LEGACY-UINT8", "warning", 1, "output 0"),
        ],
        litert="ok",
    )


@case
def mixed_uint8() -> Case:
    base = chain_model(["MAX_POOL_2D"])

    def edit(m: Model) -> None:  # uint8 into a pooling op whose output stays int8
        _to_uint8(m, op_tensor(m, 1, "input", 0))

    return Case(
        base,
        edit,
        [("QT-LEGACY-UINT8", "warning", 0, "output 0"), ("QT-DTYPE", "error", 1, "input 0")],
    )


@case
def uncovered_op() -> Case:
    base = chain_model(["RELU"])

    def edit(m: Model) -> None:  # EXP runs in int8 in LiteRT but the spec has no rule for it
        m.subgraphs[0].operators[1].opcode_index = m.opcode_for("EXP")

    return Case(base, edit, [("QT-OP-UNCOVERED", "warning", 1, None)], litert="ok")


@functools.cache
def quantized_if() -> Model:
    """qtool's int8 version of a model with IF: both branches int8 at their caller's params."""
    form = if_form()
    return qtool.quantize_model(form.model, form.calibration).model


@case
def call_params() -> Case:
    base = quantized_if()
    (op,) = [i for i, o in enumerate(base.subgraphs[0].operators) if base.op_type(o) == "IF"]
    head = base.subgraphs[0].operators[op].outputs[0]  # read only by a DEQUANTIZE

    def edit(m: Model) -> None:  # the caller reads the branches' results on another grid
        params(m, head).scale *= 1.5

    # Both branches wrote it on the grid the IF output had.
    return Case(base, edit, [("QT-CALL-PARAMS", "error", op, None)] * 2, litert="ok")


# --------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("name", sorted(CASES))
def test_injected_violation_fires_alone(name: str) -> None:
    spec = CASES[name]()
    mutated, data = mutate(spec.base, spec.edit)
    found = new_findings(spec.base, mutated)
    got = sorted((f.rule, f.severity, f.op_index, f.role or "") for f in found)
    assert got == sorted((r, s, i, role or "") for r, s, i, role in spec.expected), "\n".join(
        f"{f.rule} {f.op_index} {f.role}: {f.message}" for f in found
    )
    for finding in found:
        assert finding.subgraph == 0
        assert finding.op == mutated.op_type(mutated.subgraphs[0].operators[finding.op_index])
        if finding.role is not None:
            assert finding.tensor == mutated.subgraphs[0].tensors[finding.tensor_index].name
    verdict = litert_verdict(data)
    if spec.litert is not None:
        assert verdict == spec.litert
    if verdict != "ok":
        assert any(f.severity == "error" for f in found), f"LiteRT says {verdict}"


def test_every_rule_has_an_injection_case() -> None:
    covered = {rule for make in CASES.values() for rule, *_ in make().expected}
    # Tested elsewhere: float models (test_real_models) and extended ops on TF conversions;
    # dead channels, targets and accuracy in test_false_alarms, test_targets, test_accuracy.
    gated = {rule.id for family in (target_findings, accuracy_findings) for rule in family.rules}
    covered |= {"QT-NOT-QUANTIZED", "QT-OP-EXTENDED", "QT-DEAD-CHANNELS", *gated}
    assert covered == set(RULES)


def test_messages_state_expected_and_actual_values() -> None:
    spec = CASES["bias_scale"]()
    mutated, _ = mutate(spec.base, spec.edit)
    (finding,) = new_findings(spec.base, mutated)
    assert "expected" in finding.message and "bias_scale_rtol" in finding.message
    spec = CASES["softmax_output"]()
    mutated, _ = mutate(spec.base, spec.edit)
    (finding,) = new_findings(spec.base, mutated)
    assert "0.00390625" in finding.message and "-128" in finding.message

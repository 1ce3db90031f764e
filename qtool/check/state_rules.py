"""Rule families of the operators that keep state: resource variables (every value of one
variable on one grid) and the integer LSTM (what its kernel reads beyond the op table). The facts
are the spec file's `resource_variables` and `integer_lstm`, the ones quantize plans by."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from qtool.check.context import AuditContext, OpView
from qtool.check.findings import Finding
from qtool.check.qparams import num
from qtool.check.rulebook import family, rule
from qtool.model import Tensor, TensorType, dtype_name
from qtool.model.types import ActivationFunctionType
from qtool.model.variables import accesses, initial_values, value_of
from qtool.op_facts import options_table
from qtool.spec import integer_lstm

VARIABLE_PARAMS = rule(
    "QT-VARIABLE-PARAMS",
    "error",
    title="one resource variable read or assigned with different types or parameters",
    help=(
        "READ_VARIABLE and ASSIGN_VARIABLE copy bytes: every value read from a variable, "
        "assigned to it, and its initial value (assigned by the CALL_ONCE subgraph) must have "
        "one type and one scale and zero point, or LiteRT refuses the read (type) or reads "
        "the codes on another grid (parameters)."
    ),
)


def _grid(tensor: Tensor) -> str:
    q = tensor.quantization
    if not tensor.quantized:
        return dtype_name(tensor.dtype)
    return (
        f"{dtype_name(tensor.dtype)} (scale {num(q.scale[0])}, zero point {int(q.zero_point[0])})"
    )


def _same_grid(a: Tensor, b: Tensor) -> bool:
    if a.dtype != b.dtype or a.quantized != b.quantized:
        return False
    if not a.quantized:
        return True
    qa, qb = a.quantization, b.quantization
    return np.array_equal(qa.scale, qb.scale) and np.array_equal(qa.zero_point, qb.zero_point)


@family("resource variables", VARIABLE_PARAMS)
def check_variables(ctx: AuditContext) -> Iterator[Finding]:
    """Values of one variable (reads, assignments, initial value) on different grids: each value
    off the grid most of them share is reported at its operator."""
    model = ctx.model
    views = {(op.subgraph, op.index): op for op in ctx.ops}
    for s, subgraph in enumerate(model.subgraphs):
        initial = initial_values(model, s)
        for variable, ops in accesses(model, subgraph).items():
            if variable is None:
                continue
            values = [
                (where, _value(model, *where))
                for where in [(s, i) for i in ops] + initial.get(variable, [])
            ]
            counts = [sum(_same_grid(t, u) for _, u in values) for _, t in values]
            reference = values[counts.index(max(counts))][1]
            for where, tensor in values:
                if not _same_grid(tensor, reference):
                    yield ctx.finding(
                        VARIABLE_PARAMS,
                        f"variable {variable[1]!r}: '{tensor.name}' is {_grid(tensor)}; its other "
                        f"values are {_grid(reference)}",
                        views[where],
                    )


def _value(model, s: int, op_index: int) -> Tensor:
    subgraph = model.subgraphs[s]
    return subgraph.tensors[value_of(model, subgraph, op_index)]


LSTM_CONTRACT = rule(
    "QT-LSTM-CONTRACT",
    "error",
    title="integer LSTM outside its kernel's contract",
    help=(
        "LiteRT's integer UNIDIRECTIONAL_SEQUENCE_LSTM reads more than its operands' types: five "
        "quantized intermediate tensors, a power-of-two cell-state scale within what its tanh "
        "handles, the output state on the output's grid, biases at the scales it derives, and "
        "the TANH activation. Outside that it refuses the model or computes something else."
    ),
)


@family("integer LSTM", LSTM_CONTRACT)
def check_lstm(ctx: AuditContext) -> Iterator[Finding]:
    """Integer LSTMs breaking a fact of the spec's `integer_lstm`."""
    facts = integer_lstm()
    for op in ctx.int8_ops():
        if op.type in facts.ops:
            for problem in _lstm_problems(ctx, op):
                yield ctx.finding(LSTM_CONTRACT, f"{op.type}: {problem}", op)


def _lstm_problems(ctx: AuditContext, view: OpView) -> Iterator[str]:
    facts = integer_lstm()
    roles = facts.operands
    subgraph = ctx.model.subgraphs[view.subgraph]
    op = subgraph.operators[view.index]
    tensors = subgraph.tensors
    code = op.option("fused_activation_function", options_table(view.type))
    if code != getattr(ActivationFunctionType, facts.activation):
        yield f"the integer kernel computes {facts.activation}; this one's activation is {code}"
    if len(op.intermediates) != facts.intermediate_count:
        yield f"lists {len(op.intermediates)} intermediates; the kernel reads {facts.intermediate_count}"
        return

    def at(position: int | None) -> Tensor | None:
        if position is None or position >= len(op.inputs) or op.inputs[position] < 0:
            return None
        return tensors[op.inputs[position]]

    def scale(tensor: Tensor | None) -> float | None:
        return (
            float(tensor.quantization.scale[0]) if tensor is not None and tensor.quantized else None
        )

    hidden = tensors[op.intermediates[facts.hidden_intermediate]]
    layer_norm = at(roles["layer_norm_weights"][1]) is not None
    needed = [hidden] + (
        [tensors[op.intermediates[k]] for k in facts.gate_sum_intermediates] if layer_norm else []
    )
    for tensor in needed:
        if not tensor.quantized:
            yield f"intermediate '{tensor.name}' has no quantization (the kernel reads its scale)"
    cell = at(roles["cell_state"])
    cell_scale = scale(cell)
    if cell is not None and cell.dtype == TensorType.INT16 and cell_scale is not None:
        exponent = math.log2(cell_scale)
        low, high = facts.cell_state_log2_scale
        if exponent != round(exponent) or not low <= exponent <= high:
            yield (
                f"cell state scale {num(cell_scale)} is not a power of two 2^k with k in "
                f"[{low}, {high}]"
            )
    output, state = tensors[op.outputs[0]], at(roles["output_state"])
    projection = at(roles["projection_weights"])
    shared = [state] + ([hidden] if projection is None else [])
    for tensor in shared:
        if tensor is not None and tensor.quantized and not _same_grid(tensor, output):
            yield f"'{tensor.name}' is {_grid(tensor)} but the output is {_grid(output)}"
    yield from _bias_problems(ctx, op, at, scale, layer_norm, hidden)


def _bias_problems(ctx, op, at, scale, layer_norm: bool, hidden: Tensor) -> Iterator[str]:
    facts = integer_lstm()
    roles = facts.operands
    rtol = ctx.spec.tolerances["bias_scale_rtol"]
    expected: list[tuple[Tensor | None, float | None, str]] = []
    input_scale = scale(at(roles["input"]))
    for k, position in enumerate(roles["gate_biases"]):
        if layer_norm:
            norm = scale(at(roles["layer_norm_weights"][k]))
            wanted = None if norm is None else norm * facts.layer_norm_bias_factor
            how = "layer-norm weight scale x 2^-10"
        else:
            weight = scale(at(roles["input_weights"][k]))
            wanted = None if None in (weight, input_scale) else weight * input_scale
            how = "input scale x input weight scale"
        expected.append((at(position), wanted, how))
    projection = scale(at(roles["projection_weights"]))
    if projection is not None and scale(hidden) is not None:
        expected.append(
            (at(roles["projection_bias"]), projection * scale(hidden), "projection x hidden scale")
        )
    for bias, wanted, how in expected:
        actual = scale(bias)
        if actual is None or wanted is None:
            continue
        if not np.isclose(actual, wanted, rtol=rtol, atol=0):
            yield f"bias '{bias.name}' scale {num(actual)}, expected {how} = {num(wanted)}"

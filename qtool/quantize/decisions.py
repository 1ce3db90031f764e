"""Decisions: how each operator of a subgraph runs (int8, int16x8, float, or integer-only shape
arithmetic) and why, from the spec tables, the int16 and keep-float patterns (matched against
the op types of the input model) and the kernels' limits on calibrated ranges."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from qtool.model import Model, Operator, Subgraph, Tensor, TensorType
from qtool.numerics import activation_params
from qtool.op_facts import shape_only_inputs
from qtool.quantize import recurrent
from qtool.spec import Mode, OpRule, QuantSpec, integer_lstm, kernel_contracts
from qtool.weight_spec import weight_rule

FLOAT, INT8, INT16, INTEGER = Mode.FLOAT, Mode.INT8, Mode.INT16, Mode.INTEGER


@dataclass
class OpDecision:
    """How one operator runs. `reason` says why an operator stays in float, or why an int16x8
    candidate runs in int8 instead (None otherwise)."""

    mode: str  # INT8, INT16, FLOAT or INTEGER
    reason: str | None = None
    source_index: int | None = None  # index in the input model


@dataclass(frozen=True)
class Precision:
    """Which operators are asked to run in int16x8, and the spec tables of both schemes."""

    specs: Mapping[str, QuantSpec]  # INT8 -> int8 table, INT16 -> int16x8 table
    int16_patterns: tuple[str, ...] = ()  # op-type or tensor-name globs; "*" for every op
    weight_bits: int = 8  # 4: int4 weights where an int8 kernel reads them

    def weight_bits_of(self, op_type: str, mode: str, per_axis: bool) -> int:
        """The width of an int8 op's weights: 4 where asked and its int8 kernel reads int4
        weights of that granularity (`schemas/weight_modes.json`), else 8."""
        rule = weight_rule(op_type)
        granularity = "per-axis" if per_axis else "per-tensor"
        if self.weight_bits == 4 and mode == INT8 and rule is not None:
            return 4 if granularity in rule.int4_with_int8_activations else 8
        return 8

    def wanted(
        self, model: Model, subgraph: Subgraph, op: Operator, op_type: str | None = None
    ) -> str:
        """INT16 for an operator matching an int16 pattern (`op_type`: its type in the input
        model) when an int16x8 table is loaded, else INT8 (what is asked, not yet what is
        possible)."""
        if INT16 in self.specs and any(
            model.op_matches(op, subgraph, p, op_type) for p in self.int16_patterns
        ):
            return INT16
        return INT8


def keep_float_match(
    model: Model,
    subgraph: Subgraph,
    op: Operator,
    patterns: tuple[str, ...],
    op_type: str | None = None,
) -> str | None:
    """The first keep-float pattern the operator matches (its type, `op_type` being its type in
    the input model, or an output's name), or None."""
    return next((p for p in patterns if model.op_matches(op, subgraph, p, op_type)), None)


def unmatched_pattern(
    model: Model, input_types: list[list[str]], patterns: tuple[str, ...]
) -> str | None:
    """The first of `patterns` that matches no operator of any subgraph, the op types being
    those of the input model (`input_types[s][i]`: SQUARE, not the MUL it became)."""
    for pattern in patterns:
        if not any(
            model.op_matches(op, subgraph, pattern, input_types[s][i])
            for s, i, subgraph, op in model.iter_ops()
        ):
            return pattern
    return None


def is_float(tensor: Tensor) -> bool:
    """Whether a tensor holds float32 values (what quantization turns into integers)."""
    return tensor.dtype == TensorType.FLOAT32


def _unsupported(
    model: Model,
    subgraph: Subgraph,
    op: Operator,
    rule: OpRule | None,
    ranges: Mapping[int, tuple[float, float]],
    scheme: str,
) -> str | None:
    """Why `op` cannot run under `rule` (None when it can)."""
    tensors = subgraph.tensors
    if rule is None:
        op_type = model.op_type(op)
        float_only = integer_lstm().no_integer_kernel.get(op_type)
        if float_only is not None:
            return f"{op_type} has no integer kernel in LiteRT ({float_only})"
        return f"{op_type} has no {scheme} kernel in the {scheme} spec"
    for position, t in enumerate(op.inputs):
        if t < 0 or (rule.control_flow is not None and not is_float(tensors[t])):
            continue  # a control-flow op passes its condition and integer operands on as they are
        if not is_float(tensors[t]):
            operand = rule.input_rule(position)
            live = not model.is_constant(tensors[t])
            if live and operand is not None and operand.role == "activation":
                return f"input {position} is not float: nothing to quantize it from"
            continue
        operand = rule.input_rule(position)
        constant = model.is_constant(tensors[t])
        if operand is None:
            return f"input {position} is float but the spec has no {scheme} rule for it"
        if operand.role in ("weight", "bias") and not constant:
            return f"{operand.role} (input {position}) is not constant"
        if not constant and t not in ranges:
            return f"input {position} ({tensors[t].name}) has no calibrated range"
    for position, t in enumerate(op.outputs):
        if not is_float(tensors[t]):
            continue
        operand = rule.output_rule(position)
        if operand is None:
            return f"output {position} is float but the spec has no {scheme} rule for it"
        if operand.fixed is None and not rule.same_scale and t not in ranges:
            return f"output {position} ({tensors[t].name}) was never produced during calibration"
    if rule.name in integer_lstm().ops:
        return recurrent.unsupported(model, subgraph, op, ranges)
    return None


def decide(
    model: Model,
    subgraph: Subgraph,
    op: Operator,
    precision: Precision,
    ranges: Mapping[int, tuple[float, float]],
    keep_float: tuple[str, ...],
    input_type: str | None = None,
) -> OpDecision:
    """How an operator runs: in int16x8 when asked and possible, else int8, else float.
    Patterns match `input_type`, the type the op had in the input model, when given."""
    tensors = subgraph.tensors
    shape_only = shape_only_inputs(model.op_type(op))  # their values are never read
    valued = [t for p, t in enumerate(op.inputs) if p not in shape_only]
    if not any(t >= 0 and is_float(tensors[t]) for t in valued + op.outputs):
        return OpDecision(INTEGER)
    pattern = keep_float_match(model, subgraph, op, keep_float, input_type)
    if pattern is not None:
        return OpDecision(FLOAT, f"kept in float by keep-float pattern {pattern!r}")
    op_type = model.op_type(op)
    note = None
    if precision.wanted(model, subgraph, op, input_type) == INT16:
        rule16 = precision.specs[INT16].rule(op_type)
        why = _unsupported(model, subgraph, op, rule16, ranges, INT16)
        if why is None:
            why = _comparison_scale(model, subgraph, op, ranges, INT16)
        if why is None:
            return OpDecision(INT16)
        note = f"int8 instead of int16: {why}"
    why = _unsupported(model, subgraph, op, precision.specs[INT8].rule(op_type), ranges, INT8)
    if why is None:
        why = _comparison_scale(model, subgraph, op, ranges, INT8)
    if why is not None:
        return OpDecision(FLOAT, why)
    return OpDecision(INT8, note)


def _comparison_scale(
    model: Model,
    subgraph: Subgraph,
    op: Operator,
    ranges: Mapping[int, tuple[float, float]],
    scheme: str,
) -> str | None:
    """Why a comparison's kernel cannot resolve its inputs (kernel_contracts.comparison_scale:
    LiteRT compares round(2^8 * value)), or None."""
    contracts = kernel_contracts(scheme)
    if model.op_type(op) not in contracts.comparison_ops:
        return None
    low, high = contracts.comparison_scale
    dtype = np.int16 if scheme == INT16 else np.int8
    for position, t in enumerate(op.inputs):
        if t < 0 or t not in ranges or model.is_constant(subgraph.tensors[t]):
            continue
        scale = float(activation_params(*ranges[t], dtype=dtype).scale[0])
        if not low <= scale < high:
            return (
                f"input {position} scale {scale:.3g} is outside [{low:g}, {high:g}): LiteRT's "
                f"{scheme} comparison kernel compares values rounded to 1/256 with the scale "
                "as a multiplier below 1"
            )
    return None

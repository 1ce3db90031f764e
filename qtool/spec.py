"""The quantization op specs, loaded once from `schemas/`: the int8 table (`int8_spec.json`)
and the int16x8 table (`int16x8_spec.json`: 16-bit activations, 8-bit weights).

Both the quantizer (to plan parameters) and the checker (to audit them) read their rules from
here, so a rule exists in exactly one place: the data file.

A spec file states its plain operands once, in `operand_defaults` (one entry per role:
activation, weight, bias). An operand of an op is written as its index alone (an activation with
every default) or as an object with its index and only the fields that differ from its role's
defaults (null drops a default). `expanded_ops` writes every operand out in full before any
rule is built from it, and a profile patches those full operands the same way.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from enum import Enum
from importlib import resources
from typing import Any

SPEC_FILES = {"int8": "int8_spec.json", "int16": "int16x8_spec.json"}


class Mode(str, Enum):
    """How an operator computes, and the types a quantized value is stored in: one vocabulary
    for the planner, the rewriter, the checker and the reports (the values are what reports
    and users read)."""

    INT8 = "int8"
    INT16 = "int16"  # the 16x8 scheme: int16 activations, int8 weights
    UINT8 = "uint8"  # only at a model boundary (the legacy asymmetric type)
    FLOAT = "float"
    INTEGER = "integer"  # no real-valued operand (shape arithmetic): nothing to quantize

    def __str__(self) -> str:
        return self.value


QUANTIZED = (Mode.INT8, Mode.INT16)


@dataclass(frozen=True)
class OperandRule:
    """What the spec requires of one operand position of an op: storage type, value range,
    granularity and the parameters it fixes."""

    index: int | str  # an input/output position, or "*" for every one (CONCATENATION, PACK...)
    dtype: str
    range: tuple[int, int]
    granularity: str  # "per-tensor" or "per-axis"
    role: str = "activation"  # activation | weight | bias (inputs); outputs are activations
    axis: int | None = None  # quantized_dimension of per-axis weights
    zero_point: int | None = None  # required zero point
    fixed: tuple[float, int] | None = None  # required (scale, zero_point) of an output
    bias_scale_inputs: tuple[int, int] | None = None  # bias scale = scale(in a) * scale(in b)[c]
    per_tensor_allowed: bool = False  # per-axis is the rule, per-tensor also accepted

    def applies_to(self, position: int) -> bool:
        """Whether the rule covers operand `position` ("*" covers every one)."""
        return self.index == "*" or self.index == position


@dataclass(frozen=True)
class OpRule:
    """The spec's rules for one op: each operand's rule, whether inputs and outputs share one
    scale, and where the rules come from."""

    name: str
    inputs: tuple[OperandRule, ...]
    outputs: tuple[OperandRule, ...]
    same_scale: bool
    origin: str  # "op-table" (the normative table) or "tflite-kernel" (extended)
    int8_version: int = 1  # operator-code version of the op's int8 kernel
    # "branches" (IF) or "loop" (WHILE): the op runs other subgraphs on its operands, which
    # keep their parameters across the call (the spec file says how); None for other ops
    control_flow: str | None = None

    def input_rule(self, position: int) -> OperandRule | None:
        """The rule of input `position`; None when the spec has none."""
        return next((r for r in self.inputs if r.applies_to(position)), None)

    def output_rule(self, position: int) -> OperandRule | None:
        """The rule of output `position`; None when the spec has none."""
        return next((r for r in self.outputs if r.applies_to(position)), None)

    def weight_rule(self) -> OperandRule | None:
        """The rule of the op's weights; None for ops without weights."""
        return next((r for r in self.inputs if r.role == "weight"), None)

    def bias_rule(self) -> OperandRule | None:
        """The rule of the op's bias; None for ops without a bias."""
        return next((r for r in self.inputs if r.role == "bias"), None)


@dataclass(frozen=True)
class QuantSpec:
    """One spec table under the selected profiles: every op's rules and the table's global facts.

    Attributes:
        tolerances: relative tolerances of the audit (bias_scale_rtol, fixed_scale_rtol,
            same_scale_rtol).
        dtype_ranges: the integer range of each storage type by name ("int8": (-128, 127)).
        bias_value_limit: the magnitude an integer bias saturates at.
    """

    ops: dict[str, OpRule]
    tolerances: dict[str, float]
    dtype_ranges: dict[str, tuple[int, int]]
    bias_value_limit: int
    profiles: tuple[str, ...] = field(default_factory=tuple)
    # op type -> builtin options (schema field names) the scheme's kernels need set
    required_options: dict[str, dict[str, Any]] = field(default_factory=dict)

    def rule(self, op_type: str) -> OpRule | None:
        """The rules of `op_type`; None when the spec does not cover it."""
        return self.ops.get(op_type)


def _operand(raw: dict[str, Any]) -> OperandRule:
    scale = raw.get("scale") or {}
    fixed = raw.get("fixed")
    return OperandRule(
        index=raw["index"],
        dtype=raw["dtype"],
        range=tuple(raw["range"]),
        granularity=raw["granularity"],
        role=raw.get("role", "activation"),
        axis=raw.get("axis"),
        zero_point=raw.get("zero_point"),
        fixed=(fixed["scale"], fixed["zero_point"]) if fixed else None,
        bias_scale_inputs=tuple(scale["product_of_inputs"]) if scale else None,
        per_tensor_allowed=raw.get("per_tensor_allowed", False),
    )


def _overlay(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """`base`'s fields replaced by `changes`; a change to null drops the field."""
    return {name: value for name, value in {**base, **changes}.items() if value is not None}


def expand_operand(entry: int | str | dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """An operand as a spec file writes it (an index alone, or its index and the fields that
    differ from its role's defaults) with every field: its role's defaults, then its own."""
    written = entry if isinstance(entry, dict) else {"index": entry}
    return _overlay(defaults[written.get("role", "activation")], written)


def expanded_ops(raw: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every op of a spec file (`ops` then `extended_ops`) with its operands in full (new
    dicts: the raw data is not changed)."""
    defaults = raw["operand_defaults"]
    return {
        name: {
            **op,
            "inputs": [expand_operand(entry, defaults) for entry in op["inputs"]],
            "outputs": [expand_operand(entry, defaults) for entry in op["outputs"]],
        }
        for name, op in {**raw["ops"], **raw["extended_ops"]}.items()
    }


def _apply_profile(ops: dict[str, Any], overrides: dict[str, Any]) -> None:
    for op_name, changes in overrides.items():
        if "same_scale" in changes:  # an op-level fact of the profile's runtime
            ops[op_name]["same_scale"] = changes["same_scale"]
        for position, patch in changes.get("inputs", {}).items():
            ops[op_name]["inputs"] = [
                _overlay(operand, patch) if str(operand["index"]) == position else operand
                for operand in ops[op_name]["inputs"]
            ]


def raw_spec(scheme: str = "int8") -> dict[str, Any]:
    """A scheme's spec file as written (operands compact: read them through `expanded_ops`)."""
    text = resources.files("qtool").joinpath("_schemas", SPEC_FILES[scheme]).read_text()
    return json.loads(text)


@functools.cache
def int16_without(profile: str) -> frozenset[str]:
    """The ops of the 16x8 table that the runtime of target profile `profile` has no int16
    kernel for (the profile's `without`; empty for a profile the 16x8 file does not name)."""
    found = raw_spec("int16").get("profiles", {}).get(profile, {})
    return frozenset(found.get("without", {}))


@functools.cache
def load_spec(profiles: tuple[str, ...] = (), scheme: str = "int8") -> QuantSpec:
    """A scheme's spec ("int8" or "int16"), with the named target profiles (e.g.
    "per-tensor-fc") applied where the scheme defines them."""
    raw = raw_spec(scheme)
    ops = expanded_ops(raw)
    for name in profiles:
        if name not in raw.get("profiles", {}) and scheme != "int8":
            continue  # a profile of the int8 table that the other scheme has no use for
        if name not in raw["profiles"]:
            raise KeyError(f"unknown target profile {name!r}; known: {sorted(raw['profiles'])}")
        _apply_profile(ops, raw["profiles"][name]["overrides"])
        for op_name in raw["profiles"][name].get("without", {}):
            ops.pop(op_name, None)
    rules = {
        name: OpRule(
            name=name,
            inputs=tuple(_operand(o) for o in op["inputs"]),
            outputs=tuple(_operand(o) for o in op["outputs"]),
            same_scale=op.get("same_scale", False),
            origin=op["origin"],
            int8_version=op.get("int8_version", 1),
            control_flow=op.get("control_flow"),
        )
        for name, op in ops.items()
    }
    return QuantSpec(
        ops=rules,
        tolerances=raw["tolerances"],
        dtype_ranges={k: tuple(v) for k, v in raw["dtypes"].items()},
        bias_value_limit=raw["bias_value_limit"],
        profiles=profiles,
        required_options={
            op: {k: v for k, v in options.items() if not isinstance(v, str)}
            for op, options in raw["check"].get("required_options", {}).items()
        },
    )


# The profile of runtimes whose FULLY_CONNECTED weights are per-tensor.
PER_TENSOR_FC = "per-tensor-fc"


def spec_profiles(per_tensor_fc: bool = False) -> tuple[str, ...]:
    """The spec profiles a user's options select (quantize and check read the same ones)."""
    return (PER_TENSOR_FC,) if per_tensor_fc else ()


def input_scale_below_one(scheme: str = "int8") -> frozenset[str]:
    """The ops whose kernels in `scheme` take each input scale itself as a multiplier, which must
    stay below 1 (LiteRT's rescaling comparisons: kernel_contracts.comparison_scale)."""
    return kernel_contracts(scheme).comparison_ops


@functools.cache
def rescaling_ops() -> frozenset[str]:
    """The ops whose int8 kernels rescale each input to the output's scale before adding
    (ADD, SUB: the spec file's check.rescale_left_shift)."""
    return frozenset(raw_spec()["check"]["rescale_left_shift"])


@functools.cache
def boundary_ops() -> frozenset[str]:
    """The ops whose float (or uint8) side is the model boundary: QUANTIZE, DEQUANTIZE."""
    return frozenset(raw_spec()["check"]["boundary_ops"])


def default_min_sqnr() -> float:
    """The accuracy gate's default threshold (dB): `qtool check --min-sqnr`, and the line
    between a fair and a poor output on the HTML pages."""
    return float(raw_spec()["check"]["accuracy"]["min_sqnr_db"])


@dataclass(frozen=True)
class WeightedOperands:
    """Where a weighted op (convolutions, FULLY_CONNECTED) keeps its operands, from the op table:
    the activation its bias scale multiplies, the weights and their channel axis, the bias."""

    activation: int
    weights: int
    axis: int | None  # the per-axis weights' quantized dimension (output channels)
    bias: int | None


@functools.cache
def weighted_operands(op_type: str) -> WeightedOperands | None:
    """The operand positions of `op_type` if its int8 form has weights, else None (also for
    the recurrent ops, whose many weights `integer_lstm` describes)."""
    if op_type in integer_lstm().ops:
        return None
    rule = load_spec().rule(op_type)
    weight = None if rule is None else rule.weight_rule()
    activations = [] if rule is None else [r for r in rule.inputs if r.role == "activation"]
    if weight is None or not activations:  # no weights, or only stores them (DENSIFY)
        return None
    bias = rule.bias_rule()
    activation = (
        bias.bias_scale_inputs[0]
        if bias is not None and bias.bias_scale_inputs
        else int(activations[0].index)
    )
    return WeightedOperands(
        activation=int(activation),
        weights=int(weight.index),
        axis=weight.axis,
        bias=None if bias is None else int(bias.index),
    )


@dataclass(frozen=True)
class KernelContracts:
    """A scheme's kernel limits beyond the op table (`kernel_contracts` in its spec file)."""

    fused_bounds: dict[str, tuple[float, float]]  # fused activation -> (low, high) clamp
    op_bounds: dict[str, tuple[float, float]]  # op type (RELU6...) -> (low, high) clamp
    bound_limit: int  # |round(bound / scale)| + |zero point| must stay within this
    accumulator_limit: int | None  # int32 accumulator of the weighted ops (None: int64)
    accumulator_ops: frozenset[str]
    comparison_ops: frozenset[str]
    # an activation's scale must be in [min, max), a constant's below max
    comparison_scale: tuple[float, float]
    softmax_ops: frozenset[str]
    softmax_min_beta_scale: float | None  # beta * input scale must exceed this

    def clamp_bounds(
        self, op_type: str, fused: str | None
    ) -> list[tuple[tuple[float, float], str, bool]]:
        """(bound, what clamps, whether it is fused) for an op's fused activation `fused` (its
        name) and for the op itself."""
        bounds = []
        if fused in self.fused_bounds:
            bounds.append((self.fused_bounds[fused], fused, True))
        if op_type in self.op_bounds:
            bounds.append((self.op_bounds[op_type], op_type, False))
        return bounds

    def min_output_scale(self, bound: tuple[float, float], zero_point: int) -> float:
        """The smallest output scale whose clamp `bound` the kernels compute without int32
        overflow."""
        return max(abs(bound[0]), abs(bound[1])) / (self.bound_limit - abs(zero_point))


@functools.cache
def kernel_contracts(scheme: str = "int8") -> KernelContracts:
    """The kernel contracts of a scheme ("int8" or "int16"), read by quantize and check."""
    raw = raw_spec(scheme).get("kernel_contracts", {})
    bounds = raw.get("activation_bounds", {})
    accumulator = raw.get("accumulator", {})
    comparison = raw.get("comparison_scale", {})
    softmax = raw.get("softmax_input_scale", {})
    return KernelContracts(
        fused_bounds={k: tuple(v) for k, v in bounds.get("fused", {}).items()},
        op_bounds={k: tuple(v) for k, v in bounds.get("ops", {}).items()},
        bound_limit=int(bounds.get("limit", 2**31 - 1)),
        accumulator_limit=accumulator.get("limit"),
        accumulator_ops=frozenset(accumulator.get("ops", ())),
        comparison_ops=frozenset(comparison.get("ops", ())),
        comparison_scale=(comparison.get("min", 0.0), comparison.get("max", float("inf"))),
        softmax_ops=frozenset(softmax.get("ops", ())),
        softmax_min_beta_scale=softmax.get("min_beta_scale"),
    )


@functools.cache
def sparse_int8_consumers() -> frozenset[str]:
    """The ops whose int8 kernels read weights that a DENSIFY expands from an int8 sparse
    constant, in LiteRT's builtin kernels and XNNPACK (the spec file's `sparse_weights`)."""
    return frozenset(raw_spec()["sparse_weights"]["int8_consumers"])


@dataclass(frozen=True)
class IntegerLstm:
    """What LiteRT's integer LSTM kernel requires (the spec file's `integer_lstm`): operand
    positions by role (gates in the order input, forget, cell, output; None where a gate has
    no such operand), the intermediates, and the fixed numbers of the scheme."""

    ops: frozenset[str]
    operands: dict[str, Any]  # role -> position, or per-gate positions
    intermediate_count: int
    gate_sum_intermediates: tuple[int, ...]
    hidden_intermediate: int
    gate_sum: dict[str, Any]  # dtype, range, zero_point of the gate-sum intermediates
    gate_scale: float  # the gate sums' fixed scale without layer norm (Q3.12)
    cell_state_log2_scale: tuple[int, int]  # the cell state's scale is 2^k, k in this range
    layer_norm_bias_factor: float  # bias scale = layer-norm weight scale x this
    activation: str  # the fused activation the integer kernel computes (TANH)
    no_integer_kernel: dict[str, str]  # recurrent ops LiteRT runs in float only, and why


@functools.cache
def integer_lstm() -> IntegerLstm:
    """The integer LSTM kernel's facts, read once from the int8 spec file."""
    raw = raw_spec()["integer_lstm"]
    intermediates = raw["intermediates"]
    return IntegerLstm(
        ops=frozenset(raw["ops"]),
        operands=dict(raw["operands"]),
        intermediate_count=int(intermediates["count"]),
        gate_sum_intermediates=tuple(intermediates["gate_sums"]),
        hidden_intermediate=int(intermediates["hidden"]),
        gate_sum=dict(intermediates["gate_sum"]),
        gate_scale=float(raw["gate_scale"]),
        cell_state_log2_scale=tuple(raw["cell_state_log2_scale"]),
        layer_norm_bias_factor=float(raw["layer_norm_bias_factor"]),
        activation=raw["requires"]["fused_activation_function"],
        no_integer_kernel=dict(raw["no_integer_kernel"]),
    )


@dataclass(frozen=True)
class ResourceVariableOps:
    """The operators of resource variables (the spec file's `resource_variables`), whose reads,
    assignments and initial value share one set of parameters."""

    handle: str
    read: str
    assign: str
    initialiser: str


@functools.cache
def resource_variable_ops() -> ResourceVariableOps:
    """The resource-variable operators, read once from the int8 spec file."""
    raw = raw_spec()["resource_variables"]
    return ResourceVariableOps(raw["handle"], raw["read"], raw["assign"], raw["initialiser"])

"""The integer UNIDIRECTIONAL_SEQUENCE_LSTM: every operand quantized by its role, as LiteRT's
8x8_16 kernel requires (the spec file's `integer_lstm`, read through `qtool.spec.integer_lstm`).

The plan handles the input and the output like any activation (a slot each). Everything else is
the operator's own and is decided here from the calibrated ranges:

- weights (input, recurrent, projection): int8, symmetric, per tensor (the kernel reads one
  scale); peephole and layer-norm weights: int16 symmetric, per tensor;
- gate biases: int32 at input scale x the gate's input weight scale, or with layer norm at the
  layer-norm weight's scale x 2^-10; the projection bias at the projection weights' scale x the
  hidden state's scale;
- the output state (a variable tensor): int8 with the output's parameters (the kernel copies it
  into the output and feeds it back);
- the cell state (a variable tensor): int16 with a power-of-two scale covering its calibrated
  range (every step of every sample), 2^-15 to 2^-9 (the kernel's tanh takes 15 + log2(scale)
  integer bits, 0 to 6);
- the five intermediates: the gate sums (int16 symmetric from their ranges with layer norm,
  else on the kernel's fixed 2^-12) and the hidden state (int8; the output's parameters
  without projection, its own calibrated range with it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from qtool.model import Model, Operator, Subgraph, TensorType
from qtool.model.types import ActivationFunctionType
from qtool.numerics import (
    AffineParams,
    activation_params,
    qrange,
    quantize,
    quantize_bias,
    symmetric_params,
)
from qtool.op_facts import options_table
from qtool.spec import IntegerLstm, integer_lstm, rescaling_ops

INT16_MAX = 32767
# The tensor types of the operands, by the dtype names of the spec.
TENSOR_TYPES = {"int8": TensorType.INT8, "int16": TensorType.INT16, "int32": TensorType.INT32}


@dataclass
class QuantizedConstant:
    """One constant operand in integer form: values, per-tensor scale, zero point 0."""

    values: np.ndarray
    scale: float
    dtype: str  # "int8", "int16" or "int32"

    def real(self) -> np.ndarray:
        """The values as the integer model means them."""
        return (self.values.astype(np.float64) * self.scale).astype(np.float32)


@dataclass
class RecurrentOperands:
    """What the rewriter stores for one integer LSTM: its constants by input position, the
    type and parameters of its two state tensors (by input position) and of its
    intermediates (in order)."""

    constants: dict[int, QuantizedConstant] = field(default_factory=dict)
    states: dict[int, tuple[str, AffineParams]] = field(default_factory=dict)
    intermediates: list[tuple[str, AffineParams]] = field(default_factory=list)

    @property
    def weight_position(self) -> int:
        """The first weight operand (where analyses name the operator's weights)."""
        return min(p for p, c in self.constants.items() if c.dtype != "int32")

    def real_constants(self) -> dict[int, np.ndarray]:
        """Every constant operand as the integer model means it, by input position."""
        return {position: c.real() for position, c in self.constants.items()}


def _present(op: Operator, position: int | None) -> bool:
    return position is not None and position < len(op.inputs) and op.inputs[position] >= 0


def _gates(facts: IntegerLstm, role: str) -> list[int | None]:
    return list(facts.operands[role])


def unsupported(model: Model, subgraph: Subgraph, op: Operator, ranges: Mapping) -> str | None:
    """Why an LSTM cannot run on LiteRT's integer kernel (None when it can)."""
    facts = integer_lstm()
    code = op.option("fused_activation_function", table=options_table(model.op_type(op)))
    if code != getattr(ActivationFunctionType, facts.activation):
        return (
            f"the integer LSTM computes {facts.activation} only (this one's activation is {code})"
        )
    for position in _gates(facts, "recurrent_weights"):
        if _present(op, position) and len(subgraph.tensors[op.inputs[position]].shape) != 2:
            return "diagonal recurrent weights have a float kernel only"
    if len(op.intermediates) != facts.intermediate_count:
        return (
            f"the integer kernel reads {facts.intermediate_count} intermediate tensors; this "
            f"operator lists {len(op.intermediates)}"
        )
    needed = [op.inputs[facts.operands["cell_state"]]]
    needed.append(op.intermediates[facts.hidden_intermediate])
    if _layer_norm(facts, op):
        needed += [op.intermediates[k] for k in facts.gate_sum_intermediates]
    missing = [subgraph.tensors[t].name for t in needed if t not in ranges]
    if missing:
        return f"no calibrated range for {', '.join(missing)}"
    return None


def _layer_norm(facts: IntegerLstm, op: Operator) -> bool:
    return _present(op, facts.operands["layer_norm_weights"][1])  # the forget gate's


def _symmetric(values: np.ndarray, dtype: str) -> QuantizedConstant:
    qmax = 127 if dtype == "int8" else INT16_MAX
    scale = symmetric_params(values, qmax=qmax).scale
    stored = np.int8 if dtype == "int8" else np.int16
    q = quantize(values, scale, 0, dtype=stored, narrow_range=True)
    return QuantizedConstant(q, float(scale[0]), dtype)


def _bias(values: np.ndarray, scale: float) -> QuantizedConstant:
    return QuantizedConstant(
        quantize_bias(values, [scale], [1.0]), float(np.float32(scale)), "int32"
    )


def cell_state_scale(span: tuple[float, float], facts: IntegerLstm) -> float:
    """The power-of-two scale of an int16 cell state whose values span `span`: the smallest
    2^k (k in the kernel's range) with the range inside [-32768, 32767] * 2^k, as the
    converter extends a symmetric range to a power of two."""
    low, high = facts.cell_state_log2_scale
    magnitude = max(abs(span[0]), abs(span[1]))
    k = math.ceil(math.log2(magnitude)) - 15 if magnitude > 0 else low
    return 2.0 ** min(max(k, low), high)


def quantize_lstm(
    model: Model,
    subgraph: Subgraph,
    op: Operator,
    input_params: AffineParams,
    output_params: AffineParams,
    ranges: Mapping[int, tuple[float, float]],
) -> RecurrentOperands:
    """Every operand of an integer LSTM other than its input and output (planned as slots)."""
    facts = integer_lstm()
    roles = facts.operands
    layer_norm = _layer_norm(facts, op)
    found = RecurrentOperands()

    def data(position: int) -> np.ndarray:
        return np.asarray(model.tensor_data(subgraph.tensors[op.inputs[position]]), np.float32)

    for role in ("input_weights", "recurrent_weights"):
        for position in _gates(facts, role):
            if _present(op, position):
                found.constants[position] = _symmetric(data(position), "int8")
    for role in ("peephole_weights", "layer_norm_weights"):
        for position in _gates(facts, role):
            if _present(op, position):
                found.constants[position] = _symmetric(data(position), "int16")
    input_scale = float(input_params.scale[0])
    gate_biases = _gates(facts, "gate_biases")
    for k, position in enumerate(gate_biases):
        if not _present(op, position):
            continue
        if layer_norm:
            norm = found.constants[facts.operands["layer_norm_weights"][k]]
            scale = norm.scale * facts.layer_norm_bias_factor
        else:
            scale = input_scale * found.constants[facts.operands["input_weights"][k]].scale
        found.constants[position] = _bias(data(position), scale)

    out = AffineParams(output_params.scale.copy(), output_params.zero_point.copy())
    projection = roles["projection_weights"]
    hidden = out
    if _present(op, projection):
        found.constants[projection] = _symmetric(data(projection), "int8")
        hidden = activation_params(*ranges[op.intermediates[facts.hidden_intermediate]])
        if _present(op, roles["projection_bias"]):
            scale = found.constants[projection].scale * float(hidden.scale[0])
            found.constants[roles["projection_bias"]] = _bias(data(roles["projection_bias"]), scale)

    cell = cell_state_scale(ranges[op.inputs[roles["cell_state"]]], facts)
    found.states[roles["output_state"]] = ("int8", out)
    found.states[roles["cell_state"]] = ("int16", AffineParams(np.array([cell]), np.array([0])))

    gate_sum = facts.gate_sum
    for k in range(facts.intermediate_count):
        if k == facts.hidden_intermediate:
            found.intermediates.append(("int8", hidden))
        elif layer_norm:
            span = ranges[op.intermediates[k]]
            found.intermediates.append(
                (gate_sum["dtype"], activation_params(*span, dtype=np.int16))
            )
        else:
            fixed = AffineParams(np.array([facts.gate_scale]), np.array([gate_sum["zero_point"]]))
            found.intermediates.append((gate_sum["dtype"], fixed))
    return found


Slot = tuple  # (tensor index, dtype) as the plan keys its activation parameters


# Scales this close copy most int8 codes unchanged when one is rescaled to the other (|q| < 64 at
# 1/128): the value they stand for changes by the scale ratio, a gain error.
_SAME_GRID = 1 / 128


def snap_to_input_grids(
    model: Model,
    subgraph: Subgraph,
    plan: Any,
    find: Callable[[Slot], Slot],
    pinned: Callable[[Slot], tuple[float, int] | None],
) -> None:
    """In a model that keeps state, put an ADD or SUB and its live inputs whose scales are
    almost equal (within _SAME_GRID) on one grid: a fixed one among them (LOGISTIC's 1/256),
    else the output's; each group keeps a zero point for its range.

    These kernels rescale each input to the output's scale; between nearly equal scales that
    copies codes, so the value changes by the scale ratio: a gain error that is noise in a
    feed-forward graph but that a recurrence accumulates step after step (keras_stream_gru:
    1 - z requantized from LOGISTIC's 1/256 to 1/255 made z + (1 - z) exceed 1 by 0.4%)."""
    members: dict[Slot, list[Slot]] = {}
    for slot in plan.params:
        members.setdefault(find(slot), []).append(slot)
    for i, op in enumerate(subgraph.operators):
        output = plan.writes.get((i, 0))
        if model.op_type(op) not in rescaling_ops() or output not in plan.params:
            continue
        inputs = [
            slot
            for (reader, _), slot in plan.reads.items()
            if reader == i
            and slot in plan.params
            and not model.is_constant(subgraph.tensors[slot[0]])
        ]
        scale = float(plan.params[output].scale[0])
        near = {
            find(slot): slot
            for slot in [output, *inputs]
            if slot[1] == output[1]
            and abs(float(plan.params[slot].scale[0]) / scale - 1) < _SAME_GRID
        }
        fixed = [slot for root, slot in near.items() if pinned(root) is not None]
        grid = float(plan.params[fixed[0] if fixed else output].scale[0])
        for root, slot in near.items():
            if pinned(root) is None:
                snapped = _params_on_grid(_group_span(plan, members[root]), grid, slot[1])
                for member in members[root]:
                    plan.params[member] = snapped


def _group_span(plan: Any, slots: list[Slot]) -> tuple[float, float]:
    spans = [plan.ranges[s[0]] for s in slots if s[0] in plan.ranges]
    return min(s[0] for s in spans), max(s[1] for s in spans)


def _params_on_grid(span: tuple[float, float], scale: float, dtype: str) -> AffineParams:
    """Parameters with `scale` for the range `span`: int16 symmetric (zero point 0, its
    scheme), int8 with the range's lowest end at the lowest code (0 exact)."""
    if dtype == "int16":
        return AffineParams(np.array([scale], np.float32), np.array([0]))
    low, high = qrange(np.int8)
    zero_point = int(np.clip(np.round(low - min(span[0], 0.0) / scale), low, high))
    return AffineParams(np.array([scale], np.float32), np.array([zero_point]))

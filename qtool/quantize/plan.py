"""Planning: which operators become int8, and the parameters of every activation tensor.

Every rule comes from the spec data (`qtool.spec`): which operands of an op are int8, fixed output
parameters, and which ops need the same scale in and out. Same-scale constraints are solved with
a union-find over tensors: each group shares one (scale, zero_point) computed from the union of
its members' calibrated ranges, or the fixed parameters of a member. An input of a multi-input
same-scale op (CONCATENATION, PACK...) whose group is pinned to fixed parameters elsewhere cannot
be unified, so it is requantized with an int8 -> int8 QUANTIZE in front of that op.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from qtool.model import Model, Operator, Subgraph, Tensor, TensorType
from qtool.model.edit import NameAllocator
from qtool.numerics import AffineParams, activation_params
from qtool.spec import Int8Spec, OpRule

INT8 = "int8"
FLOAT = "float"
INTEGER = "integer"  # an op with no float operand (shape arithmetic): left untouched


@dataclass
class OpDecision:
    mode: str  # INT8, FLOAT or INTEGER
    reason: str | None = None
    source_index: int | None = None  # index in the input model; None for ops qtool inserted


@dataclass
class Plan:
    decisions: dict[int, OpDecision]  # id(operator) -> decision
    params: dict[int, AffineParams]  # activation tensor index -> int8 params
    ranges: dict[int, tuple[float, float]]  # tensor index -> range the params come from
    requantized: list[tuple[int, int]] = field(default_factory=list)  # (op source index, input)

    def decision(self, op: Operator) -> OpDecision:
        return self.decisions[id(op)]


class _Groups:
    """Union-find over tensor indices, carrying ranges and fixed parameters per group."""

    def __init__(self) -> None:
        self.parent: dict[int, int] = {}
        self.fixed: dict[int, tuple[float, int]] = {}

    def find(self, t: int) -> int:
        self.parent.setdefault(t, t)
        root = t
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[t] != root:
            self.parent[t], t = root, self.parent[t]
        return root

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return
        self.parent[rb] = ra
        if rb in self.fixed:
            self.fixed.setdefault(ra, self.fixed.pop(rb))

    def pin(self, t: int, fixed: tuple[float, int]) -> None:
        self.fixed[self.find(t)] = fixed

    def pinned(self, t: int) -> tuple[float, int] | None:
        return self.fixed.get(self.find(t))


def keep_float_match(
    model: Model, subgraph: Subgraph, op: Operator, patterns: tuple[str, ...]
) -> str | None:
    return next((p for p in patterns if model.op_matches(op, subgraph, p)), None)


def _is_float(tensor: Tensor) -> bool:
    return tensor.dtype == TensorType.FLOAT32


def decide(
    model: Model,
    subgraph: Subgraph,
    op: Operator,
    spec: Int8Spec,
    ranges: dict[int, tuple[float, float]],
    keep_float: tuple[str, ...],
) -> OpDecision:
    """Whether an operator can and may run in int8, and why not when it cannot."""
    tensors = subgraph.tensors
    float_inputs = [(p, t) for p, t in enumerate(op.inputs) if t >= 0 and _is_float(tensors[t])]
    float_outputs = [(p, t) for p, t in enumerate(op.outputs) if _is_float(tensors[t])]
    if not float_inputs and not float_outputs:
        return OpDecision(INTEGER)
    op_type = model.op_type(op)
    pattern = keep_float_match(model, subgraph, op, keep_float)
    if pattern is not None:
        return OpDecision(FLOAT, f"kept in float by --keep-float {pattern}")
    rule = spec.rule(op_type)
    if rule is None:
        return OpDecision(FLOAT, f"{op_type} has no int8 kernel in the int8 spec")
    for position, t in enumerate(op.inputs):
        operand = rule.input_rule(position)
        live = t >= 0 and not model.is_constant(tensors[t])
        if (
            live
            and operand is not None
            and operand.role == "activation"
            and not _is_float(tensors[t])
        ):
            return OpDecision(FLOAT, f"input {position} is not float: nothing to quantize it from")
    for position, t in float_inputs:
        operand = rule.input_rule(position)
        constant = model.is_constant(tensors[t])
        if operand is None:
            return OpDecision(
                FLOAT, f"input {position} is float but the spec has no int8 rule for it"
            )
        if operand.role in ("weight", "bias") and not constant:
            return OpDecision(FLOAT, f"{operand.role} (input {position}) is not constant")
        if not constant and t not in ranges:
            return OpDecision(
                FLOAT, f"input {position} ({tensors[t].name}) has no calibrated range"
            )
    for position, t in float_outputs:
        operand = rule.output_rule(position)
        if operand is None:
            return OpDecision(
                FLOAT, f"output {position} is float but the spec has no int8 rule for it"
            )
        if operand.fixed is None and not rule.same_scale and t not in ranges:
            return OpDecision(
                FLOAT,
                f"output {position} ({tensors[t].name}) was never produced during calibration",
            )
    return OpDecision(INT8)


def activation_positions(rule: OpRule, op: Operator, tensors: list[Tensor]) -> list[int]:
    """Input positions of an int8 op that carry real-valued activations (constant or not)."""
    return [
        p
        for p, t in enumerate(op.inputs)
        if t >= 0
        and _is_float(tensors[t])
        and (r := rule.input_rule(p)) is not None
        and r.role == "activation"
    ]


def make_plan(
    model: Model,
    spec: Int8Spec,
    ranges: dict[int, tuple[float, float]],
    keep_float: tuple[str, ...],
    source_index: list[int],
    subgraph_index: int = 0,
) -> Plan:
    """Decide every operator of a subgraph and the params of its activations.

    `source_index[i]` is the input-model index of the subgraph's operator i (for reports).
    """
    subgraph = model.subgraphs[subgraph_index]
    decisions = {
        id(op): decide(model, subgraph, op, spec, ranges, keep_float) for op in subgraph.operators
    }
    for position, op in enumerate(subgraph.operators):
        decisions[id(op)].source_index = source_index[position]
    plan = Plan(decisions=decisions, params={}, ranges=dict(ranges))
    groups = _Groups()
    int8_ops = [op for op in subgraph.operators if decisions[id(op)].mode == INT8]
    # Fixed outputs and single-input same-scale ops first: their groups are forced.
    for op in int8_ops:
        rule = spec.rule(model.op_type(op))
        for position, t in enumerate(op.outputs):
            operand = rule.output_rule(position)
            if operand is not None and operand.fixed is not None:
                groups.pin(t, operand.fixed)
    multi_input = []
    for op in int8_ops:
        rule = spec.rule(model.op_type(op))
        if not rule.same_scale:
            continue
        positions = activation_positions(rule, op, subgraph.tensors)
        if len([p for p in positions if not model.is_constant(subgraph.tensors[op.inputs[p]])]) > 1:
            multi_input.append((op, positions))
            continue
        for position in positions:
            for out in _real_outputs(rule, op, subgraph):
                groups.union(op.inputs[position], out)
    names = NameAllocator(subgraph)
    for op, positions in multi_input:
        rule = spec.rule(model.op_type(op))
        outputs = _real_outputs(rule, op, subgraph)
        anchor = outputs[0]
        for position in positions:
            t = op.inputs[position]
            if (
                groups.pinned(t) is not None
                and groups.find(t) != groups.find(anchor)
                and not model.is_constant(subgraph.tensors[t])
            ):
                t = _insert_requantize(model, subgraph, op, position, names, plan)
            groups.union(anchor, t)
        for out in outputs[1:]:
            groups.union(anchor, out)
    _assign_params(model, subgraph, plan, groups)
    return plan


def _real_outputs(rule: OpRule, op: Operator, subgraph: Subgraph) -> list[int]:
    return [
        t
        for p, t in enumerate(op.outputs)
        if rule.output_rule(p) is not None and _is_float(subgraph.tensors[t])
    ]


def _insert_requantize(
    model: Model, subgraph: Subgraph, op: Operator, position: int, names: NameAllocator, plan: Plan
) -> int:
    """Give `op` a private copy of input `position`, produced by a QUANTIZE (int8 -> int8)."""
    source = op.inputs[position]
    original = subgraph.tensors[source]
    copy = subgraph.add_tensor(
        Tensor(
            name=names(f"{original.name}/requantized"),
            shape=list(original.shape),
            dtype=TensorType.FLOAT32,
            shape_signature=original.shape_signature,
        )
    )
    requantize = Operator(
        opcode_index=model.opcode_for("QUANTIZE"), inputs=[source], outputs=[copy]
    )
    subgraph.operators.insert(subgraph.operators.index(op), requantize)
    plan.decisions[id(requantize)] = OpDecision(INT8)
    op.inputs[position] = copy
    if source in plan.ranges:
        plan.ranges[copy] = plan.ranges[source]
    plan.requantized.append((plan.decisions[id(op)].source_index, position))
    return copy


def _assign_params(model: Model, subgraph: Subgraph, plan: Plan, groups: _Groups) -> None:
    """One set of params per group (fixed, or from the union of its members' ranges)."""
    members: dict[int, list[int]] = {}
    for t in groups.parent:
        members.setdefault(groups.find(t), []).append(t)
    for root, tensors in members.items():
        fixed = groups.fixed.get(root)
        if fixed is not None:
            params = AffineParams(np.array([fixed[0]], np.float32), np.array([fixed[1]]))
        else:
            spans = [_value_range(model, subgraph, t, plan.ranges) for t in tensors]
            spans = [s for s in spans if s is not None]
            if not spans:
                continue
            low, high = min(s[0] for s in spans), max(s[1] for s in spans)
            params = activation_params(low, high)
            for t in tensors:
                plan.ranges.setdefault(t, (low, high))
        for t in tensors:
            plan.params[t] = params
    for t, (low, high) in plan.ranges.items():
        if t not in plan.params:
            plan.params[t] = activation_params(low, high)


def _value_range(
    model: Model, subgraph: Subgraph, t: int, ranges: dict[int, tuple[float, float]]
) -> tuple[float, float] | None:
    if t in ranges:
        return ranges[t]
    data = model.tensor_data(subgraph.tensors[t])
    if data is None or not data.size:
        return None
    return float(np.min(data)), float(np.max(data))

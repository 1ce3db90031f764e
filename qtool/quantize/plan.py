"""Planning: the parameters of every quantized tensor, given how each operator runs.

Every rule comes from the spec data (`qtool.spec`): the int8 table, and the int16x8 table for
operators asked to run with 16-bit activations. An operator runs in int8, in int16x8, in float
(no kernel, or kept on purpose) or is left alone (integer-only shape arithmetic): its
`OpDecision` (`qtool.quantize.decisions`).

A quantized version of an activation is a *slot*: `(tensor, dtype)` (the operand's dtype in the
spec: int16 activations of a 16x8 op, but an int8 PRELU alpha), or `(tensor, dtype, op,
position)` for a private copy that one operator reads: a requantized copy of an activation, or
the quantized copy of a constant operand. Each integer operator writes
its outputs to slots and reads slots; the rewriter materialises every slot as a tensor and adds
the QUANTIZE/DEQUANTIZE converters between the slot a tensor is produced in and the slots it is
read in. Same-scale constraints are solved with a union-find over slots: a group shares one set
of parameters, fixed by a member (LOGISTIC's output...) or computed from the union of its
activation members' calibrated ranges. Constants never widen a group: a constant operand of
MINIMUM or CONCATENATION (or a comparison's constant of zeros) is quantized with the group's
parameters (clamped), and each reader of a constant has its own copy, so a constant shared by
two operators never joins their groups (TensorFlow shares one `0.0` among many MAXIMUMs). An
input of a multi-input same-scale op whose group is pinned elsewhere reads a requantized copy
instead.

The plan refers to operators by their index in the subgraph it was made for and never edits
the model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from qtool.model import Model, Operator, Subgraph, Tensor
from qtool.model.types import activation_name
from qtool.numerics import (
    AffineParams,
    activation_params,
    multiplier_reaches_one,
    symmetric_activation_params,
)
from qtool.quantize import recurrent
from qtool.quantize.decisions import (
    INT8,
    INT16,
    OpDecision,
    Precision,
    decide,
    is_float,
)
from qtool.runtime.state import keeps_state
from qtool.spec import (
    QUANTIZED,
    OpRule,
    input_scale_below_one,
    kernel_contracts,
)

Slot = tuple  # (tensor, dtype) or (tensor, dtype, op index, input position)


@dataclass
class Plan:
    """The integer form of one subgraph: each operator's decision, the parameters of every slot,
    the slots each integer operator reads and writes, and its integer weights. Operators are
    referred to by index in the subgraph the plan was made for."""

    subgraph_index: int
    decisions: list[OpDecision]  # one per operator of the subgraph, by index
    params: dict[Slot, AffineParams]
    ranges: dict[int, tuple[float, float]]  # tensor -> calibrated range the params come from
    reads: dict[tuple[int, int], Slot] = field(default_factory=dict)  # (op, input pos) -> slot
    writes: dict[tuple[int, int], Slot] = field(default_factory=dict)  # (op, output pos) -> slot
    weights: dict[int, object] = field(default_factory=dict)  # op -> LayerWeights (weights.py)
    # The weight modes: (op, input position) -> NarrowWeight (weight_store.py), the narrow form
    # a float op's constant weights are stored in.
    narrow: dict[tuple[int, int], object] = field(default_factory=dict)
    # A subgraph a control-flow op runs: the int8 parameters its inputs arrive with and its
    # outputs must leave with (the caller's operands'), by tensor.
    boundary_inputs: dict[int, AffineParams] = field(default_factory=dict)
    boundary_outputs: dict[int, AffineParams] = field(default_factory=dict)
    boundary_dtype: str = INT8  # the boundary parameters' type: the calling operator's mode
    # The plans of the subgraphs this one's control-flow ops run in int8, by subgraph index
    # (nested calls in theirs).
    bodies: dict[int, Plan] = field(default_factory=dict)
    # Why a group's range was widened to meet a kernel contract (one line per group).
    widened: list[str] = field(default_factory=list)

    def with_bodies(self) -> list[Plan]:
        """This plan and the plans of every subgraph it runs, callers first."""
        found = [self]
        for body in self.bodies.values():
            found += body.with_bodies()
        return found

    def requantized(self, model: Model) -> list[tuple[int, int]]:
        """(op, input position) of every activation an integer op writes that is read through
        a private requantized copy."""
        subgraph = model.subgraphs[self.subgraph_index]
        written = self.home(subgraph)
        return sorted(
            key
            for key, slot in self.reads.items()
            if len(slot) > 2 and slot[0] in written and written[slot[0]] != slot
        )

    def home(self, subgraph: Subgraph) -> dict[int, Slot]:
        """The slot each activation is produced in, for tensors an integer operator writes."""
        return {
            subgraph.operators[op].outputs[position]: slot
            for (op, position), slot in self.writes.items()
        }


class _Groups:
    """Union-find over slots, carrying per group: fixed parameters, the largest code of a
    symmetric group (zero point 0 required), and the smallest scale a kernel accepts."""

    def __init__(self) -> None:
        self.parent: dict[Slot, Slot] = {}
        self.fixed: dict[Slot, tuple[float, int]] = {}
        self.symmetric: dict[Slot, int] = {}
        self.floor: dict[Slot, tuple[float, str]] = {}  # smallest scale, and why

    def find(self, slot: Slot) -> Slot:
        self.parent.setdefault(slot, slot)
        root = slot
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[slot] != root:
            self.parent[slot], slot = root, self.parent[slot]
        return root

    def union(self, a: Slot, b: Slot) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return
        self.parent[rb] = ra
        if rb in self.fixed:
            self.fixed.setdefault(ra, self.fixed.pop(rb))
        if rb in self.symmetric:
            self.require_symmetric(ra, self.symmetric.pop(rb))
        if rb in self.floor:
            self.require_scale(ra, *self.floor.pop(rb))

    def require_symmetric(self, slot: Slot, qmax: int) -> None:
        root = self.find(slot)
        self.symmetric[root] = min(qmax, self.symmetric.get(root, qmax))

    def require_scale(self, slot: Slot, scale: float, why: str) -> None:
        root = self.find(slot)
        if scale > self.floor.get(root, (0.0, ""))[0]:
            self.floor[root] = (scale, why)

    def pin(self, slot: Slot, fixed: tuple[float, int]) -> None:
        self.fixed[self.find(slot)] = fixed

    def pinned(self, slot: Slot) -> tuple[float, int] | None:
        return self.fixed.get(self.find(slot))


def activation_positions(rule: OpRule, op: Operator, tensors: list[Tensor]) -> list[int]:
    """Input positions of an integer op that carry real-valued activations (constant or not)."""
    return [
        p
        for p, t in enumerate(op.inputs)
        if t >= 0
        and is_float(tensors[t])
        and (r := rule.input_rule(p)) is not None
        and r.role == "activation"
    ]


def output_positions(rule: OpRule, op: Operator, tensors: list[Tensor]) -> list[int]:
    """Output positions of an integer op that carry float outputs the spec has a rule for."""
    return [
        p
        for p, t in enumerate(op.outputs)
        if rule.output_rule(p) is not None and is_float(tensors[t])
    ]


def make_plan(
    model: Model,
    precision: Precision,
    ranges: Mapping[int, tuple[float, float]],
    keep_float: tuple[str, ...],
    source_index: list[int],
    subgraph_index: int = 0,
    decisions: list[OpDecision] | None = None,
    shared: Callable[[Plan], Iterable[list[Slot]]] | None = None,
    pins: Mapping[Slot, tuple[float, int]] | None = None,
    boundary_inputs: Mapping[int, AffineParams] | None = None,
    boundary_outputs: Mapping[int, AffineParams] | None = None,
    boundary_dtype: str = INT8,
) -> Plan:
    """Decide every operator of a subgraph (unless `decisions` are given) and the parameters of
    every slot. `source_index[i]` is the input-model index of operator i (for reports).
    `shared(plan)`, given the plan's reads and writes, names further groups of slots that must
    share one set of parameters (the values of one resource variable). `pins` fixes the
    parameters of slots of control-flow operators; `boundary_inputs` and `boundary_outputs` are
    the parameters (of type `boundary_dtype`) a subgraph that control flow runs receives its
    inputs with and must give its outputs with (its group takes them unless fixed otherwise;
    where they differ, the rewriter requantizes)."""
    subgraph = model.subgraphs[subgraph_index]
    if decisions is None:
        decisions = [
            decide(model, subgraph, op, precision, ranges, keep_float) for op in subgraph.operators
        ]
    for position, decision in enumerate(decisions):
        decision.source_index = source_index[position]
    plan = Plan(subgraph_index, decisions, params={}, ranges=dict(ranges))
    plan.boundary_inputs = dict(boundary_inputs or {})
    plan.boundary_outputs = dict(boundary_outputs or {})
    plan.boundary_dtype = boundary_dtype
    groups = _Groups()
    for t, params in plan.boundary_inputs.items():
        groups.pin((t, boundary_dtype), _fixed(params))
    tensors = subgraph.tensors
    multi_input = []
    for i, op in enumerate(subgraph.operators):
        mode = decisions[i].mode
        if mode not in QUANTIZED:
            continue
        rule = precision.specs[mode].rule(model.op_type(op))
        outputs = output_positions(rule, op, tensors)
        for p in outputs:
            slot = (op.outputs[p], rule.output_rule(p).dtype)
            plan.writes[(i, p)] = slot
            fixed = rule.output_rule(p).fixed
            if fixed is not None:
                groups.pin(slot, fixed)
            _require(groups, slot, rule.output_rule(p))
            groups.find(slot)
        inputs = activation_positions(rule, op, tensors)
        for p in inputs:
            slot = (op.inputs[p], rule.input_rule(p).dtype)
            if model.is_constant(tensors[op.inputs[p]]) or rule.control_flow == "loop":
                # This reader's own copy: joins only this op's group (a loop variable is
                # requantized to the parameters it has all along the loop).
                slot = (*slot, i, p)
            plan.reads[(i, p)] = slot
            _require(groups, slot, rule.input_rule(p))
            groups.find(slot)
        _scale_floors(model, op, mode, plan, groups, i, inputs, outputs)
        live = [p for p in inputs if not model.is_constant(tensors[op.inputs[p]])]
        if not rule.same_scale:
            if model.op_type(op) in input_scale_below_one(mode) and len(live) == 1:
                # A comparison with a constant. LiteRT's int8 comparisons abort on an input
                # scale >= 1, the scale a constant of only zeros gets on its own: such a
                # constant goes on the activation's grid (which holds 0 exactly). Any other
                # keeps its own, finer grid: the threshold stays where it was.
                for p in inputs:
                    if p not in live and _coarse(model, tensors[op.inputs[p]], mode):
                        groups.union(plan.reads[(i, live[0])], plan.reads[(i, p)])
            continue
        if len(live) > 1:
            multi_input.append((i, inputs, outputs))
            continue
        # Outputs, or the first input of an op with no real-valued output (a comparison).
        anchor = plan.writes[(i, outputs[0])] if outputs else plan.reads[(i, inputs[0])]
        for slot in [plan.reads[(i, p)] for p in inputs] + [plan.writes[(i, q)] for q in outputs]:
            groups.union(anchor, slot)
    for tied in shared(plan) if shared is not None else ():
        for slot in tied[1:]:
            groups.union(tied[0], slot)
    for slot, fixed in (pins or {}).items():
        if groups.pinned(slot) is None:
            groups.pin(slot, fixed)
    for i, inputs, outputs in multi_input:
        anchor = plan.writes[(i, outputs[0])] if outputs else plan.reads[(i, inputs[0])]
        for p in inputs:
            slot = plan.reads[(i, p)]
            live = not model.is_constant(tensors[slot[0]])
            if (
                live
                and groups.pinned(slot) is not None
                and groups.find(slot) != groups.find(anchor)
            ):
                slot = (*slot, i, p)  # a private copy, requantized to the group's parameters
                plan.reads[(i, p)] = slot
            groups.union(anchor, slot)
        for q in outputs[1:]:
            groups.union(anchor, plan.writes[(i, q)])
    home = plan.home(subgraph)
    for t, params in plan.boundary_outputs.items():
        if t in home and home[t][1] == boundary_dtype and groups.pinned(home[t]) is None:
            groups.pin(home[t], _fixed(params))
    _assign_params(model, subgraph, plan, groups)
    if keeps_state(model, subgraph_index):
        recurrent.snap_to_input_grids(model, subgraph, plan, groups.find, groups.pinned)
    return plan


def _fixed(params: AffineParams) -> tuple[float, int]:
    return float(params.scale[0]), int(params.zero_point[0])


def _require(groups: _Groups, slot: Slot, operand) -> None:
    """A group whose operand needs zero point 0 (NEG's raw negation) is symmetric, within the
    operand's codes."""
    if operand.zero_point == 0 and operand.role == "activation":
        groups.require_symmetric(slot, operand.range[1])


def _scale_floors(
    model: Model,
    op: Operator,
    mode: str,
    plan: Plan,
    groups: _Groups,
    i: int,
    inputs: list[int],
    outputs: list[int],
) -> None:
    """The smallest scales the op's kernel prepares (kernel_contracts): a clamp bound must fit
    int32 in output codes; SOFTMAX's beta * input scale must reach its floor."""
    contracts = kernel_contracts(mode)
    op_type = model.op_type(op)
    qmin = -32768 if mode == INT16 else -128
    fused = op.options.get("fused_activation_function") if op.options else None
    for bound, name, is_fused in contracts.clamp_bounds(
        op_type, activation_name(fused) if fused else None
    ):
        why = f"{op_type}'s fused {name}" if is_fused else name
        for p in outputs:
            floor = contracts.min_output_scale(bound, qmin)
            groups.require_scale(
                plan.writes[(i, p)], floor, f"{why} bound {max(map(abs, bound)):g}"
            )
    if op_type in contracts.softmax_ops and inputs and contracts.softmax_min_beta_scale:
        beta = float(op.options.get("beta", 1.0) or 1.0)
        floor = contracts.softmax_min_beta_scale / beta
        groups.require_scale(plan.reads[(i, inputs[0])], floor, f"{op_type} beta {beta:g}")


def _coarse(model: Model, tensor: Tensor, mode: str) -> bool:
    """Whether a constant quantized on its own range gets a scale of 1 or more."""
    data = np.asarray(model.tensor_data(tensor), np.float32)
    if not data.size or not np.isfinite(data).all():
        return False
    dtype = np.int16 if mode == INT16 else np.int8
    params = activation_params(float(data.min()), float(data.max()), dtype=dtype)
    return multiplier_reaches_one(params.scale[0])


def _assign_params(model: Model, subgraph: Subgraph, plan: Plan, groups: _Groups) -> None:
    """One set of parameters per group: fixed, or from its activations' ranges (constants only
    when the group has nothing else)."""
    members: dict[Slot, list[Slot]] = {}
    for slot in groups.parent:
        members.setdefault(groups.find(slot), []).append(slot)
    for root, slots in members.items():
        dtype = root[1]
        fixed = groups.fixed.get(root)
        if fixed is not None:
            params = AffineParams(np.array([fixed[0]], np.float32), np.array([fixed[1]]))
        else:
            span = _group_range(model, subgraph, slots, plan.ranges)
            if span is None:
                continue
            params = _group_params(span, dtype, groups, root, plan, subgraph)
            for slot in slots:
                if slot[0] not in plan.ranges and not _constant(model, subgraph, slot[0]):
                    plan.ranges[slot[0]] = span
        for slot in slots:
            plan.params[slot] = params


def _group_params(
    span: tuple[float, float], dtype: str, groups: _Groups, root: Slot, plan: Plan, subgraph
) -> AffineParams:
    """A group's parameters from its range: symmetric when a member needs zero point 0, the
    range widened (and the widening recorded) where a kernel needs a larger scale."""
    np_dtype = np.int16 if dtype == INT16 else np.int8
    qmax = groups.symmetric.get(root)

    def params_for(low: float, high: float) -> AffineParams:
        if qmax is None:
            return activation_params(low, high, dtype=np_dtype)
        return symmetric_activation_params(max(-low, high, 0.0), qmax)

    params = params_for(*span)
    floor, why = groups.floor.get(root, (0.0, ""))
    scale = float(params.scale[0])
    if scale < floor:
        # The range stretched (about 0, as it stands) to a scale just past the floor: float32
        # rounding must not fall below it.
        low, high = min(span[0], 0.0), max(span[1], 0.0)
        codes = (
            (2 * qmax) if qmax is not None else int(np.iinfo(np_dtype).max - np.iinfo(np_dtype).min)
        )
        width = floor * codes * (1 + 2**-16)
        if high - low <= 0:
            low, high = 0.0, width
        else:
            factor = width / (high - low)
            low, high = low * factor, high * factor
        params = params_for(low, high)
        plan.widened.append(
            f"subgraph {plan.subgraph_index} tensor {subgraph.tensors[root[0]].name}: range "
            f"widened from scale {scale:.3g} to {float(params.scale[0]):.3g}, the smallest "
            f"{why} allows (int32 limits of LiteRT's kernels)"
        )
    return params


def _constant(model: Model, subgraph: Subgraph, t: int) -> bool:
    return model.is_constant(subgraph.tensors[t])


def _group_range(
    model: Model, subgraph: Subgraph, slots: list[Slot], ranges: Mapping[int, tuple[float, float]]
) -> tuple[float, float] | None:
    spans = [ranges[s[0]] for s in slots if s[0] in ranges]
    if not spans:
        for slot in slots:
            data = model.tensor_data(subgraph.tensors[slot[0]])
            if data is not None and data.size:
                spans.append((float(np.min(data)), float(np.max(data))))
    if not spans:
        return None
    return min(s[0] for s in spans), max(s[1] for s in spans)

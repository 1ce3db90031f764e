"""Control flow in the plan: what IF and WHILE require of the subgraphs they run.

LiteRT's IF and WHILE copy bytes between the caller's operands and the subgraphs' inputs and
outputs and never rescale (`control_flow` and its note in `schemas/int8_spec.json`), so an IF
or WHILE runs in int8 only with the subgraphs it runs planned around its operands' parameters:

- IF ("branches"): each branch input gets the parameters of the IF input it receives; each IF
  output gets parameters both branches give their output (the fixed ones both branches' last
  operators agree on, such as LOGISTIC's 1/256, else those of the IF output's calibrated range,
  which holds every branch's values), and each branch output leaves with them.
- WHILE ("loop"): loop variable k has one set of parameters, from the union of the ranges it
  takes anywhere: the WHILE's input and output k, and input and output k of the condition and
  the body on every iteration. The WHILE reads its operand requantized to them.

The subgraphs are planned like any other (with the caller's recipe), their boundary tensors
taking those parameters (`make_plan`'s boundary). A subgraph stays float, with the reason,
when it never ran on the calibration data, when another operator runs it too, or when its
caller is float (it is then quantized inside, its boundary float, if it ran).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from qtool.calibrate.ranges import Method
from qtool.calibrate.statistics import SubgraphStatistics
from qtool.model import Model, TensorType
from qtool.model.calls import CallSite, call_sites, callers
from qtool.numerics import AffineParams, activation_params
from qtool.quantize.decisions import OpDecision
from qtool.quantize.plan import INT8, INT16, Plan, Slot
from qtool.spec import QuantSpec

BRANCHES, LOOP = "branches", "loop"
# Why a WHILE carrying a recurrent state runs as it does (`loop_recurrence` names the state).
RECURRENT_LOOP = (
    "int16x8: its body carries a recurrent state ({}), whose error compounds over the "
    "iterations: the loop variables and the body are 16-bit, as LiteRT's integer LSTM keeps "
    "its state"
)
FLOAT_LOOP = (
    "its body carries a recurrent state ({}), whose error compounds over the iterations: the "
    "body runs in int16x8 and the loop variables stay float between iterations ({})"
)
BRANCH_NAMES = ("then branch", "else branch")
LOOP_NAMES = ("condition", "body")
INIT_NAMES = ("initialiser",)


@dataclass(frozen=True)
class Boundary:
    """The parameters a subgraph receives its inputs with and gives its outputs with, in the
    type of its caller (int8, or int16 for a loop run in int16x8)."""

    inputs: dict[int, AffineParams]
    outputs: dict[int, AffineParams]
    dtype: str = INT8

    def key(self) -> tuple:
        """A hashable form, for caching plans made with it."""
        return (
            self.dtype,
            *(
                (kind, t, p.scale.tobytes(), p.zero_point.tobytes())
                for kind, found in (("in", self.inputs), ("out", self.outputs))
                for t, p in sorted(found.items())
            ),
        )


NO_BOUNDARY = Boundary({}, {})


def planned_sites(model: Model, s: int, spec: QuantSpec) -> list[CallSite]:
    """The call sites of subgraph s whose subgraphs are planned around them: the operators with
    a `control_flow` rule (IF, WHILE). The subgraph a CALL_ONCE runs is planned with the
    variables it initialises (`qtool.quantize.variables`)."""
    return [
        site
        for site in call_sites(model, s)
        if (rule := spec.rule(site.op_type)) is not None and rule.control_flow is not None
    ]


def body_role(model: Model, site: CallSite, body: int) -> str:
    """How a report names a subgraph a call site runs: 'then branch of IF op 25 (subgraph 0)'."""
    names = {"IF": BRANCH_NAMES, "WHILE": LOOP_NAMES, "CALL_ONCE": INIT_NAMES}.get(site.op_type)
    found = names is not None and len(site.bodies) == len(names)
    role = names[site.bodies.index(body)] if found else "subgraph"
    return f"{role} of {site.op_type} op {site.op_index} (subgraph {site.subgraph})"


def refusal(
    model: Model, site: CallSite, calls: Mapping[int, SubgraphStatistics], engine: str
) -> str | None:
    """Why the subgraphs of a call site cannot be planned around its int8 operands (None when
    they can)."""
    entries = {signature["subgraph_index"] for signature in model.signature_defs}
    runs = callers(model)
    for body in dict.fromkeys(site.bodies):
        role = body_role(model, site, body)
        if body in entries or len(runs.get(body, ())) > 1:
            return f"its {role.split(' of ')[0]} (subgraph {body}) is also run elsewhere"
        found = calls.get(body)
        if found is None or not found.samples:
            if engine == "litert":
                return (
                    f"its {role.split(' of ')[0]} (subgraph {body}) was not observed: LiteRT "
                    "calibrated the model, which does not show what control flow runs "
                    "(--engine numpy or auto observes it)"
                )
            return (
                f"its {role.split(' of ')[0]} (subgraph {body}) never ran on the calibration "
                "data: no ranges to quantize it with"
            )
    return None


def _producer_fixed(
    model: Model, s: int, t: int, specs: Mapping[str, QuantSpec], mode: str = INT8
) -> tuple[float, int] | None:
    """The fixed output parameters of the operator producing tensor t of subgraph s, in `mode`
    (int8 or int16x8)."""
    subgraph = model.subgraphs[s]
    producer = subgraph.producers().get(t)
    if producer is None:
        return None
    op = subgraph.operators[producer]
    rule = specs[mode].rule(model.op_type(op))
    operand = None if rule is None else rule.output_rule(op.outputs.index(t))
    return None if operand is None else operand.fixed


def _branch_output_fixed(
    model: Model, site: CallSite, j: int, specs: Mapping[str, QuantSpec]
) -> tuple[float, int] | None:
    """Fixed parameters every branch gives IF output j (an operator with a fixed output, or
    an operand passed through whose producer has one), or None."""
    caller = model.subgraphs[site.subgraph].operators[site.op_index]
    found = set()
    for body in site.bodies:
        branch = model.subgraphs[body]
        t = branch.outputs[j]
        if t in branch.inputs:
            operand = caller.inputs[branch.inputs.index(t) + 1]
            found.add(_producer_fixed(model, site.subgraph, operand, specs))
        else:
            found.add(_producer_fixed(model, body, t, specs))
    return found.pop() if len(found) == 1 else None


def _span(spans: list[tuple[float, float]]) -> tuple[float, float] | None:
    if not spans:
        return None
    return min(s[0] for s in spans), max(s[1] for s in spans)


def _operand_span(
    model: Model, site: CallSite, k: int, ranges: Mapping[int, tuple[float, float]]
) -> tuple[float, float] | None:
    """The range of a WHILE's operand k: calibrated, or a constant's values."""
    subgraph = model.subgraphs[site.subgraph]
    t = subgraph.operators[site.op_index].inputs[k]
    if t in ranges:
        return ranges[t]
    data = (
        model.tensor_data(subgraph.tensors[t]) if model.is_constant(subgraph.tensors[t]) else None
    )
    if data is None or not data.size:
        return None
    return float(np.min(data)), float(np.max(data))


def _loop_variable_span(
    model: Model,
    site: CallSite,
    k: int,
    ranges: Mapping[int, tuple[float, float]],
    calls: Mapping[int, SubgraphStatistics],
    method: Method,
) -> tuple[float, float] | None:
    """The union of the ranges loop variable k takes: the WHILE's operand and result, and the
    condition's and body's input and output k on every iteration."""
    op = model.subgraphs[site.subgraph].operators[site.op_index]
    spans = [ranges[op.outputs[k]]] if op.outputs[k] in ranges else []
    initial = _operand_span(model, site, k, ranges)
    spans += [] if initial is None else [initial]
    for body in site.bodies:
        callee = model.subgraphs[body]
        inner = calls[body].ranges(method)
        tensors = [callee.inputs[k]] + ([callee.outputs[k]] if len(callee.outputs) > k else [])
        spans += [inner[t] for t in tensors if t in inner]
    return _span(spans)


def _loop_variable_params(
    model: Model,
    site: CallSite,
    k: int,
    ranges: Mapping[int, tuple[float, float]],
    calls: Mapping[int, SubgraphStatistics],
    method: Method,
    specs: Mapping[str, QuantSpec],
    mode: str,
) -> tuple[float, int] | None:
    """Loop variable k's parameters in `mode` (the WHILE's: int8, or int16 for a recurrent
    state): those its body's last operator fixes (TANH's 1/128 in int8) when its initial value
    fits them (every later value is that operator's output), else its range's."""
    span = _loop_variable_span(model, site, k, ranges, calls, method)
    if span is None:
        return None
    body = site.bodies[-1]
    fixed = _producer_fixed(model, body, model.subgraphs[body].outputs[k], specs, mode)
    initial = _operand_span(model, site, k, ranges)
    if fixed is not None and initial is not None:
        low, high = specs[mode].dtype_ranges[mode]
        scale, zero_point = fixed
        if (low - zero_point) * scale <= initial[0] and initial[1] <= (high - zero_point) * scale:
            return fixed
    params = activation_params(*span, dtype=mode.value)
    return float(params.scale[0]), int(params.zero_point[0])


def call_pins(
    model: Model,
    s: int,
    decisions: list[OpDecision],
    specs: Mapping[str, QuantSpec],
    ranges: Mapping[int, tuple[float, float]],
    calls: Mapping[int, SubgraphStatistics],
    method: Method,
) -> dict[Slot, tuple[float, int]]:
    """The parameters the integer control-flow operators of subgraph s fix on their slots: IF
    outputs on which the branches agree, WHILE loop variables (read and written; int16 where
    the WHILE carries a recurrent state)."""
    pins: dict[Slot, tuple[float, int]] = {}
    tensors = model.subgraphs[s].tensors
    for site in call_sites(model, s):
        mode = decisions[site.op_index].mode
        if mode not in (INT8, INT16):
            continue
        rule = specs[mode].rule(site.op_type)
        op = model.subgraphs[s].operators[site.op_index]
        for j, t in enumerate(op.outputs):
            if tensors[t].dtype != TensorType.FLOAT32:
                continue
            if rule.control_flow == BRANCHES:
                fixed = _branch_output_fixed(model, site, j, specs)
            else:
                fixed = _loop_variable_params(model, site, j, ranges, calls, method, specs, mode)
                if fixed is not None:
                    pins[(op.inputs[j], mode, site.op_index, j)] = fixed
            if fixed is not None:
                pins[(t, mode)] = fixed
    return pins


def boundaries(model: Model, plan: Plan, site: CallSite) -> dict[int, Boundary]:
    """Per subgraph the integer call site runs, the parameters at its boundary: those of the
    caller's slots the operands are read from and the results written to."""
    offset = 1 if site.op_type == "IF" else 0  # IF's condition is not passed on
    received = {
        k - offset: plan.params[slot]
        for (i, k), slot in plan.reads.items()
        if i == site.op_index and k >= offset
    }
    given = {j: plan.params[slot] for (i, j), slot in plan.writes.items() if i == site.op_index}
    found = {}
    for position, body in enumerate(site.bodies):
        callee = model.subgraphs[body]
        inputs = {callee.inputs[k]: p for k, p in received.items()}
        if site.op_type == "IF":
            outputs = {callee.outputs[j]: p for j, p in given.items()}
        elif position == 1:  # the body: a loop variable leaves it as it came in
            outputs = {callee.outputs[k]: p for k, p in received.items()}
        else:  # the condition gives a bool
            outputs = {}
        found[body] = Boundary(inputs, outputs, plan.decisions[site.op_index].mode)
    return found


def loop_recurrence(model: Model, site: CallSite) -> str | None:
    """The recurrent state a WHILE's body carries ('loop variable 1, c'; None when it carries
    none): a float loop variable whose next value the body computes from its current one. Its
    error compounds over the iterations, as the state of an LSTM does; LiteRT's own integer
    LSTM keeps that path 16-bit (its cell state and gate outputs), so the planner runs such a
    loop in int16x8, its loop variables included."""
    if site.op_type != "WHILE" or len(site.bodies) != 2:
        return None
    body = model.subgraphs[site.bodies[1]]
    for k, (t_in, t_out) in enumerate(zip(body.inputs, body.outputs, strict=False)):
        if t_in == t_out or body.tensors[t_in].dtype != TensorType.FLOAT32:
            continue
        reached = {t_in}
        for op in body.operators:
            if reached.intersection(op.inputs):
                reached.update(op.outputs)
        if t_out in reached:
            return f"loop variable {k}, {body.tensors[t_in].name}"
    return None

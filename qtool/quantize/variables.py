"""Resource variables in the plan: one variable, one type, one set of parameters.

LiteRT's READ_VARIABLE and ASSIGN_VARIABLE copy bytes and READ_VARIABLE refuses a variable whose
type differs from its output's (the spec file's `resource_variables`). So, per variable (a
VAR_HANDLE's container and shared name):

- its READ_VARIABLE outputs and ASSIGN_VARIABLE values form one group of the plan, whose
  parameters cover every value read or assigned (the initial value included: the first read
  returns it);
- they are all integer or all float: one float reader or writer keeps every one float;
- the initial value, which a CALL_ONCE subgraph assigns from a constant, is quantized with the
  same parameters (`initialiser_plans`, a plan of that subgraph for the rewriter); a variable
  whose initial value is not a constant stays float.
"""

from __future__ import annotations

from collections.abc import Mapping

from qtool.model import Model
from qtool.model.variables import Variable, accesses, initial_values
from qtool.quantize.decisions import FLOAT, INTEGER, OpDecision
from qtool.quantize.plan import QUANTIZED, Plan, Slot
from qtool.spec import QuantSpec, resource_variable_ops


def settle(model: Model, subgraph_index: int, decisions: list[OpDecision]) -> None:
    """Make every reader and writer of a variable run alike: all in one integer mode, or all in
    float with the reason (the first float one's, or an initial value that is not a constant)."""
    subgraph = model.subgraphs[subgraph_index]
    initial = initial_values(model, subgraph_index)
    for variable, ops in accesses(model, subgraph).items():
        modes = {decisions[i].mode for i in ops}
        reason = None
        if variable is None:
            reason = "reads or assigns a variable whose handle comes from outside the subgraph"
        elif len(modes) > 1 or not modes <= set(QUANTIZED):
            first = next(i for i in ops if decisions[i].mode not in QUANTIZED or len(modes) > 1)
            why = decisions[first].reason or f"runs in {decisions[first].mode}"
            reason = f"variable {variable[1]!r} is one type everywhere; op {first}: {why}"
        elif not all(_constant_value(model, s, i) for s, i in initial.get(variable, [])):
            reason = f"variable {variable[1]!r} is initialised from a value that is not a constant"
        if reason is not None:
            for i in ops:
                if decisions[i].mode != FLOAT or decisions[i].reason is None:
                    decisions[i] = OpDecision(FLOAT, reason, decisions[i].source_index)


def recurrences(model: Model, subgraph_index: int, spec: QuantSpec) -> dict[int, str]:
    """The operators on a variable's recurrence, each with the variable's name: those between
    a READ_VARIABLE of a variable and an ASSIGN_VARIABLE of it (the next state computed from the
    current one), with the reads and assignments themselves, for every variable whose
    recurrence rescales a value somewhere (an operator of `spec` that is not same-scale).

    Rounding error on such a path re-enters at every step and compounds, as in a WHILE body
    carrying a loop variable; a recurrence of same-scale operators only (a buffer of past frames
    sliced and concatenated) copies codes exactly and adds no error of its own."""
    subgraph = model.subgraphs[subgraph_index]
    ops = resource_variable_ops()
    found: dict[int, str] = {}
    for variable, indices in accesses(model, subgraph).items():
        if variable is None:
            continue
        reads = [i for i in indices if model.op_type(subgraph.operators[i]) == ops.read]
        assigns = [i for i in indices if i not in reads]
        reached = {subgraph.operators[i].outputs[0] for i in reads}
        after = set()
        for i, op in enumerate(subgraph.operators):
            if reached.intersection(op.inputs):
                reached.update(op.outputs)
                after.add(i)
        needed = {subgraph.operators[i].inputs[1] for i in assigns}
        before = set()
        for i in reversed(range(len(subgraph.operators))):
            op = subgraph.operators[i]
            if needed.intersection(op.outputs):
                needed.update(op.inputs)
                before.add(i)
        path = after & before
        rescaling = [
            i
            for i in path
            if (rule := spec.rule(model.op_type(subgraph.operators[i]))) is None
            or not rule.same_scale
        ]
        if rescaling:
            found.update(dict.fromkeys(sorted(path | set(indices)), variable[1]))
    return found


def float_reason(model: Model, plan: Plan) -> str | None:
    """Why variables of the plan's subgraph stay float, as an initialiser assigning them would
    say it: the reason of the first float assignment of a variable, else of the first float
    read (None when every one is integer)."""
    subgraph = model.subgraphs[plan.subgraph_index]
    assign = resource_variable_ops().assign
    found = [
        (model.op_type(subgraph.operators[i]) != assign, i)
        for indices in accesses(model, subgraph).values()
        for i in indices
        if plan.decisions[i].mode == FLOAT and plan.decisions[i].reason
    ]
    return plan.decisions[min(found)[1]].reason if found else None


def _constant_value(model: Model, subgraph_index: int, op_index: int) -> bool:
    subgraph = model.subgraphs[subgraph_index]
    value = subgraph.tensors[subgraph.operators[op_index].inputs[1]]
    return model.is_constant(value)


def variable_slots(model: Model, plan: Plan) -> dict[Variable, list[Slot]]:
    """Per quantized variable, the slots of its values: READ_VARIABLE outputs and
    ASSIGN_VARIABLE values."""
    subgraph = model.subgraphs[plan.subgraph_index]
    ops = resource_variable_ops()
    found: dict[Variable, list[Slot]] = {}
    for variable, indices in accesses(model, subgraph).items():
        for i in indices:
            if variable is None or plan.decisions[i].mode not in QUANTIZED:
                continue
            read = model.op_type(subgraph.operators[i]) == ops.read
            slot = plan.writes.get((i, 0)) if read else plan.reads.get((i, 1))
            if slot is not None:
                found.setdefault(variable, []).append(slot)
    return found


def initialiser_plans(model: Model, plans: Mapping[int, Plan]) -> dict[int, Plan]:
    """Plans of the CALL_ONCE subgraphs of planned subgraphs: each ASSIGN_VARIABLE of a
    quantized variable stores its constant initial value with the variable's parameters."""
    found: dict[int, Plan] = {}
    for plan in plans.values():
        slots = variable_slots(model, plan)
        for variable, assignments in initial_values(model, plan.subgraph_index).items():
            if variable not in slots:
                continue
            slot = slots[variable][0]
            for s, i in assignments:
                if s in plans:
                    continue
                if s not in found:
                    count = len(model.subgraphs[s].operators)
                    decisions = [OpDecision(INTEGER, None, k) for k in range(count)]
                    found[s] = Plan(s, decisions, params={}, ranges={})
                value = model.subgraphs[s].operators[i].inputs[1]
                read = (value, slot[1], i, 1)  # the assignment's own copy of the constant
                found[s].decisions[i] = OpDecision(slot[1], None, i)
                found[s].reads[(i, 1)] = read
                found[s].params[read] = plan.params[slot]
    return found

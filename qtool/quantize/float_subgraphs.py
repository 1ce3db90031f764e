"""The subgraphs of a quantized model that stay float, and why: those control flow runs that
could not be planned (each op with the reason), and those nothing calibrated."""

from __future__ import annotations

from collections.abc import Mapping

from qtool.model import Model, TensorType
from qtool.model.calls import callers
from qtool.quantize.control_flow import body_role
from qtool.quantize.decisions import FLOAT, INTEGER, OpDecision
from qtool.quantize.plan import Plan
from qtool.quantize.rewrite import RewriteNotes
from qtool.quantize.variables import float_reason
from qtool.spec import boundary_ops, resource_variable_ops


def computes_in_float(model: Model, subgraph_index: int) -> bool:
    """Whether an operator other than a QUANTIZE/DEQUANTIZE boundary has a float32 operand."""
    subgraph = model.subgraphs[subgraph_index]
    return any(
        model.op_type(op) not in boundary_ops()
        and any(
            t >= 0 and subgraph.tensors[t].dtype == TensorType.FLOAT32
            for t in op.inputs + op.outputs
        )
        for op in subgraph.operators
    )


def float_body_plans(
    model: Model,
    source_index: list[list[int]],
    plans: Mapping[int, Plan],
    notes: RewriteNotes,
) -> dict[int, Plan]:
    """Plans keeping float the subgraphs control flow runs that were neither planned nor
    rewritten (callers first), each op with the reason: the caller's float decision's, or
    that it never ran."""
    found: dict[int, Plan] = {}
    for s, sites in sorted(callers(model).items()):
        if s in plans or s in notes.origins or not computes_in_float(model, s):
            continue
        site = sites[0]
        caller = plans.get(site.subgraph, found.get(site.subgraph))
        decision = None if caller is None else caller.decisions[site.op_index]
        if site.op_type == resource_variable_ops().initialiser:
            why = (caller and float_reason(model, caller)) or "its variables stay float"
        elif decision is not None and decision.mode == FLOAT and decision.reason:
            why = decision.reason
        else:
            why = "it never ran on the calibration data"
        reason = f"the {body_role(model, site, s)} is kept in float: {why}"
        decisions = [
            OpDecision(FLOAT if _has_float(model, s, op) else INTEGER, reason, source)
            for op, source in zip(model.subgraphs[s].operators, source_index[s], strict=True)
        ]
        found[s] = Plan(s, decisions, params={}, ranges={})
    return found


def _has_float(model: Model, s: int, op) -> bool:
    tensors = model.subgraphs[s].tensors
    return any(t >= 0 and tensors[t].dtype == TensorType.FLOAT32 for t in op.inputs + op.outputs)


def subgraph_warnings(
    work: Model,
    plans: Mapping[int, Plan],
    float_bodies: Mapping[int, Plan],
    synthetic: bool,
    notes: RewriteNotes,
) -> list[str]:
    """The rewrite's warnings, then every subgraph of the written model `work` left float:
    those control flow runs with the reason (`float_bodies`), the others unplanned."""
    warnings = list(notes.warnings)
    for s, subgraph in enumerate(work.subgraphs):
        name = f"subgraph {s} ({subgraph.name or 'unnamed'})"
        if s in float_bodies:
            warnings.append(f"{name}, {float_bodies[s].decisions[0].reason}")
        # A subgraph rewritten without a plan of its own initialises quantized variables.
        elif s not in plans and s not in notes.origins and computes_in_float(work, s):
            warnings.append(
                f"{name} has no calibration data (not a signature's entry point, and no "
                "control flow runs it): kept in float"
            )
    if synthetic:
        warnings.insert(
            0,
            "calibrated on synthetic random data: activation ranges do not "
            "reflect real inputs, so accuracy is not meaningful",
        )
    return warnings

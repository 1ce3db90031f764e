"""Constants passed to control-flow subgraphs become constants of those subgraphs.

Exporters pass the weights a branch or a loop body uses as operands of the IF or WHILE (ONNX
converters do: openWakeWord's hey_jarvis passes its second head's weights to IF). Inside the
subgraph they are then inputs, and a FULLY_CONNECTED whose weights are an input has no int8
form. Each such operand is made a constant of the subgraphs instead (they share its buffer) and
dropped from the operator and the subgraphs' inputs, which computes exactly the same:

- IF: a constant operand of either branch;
- WHILE: a constant loop variable the body passes through unchanged (its output is its input),
  also dropped from the outputs; readers of the WHILE's output read the constant itself.

A subgraph that is a signature's entry point or that more than one operator runs is left as
it is.
"""

from __future__ import annotations

from qtool.model import Model
from qtool.model.calls import CallSite, call_sites, callers


def inline_constant_operands(model: Model) -> int:
    """Move constant operands into the subgraphs control flow runs; how many were moved."""
    entries = {signature["subgraph_index"] for signature in model.signature_defs}
    runs = callers(model)
    moved = 0
    for s in range(len(model.subgraphs)):
        for site in call_sites(model, s):
            bodies = set(site.bodies)
            if bodies & entries or any(len(runs[b]) > 1 for b in bodies):
                continue
            if site.op_type == "IF":
                moved += _inline_branches(model, site)
            elif site.op_type == "WHILE":
                moved += _inline_loop(model, site)
    return moved


def _constant(model: Model, s: int, t: int) -> bool:
    return t >= 0 and model.is_constant(model.subgraphs[s].tensors[t])


def _make_constant(model: Model, s: int, source: int, body: int, t: int) -> None:
    """Tensor t of subgraph `body` holds the value of constant `source` of subgraph s."""
    given = model.subgraphs[s].tensors[source]
    tensor = model.subgraphs[body].tensors[t]
    tensor.buffer = given.buffer
    tensor.quantization = given.quantization
    tensor.sparsity = given.sparsity


def _inline_branches(model: Model, site: CallSite) -> int:
    op = model.subgraphs[site.subgraph].operators[site.op_index]
    branches = [model.subgraphs[b] for b in site.bodies]
    moved = [
        k
        for k, t in enumerate(op.inputs[1:])
        if _constant(model, site.subgraph, t)
        and not any(branch.inputs[k] in branch.outputs for branch in branches)
    ]
    for k in moved:
        for b, branch in zip(site.bodies, branches, strict=True):
            _make_constant(model, site.subgraph, op.inputs[k + 1], b, branch.inputs[k])
    for branch in branches:
        branch.inputs = [t for k, t in enumerate(branch.inputs) if k not in moved]
    op.inputs = [op.inputs[0]] + [t for k, t in enumerate(op.inputs[1:]) if k not in moved]
    return len(moved)


def _inline_loop(model: Model, site: CallSite) -> int:
    caller = model.subgraphs[site.subgraph]
    op = caller.operators[site.op_index]
    condition, body = (model.subgraphs[b] for b in site.bodies)
    moved = [
        k
        for k, t in enumerate(op.inputs)
        if _constant(model, site.subgraph, t)
        and body.outputs[k] == body.inputs[k]
        and op.outputs[k] not in caller.outputs
    ]
    for k in moved:
        for b, callee in zip(site.bodies, (condition, body), strict=True):
            _make_constant(model, site.subgraph, op.inputs[k], b, callee.inputs[k])
        replaced, constant = op.outputs[k], op.inputs[k]
        for reader in caller.operators:
            reader.inputs = [constant if t == replaced else t for t in reader.inputs]
    for callee in (condition, body):
        callee.inputs = [t for k, t in enumerate(callee.inputs) if k not in moved]
    body.outputs = [t for k, t in enumerate(body.outputs) if k not in moved]
    op.inputs = [t for k, t in enumerate(op.inputs) if k not in moved]
    op.outputs = [t for k, t in enumerate(op.outputs) if k not in moved]
    return len(moved)

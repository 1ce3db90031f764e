"""Where a model uses resource variables: which variable (VAR_HANDLE's container and shared name)
each READ_VARIABLE and ASSIGN_VARIABLE refers to, and which assignments of a CALL_ONCE
subgraph give the variables their initial values. The operator names come from the spec file's
`resource_variables`; quantize plans by these facts and check audits them."""

from __future__ import annotations

from qtool.model.calls import call_sites
from qtool.model.graph import Model, Subgraph
from qtool.op_facts import options_table
from qtool.spec import resource_variable_ops

Variable = tuple[str, str]  # (container, shared_name)


def handle_of(model: Model, subgraph: Subgraph, t: int) -> Variable | None:
    """The variable a resource tensor refers to, when a VAR_HANDLE of the subgraph makes it."""
    ops = resource_variable_ops()
    table = options_table(ops.handle)
    for op in subgraph.operators:
        if t in op.outputs and model.op_type(op) == ops.handle:
            return (op.option("container", table) or "", op.option("shared_name", table) or "")
    return None


def accesses(model: Model, subgraph: Subgraph) -> dict[Variable | None, list[int]]:
    """The READ_VARIABLE and ASSIGN_VARIABLE operators of a subgraph, by variable (None: a
    handle that does not come from a VAR_HANDLE of the subgraph)."""
    ops = resource_variable_ops()
    found: dict[Variable | None, list[int]] = {}
    for i, op in enumerate(subgraph.operators):
        if model.op_type(op) in (ops.read, ops.assign):
            found.setdefault(handle_of(model, subgraph, op.inputs[0]), []).append(i)
    return found


def value_of(model: Model, subgraph: Subgraph, op_index: int) -> int:
    """The tensor holding a variable's value at a READ_VARIABLE (its output) or an
    ASSIGN_VARIABLE (its input 1)."""
    op = subgraph.operators[op_index]
    return op.outputs[0] if model.op_type(op) == resource_variable_ops().read else op.inputs[1]


def initial_values(model: Model, subgraph_index: int) -> dict[Variable, list[tuple[int, int]]]:
    """Per variable, the (subgraph, ASSIGN_VARIABLE) pairs of the CALL_ONCE subgraphs this
    subgraph runs."""
    ops = resource_variable_ops()
    found: dict[Variable, list[tuple[int, int]]] = {}
    for site in call_sites(model, subgraph_index):
        if site.op_type != ops.initialiser:
            continue
        for body in site.bodies:
            if not 0 <= body < len(model.subgraphs):
                continue
            init = model.subgraphs[body]
            for i, op in enumerate(init.operators):
                if model.op_type(op) == ops.assign:
                    variable = handle_of(model, init, op.inputs[0])
                    if variable is not None:
                        found.setdefault(variable, []).append((body, i))
    return found

"""The subgraphs control-flow operators run: IF's branches, WHILE's condition and body,
CALL_ONCE's initialiser (the options naming them are operator facts: `calls` in
`schemas/ops.json`)."""

from __future__ import annotations

from dataclasses import dataclass

from qtool.model.graph import Model
from qtool.op_facts import load_op_facts


@dataclass(frozen=True)
class CallSite:
    """One control-flow operator and the subgraphs it runs, in the order its options name
    them (IF: then, else; WHILE: cond, body; CALL_ONCE: init)."""

    subgraph: int  # the caller
    op_index: int
    op_type: str
    bodies: tuple[int, ...]


def call_sites(model: Model, subgraph_index: int) -> list[CallSite]:
    """Every control-flow operator of a subgraph."""
    table = load_op_facts()
    sites = []
    for i, op in enumerate(model.subgraphs[subgraph_index].operators):
        op_type = model.op_type(op)
        facts = table.facts(op_type)
        if facts is not None and facts.calls:
            bodies = tuple(int(op.option(name, table=facts.options)) for name in facts.calls)
            sites.append(CallSite(subgraph_index, i, op_type, bodies))
    return sites


def called_subgraphs(model: Model, subgraph_index: int) -> list[int]:
    """The subgraphs a subgraph runs through control flow, directly or not, first seen first."""
    found: list[int] = []
    pending = [subgraph_index]
    while pending:
        for site in call_sites(model, pending.pop(0)):
            for body in site.bodies:
                if body != subgraph_index and body not in found:
                    found.append(body)
                    pending.append(body)
    return found


def callers(model: Model) -> dict[int, list[CallSite]]:
    """Per subgraph, the control-flow operators (of any subgraph) that run it."""
    found: dict[int, list[CallSite]] = {}
    for s in range(len(model.subgraphs)):
        for site in call_sites(model, s):
            for body in dict.fromkeys(site.bodies):
                found.setdefault(body, []).append(site)
    return found

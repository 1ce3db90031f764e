"""The subgraphs operators call (CALL_ONCE, IF, WHILE, CALL, the StableHLO control ops), and
the call graph they make: the call sites of a subgraph (what the engine runs, calibration
observes, the planner plans around and the resource-variable code finds initialisers through),
and the problems checked before any engine or runtime follows a call.

Runtimes follow a call by recursing into the callee: subgraphs that call each other (or
themselves) make LiteRT recurse until the process dies of a stack overflow (SIGSEGV, no message).
Which options name a callee is read from the schema (every options field about a subgraph
index), so a new control-flow op is covered as soon as the schema knows it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

from qtool.model.graph import Model, Operator
from qtool.model.reflect import schema, snake_case
from qtool.op_facts import options_table

_NOT_CALLS = ("Model", "SignatureDef")  # tables whose subgraph fields are not calls


@functools.cache
def callee_fields() -> dict[str, tuple[str, ...]]:
    """Options table -> the names of its fields that hold the index of a subgraph to call."""
    fields = {}
    for table, layout in schema()["tables"].items():
        if table in _NOT_CALLS:
            continue
        names = tuple(
            snake_case(accessor)
            for accessor, _slot, kind, *_ in layout["fields"]
            if "Subgraph" in accessor and kind == "scalar"
        )
        if names:
            fields[table] = names
    return fields


def callees(op: Operator, op_type: str | None = None) -> Iterator[tuple[str, int]]:
    """(option name, subgraph index) of every subgraph `op` calls, in the order its options
    table names them (IF: then, else; WHILE: cond, body). An operator written without its
    options table calls what the table's defaults name, when `op_type` says which table."""
    table = op.options_type or (None if op_type is None else options_table(op_type))
    for name in callee_fields().get(table or "", ()):
        value = op.option(name, table)  # a field left out holds its default (0)
        if isinstance(value, int):
            yield name, value
    for name in callee_fields().get(op.options_2_type or "", ()):
        value = op.options_2.get(name)
        if isinstance(value, int):
            yield name, value


@dataclass(frozen=True)
class CallSite:
    """One operator that calls subgraphs and the subgraphs it runs, in the order its options
    name them (IF: then, else; WHILE: cond, body; CALL_ONCE: init)."""

    subgraph: int  # the caller
    op_index: int
    op_type: str
    bodies: tuple[int, ...]


def call_sites(model: Model, subgraph_index: int) -> list[CallSite]:
    """Every operator of a subgraph that calls subgraphs."""
    sites = []
    for i, op in enumerate(model.subgraphs[subgraph_index].operators):
        op_type = model.op_type(op)
        bodies = tuple(index for _, index in callees(op, op_type))
        if bodies:
            sites.append(CallSite(subgraph_index, i, op_type, bodies))
    return sites


def called_subgraphs(model: Model, subgraph_index: int) -> list[int]:
    """The subgraphs a subgraph runs through calls, directly or not, first seen first (a valid
    model's: `call_problems` finds none)."""
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
    """Per subgraph, the operators (of any subgraph) that call it."""
    found: dict[int, list[CallSite]] = {}
    for s in range(len(model.subgraphs)):
        for site in call_sites(model, s):
            for body in dict.fromkeys(site.bodies):
                found.setdefault(body, []).append(site)
    return found


def call_problems(model: Model) -> list[tuple[int, int, str]]:
    """(subgraph, operator, message) for every call to a subgraph the model lacks, and for the
    first call of every cycle of calls (a subgraph that ends up calling itself)."""
    count = len(model.subgraphs)
    problems = []
    edges: dict[int, list[tuple[int, int]]] = {s: [] for s in range(count)}  # s -> (op, callee)
    for s, subgraph in enumerate(model.subgraphs):
        for i, op in enumerate(subgraph.operators):
            for name, target in callees(op, model.op_type(op)):
                if not 0 <= target < count:
                    problems.append(
                        (s, i, f"option {name} calls subgraph {target}, the model has {count}")
                    )
                else:
                    edges[s].append((i, target))
    problems += _cycles(edges)
    return problems


def _cycles(edges: dict[int, list[tuple[int, int]]]) -> list[tuple[int, int, str]]:
    """The calls that close a cycle, found by an iterative depth-first walk (a model may hold
    thousands of subgraphs: no recursion here either)."""
    state = dict.fromkeys(edges, 0)  # 0 unseen, 1 on the current path, 2 done
    found = []
    for start in edges:
        if state[start]:
            continue
        path = [start]
        stack = [iter(edges[start])]
        state[start] = 1
        while stack:
            step = next(stack[-1], None)
            if step is None:
                state[path.pop()] = 2
                stack.pop()
                continue
            op_index, target = step
            if state[target] == 1:
                loop = [*path[path.index(target) :], target]
                chain = " -> ".join(f"subgraph {s}" for s in loop)
                found.append(
                    (
                        path[-1],
                        op_index,
                        f"calls back into a subgraph already running ({chain}): "
                        "recursive calls never finish",
                    )
                )
            elif state[target] == 0:
                state[target] = 1
                path.append(target)
                stack.append(iter(edges[target]))
    return found

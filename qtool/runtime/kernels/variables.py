"""Resource variables: VAR_HANDLE, READ_VARIABLE, ASSIGN_VARIABLE, and CALL_ONCE, which runs the
subgraph that initialises them. The values live in the run's `ModelState`
(qtool.runtime.state); LiteRT's kernels copy bytes in and out (read_variable.cc,
assign_variable.cc), as these do. They run one sample at a time: a stateful model's samples are
a sequence."""

from __future__ import annotations

import numpy as np

from qtool.runtime.registry import OpContext, kernel, never


@kernel("VAR_HANDLE", batch=never)
def var_handle(ctx: OpContext) -> np.ndarray:
    """VAR_HANDLE: the id of the variable named by (container, shared_name)."""
    return ctx.state.handle(ctx.option("container") or "", ctx.option("shared_name") or "")


@kernel("READ_VARIABLE", batch=never)
def read_variable(ctx: OpContext) -> np.ndarray:
    """READ_VARIABLE: the variable's current value."""
    return ctx.state.read(ctx.inputs[0])


@kernel("ASSIGN_VARIABLE", batch=never)
def assign_variable(ctx: OpContext) -> list[np.ndarray]:
    """ASSIGN_VARIABLE: the variable takes the value of input 1; no outputs."""
    ctx.state.assign(ctx.inputs[0], ctx.inputs[1])
    return []


@kernel("CALL_ONCE", batch=never)
def call_once(ctx: OpContext) -> list[np.ndarray]:
    """CALL_ONCE: the initialising subgraph runs on the first invocation of a sequence."""
    init = int(ctx.option("init_subgraph_index"))
    if ctx.state.first_run(init):
        ctx.calls.run(init, [])
    return []

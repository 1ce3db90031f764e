"""Control flow: IF and WHILE run other subgraphs of the model (`OpContext.calls`, one engine
per subgraph). LiteRT copies the operands into the subgraph's inputs and its outputs back
(if.cc, while.cc); so do these kernels, one sample at a time (a sample's condition decides
which subgraph runs, and how often)."""

from __future__ import annotations

import numpy as np

from qtool.errors import DataError
from qtool.runtime.registry import OpContext, kernel, never

# A WHILE whose condition never turns false would run forever: LiteRT would too, but a model
# file should not be able to hang qtool.
MAX_ITERATIONS = 1_000_000


def _true(value: np.ndarray) -> bool:
    return bool(np.asarray(value).reshape(-1)[0])


@kernel("IF", batch=never)
def if_(ctx: OpContext) -> list[np.ndarray]:
    """IF: the then branch's outputs on the other inputs when the condition holds, else the
    else branch's."""
    taken = "then_subgraph_index" if _true(ctx.inputs[0]) else "else_subgraph_index"
    return ctx.calls.run(int(ctx.option(taken)), list(ctx.inputs[1:]))


@kernel("WHILE", batch=never)
def while_(ctx: OpContext) -> list[np.ndarray]:
    """WHILE: the body's outputs become its inputs as long as the condition subgraph says so;
    the loop variables' last values."""
    condition = int(ctx.option("cond_subgraph_index"))
    body = int(ctx.option("body_subgraph_index"))
    values = list(ctx.inputs)
    for _ in range(MAX_ITERATIONS):
        if not _true(ctx.calls.run(condition, values)[0]):
            return values
        values = ctx.calls.run(body, values)
    raise DataError(
        f"operator {ctx.index} (WHILE) ran {MAX_ITERATIONS:,} iterations without its "
        "condition turning false"
    )

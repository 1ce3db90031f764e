"""Float ops that need precision relative to each value, and the producers that must feed them in
float.

Some float ops turn a small absolute error of their input into an unbounded one as the value
nears zero: LOG (d ln x = dx/x), RSQRT, a divisor (`relative` operands in schemas/ops.json). An
affine integer grid has one absolute step for the whole range, so every value within half a step
of zero becomes exactly zero: its logarithm goes to -inf, or to whatever floor the model clamps
it to, however small its share of the range's top. A power spectrum spanning many decades (an
audio front-end's, before its LOG) loses most of its values this way in int8.

The rule: where such an op stays float, the tensor it reads there keeps float, with its producer,
when more than `ZERO_ROUNDED_SHARE` of its observed nonzero values would round to zero on the
grid its producer would write; the producer's own inputs are judged the same way (relative
errors pass through the linear and multiplicative ops that build a spectrum), back to a tensor
the grid resolves or a model input.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from qtool.calibrate.histogram import Histogram, counts_below
from qtool.model import Model, Subgraph
from qtool.numerics import activation_params
from qtool.op_facts import relative_inputs
from qtool.quantize.decisions import FLOAT, INT16, OpDecision, is_float

# More than 1% of the values rounded to zero: that share of a LOG's outputs alone, each off by
# decades, bounds its SQNR near 20 dB whatever the rest of the model does.
ZERO_ROUNDED_SHARE = 0.01


def zero_rounded_share(histogram: Histogram, low: float, high: float, dtype=np.int8) -> float:
    """The share of the observed nonzero values that the grid of range [low, high] rounds to
    zero (|x| < half a step: real 0 is exact on every activation grid)."""
    half_step = float(activation_params(low, high, dtype=dtype).scale[0]) / 2
    tiny = np.finfo(np.float32).tiny
    below = counts_below(histogram, np.array([-half_step, -tiny, tiny, half_step]))
    zeros = below[2] - below[1]
    nonzero = float(histogram.counts.sum()) - zeros
    if nonzero <= 0:
        return 0.0
    return float((below[3] - below[0] - zeros) / nonzero)


def keep_relative_float(
    model: Model,
    subgraph: Subgraph,
    decisions: list[OpDecision],
    ranges: Mapping[int, tuple[float, float]],
    histogram: Callable[[int], Histogram | None],
) -> None:
    """Keep in float the producers a float op's relative input needs (the module's rule),
    with the reason in each decision."""
    producers = {t: i for i, op in enumerate(subgraph.operators) for t in op.outputs}
    pending = []  # (tensor, the float op that needs it relative, its type)
    for i, op in enumerate(subgraph.operators):
        if decisions[i].mode == FLOAT:
            op_type = model.op_type(op)
            pending += [(op.inputs[p], i, op_type) for p in relative_inputs(op_type)]
    seen = set()
    while pending:
        t, reader, reader_type = pending.pop()
        if t < 0 or t in seen or t not in ranges or model.is_constant(subgraph.tensors[t]):
            continue
        seen.add(t)
        producer = producers.get(t)
        found = histogram(t)
        if producer is None or found is None or found.empty:
            continue
        mode = decisions[producer].mode
        dtype = np.int16 if mode == INT16 else np.int8
        share = zero_rounded_share(found, *ranges[t], dtype=dtype)
        if share <= ZERO_ROUNDED_SHARE:
            continue
        if mode != FLOAT:
            grid = "int16" if mode == INT16 else "int8"
            decisions[producer] = OpDecision(
                FLOAT,
                f"{reader_type} (op {reader}) needs its input precise relative to each value: "
                f"{share:.0%} of {subgraph.tensors[t].name}'s values would round to zero on "
                f"the {grid} grid of [{ranges[t][0]:.3g}, {ranges[t][1]:.3g}]",
                decisions[producer].source_index,
            )
        op = subgraph.operators[producer]
        pending += [
            (u, reader, reader_type) for u in op.inputs if u >= 0 and is_float(subgraph.tensors[u])
        ]

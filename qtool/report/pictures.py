"""What the HTML page draws beyond the report: each activation's histogram against the range
and integer grid it got, and each quantized activation's SQNR along the graph (JSON-ready)."""

from __future__ import annotations

from typing import Any

import numpy as np

from qtool.calibrate.histogram import counts_below
from qtool.calibrate.statistics import SubgraphStatistics
from qtool.model import Model
from qtool.numerics.dtypes import qrange
from qtool.quantize import QuantizeResult
from qtool.quantize.diagnosis import Diagnosis
from qtool.quantize.plan import Plan, Slot
from qtool.report.analysis_report import json_db

BINS = 64  # linear bins over a tensor's [min, max]: enough to see its shape, small to store


def _stored_slots(model: Model, plan: Plan) -> dict[int, Slot]:
    """The slot each quantized activation lives in: where an integer operator writes it, else
    where one reads it (a model input, a float operator's output)."""
    subgraph = model.subgraphs[plan.subgraph_index]
    slots = plan.home(subgraph)
    for slot in plan.reads.values():
        if len(slot) == 2 and not model.is_constant(subgraph.tensors[slot[0]]):
            slots.setdefault(slot[0], slot)
    return slots


def graph_order(model: Model, subgraph_index: int) -> list[tuple[int, str]]:
    """(tensor, producing op type) of the subgraph's inputs, then of every operator's outputs."""
    subgraph = model.subgraphs[subgraph_index]
    ordered = [(t, "input") for t in subgraph.inputs]
    for op in subgraph.operators:
        ordered += [(t, model.op_type(op)) for t in op.outputs if t >= 0]
    return ordered


def _spread(statistics: SubgraphStatistics, t: int) -> tuple[list[int], float, float] | None:
    """The histogram of tensor t on BINS linear bins over its [min, max], and the extremes."""
    histogram = statistics.histogram(t)
    if histogram is None or histogram.empty:
        return None
    low, high = histogram.min, histogram.max
    if high > low:
        counts = np.diff(counts_below(histogram, np.linspace(low, high, BINS + 1)))
    else:
        counts = np.array([histogram.counts.sum()])
    return [int(c) for c in np.rint(counts)], float(low), float(high)


def tensor_histograms(
    model: Model, plan: Plan, statistics: SubgraphStatistics
) -> list[dict[str, Any]]:
    """Every quantized activation of the plan's subgraph, in graph order: its histogram, the
    calibrated range its parameters come from, the integer grid it is stored on (ends, step
    and type) and the share of values outside that grid."""
    slots = _stored_slots(model, plan)
    subgraph = model.subgraphs[plan.subgraph_index]
    found = []
    for t, op_type in graph_order(model, plan.subgraph_index):
        spread = _spread(statistics, t)
        if t not in slots or spread is None:
            continue
        counts, low, high = spread
        slot = slots[t]
        params = plan.params[slot]
        scale, zero_point = (
            float(params.scale.reshape(-1)[0]),
            int(params.zero_point.reshape(-1)[0]),
        )
        qmin, qmax = qrange(slot[1])
        grid = (scale * (qmin - zero_point), scale * (qmax - zero_point))
        histogram = statistics.histogram(t)
        below, above = counts_below(histogram, np.array(grid))
        total = float(histogram.counts.sum())
        clipped = round(below + total - above)  # whole values: no interpolation crumbs
        calibrated = plan.ranges.get(t, (low, high))
        found.append(
            {
                "subgraph": plan.subgraph_index,
                "name": subgraph.tensors[t].name,
                "op": op_type,
                "dtype": str(slot[1]),
                "data": [low, high],
                "counts": counts,
                "range": [float(calibrated[0]), float(calibrated[1])],
                "grid": [grid[0], grid[1]],
                "scale": scale,
                "zero_point": zero_point,
                "clipped": clipped / total if total else 0.0,
            }
        )
    return found


def layer_rows(model: Model, subgraph_index: int, sqnr: dict[int, float]) -> list[dict[str, Any]]:
    """Each measured activation's SQNR, in graph order, with its name and producing op."""
    tensors = model.subgraphs[subgraph_index].tensors
    return [
        {
            "subgraph": subgraph_index,
            "tensor": tensors[t].name,
            "op": op,
            "sqnr_db": json_db(sqnr[t]),
        }
        for t, op in graph_order(model, subgraph_index)
        if t in sqnr
    ]


def quantize_pictures(result: QuantizeResult) -> dict[str, Any]:
    """The page's extra data for a quantization: histograms of the final plan, and the per-layer
    SQNR when it was measured (`measure_layer_sqnr`)."""
    model = result.float_model
    return {
        "layers": [
            row
            for s, sqnr in sorted(result.layer_sqnr.items())
            for row in layer_rows(model, s, sqnr)
        ],
        "tensors": [  # none in the weight modes: they calibrate nothing
            row
            for s, plan in sorted(result.plans.items())
            if (statistics := result.statistics.of(s)) is not None
            for row in tensor_histograms(model, plan, statistics)
        ],
    }


def analysis_histograms(diagnosis: Diagnosis, model: Model) -> list[dict[str, Any]]:
    """Histograms of the plans an analysis measured (`model`: the prepared float model)."""
    return [
        row
        for sub in diagnosis.subgraphs
        for row in tensor_histograms(model, sub.plan, sub.statistics)
    ]

"""A JSON-ready description of a model: what `qtool inspect` shows."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from qtool.model.graph import Model, QuantParams
from qtool.model.types import dtype_name


def quant_summary(q: QuantParams | None) -> dict[str, Any] | None:
    """Quantization parameters, with per-axis arrays kept whole (JSON) and summarised (text)."""
    if q is None or not (q.is_quantized or q.min is not None):
        return None
    out: dict[str, Any] = {}
    if q.is_quantized:
        out["scale"] = [float(s) for s in q.scale]
        out["zero_point"] = [int(z) for z in q.zero_point]
        if q.per_axis:
            out["quantized_dimension"] = q.quantized_dimension
    if q.min is not None and len(q.min):
        out["min"] = [float(v) for v in q.min]
    if q.max is not None and len(q.max):
        out["max"] = [float(v) for v in q.max]
    return out


def format_quant(q: dict[str, Any] | None) -> str:
    """One short line for a quantization summary: per-axis shown as count and range.

    Inconsistent parameters (no zero points, a range with one end) are shown as they are: the
    audit is where they are judged.
    """
    if not q:
        return ""
    if "scale" not in q:
        low, high = (f"{q[k][0]:.4g}" if q.get(k) else "?" for k in ("min", "max"))
        return f"range [{low}, {high}]"
    scales, zps = q["scale"], q["zero_point"]
    zp_text = (
        "zp ?"
        if not zps
        else (f"zp {zps[0]}" if len(set(zps)) == 1 else f"zp {min(zps)}..{max(zps)}")
    )
    if len(scales) == 1:
        return f"scale {scales[0]:.6g}, {zp_text}"
    return (
        f"per-axis[{q.get('quantized_dimension', 0)}] x{len(scales)}: "
        f"scale {min(scales):.4g}..{max(scales):.4g}, {zp_text}"
    )


def describe_model(model: Model, path: str | None = None) -> dict[str, Any]:
    """What `qtool inspect` shows: a summary (operators and tensor types counted, weight bytes,
    signature keys, metadata names) and each subgraph's tensors and operators; `path` is only
    echoed."""
    subgraphs = []
    dtype_counts: Counter[str] = Counter()
    op_counts: Counter[str] = Counter()
    for subgraph in model.subgraphs:
        tensors = []
        for index, tensor in enumerate(subgraph.tensors):
            dtype_counts[dtype_name(tensor.dtype)] += 1
            tensors.append(
                {
                    "index": index,
                    "name": tensor.name,
                    "dtype": dtype_name(tensor.dtype),
                    "shape": list(tensor.shape),
                    "constant": model.is_constant(tensor),
                    "sparse": tensor.sparsity is not None,
                    "quantization": quant_summary(tensor.quantization),
                }
            )
        operators = []
        for index, op in enumerate(subgraph.operators):
            op_type = model.op_type(op)
            op_counts[op_type] += 1
            operators.append(
                {
                    "index": index,
                    "type": op_type,
                    "inputs": list(op.inputs),
                    "outputs": list(op.outputs),
                }
            )
        subgraphs.append(
            {
                "name": subgraph.name,
                "inputs": list(subgraph.inputs),
                "outputs": list(subgraph.outputs),
                "operators": operators,
                "tensors": tensors,
            }
        )
    return {
        "path": path,
        "schema_version": model.version,
        "description": model.description,
        "summary": {
            "subgraphs": len(model.subgraphs),
            "operators": sum(op_counts.values()),
            "ops_by_type": dict(sorted(op_counts.items())),
            "tensors_by_dtype": dict(sorted(dtype_counts.items())),
            "weights_bytes": int(model.weights_nbytes()),
            "signatures": [s["signature_key"] for s in model.signature_defs],
            "metadata": [m["name"] for m in model.metadata],
        },
        "subgraphs": subgraphs,
    }


def io_details(model: Model, subgraph_index: int = 0) -> list[dict[str, Any]]:
    """Inputs then outputs of a subgraph with dtype, shape and quantization."""
    subgraph = model.subgraphs[subgraph_index]
    rows = []
    for role, indices in (("input", subgraph.inputs), ("output", subgraph.outputs)):
        for t in indices:
            tensor = subgraph.tensors[t]
            rows.append(
                {
                    "role": role,
                    "name": tensor.name,
                    "dtype": dtype_name(tensor.dtype),
                    "shape": [int(d) for d in np.asarray(tensor.shape)],
                    "quantization": quant_summary(tensor.quantization),
                }
            )
    return rows

"""The quantization report (`*.report.json`), as defined by `schemas/report.schema.json`."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import numpy as np

from qtool import __version__
from qtool.model import Model, dtype_name
from qtool.model.describe import io_details, quant_summary
from qtool.quantize import QuantizeOptions, QuantizeResult

REPORT_VERSION = 1


def file_facts(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return {"path": str(path), "size_bytes": path.stat().st_size, "sha256": digest.hexdigest()}


def _op_rows(result: QuantizeResult, source: Model) -> list[dict[str, Any]]:
    rows: dict[int, dict[str, Any]] = {}
    for folded in result.folded:
        rows[folded.index] = {
            "index": folded.index,
            "op": folded.op_type,
            "mode": "folded",
            "reason": "constant inputs: evaluated once and stored as a "
            "float constant before quantization",
        }
    for op in result.plan.decisions.values():
        if op.source_index is None:
            continue
        rows[op.source_index] = {
            "index": op.source_index,
            "op": source.op_type(source.subgraphs[0].operators[op.source_index]),
            "mode": op.mode,
            "reason": op.reason,
        }
    inserted = sum(1 for d in result.plan.decisions.values() if d.source_index is None)
    ordered = [rows[i] for i in sorted(rows)]
    if inserted:
        ordered.append(
            {
                "index": None,
                "op": "QUANTIZE",
                "mode": "inserted",
                "reason": f"{inserted} int8 -> int8 requantization(s) in front of same-scale ops",
            }
        )
    return ordered


def _tensor_rows(result: QuantizeResult, source: Model) -> list[dict[str, Any]]:
    before = {t.name: t for t in source.subgraphs[0].tensors}
    calibrated = {
        result.float_model.subgraphs[0].tensors[t].name: span
        for t, span in result.calibration.ranges.items()
    }
    rows = []
    for tensor in result.model.subgraphs[0].tensors:
        original = before.get(tensor.name)
        span = calibrated.get(tensor.name)
        rows.append(
            {
                "name": tensor.name,
                "shape": [int(d) for d in tensor.shape],
                "dtype_before": dtype_name(original.dtype) if original is not None else None,
                "dtype_after": dtype_name(tensor.dtype),
                "calibrated_min": None if span is None else float(span[0]),
                "calibrated_max": None if span is None else float(span[1]),
                "quantization": quant_summary(tensor.quantization),
            }
        )
    return rows


def build_report(
    result: QuantizeResult,
    source: Model,
    options: QuantizeOptions,
    *,
    input_path: str,
    output_path: str,
    data_sources: list[str],
    samples_limit: int | None,
    seed: int | None,
    audit: dict[str, Any],
) -> dict[str, Any]:
    calibration = result.calibration
    return {
        "report_version": REPORT_VERSION,
        "qtool_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "settings": {
            "io": options.io,
            "per_tensor_fc": options.per_tensor_fc,
            "keep_float": list(options.keep_float),
            "engine": options.engine,
            "data": data_sources,
            "synthetic": calibration.synthetic,
            "samples_limit": samples_limit,
            "seed": seed,
        },
        "input_model": file_facts(input_path),
        "output_model": file_facts(output_path),
        "calibration": {
            "samples": calibration.samples,
            "engine": calibration.engine,
            "seconds": round(calibration.seconds, 4),
            "observer": calibration.observer.kind,
            "source": calibration.source,
            "synthetic": calibration.synthetic,
        },
        "io": io_details(result.model),
        "ops": _op_rows(result, source),
        "float_ops": [
            {"index": f.index, "op": f.op_type, "reason": f.reason} for f in result.float_ops
        ],
        "tensors": _tensor_rows(result, source),
        "enlarged_weight_scales": result.notes.enlarged_weight_scales,
        "warnings": result.warnings,
        "audit": audit,
    }


def summary_counts(report: dict[str, Any]) -> dict[str, int]:
    modes = [row["mode"] for row in report["ops"]]
    return {mode: modes.count(mode) for mode in ("int8", "float", "integer", "folded")}


def size_ratio(report: dict[str, Any]) -> float:
    return float(
        np.float64(report["output_model"]["size_bytes"])
        / max(report["input_model"]["size_bytes"], 1)
    )

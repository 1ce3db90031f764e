"""The analysis report (`qtool analyze --json`, and `analysis` in the quantize report)."""

from __future__ import annotations

from typing import Any

from qtool.quantize.diagnosis import Diagnosis, PlaceReport


def json_db(value: float | None) -> float | None:
    """A dB value for JSON: rounded, None when exact (infinite)."""
    if value is None or value == float("inf"):
        return None
    return round(float(value), 3)


def _place(report: PlaceReport, outputs: list[str]) -> dict[str, Any]:
    sensitivity = report.sensitivity
    return {
        "place": sensitivity.place.kind,
        "op_index": report.op_index,
        "op": sensitivity.op_type,
        "tensor": sensitivity.name,
        "alone_sqnr_db": dict(zip(outputs, map(json_db, sensitivity.output_sqnr), strict=True)),
        "alone_worst_db": json_db(sensitivity.worst_db),
        "layer_sqnr_db": json_db(report.layer_sqnr_db),
        "remedies": [
            {"remedy": effect.remedy, "alone_worst_db": json_db(effect.worst_db)}
            for effect in report.remedies
        ],
        "recommended": report.recommended,
    }


def analysis_section(diagnosis: Diagnosis) -> dict[str, Any]:
    """JSON-ready analysis: sqnr_db values are null when exact."""
    return {
        "method": diagnosis.method,
        "samples_from": diagnosis.source,
        "subgraphs": [
            {
                "subgraph": sub.subgraph,
                "samples": sub.samples,
                "output_sqnr_db": dict(
                    zip(sub.outputs, map(json_db, sub.output_sqnr), strict=True)
                ),
                "outputs_measured_in": sub.measured_in,
                "weights_alone_sqnr_db": dict(
                    zip(sub.outputs, map(json_db, sub.weights_alone), strict=True)
                ),
                "activations_alone_sqnr_db": dict(
                    zip(sub.outputs, map(json_db, sub.activations_alone), strict=True)
                ),
                "output_samples": sub.output_samples,
                "places": [_place(p, sub.outputs) for p in sub.places],
                "layer_sqnr_db": {name: json_db(v) for name, v in sub.layer_sqnr.items()},
            }
            for sub in diagnosis.subgraphs
        ],
    }

"""The quantization report (`*.report.json`), as defined by `schemas/report.schema.json`."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

from qtool.calibrate.inputs import entry_subgraphs
from qtool.model import Model, dtype_name
from qtool.model.describe import io_details, quant_summary
from qtool.quantize import QuantizeOptions, QuantizeResult
from qtool.quantize.analysis import LayerError
from qtool.quantize.planner import FOR_TARGET
from qtool.quantize.weight_plan import FULL
from qtool.quantize.weight_store import DEQUANTIZED, FLOAT16, HYBRID
from qtool.report.analysis_report import analysis_section
from qtool.report.size_report import size_section, size_warning
from qtool.spec import Mode
from qtool.version import __version__

REPORT_VERSION = 4  # 4: "target" became "sqnr_target"; "device" records --target
FOLDED = "folded"  # an op of the float model computed at build time: no operator remains
INSERTED = "inserted"  # a QUANTIZE qtool added between differently quantized tensors
# How an op of a weight mode reads its weights (`qtool.quantize.weight_store`).
WEIGHT_READS = (HYBRID, DEQUANTIZED, FLOAT16)
REPORTED_MODES = (
    *(m.value for m in (Mode.INT8, Mode.INT16, Mode.FLOAT, Mode.INTEGER)),
    FOLDED,
    *WEIGHT_READS,
)


def file_facts(path: str | Path | None, data: bytes | None = None) -> dict[str, Any]:
    """Path, size and sha256 of a file: read from disk, or given as the bytes about to be
    written there (the report is written together with the model, not after it); the path is
    None for a model only held in memory."""
    if data is not None:
        return {
            "path": None if path is None else str(path),
            "size_bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
    path = Path(path)
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return {"path": str(path), "size_bytes": path.stat().st_size, "sha256": digest.hexdigest()}


def _op_rows(result: QuantizeResult, source: Model) -> list[dict[str, Any]]:
    rows: dict[tuple[int, int], dict[str, Any]] = {}
    for folded in result.folded:
        rows[(folded.subgraph, folded.index)] = {
            "subgraph": folded.subgraph,
            "index": folded.index,
            "op": folded.op_type,
            "mode": FOLDED,
            "reason": "constant inputs: evaluated once and stored as a float constant",
        }
    if result.mode != FULL:
        rows.update(_weight_op_rows(result, source))
        return [rows[key] for key in sorted(rows)]
    inserted: dict[int, int] = {}
    for s, plan in result.plans.items():
        inserted[s] = len(plan.requantized(result.float_model))
        for decision in plan.decisions:
            op = source.subgraphs[s].operators[decision.source_index]
            rewrite = result.rewritten.get((s, decision.source_index))
            reason = decision.reason
            if rewrite is not None:
                reason = "; ".join(filter(None, [f"rewritten as {rewrite.into}", reason]))
            rows[(s, decision.source_index)] = {
                "subgraph": s,
                "index": decision.source_index,
                "op": source.op_type(op),
                "mode": decision.mode,
                "reason": reason,
            }
    ordered = [rows[key] for key in sorted(rows)]
    for s, count in sorted(inserted.items()):
        if not count:
            continue
        ordered.append(
            {
                "subgraph": s,
                "index": None,
                "op": "QUANTIZE",
                "mode": INSERTED,
                "reason": f"{count} requantization(s) in front of ops that need other "
                "parameters (same-scale groups, loop variables)",
            }
        )
    return ordered


def _weight_op_rows(result: QuantizeResult, source: Model) -> dict[tuple[int, int], dict]:
    """The weight modes: every op computes in float; those with weights say how they read
    them (hybrid, weight-only, float16) and in which form, or why they keep float ones."""
    rows = {}
    for s, plan in result.plans.items():
        for decision in plan.decisions:
            op = source.subgraphs[s].operators[decision.source_index]
            rows[(s, decision.source_index)] = {
                "subgraph": s,
                "index": decision.source_index,
                "op": source.op_type(op),
                "mode": Mode.FLOAT.value,
                "reason": None,
            }
    for s, plan in result.weight_plans.items():
        for op in plan.ops:
            row = rows[(s, op.source_index)]
            if op.form is None:
                row["reason"] = op.kept_float or FOR_TARGET
                continue
            row["mode"] = op.form.kind
            row["weights"] = op.form.label() + (", rounding optimised" if op.rounded else "")
            row["reason"] = op.note
    return rows


def _tensor_rows(result: QuantizeResult, source: Model) -> list[dict[str, Any]]:
    rows = []
    for s, subgraph in enumerate(result.model.subgraphs):
        before = {t.name: t for t in source.subgraphs[s].tensors}
        plan = result.plans.get(s)
        calibrated = (
            {}
            if plan is None
            else {
                result.float_model.subgraphs[s].tensors[t].name: span
                for t, span in plan.ranges.items()
            }
        )
        for tensor in subgraph.tensors:
            original = before.get(tensor.name)
            span = calibrated.get(tensor.name)
            rows.append(
                {
                    "subgraph": s,
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


def _calibration_rows(result: QuantizeResult, model: Model) -> list[dict[str, Any]]:
    keys = {sig["subgraph_index"]: sig["signature_key"] for sig in model.signature_defs}
    return [
        {
            "subgraph": s,
            "signature": keys.get(s),
            "samples": c.samples,
            "engine": c.engine,
            "seconds": round(c.seconds, 4),
            "method": result.method,
            "source": c.source,
            "synthetic": c.synthetic,
        }
        for s, c in sorted(result.calibrations.items())
    ]


def _dynamic_input_shapes(result: QuantizeResult) -> dict[str, list[int]]:
    """The shape each input declared dynamic (-1 in its signature) was quantized at (the entry
    subgraphs' in a weight mode, which calibrates none)."""
    model = result.float_model
    return {
        model.subgraphs[s].tensors[t].name: list(model.subgraphs[s].tensors[t].shape)
        for s in sorted(result.calibrations or entry_subgraphs(model))
        for t in model.subgraphs[s].inputs
        if -1 in (model.subgraphs[s].tensors[t].shape_signature or ())
    }


def build_report(
    result: QuantizeResult,
    source: Model,
    options: QuantizeOptions,
    *,
    input_path: str | None,
    output_path: str | None,
    input_data: bytes | None = None,
    output_data: bytes | None = None,
    data_sources: list[str],
    samples_limit: int | None,
    seed: int | None,
    audit: dict[str, Any],
    layer_errors: list[LayerError] = (),
) -> dict[str, Any]:
    """The quantization report of one run (`schemas/report.schema.json`): settings, input and
    output files, calibration, what became of each op and tensor, accuracy, the audit, and the
    sections asked for (target SQNR, analysis, layer errors)."""
    input_file = file_facts(input_path, input_data)
    output_file = file_facts(output_path, output_data)
    size = size_section(source, input_file["size_bytes"], result.model, output_file["size_bytes"])
    warnings = [*result.warnings, *filter(None, [size_warning(size)])]
    return {
        "report_version": REPORT_VERSION,
        "qtool_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "settings": {
            "io": options.io,
            "per_tensor_fc": options.per_tensor_fc,
            "keep_float": list(options.keep_float),
            "sparsify": options.sparsify,
            "engine": options.engine,
            "calibration": options.calibration,
            "bias_correction": options.bias_correction,  # null: chosen (see recipe)
            "activations": options.activations,
            "int16": list(options.int16),
            "optimize_rounding": options.optimize_rounding,
            "equalize": options.equalize,
            "target_sqnr": options.target_sqnr,
            "device": options.target,
            "allow_float": options.allow_float,
            "mode": options.mode,
            "weight_bits": options.weight_bits,
            "block_size": options.block_size,
            "min_weight_elements": options.min_weight_elements,
            "metric": metric_name(options.metric),
            "target_metric": options.target_metric,
            "data": data_sources,
            "synthetic": result.synthetic or any(c.synthetic for c in result.calibrations.values()),
            "samples_limit": samples_limit,
            "seed": seed,
            "input_shapes": _dynamic_input_shapes(result),
        },
        "input_model": input_file,
        "output_model": output_file,
        "size": size,
        "calibration": _calibration_rows(result, source),
        "io": [
            {"subgraph": s, **row}
            for s in sorted(result.calibrations or {0})  # the weight modes calibrate none
            for row in io_details(result.model, s)
        ],
        "ops": _op_rows(result, source),
        "float_ops": [
            {"subgraph": f.subgraph, "index": f.index, "op": f.op_type, "reason": f.reason}
            for f in result.float_ops
        ],
        "tensors": _tensor_rows(result, source),
        "enlarged_weight_scales": result.notes.enlarged_weight_scales,
        "warnings": warnings,
        "accuracy": accuracy_section(result),
        "recipe": recipe_section(result),
        "equalized": [pair.to_dict() for pair in result.equalized],
        "sqnr_target": target_section(result, options, input_file, output_file),
        "device": device_section(options),
        "analysis": None if result.diagnosis is None else analysis_section(result.diagnosis),
        "audit": audit,
        "layer_errors": [
            {
                "subgraph": e.subgraph,
                "tensor": e.tensor,
                "op": e.op,
                "sqnr_db": None if e.sqnr_db == float("inf") else round(e.sqnr_db, 3),
            }
            for e in layer_errors
        ],
    }


def _names(result: QuantizeResult, s: int, tensors=(), ops=()) -> list[str]:
    graph = result.float_model.subgraphs[s]
    named = [graph.tensors[t].name for t in sorted(tensors)]
    named += [graph.tensors[graph.operators[i].outputs[0]].name for i in sorted(ops)]
    return named


def recipe_section(result: QuantizeResult) -> list[dict[str, Any]]:
    """Per subgraph, the choices that made the plan (what auto, rounding and a target chose)."""
    rows = []
    for s, recipe in sorted(result.recipes.items()):
        rows.append(
            {
                "subgraph": s,
                "method": str(recipe.method),
                "bias_correction": recipe.bias_correction,
                "rounding_optimized": _names(result, s, ops=recipe.rounding_ops),
                "int16_tensors": _names(result, s, tensors=recipe.int16_tensors),
                "float_for_target": _names(result, s, ops=recipe.float_ops),
            }
        )
    return rows


def metric_name(metric) -> str | None:
    """How the report names the user's metric: its `module:function`, or a callable's name."""
    if metric is None or isinstance(metric, str):
        return metric
    return getattr(metric, "__qualname__", None) or type(metric).__name__


def device_section(options: QuantizeOptions) -> dict[str, Any] | None:
    """The device profile a --target run planned for (schemas/targets/), or None."""
    if options.target is None:
        return None
    from qtool.targets import load_target

    profile = load_target(options.target)
    return {
        "name": profile.name,
        "title": profile.title,
        "spec_profiles": list(profile.spec_profiles),
    }


def target_section(
    result: QuantizeResult,
    options: QuantizeOptions,
    input_file: dict[str, Any] | None = None,
    output_file: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """The report's target section: the target, whether each subgraph reached it (on the
    search's samples, and confirmed on samples no choice saw), the remedies applied, what the
    result costs (bytes against the float model's, ops per precision) and what the search took
    (seconds, candidates, budget); None without a target. In a weight mode the remedies are
    the ops given wider weights than asked, or float ones."""
    if options.accuracy_target is None:
        return None
    confirmed = result.target_confirmed
    modes = [d.mode for plan in result.plans.values() for d in plan.decisions]
    searches = result.searches.values()
    remedies = _remedy_rows if result.mode == FULL else _weight_remedy_rows
    return {
        "sqnr_db": options.target_sqnr,
        "metric": options.target_metric,
        "allow_float": options.allow_float,
        "size_bytes": None if output_file is None else output_file["size_bytes"],
        "float_model_bytes": None if input_file is None else input_file["size_bytes"],
        "ops": {m.value: modes.count(m) for m in (Mode.INT8, Mode.INT16, Mode.FLOAT)},
        "seconds": round(sum(s.seconds for s in searches), 3),
        "budget_seconds": max((s.budget or 0.0 for s in searches), default=None) or None,
        "candidates": sum(s.candidates for s in searches),
        "reached": all(
            search.reached and confirmed.get(s, False) for s, search in result.searches.items()
        ),
        "size_without_remedies_bytes": result.baseline_size,
        "subgraphs": [
            {
                "subgraph": s,
                "reached": search.reached and confirmed.get(s, False),
                "search_reached": search.reached,
                "stopped": search.stopped,
                "candidates": search.candidates,
                "seconds": round(search.seconds, 3),
                "confirmed": confirmed.get(s, False),
                "output_sqnr_db": [_db(v) for v in search.output_sqnr],
                "metric": search.metric,
                "remedies": remedies(result, s, search),
            }
            for s, search in sorted(result.searches.items())
        ],
    }


def _remedy_rows(result: QuantizeResult, s: int, search) -> list[dict[str, Any]]:
    return [
        {
            "kind": remedy.kind,
            "place": remedy.place.kind,
            "op_index": result.plans[s].decisions[remedy.place.op_index].source_index
            if remedy.place.op_index >= 0
            else None,
            "op": remedy.op_type,
            "tensor": remedy.name,
            "alone_sqnr_db": _db(remedy.share_db),
        }
        for remedy in search.remedies
    ]


def _weight_remedy_rows(result: QuantizeResult, s: int, search) -> list[dict[str, Any]]:
    return [
        {
            "kind": change.kind,
            "place": "weights",
            "op_index": change.op_index,
            "op": change.op_type,
            "tensor": change.tensor,
            "alone_sqnr_db": _db(change.alone_sqnr_db),
            "subgraph": change.subgraph,
            "asked": change.asked,
            "chosen": change.chosen,
        }
        for change in search.changes
    ]


def accuracy_section(result: QuantizeResult) -> dict[str, Any]:
    """How close the quantized model is to the float one on samples no choice saw."""
    return {
        "source": result.accuracy_source or None,
        "independent": result.estimate_independent,
        "method": result.method,
        "method_scores_db": {m: _db(v) for m, v in result.method_scores.items()},
        "method_metrics": dict(result.method_metrics),
        "metric": [{"subgraph": s, "value": v} for s, v in sorted(result.metric.items())],
        "outputs": [a.to_dict() for a in result.accuracy],
        "simulation_check": [c.to_dict() for c in result.simulation_checks],
    }


def _db(value: float) -> float | None:
    return None if value == float("inf") else round(value, 3)


def summary_counts(report: dict[str, Any]) -> dict[str, int]:
    """How many of the report's operator rows compute in each mode."""
    modes = [row["mode"] for row in report["ops"]]
    return {mode: modes.count(mode) for mode in REPORTED_MODES}

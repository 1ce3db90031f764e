"""Audit models against the int8 spec: every finding, never stopping at the first.

With a target (`schemas/targets/NAME.json`) the audit also says where each op runs on that device;
with an accuracy gate it compares the model's outputs with its float reference.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

from qtool.check.context import AuditContext
from qtool.check.families import FAMILIES, GATE, VALIDITY
from qtool.check.findings import Finding, ModelResult
from qtool.check.gates import AccuracyGate, accuracy_findings, target_findings
from qtool.check.severities import OFF, rule_severities
from qtool.check.weight_rules import weight_forms
from qtool.errors import QtoolError
from qtool.model import Model, load_model
from qtool.model.validate import operator_list

__all__ = ["AccuracyGate", "ModelResult", "audit_model", "check_loaded", "check_paths"]


def audit_model(
    model: Model, profiles: tuple[str, ...] = (), target: str | None = None
) -> list[Finding]:
    """All findings of `model` under the spec `profiles` (and on `target`), in graph order."""
    return check_loaded(model, profiles, target).findings


def _validity_findings(model: Model, severity: dict[str, str]) -> list[Finding]:
    """Why a model that decodes is not a valid graph (the other rules would not make sense)."""
    return sorted(VALIDITY.run(model, severity), key=Finding.sort_key)


def _spec_findings(
    model: Model, severity: dict[str, str], profiles: tuple[str, ...]
) -> tuple[list[Finding], dict[str, dict[str, int]] | None]:
    """The findings of the spec's rules, and how the model stores narrow weights (hybrid,
    weight-only, float16: `weight_rules.weight_forms`)."""
    ctx = AuditContext(model, severity, profiles)
    findings = list(GATE.run(ctx))
    if not findings:
        for family in FAMILIES:
            findings += _once_per_tensor(family.run(ctx)) if family.per_tensor else family.run(ctx)
    return findings, weight_forms(ctx)


def check_loaded(
    model: Model,
    profiles: tuple[str, ...] = (),
    target: str | None = None,
    accuracy: AccuracyGate | None = None,
    path: str = "",
) -> ModelResult:
    """The audit of one loaded model: spec findings, target placement, accuracy against a
    float reference (`accuracy`)."""
    profiles = tuple(profiles)
    if target is not None:
        # Imported here, like the accuracy gate below: a plain audit does not load them.
        from qtool.targets.placement import checked_target, place_model

        profiles += tuple(p for p in checked_target(target).spec_profiles if p not in profiles)
    severity = rule_severities(profiles)
    result = ModelResult(path=path, operators=operator_list(model))
    invalid = _validity_findings(model, severity)
    if invalid:
        result.findings = invalid
        return result
    findings, result.weights = _spec_findings(model, severity, profiles)
    if target is not None:
        report = place_model(model, target)
        findings += target_findings(report, severity)
        result.target = report.to_dict()
    if accuracy is not None:
        # Imported here: calibration data and the numpy engine are needed by the gate only.
        from qtool.calibrate import Dataset, load_dataset, model_inputs
        from qtool.calibrate.shapes import shaped_model
        from qtool.evaluate import compare_models

        reference = (
            accuracy.reference
            if isinstance(accuracy.reference, Model)
            else load_model(accuracy.reference)
        )
        if not isinstance(accuracy.data, Dataset):  # a dynamic input runs at the data's shape
            reference = shaped_model(
                reference,
                data_for=lambda s, specs: (
                    load_dataset(list(accuracy.data), specs) if s == 0 else None
                ),
            )
        data = (
            accuracy.data
            if isinstance(accuracy.data, Dataset)
            else load_dataset(list(accuracy.data), model_inputs(reference))
        )
        from qtool.quantize.user_metric import as_metric

        metric = as_metric(accuracy.metric)
        comparison = compare_models(reference, model, data, accuracy.engine, metric)
        findings += accuracy_findings(
            comparison,
            accuracy.min_sqnr,
            severity,
            accuracy.min_metric,
            "metric" if metric is None else f"metric {metric.label}",
        )
        result.accuracy = {
            **comparison.to_dict(),
            "min_sqnr": accuracy.min_sqnr,
            "min_metric": accuracy.min_metric,
        }
    result.findings = sorted((f for f in findings if f.severity != OFF), key=Finding.sort_key)
    return result


def _once_per_tensor(findings: Iterable[Finding]) -> list[Finding]:
    seen: set[tuple] = set()
    kept = []
    for finding in findings:
        key = (finding.rule, finding.subgraph, finding.tensor_index)
        if key not in seen:
            seen.add(key)
            kept.append(finding)
    return kept


def check_paths(
    paths: Iterable[str | os.PathLike],
    profiles: tuple[str, ...] = (),
    target: str | None = None,
    accuracy: AccuracyGate | None = None,
) -> list[ModelResult]:
    """Audit each model file; an unreadable one gets its error and the others are still checked.

    A file that decodes but is not a valid graph is audited too: its problems are findings.
    """
    results = []
    for path in paths:
        start = time.perf_counter()
        try:
            model = load_model(path, validate=False)
        except QtoolError as exc:
            result = ModelResult(path=str(path), error=str(exc))
        else:
            result = check_loaded(model, profiles, target, accuracy, path=str(path))
        result.seconds = time.perf_counter() - start
        results.append(result)
    return results

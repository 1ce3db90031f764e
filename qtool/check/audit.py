"""Audit models against the int8 spec: every finding, never stopping at the first."""

from __future__ import annotations

import os
from collections.abc import Iterable

from qtool.check.config import OFF
from qtool.check.context import AuditContext
from qtool.check.findings import Finding, ModelResult
from qtool.check.registry import FAMILIES, GATE, VALIDITY
from qtool.errors import QtoolError
from qtool.model import Model, load_model
from qtool.model.validate import operator_list

__all__ = ["ModelResult", "audit_model", "check_paths"]


def audit_model(model: Model, profiles: tuple[str, ...] = ()) -> list[Finding]:
    """All findings of `model` under the target `profiles`, in graph order."""
    invalid = list(VALIDITY.run(model, tuple(profiles)))
    if invalid:
        return sorted(invalid, key=Finding.sort_key)
    ctx = AuditContext(model, tuple(profiles))
    findings = list(GATE.run(ctx))
    if not findings:
        for family in FAMILIES:
            findings += _once_per_tensor(family.run(ctx)) if family.per_tensor else family.run(ctx)
    return sorted((f for f in findings if f.severity != OFF), key=Finding.sort_key)


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
    paths: Iterable[str | os.PathLike], profiles: tuple[str, ...] = ()
) -> list[ModelResult]:
    """Audit each model file; an unreadable one gets its error and the others are still checked.

    A file that decodes but is not a valid graph is audited too: its problems are findings.
    """
    results = []
    for path in paths:
        try:
            model = load_model(path, validate=False)
        except QtoolError as exc:
            results.append(ModelResult(path=str(path), error=str(exc)))
            continue
        operators = operator_list(model)
        results.append(
            ModelResult(path=str(path), findings=audit_model(model, profiles), operators=operators)
        )
    return results

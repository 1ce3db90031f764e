"""The JSON report of `qtool check` (schemas/check.schema.json); also the baseline file format.

Findings left out by ignores or a baseline are listed apart (`suppressed`, each with what left
it out), so that the report keeps a record of everything the audit found."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from qtool.check.findings import ModelResult
from qtool.version import __version__


def to_json(results: Sequence[ModelResult], profiles: Sequence[str] = ()) -> dict[str, Any]:
    """`qtool check --format json`: each model's findings, summary and, when asked for, target
    placement and accuracy, with totals over the models."""
    models = [
        {
            "path": result.path,
            "error": result.error,
            "operators": len(result.operators),
            "findings": [finding.to_dict() for finding in result.findings],
            "suppressed": [suppressed.to_dict() for suppressed in result.suppressed],
            "summary": result.summary,
            **({"weights": result.weights} if result.weights is not None else {}),
            **({"target": result.target} if result.target is not None else {}),
            **({"accuracy": result.accuracy} if result.accuracy is not None else {}),
        }
        for result in results
    ]
    totals = {
        key: sum(m["summary"][key] for m in models) for key in ("errors", "warnings", "infos")
    }
    return {
        "tool": {"name": "qtool", "version": __version__},
        "profiles": list(profiles),
        "models": models,
        "summary": {
            "models": len(models),
            "unreadable": sum(result.error is not None for result in results),
            **totals,
            "suppressed": sum(len(result.suppressed) for result in results),
        },
    }

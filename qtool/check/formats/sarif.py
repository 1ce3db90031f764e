"""SARIF 2.1.0 for code scanning (GitHub, GitLab, Azure DevOps), valid against the OASIS schema.

Each result points at the model file (a binary artifact: the region is its first "line", which is
what GitHub needs to place an alert) and, as logical locations, at the operator and the tensor.
`partialFingerprints` hash what the finding is about (model, rule, op type, role, tensor name), so
code scanning keeps one alert per problem across runs even when operator indices shift. Findings
an ignore or a baseline left out are results with `suppressions` (kind external, accepted, the
justification naming the ignore or the baseline).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from qtool.check.findings import Finding, ModelResult
from qtool.check.rulebook import RuleInfo
from qtool.check.rules import RULES
from qtool.check.severities import OFF, rule_severities
from qtool.check.suppress import fingerprint
from qtool.version import __version__

SARIF_SCHEMA = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)
SARIF_LEVELS = {"error": "error", "warning": "warning", "info": "note", OFF: "none"}
# The specification every rule is a part of; qtool has no web home of its own yet.
SPEC_URI = "https://ai.google.dev/edge/litert/models/quantization_spec"
FINGERPRINT = "qtoolFinding/v1"


def _uri(path: str) -> str:
    p = Path(path)
    return p.as_uri() if p.is_absolute() else quote(p.as_posix())


def _logical_locations(finding: Finding) -> list[dict[str, str]]:
    """The operator ("function") and the tensor ("variable") the finding is about."""
    if finding.subgraph is None:
        return []
    path = [f"subgraph[{finding.subgraph}]"]
    locations = []
    if finding.op_index is not None:
        path.append(f"op[{finding.op_index}]:{finding.op}")
        locations.append(
            {"name": path[-1], "fullyQualifiedName": "::".join(path), "kind": "function"}
        )
    if finding.tensor is not None:
        path.append(f"{finding.role or 'tensor'}:{finding.tensor}")
        locations.append(
            {"name": finding.tensor, "fullyQualifiedName": "::".join(path), "kind": "variable"}
        )
    if not locations:
        locations.append({"name": path[0], "fullyQualifiedName": path[0], "kind": "module"})
    return locations


def _rule(rule: RuleInfo, severity: str) -> dict[str, Any]:
    device = f" On a device: {rule.on_device}" if rule.on_device else ""
    markdown = f"**{rule.title}**\n\n{rule.help}" + (
        f"\n\n*On a device:* {rule.on_device}" if rule.on_device else ""
    )
    return {
        "id": rule.id,
        "name": rule.id.partition("-")[2].title().replace("-", ""),
        "shortDescription": {"text": rule.title},
        "fullDescription": {"text": rule.help + device},
        "help": {"text": rule.help + device, "markdown": markdown},
        "helpUri": SPEC_URI,
        "defaultConfiguration": {"level": SARIF_LEVELS[severity], "enabled": severity != OFF},
    }


def _result(
    path: str, finding: Finding, artifact: dict[str, Any], rule_index: int
) -> dict[str, Any]:
    location: dict[str, Any] = {
        "physicalLocation": {"artifactLocation": artifact, "region": {"startLine": 1}}
    }
    logical = _logical_locations(finding)
    if logical:
        location["logicalLocations"] = logical
    properties = {
        k: v
        for k, v in finding.to_dict().items()
        if k not in ("rule", "severity", "message") and v is not None
    }
    return {
        "ruleId": finding.rule,
        "ruleIndex": rule_index,
        "level": SARIF_LEVELS[finding.severity],
        "message": {"text": finding.message},
        "locations": [location],
        "partialFingerprints": {FINGERPRINT: fingerprint(path, finding)},
        "properties": properties,
    }


def to_sarif(results: Sequence[ModelResult], profiles: Sequence[str] = ()) -> dict[str, Any]:
    """`qtool check --format sarif`: a SARIF 2.1.0 log, one result per finding (with a stable
    fingerprint) and a notification per unreadable model."""
    severity = rule_severities(tuple(profiles))
    rule_index = {rule_id: index for index, rule_id in enumerate(RULES)}
    artifacts, sarif_results, notifications = [], [], []
    for index, result in enumerate(results):
        artifact = {"uri": _uri(result.path), "index": index}
        artifacts.append({"location": {"uri": artifact["uri"]}, "roles": ["analysisTarget"]})
        if result.error is not None:
            notifications.append(
                {
                    "level": "error",
                    "message": {"text": result.error},
                    "locations": [{"physicalLocation": {"artifactLocation": artifact}}],
                }
            )
        sarif_results += [
            _result(result.path, f, artifact, rule_index[f.rule]) for f in result.findings
        ]
        # Suppressed findings stay results, marked so: code scanning shows them as dismissed,
        # and the log keeps a record of what an ignore or a baseline left out.
        for suppressed in result.suppressed:
            finding = suppressed.finding
            entry = _result(result.path, finding, artifact, rule_index[finding.rule])
            entry["suppressions"] = [
                {"kind": "external", "status": "accepted", "justification": suppressed.source}
            ]
            sarif_results.append(entry)
    driver = {
        "name": "qtool",
        "version": __version__,
        "semanticVersion": __version__,
        "informationUri": SPEC_URI,
        "rules": [_rule(rule, severity[rule.id]) for rule in RULES.values()],
    }
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": driver},
                "invocations": [
                    {
                        "executionSuccessful": not notifications,
                        "toolExecutionNotifications": notifications,
                    }
                ],
                "artifacts": artifacts,
                "results": sarif_results,
                "properties": {
                    "profiles": list(profiles),
                    "models": [
                        {"path": r.path, "target": r.target, "accuracy": r.accuracy}
                        for r in results
                        if r.target is not None or r.accuracy is not None
                    ],
                },
            }
        ],
    }

"""Reports of `qtool check`: rich text, JSON (schemas/check.schema.json), JUnit XML, SARIF 2.1.0."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from rich.console import Console
from rich.table import Table
from rich.text import Text

from qtool import __version__
from qtool.check.config import OFF, load_settings
from qtool.check.findings import Finding, ModelResult
from qtool.check.rules import RULES

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_LEVELS = {"error": "error", "warning": "warning", "info": "note", OFF: "none"}
_STYLES = {"error": "bold red", "warning": "yellow", "info": "cyan"}

# --------------------------------------------------------------------------- text


def summary_line(result: ModelResult) -> str:
    if result.error is not None:
        # Load errors already name the file; do not repeat it.
        return f"{result.path}: cannot read: {result.error.removeprefix(result.path + ': ')}"
    counts = result.summary
    return (
        f"{result.path}: {counts['errors']} error{'s' * (counts['errors'] != 1)}, "
        f"{counts['warnings']} warning{'s' * (counts['warnings'] != 1)}, "
        f"{counts['infos']} info"
    )


def target_line(target: dict[str, Any]) -> str:
    share = target["mac_share"]
    macs = "no MACs" if share is None else f"{share:.1%} of {target['macs']:,} MACs"
    return (
        f"target {target['target']}: {target['on_target']} of {target['ops']} ops ({macs}) run "
        f"on the {target['accelerator']}, {target['fallback']} fall back to the CPU, "
        f"{target['cannot_run']} cannot run"
    )


def accuracy_line(accuracy: dict[str, Any]) -> str:
    worst = min((o["sqnr_db"] for o in accuracy["outputs"]), default=float("inf"))
    return (
        f"accuracy: worst output SQNR {worst:.2f} dB (min-sqnr {accuracy['min_sqnr']:g}) over "
        f"{accuracy['samples']} samples, quantized model "
        f"{'run in LiteRT' if accuracy['engine'] == 'litert' else 'simulated'}"
    )


def extra_lines(result: ModelResult) -> list[str]:
    """The target and accuracy summaries of a model, when they were asked for."""
    lines = []
    if result.target is not None:
        lines.append(target_line(result.target))
    if result.accuracy is not None:
        lines.append(accuracy_line(result.accuracy))
    return lines


def _where(finding: Finding) -> str:
    if finding.subgraph is None:
        return "model"
    if finding.op_index is None:
        return f"subgraph {finding.subgraph}"
    return f"{finding.subgraph}:{finding.op_index} {finding.op}"


def _operand(finding: Finding) -> str:
    if finding.tensor is None:
        return ""
    return f"{finding.role or 'tensor'} '{finding.tensor}'"


def render_text(results: Sequence[ModelResult], console: Console, quiet: bool = False) -> None:
    """A findings table per model (unless `quiet`) and one summary line per model."""
    for result in results:
        if result.findings and not quiet:
            # Text cells throughout: paths and tensor names may contain "[...]", not markup.
            table = Table(title=Text(result.path), title_justify="left", expand=True)
            table.add_column("severity", no_wrap=True)
            table.add_column("rule", no_wrap=True)
            table.add_column("op", no_wrap=True)
            table.add_column("operand", ratio=2, overflow="fold")
            table.add_column("message", ratio=3)
            for finding in result.findings:
                table.add_row(
                    Text(finding.severity, style=_STYLES[finding.severity]),
                    *(
                        Text(cell)
                        for cell in (
                            finding.rule,
                            _where(finding),
                            _operand(finding),
                            finding.message,
                        )
                    ),
                )
            console.print(table)
        style = (
            "bold red"
            if result.error or result.summary["errors"]
            else ("yellow" if result.summary["warnings"] else "green")
        )
        console.print(Text(summary_line(result), style=style), soft_wrap=True)
        for line in extra_lines(result):
            console.print(Text(f"  {line}"), soft_wrap=True)


def to_text(results: Sequence[ModelResult], quiet: bool = False, width: int = 160) -> str:
    """The text report as plain text (no colour), e.g. for a file."""
    buffer = io.StringIO()
    render_text(
        results, Console(file=buffer, width=width, color_system=None, highlight=False), quiet=quiet
    )
    return buffer.getvalue()


# --------------------------------------------------------------------------- JSON


def to_json(results: Sequence[ModelResult], profiles: Sequence[str] = ()) -> dict[str, Any]:
    models = [
        {
            "path": result.path,
            "error": result.error,
            "operators": len(result.operators),
            "findings": [finding.to_dict() for finding in result.findings],
            "summary": result.summary,
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
        },
    }


# --------------------------------------------------------------------------- JUnit


def _finding_line(finding: Finding) -> str:
    operand = _operand(finding)
    return (
        f"{finding.severity} {finding.rule}{': ' + operand if operand else ''}: {finding.message}"
    )


def _testcase(suite: ET.Element, classname: str, name: str, findings: list[Finding]) -> bool:
    """Add one test case; errors become its failure. Returns whether it failed."""
    case = ET.SubElement(suite, "testcase", name=name, classname=classname)
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        failure = ET.SubElement(
            case, "failure", type=errors[0].rule, message=f"{errors[0].rule}: {errors[0].message}"
        )
        failure.text = "\n".join(_finding_line(f) for f in errors)
    others = [f for f in findings if f.severity != "error"]
    if others:
        ET.SubElement(case, "system-out").text = "\n".join(_finding_line(f) for f in others)
    return bool(errors)


def _properties(suite: ET.Element, result: ModelResult) -> None:
    """Target placement and accuracy summaries as suite properties (CI dashboards show them)."""
    values: dict[str, Any] = {}
    if result.target is not None:
        values.update({f"target.{k}": v for k, v in result.target.items() if k != "placement"})
    if result.accuracy is not None:
        values["accuracy.samples"] = result.accuracy["samples"]
        values["accuracy.engine"] = result.accuracy["engine"]
        for output in result.accuracy["outputs"]:
            values[f"accuracy.sqnr_db.{output['name']}"] = round(output["sqnr_db"], 3)
            if output["top1"] is not None:
                values[f"accuracy.top1.{output['name']}"] = output["top1"]
    if values:
        properties = ET.SubElement(suite, "properties")
        for name, value in values.items():
            ET.SubElement(properties, "property", name=name, value=str(value))


def to_junit(results: Sequence[ModelResult]) -> str:
    """One test suite per model, one test case per op plus one for model-level findings."""
    root = ET.Element("testsuites", name="qtool check")
    totals = {"tests": 0, "failures": 0, "errors": 0}
    for result in results:
        suite = ET.SubElement(root, "testsuite", name=result.path)
        _properties(suite, result)
        counts = {"tests": 0, "failures": 0, "errors": 0}
        if result.error is not None:
            case = ET.SubElement(suite, "testcase", name="load model", classname=result.path)
            ET.SubElement(case, "error", type="unreadable", message=result.error)
            counts.update(tests=1, errors=1)
        else:
            by_op: dict[tuple[int, int] | None, list[Finding]] = {}
            for finding in result.findings:
                key = (finding.subgraph, finding.op_index) if finding.op_index is not None else None
                by_op.setdefault(key, []).append(finding)
            cases = [("model", by_op.get(None, []))]
            cases += [
                (f"subgraph {s} op {i} {op_type}", by_op.get((s, i), []))
                for s, i, op_type in result.operators
            ]
            for name, findings in cases:
                counts["failures"] += _testcase(suite, result.path, name, findings)
            counts["tests"] = len(cases)
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
        suite.set("skipped", "0")
    for key, value in totals.items():
        root.set(key, str(value))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


# --------------------------------------------------------------------------- SARIF


def _uri(path: str) -> str:
    p = Path(path)
    return p.as_uri() if p.is_absolute() else quote(p.as_posix())


def _logical_location(finding: Finding) -> dict[str, str] | None:
    if finding.subgraph is None:
        return None
    parts = [f"subgraph[{finding.subgraph}]"]
    if finding.op_index is not None:
        parts.append(f"op[{finding.op_index}]:{finding.op}")
    if finding.tensor is not None:
        parts.append(f"{finding.role or 'tensor'}:{finding.tensor}")
        name, kind = finding.tensor, "variable"
    elif finding.op_index is not None:
        name, kind = f"op[{finding.op_index}]:{finding.op}", "function"
    else:
        name, kind = parts[0], "module"
    return {"name": name, "fullyQualifiedName": "::".join(parts), "kind": kind}


def to_sarif(results: Sequence[ModelResult], profiles: Sequence[str] = ()) -> dict[str, Any]:
    severity = load_settings(tuple(profiles)).severity
    rule_ids = list(RULES)
    rules = [
        {
            "id": rule.id,
            "name": rule.id.removeprefix("QT-").title().replace("-", ""),
            "shortDescription": {"text": rule.title},
            "fullDescription": {
                "text": rule.help + (f" On a device: {rule.on_device}" if rule.on_device else "")
            },
            "help": {"text": rule.help},
            "defaultConfiguration": {
                "level": SARIF_LEVELS[severity[rule.id]],
                "enabled": severity[rule.id] != OFF,
            },
        }
        for rule in RULES.values()
    ]
    artifacts, sarif_results, notifications = [], [], []
    for index, result in enumerate(results):
        artifact = {"uri": _uri(result.path), "index": index}
        artifacts.append({"location": {"uri": artifact["uri"]}})
        if result.error is not None:
            notifications.append(
                {
                    "level": "error",
                    "message": {"text": result.error},
                    "locations": [{"physicalLocation": {"artifactLocation": artifact}}],
                }
            )
        for finding in result.findings:
            location: dict[str, Any] = {"physicalLocation": {"artifactLocation": artifact}}
            logical = _logical_location(finding)
            if logical is not None:
                location["logicalLocations"] = [logical]
            properties = {
                k: v
                for k, v in finding.to_dict().items()
                if k not in ("rule", "severity", "message") and v is not None
            }
            sarif_results.append(
                {
                    "ruleId": finding.rule,
                    "ruleIndex": rule_ids.index(finding.rule),
                    "level": SARIF_LEVELS[finding.severity],
                    "message": {"text": finding.message},
                    "locations": [location],
                    "properties": properties,
                }
            )
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {"name": "qtool", "version": __version__, "rules": rules}},
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


def render_rules(console: Console) -> None:
    """The rule catalogue: id, default severity, what it checks and why it matters."""
    table = Table(title="qtool check rules", title_justify="left", show_lines=True)
    for column in ("rule", "severity", "checks"):
        table.add_column(column, overflow="fold")
    for rule in RULES.values():
        device = f"\n[italic]On a device: {rule.on_device}[/]" if rule.on_device else ""
        table.add_row(rule.id, rule.severity, f"{rule.title}\n[dim]{rule.help}[/]{device}")
    console.print(table)

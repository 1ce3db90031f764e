"""JUnit XML for CI test reports (Jenkins, GitLab, Azure...): the Jenkins `junit-10.xsd` dialect.

One test suite per model. Every finding is a test case of its own, failed exactly when its
severity is at or above `fail_on` (so the report is red exactly when the exit code is 1);
findings below stay passing cases with the finding in their output; an operator without findings
is one passing case; a finding an ignore or a baseline left out is a skipped case saying which. A
model that cannot be read is one case in error.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import PurePath
from typing import Any

from qtool.check.findings import SEVERITY_RANK, Finding, ModelResult
from qtool.check.formats.text import location
from qtool.check.rules import RULES
from qtool.display import printable


def classname(path: str) -> str:
    """The model path without its extension, dots as underscores: JUnit readers split class
    names at dots (Jenkins would show `models/net.tflite` as package `models/net`, class
    `tflite`)."""
    return PurePath(path).with_suffix("").as_posix().replace(".", "_")


def _seconds(value: float) -> str:
    return f"{value:.3f}"


def _rule_text(rule_id: str) -> str:
    rule = RULES.get(rule_id)
    if rule is None:
        return rule_id
    device = f"\nOn a device: {rule.on_device}" if rule.on_device else ""
    return f"{rule.id}: {rule.title}.\n{rule.help}{device}"


def _case_name(finding: Finding) -> str:
    return printable(
        f"{location(finding)} {finding.rule}" + (f" ({finding.role})" if finding.role else "")
    )


def _model_cases(result: ModelResult) -> list[tuple[str, list[Finding]]]:
    """(case name, findings) per place in the model, in graph order: "model", then each op."""
    by_place: dict[tuple[int, int] | None, list[Finding]] = {}
    for finding in result.findings:
        key = (finding.subgraph, finding.op_index) if finding.op_index is not None else None
        by_place.setdefault(key, []).append(finding)
    places = [("model", by_place.pop(None, []))]
    places += [
        (printable(f"subgraph {s} op {i} {op_type}"), by_place.pop((s, i), []))
        for s, i, op_type in result.operators
    ]
    # A result built without its operator list (e.g. by hand) still reports every finding.
    places += [(printable(location(fs[0])), fs) for fs in by_place.values()]
    return places


def _suite(root: ET.Element, result: ModelResult, threshold: int) -> dict[str, int]:
    suite = ET.SubElement(
        root, "testsuite", name=printable(result.path), file=printable(result.path)
    )
    _properties(suite, result)
    name = classname(printable(result.path))
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    cases: list[ET.Element] = []
    if result.error is not None:
        case = ET.SubElement(suite, "testcase", name="read model", classname=name)
        ET.SubElement(case, "error", type="unreadable", message=printable(result.error))
        cases.append(case)
        counts["errors"] = 1
    else:
        for place, findings in _model_cases(result):
            if not findings:
                cases.append(ET.SubElement(suite, "testcase", name=place, classname=name))
            for finding in findings:
                case = ET.SubElement(suite, "testcase", name=_case_name(finding), classname=name)
                cases.append(case)
                if SEVERITY_RANK[finding.severity] >= threshold:
                    failure = ET.SubElement(
                        case, "failure", type=finding.rule, message=printable(finding.message)
                    )
                    failure.text = _rule_text(finding.rule)
                    counts["failures"] += 1
                else:
                    out = ET.SubElement(case, "system-out")
                    out.text = f"{finding.severity}: {printable(finding.message)}\n\n{_rule_text(finding.rule)}"
    for suppressed in result.suppressed:
        case = ET.SubElement(suite, "testcase", name=_case_name(suppressed.finding), classname=name)
        ET.SubElement(
            case,
            "skipped",
            type=suppressed.kind,
            message=printable(f"suppressed by {suppressed.source}: {suppressed.finding.message}"),
        )
        cases.append(case)
        counts["skipped"] += 1
    counts["tests"] = len(cases)
    # The audit is one unit of work: its time is on the first case, so the cases add up.
    for index, case in enumerate(cases):
        case.set("time", _seconds(result.seconds if index == 0 else 0.0))
    for key, value in counts.items():
        suite.set(key, str(value))
    suite.set("time", _seconds(result.seconds))
    return counts


def _properties(suite: ET.Element, result: ModelResult) -> None:
    """Target placement and accuracy summaries as suite properties (CI dashboards show them)."""
    values: dict[str, Any] = {}
    if result.target is not None:
        values.update({f"target.{k}": v for k, v in result.target.items() if k != "placement"})
    if result.accuracy is not None:
        values["accuracy.samples"] = result.accuracy["samples"]
        values["accuracy.engine"] = result.accuracy["engine"]
        for output in result.accuracy["outputs"]:
            values[f"accuracy.kind.{output['name']}"] = output["kind"]
            values[f"accuracy.sqnr_db.{output['name']}"] = output["fitting_sqnr_db"]
            for measure, value in output["measures"].items():
                values[f"accuracy.{measure}.{output['name']}"] = value
        if result.accuracy.get("metric") is not None:
            values["accuracy.metric"] = result.accuracy["metric"]
    if values:
        properties = ET.SubElement(suite, "properties")
        for name, value in values.items():
            ET.SubElement(properties, "property", name=printable(name), value=str(value))


def to_junit(results: Sequence[ModelResult], fail_on: str = "error") -> str:
    """The JUnit XML document; findings at or above severity `fail_on` are failures."""
    threshold = SEVERITY_RANK[fail_on]
    root = ET.Element("testsuites", name="qtool check")
    totals = {"tests": 0, "failures": 0, "errors": 0}  # junit-10.xsd: no skipped total
    for result in results:
        counts = _suite(root, result, threshold)
        for key in totals:
            totals[key] += counts[key]
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", _seconds(sum(result.seconds for result in results)))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"

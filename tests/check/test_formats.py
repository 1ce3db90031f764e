"""Report formats: JSON against its schema, JUnit XML, SARIF 2.1.0, text."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from qtool.check import RULES, check_paths
from qtool.check.formats import to_json, to_junit, to_sarif, to_text

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "schemas" / "check.schema.json").read_text()
)
ORDER = ("clean", "errors", "warnings", "float", "unreadable")


@pytest.fixture(scope="module")
def results(model_files):
    return check_paths([model_files[name] for name in ORDER])


def test_results_per_model(results) -> None:
    summaries = {
        name: (r.summary, r.error is not None) for name, r in zip(ORDER, results, strict=True)
    }
    assert summaries["clean"] == ({"errors": 0, "warnings": 0, "infos": 0}, False)
    assert summaries["errors"] == ({"errors": 1, "warnings": 1, "infos": 0}, False)
    assert summaries["warnings"] == ({"errors": 0, "warnings": 1, "infos": 0}, False)
    assert summaries["float"] == ({"errors": 1, "warnings": 0, "infos": 0}, False)
    assert summaries["unreadable"][1]


def test_json_matches_schema(results) -> None:
    report = to_json(results, profiles=("per-tensor-fc",))
    jsonschema.validate(report, SCHEMA)
    jsonschema.validate(to_json([]), SCHEMA)
    assert report["summary"] == {
        "models": 5,
        "unreadable": 1,
        "errors": 2,
        "warnings": 2,
        "infos": 0,
    }
    finding = report["models"][1]["findings"][0]
    assert {
        "rule",
        "severity",
        "subgraph",
        "op_index",
        "op",
        "role",
        "tensor",
        "tensor_index",
        "message",
    } <= finding.keys()
    json.dumps(report)  # plain JSON types only


def test_junit_has_a_case_per_op_and_failures_for_errors(results) -> None:
    root = ET.fromstring(to_junit(results))
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == [r.path for r in results]
    for suite, result in zip(suites, results, strict=True):
        cases = suite.findall("testcase")
        assert int(suite.get("tests")) == len(cases)
        if result.error is None:
            assert len(cases) == len(result.operators) + 1  # + the model-level case
            failing = {(f.subgraph, f.op_index) for f in result.findings if f.severity == "error"}
            assert int(suite.get("failures")) == len(failing)
            assert len(suite.findall("testcase/failure")) == len(failing)
    errors_suite = suites[ORDER.index("errors")]
    (failure,) = errors_suite.findall("testcase/failure")
    assert failure.get("type") == "QT-WEIGHT-RANGE"
    assert "QT-BIAS-SATURATED" in errors_suite.find(".//system-out").text
    float_case = suites[ORDER.index("float")].find("testcase")
    assert float_case.get("name") == "model" and float_case.find("failure") is not None
    unreadable = suites[ORDER.index("unreadable")]
    assert unreadable.get("errors") == "1" and unreadable.find("testcase/error") is not None
    assert root.get("tests") == str(sum(int(s.get("tests")) for s in suites))


def test_sarif_has_the_required_structure(results) -> None:
    sarif = to_sarif(results)
    assert sarif["$schema"].endswith("sarif-2.1.0.json") and sarif["version"] == "2.1.0"
    (run,) = sarif["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "qtool"
    assert [rule["id"] for rule in driver["rules"]] == list(RULES)
    findings = [f for r in results for f in r.findings]
    assert len(run["results"]) == len(findings)
    for result, finding in zip(run["results"], findings, strict=True):
        assert result["ruleId"] == finding.rule
        assert driver["rules"][result["ruleIndex"]]["id"] == finding.rule
        assert result["level"] in ("error", "warning", "note")
        assert result["message"]["text"] == finding.message
        (location,) = result["locations"]
        assert location["physicalLocation"]["artifactLocation"]["uri"].endswith(".tflite")
        if finding.tensor is not None:
            (logical,) = location["logicalLocations"]
            assert logical["name"] == finding.tensor
            assert logical["fullyQualifiedName"].startswith(f"subgraph[{finding.subgraph}]::op[")
    (invocation,) = run["invocations"]
    assert invocation["executionSuccessful"] is False
    assert len(invocation["toolExecutionNotifications"]) == 1
    json.dumps(sarif)


def test_text_report_and_quiet(results) -> None:
    text = to_text(results)
    assert "QT-WEIGHT-RANGE" in text and "QT-NOT-QUANTIZED" in text
    assert f"{results[1].path}: 1 error, 1 warning, 0 info" in text
    quiet = to_text(results, quiet=True).splitlines()
    assert len(quiet) == len(results)
    assert quiet[0] == f"{results[0].path}: 0 errors, 0 warnings, 0 info"
    assert quiet[-1].startswith(f"{results[-1].path}: cannot read: ")

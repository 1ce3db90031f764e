"""`qtool check` in CI: the JUnit report agrees with the exit code, --json, --ignore, baselines."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner

from qtool.cli import main
from tests.check.validators import validate_junit, validate_sarif


def run(*args: str):
    return CliRunner().invoke(main, ["check", *(str(a) for a in args)], catch_exceptions=False)


@pytest.mark.parametrize(("fail_on", "code", "failures"), [("error", 0, "0"), ("warning", 1, "1")])
def test_junit_is_red_exactly_when_the_job_fails(model_files, fail_on, code, failures) -> None:
    result = run(model_files["warnings"], "--fail-on", fail_on, "--format", "junit")
    assert result.exit_code == code
    validate_junit(result.stdout)
    assert ET.fromstring(result.stdout).get("failures") == failures


def test_sarif_on_stdout_is_valid(model_files) -> None:
    result = run(model_files["errors"], model_files["unreadable"], "--format", "sarif")
    assert result.exit_code == 2
    validate_sarif(json.loads(result.stdout))


def test_json_flag_is_format_json(model_files) -> None:
    assert json.loads(run(model_files["errors"], "--json").stdout)["summary"]["errors"] == 1
    assert json.loads(run(model_files["errors"], "--json", "--format", "json").stdout)
    clash = run(model_files["errors"], "--json", "--format", "sarif")
    assert clash.exit_code == 2 and "contradict" in clash.output


def test_ignore_a_rule_everywhere_or_by_glob(model_files) -> None:
    errors = model_files["errors"]
    everywhere = run(errors, "--ignore", "QT-WEIGHT-RANGE", "--json")
    assert everywhere.exit_code == 0
    (model,) = json.loads(everywhere.stdout)["models"]
    assert [f["rule"] for f in model["findings"]] == ["QT-BIAS-SATURATED"]
    assert "1 finding(s) left out by --ignore" in everywhere.stderr

    tensor = json.loads(run(errors, "--json").stdout)["models"][0]["findings"][0]["tensor"]
    by_tensor = run(errors, "--ignore", f"QT-WEIGHT-*:tensor:{tensor}", "--json")
    assert by_tensor.exit_code == 0
    # A tensor name is the model author's choice: the short form never matches it.
    assert run(errors, "--ignore", f"QT-WEIGHT-*:{tensor}").exit_code == 1
    assert run(errors, "--ignore", f"QT-WEIGHT-RANGE:{errors.parent}/*").exit_code == 0
    assert run(errors, "--ignore", f"QT-WEIGHT-RANGE:path:{errors.parent}/*").exit_code == 0
    assert run(errors, "--ignore", "QT-WEIGHT-RANGE:CONV_2D").exit_code == 0
    assert run(errors, "--ignore", "QT-WEIGHT-RANGE:op:CONV_2D").exit_code == 0
    assert run(errors, "--ignore", "QT-WEIGHT-RANGE:path:CONV_2D").exit_code == 1
    assert run(errors, "--ignore", "QT-WEIGHT-RANGE:other/*").exit_code == 1
    unknown = run(errors, "--ignore", "QT-NO-SUCH-RULE")
    assert unknown.exit_code == 2 and "no rule matches" in unknown.output


def test_baseline_reports_only_new_findings(model_files, tmp_path) -> None:
    baseline = tmp_path / "findings.json"
    first = run(model_files["errors"], "--write-baseline", baseline)
    assert first.exit_code == 1  # writing a baseline does not hide this run's findings
    recorded = json.loads(baseline.read_text())
    assert recorded["summary"]["errors"] == 1 and recorded["summary"]["warnings"] == 1

    again = run(model_files["errors"], "--baseline", baseline, "--fail-on", "warning", "--json")
    assert again.exit_code == 0
    assert json.loads(again.stdout)["summary"] == {
        "models": 1,
        "unreadable": 0,
        "errors": 0,
        "warnings": 0,
        "infos": 0,
        "suppressed": 2,
    }
    assert "2 finding(s) already in the baseline" in again.stderr

    # Another model: its findings are new, whatever the baseline holds.
    other = run(model_files["warnings"], "--baseline", baseline, "--fail-on", "warning")
    assert other.exit_code == 1

    # A plain `--format json -o` report is a baseline too.
    report = tmp_path / "report.json"
    run(model_files["errors"], "--format", "json", "-o", report)
    assert run(model_files["errors"], "--baseline", report).exit_code == 0


def test_bad_baseline_is_one_line_error(model_files, tmp_path) -> None:
    missing = run(model_files["errors"], "--baseline", tmp_path / "nope.json")
    assert missing.exit_code == 2
    broken = tmp_path / "broken.json"
    broken.write_text("[1, 2]")
    result = run(model_files["errors"], "--baseline", broken)
    assert result.exit_code == 2 and "not a baseline" in result.output

"""`qtool check` on the command line: exit codes, formats, -o, --quiet, --fail-on."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner

from qtool.cli.check import check_command
from tests.check.helpers import TF_INT8
from tests.conftest import MODELS


def run(*args: str):
    return CliRunner().invoke(check_command, [str(a) for a in args], catch_exceptions=False)


@pytest.mark.parametrize(
    ("names", "options", "code"),
    [
        (["clean"], [], 0),
        (["clean", "warnings"], [], 0),
        (["clean", "warnings"], ["--fail-on", "warning"], 1),
        (["clean", "errors"], [], 1),
        (["float"], [], 1),
        (["clean", "unreadable", "errors"], [], 2),
    ],
)
def test_exit_codes(model_files, names, options, code) -> None:
    result = run(*[model_files[n] for n in names], *options)
    assert result.exit_code == code, result.output


def test_unreadable_model_among_good_ones_is_reported_and_others_checked(model_files) -> None:
    result = run(
        model_files["clean"], model_files["unreadable"], model_files["errors"], "--format", "json"
    )
    assert result.exit_code == 2
    report = json.loads(result.stdout)
    assert [m["error"] is None for m in report["models"]] == [True, False, True]
    assert report["models"][2]["summary"]["errors"] == 1
    assert "qtool: error:" in result.stderr


def test_text_report_and_quiet(model_files) -> None:
    full = run(model_files["errors"], model_files["clean"])
    assert "QT-WEIGHT-RANGE" in full.stdout and "QT-BIAS-SATURATED" in full.stdout
    assert f"{model_files['errors']}: 1 error, 1 warning, 0 info" in full.stdout
    quiet = run(model_files["errors"], model_files["clean"], "--quiet")
    assert quiet.stdout.splitlines() == [
        f"{model_files['errors']}: 1 error, 1 warning, 0 info",
        f"{model_files['clean']}: 0 errors, 0 warnings, 0 info",
    ]


@pytest.mark.parametrize("fmt", ["json", "junit", "sarif", "text"])
def test_output_file(model_files, tmp_path, fmt) -> None:
    target = tmp_path / f"report.{fmt}"
    result = run(model_files["warnings"], "--format", fmt, "-o", target)
    assert result.exit_code == 0
    text = target.read_text()
    if fmt == "junit":
        assert ET.fromstring(text).tag == "testsuites"
    elif fmt == "text":
        assert "QT-WEIGHT-PER-TENSOR" in text
    else:
        assert json.loads(text)
    # The report is in the file; the log keeps one summary line per model.
    assert result.stdout.splitlines() == [f"{model_files['warnings']}: 0 errors, 1 warning, 0 info"]
    assert not [p for p in tmp_path.iterdir() if p.name != target.name]  # no temporary left


def test_formats_on_stdout(model_files) -> None:
    sarif = json.loads(run(model_files["errors"], "--format", "sarif").stdout)
    assert sarif["version"] == "2.1.0" and len(sarif["runs"][0]["results"]) == 2
    junit = ET.fromstring(run(model_files["errors"], "--format", "junit").stdout)
    assert junit.get("failures") == "1"


def test_per_tensor_fc(model_files) -> None:
    mlp = TF_INT8 / "mlp_int8.tflite"
    assert run(mlp).exit_code == 0
    result = run(mlp, "--per-tensor-fc", "--format", "json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["profiles"] == ["per-tensor-fc"]
    assert {f["rule"] for f in report["models"][0]["findings"]} == {"QT-GRANULARITY"}


def test_requires_a_model() -> None:
    assert CliRunner().invoke(check_command, []).exit_code == 2


def test_list_rules_prints_every_rule() -> None:
    from click.testing import CliRunner

    from qtool.check.rules import RULES
    from qtool.cli import main

    result = CliRunner().invoke(main, ["check", "--list-rules"], terminal_width=200)
    assert result.exit_code == 0
    assert all(rule in result.output for rule in RULES)
    assert CliRunner().invoke(main, ["check"]).exit_code == 2


def test_report_never_overwrites_a_checked_model(tmp_path) -> None:
    model = tmp_path / "model.tflite"
    shutil.copy(MODELS / "tf_int8" / "mlp_int8.tflite", model)
    before = model.read_bytes()
    result = subprocess.run(
        [sys.executable, "-m", "qtool", "check", str(model), "--format", "json", "-o", str(model)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "refusing to overwrite the input file" in result.stderr
    assert model.read_bytes() == before

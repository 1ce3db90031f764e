"""Default options from [tool.qtool.COMMAND] in the nearest pyproject.toml; flags override."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from qtool.cli import main


def write_config(folder: Path, body: str) -> Path:
    path = folder / "pyproject.toml"
    path.write_text('[project]\nname = "models"\n\n' + textwrap.dedent(body))
    return path


def run(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_check_options_from_pyproject_and_flags_override(model_files, tmp_path, monkeypatch):
    write_config(
        tmp_path,
        """
        [tool.qtool.check]
        fail-on = "warning"
        ignore = ["QT-BIAS-SATURATED"]
        """,
    )
    nested = tmp_path / "sub" / "dir"
    nested.mkdir(parents=True)
    monkeypatch.chdir(nested)  # found by walking up
    warnings = model_files["warnings"]
    assert run("check", warnings).exit_code == 1  # fail-on warning from the file
    assert run("check", warnings, "--fail-on", "error").exit_code == 0  # the flag wins
    report = json.loads(run("check", model_files["errors"], "--json").stdout)
    assert [f["rule"] for f in report["models"][0]["findings"]] == ["QT-WEIGHT-RANGE"]


def test_paths_are_relative_to_the_pyproject(model_files, tmp_path, monkeypatch):
    baseline = tmp_path / "ci" / "findings.json"
    baseline.parent.mkdir()
    monkeypatch.chdir(tmp_path)
    assert run("check", model_files["errors"], "--write-baseline", baseline).exit_code == 1
    write_config(tmp_path, '[tool.qtool.check]\nbaseline = "ci/findings.json"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert run("check", model_files["errors"]).exit_code == 0


def test_quantize_section(tmp_path, monkeypatch):
    from tests.conftest import DATA, MODELS

    write_config(tmp_path, '[tool.qtool.quantize]\nsamples = 8\nio = "int8"\n')
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "cnn_int8.tflite"
    result = run(
        "quantize", MODELS / "cnn.tflite", "--data", DATA / "cnn_calib.npz", "-o", out, "--json"
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert sum(c["samples"] for c in report["calibration"]) == 8
    assert {row["dtype"] for row in report["io"]} == {"INT8"}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('[tool.qtool.check]\nfail_on = "sometimes"\n', "sometimes"),
        ('[tool.qtool.check]\ncolour = "blue"\n', "unknown option 'colour'"),
        ("[tool.qtool.deploy]\nfast = true\n", "no command 'deploy'"),
        ("[tool.qtool.check\n", "not valid TOML"),
    ],
)
def test_bad_config_is_a_one_line_error(model_files, tmp_path, monkeypatch, body, message):
    write_config(tmp_path, body)
    monkeypatch.chdir(tmp_path)
    result = run("check", model_files["clean"])
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output

"""Configuration that cannot be turned against the user (issue 21).

Found by trying: `[tool.qtool.check]` in a pyproject.toml of any parent folder was applied
silently. With `reference` and `data = ["/somewhere/evil.py:gen"]` a plain `qtool check MODEL`
imported and ran that file; `ignore = ["*"]` turned two errors into exit 0 with nothing in the
SARIF log; `output = "victim.txt"` overwrote a file; `samples = 1` applied to quantize; and
nothing named the file or could switch it off.
"""

from __future__ import annotations

import json
import shutil
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from tests.check.conftest import write_model_files
from tests.check.validators import validate_junit, validate_sarif
from tests.conftest import DATA, MODELS, ROOT
from tests.fuzz.judge import run_cli

EVIL = """\
from pathlib import Path
Path({marker!r}).write_text("ran")

def gen():
    import numpy as np
    for _ in range(4):
        yield [np.zeros((1, 32), np.float32)]
"""

HOSTILE = """\
[tool.qtool.check]
reference = "float.tflite"
data = ["{evil}:gen"]
ignore = ["*"]
output = "victim.txt"
"""


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tmp/ holds a hostile pyproject.toml and evil.py; tmp/repo/ is a git work tree whose
    sub/ holds the model with an error and a warning; the run starts in tmp/repo/sub."""
    (tmp_path / "evil.py").write_text(EVIL.format(marker=str(tmp_path / "PWNED")))
    (tmp_path / "pyproject.toml").write_text(HOSTILE.format(evil=tmp_path / "evil.py"))
    (tmp_path / "victim.txt").write_text("precious")
    shutil.copy(MODELS / "mlp.tflite", tmp_path / "float.tflite")
    work = tmp_path / "repo" / "sub"
    work.mkdir(parents=True)
    shutil.copy(write_model_files(tmp_path)["errors"], work / "model.tflite")
    monkeypatch.chdir(work)
    monkeypatch.delenv("QTOOL_NO_CONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path


def _check(*args: str):
    return run_cli(["check", "model.tflite", *args], timeout=120)


def _untouched(tree: Path) -> None:
    assert not (tree / "PWNED").exists(), "the pyproject.toml ran code"
    assert (tree / "victim.txt").read_text() == "precious"


def test_a_pyproject_above_the_git_work_tree_is_not_read(tree: Path) -> None:
    (tree / "repo" / ".git").mkdir()
    result = _check()
    assert result.code == 1, result.stderr  # the error is reported, nothing ignored
    assert "settings from" not in result.stderr
    assert "1 error, 1 warning" in result.stdout
    _untouched(tree)


def test_a_pyproject_above_the_home_folder_is_not_read(tree: Path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tree / "repo"))
    result = _check()
    assert result.code == 1 and "settings from" not in result.stderr
    _untouched(tree)


def test_the_nearest_pyproject_is_the_project_even_without_qtool_settings(tree: Path) -> None:
    (tree / "repo" / "pyproject.toml").write_text('[project]\nname = "models"\n')
    result = _check()
    assert result.code == 1 and "settings from" not in result.stderr
    _untouched(tree)


@pytest.mark.parametrize(
    ("command", "key", "value"),
    [
        ("check", "reference", '"float.tflite"'),
        ("check", "data", '["evil.py:gen"]'),
        ("check", "output", '"victim.txt"'),
        ("check", "write-baseline", '"victim.txt"'),
        ("check", "baseline", '"../outside.json"'),
        ("quantize", "data", '["evil.py:gen"]'),
        ("quantize", "custom-ops", '"evil"'),
        ("quantize", "output", '"victim.txt"'),
        ("quantize", "force", "true"),
        ("quantize", "statistics", '["stats.json"]'),
        ("analyze", "html", '"victim.txt"'),
        ("calibrate", "output", '"victim.txt"'),
    ],
)
def test_keys_that_run_code_or_name_files_come_from_the_command_line_only(
    tree: Path, command: str, key: str, value: str
) -> None:
    project = tree / "repo"
    (project / "pyproject.toml").write_text(f"[tool.qtool.{command}]\n{key} = {value}\n")
    argv = ["model.tflite"] if command == "check" else ["model.tflite", "--data", "x.npz"]
    result = run_cli([command, *argv], timeout=120)
    assert result.code == 2, (result.stdout, result.stderr)
    (line,) = result.stderr.splitlines()
    assert line.startswith("qtool: error: ") and str(project / "pyproject.toml") in line
    assert f"[tool.qtool.{command}]: {key} " in line
    _untouched(tree)


def test_settings_are_named_when_they_apply(tree: Path) -> None:
    (tree / "repo" / "pyproject.toml").write_text(
        "[tool.qtool.check]\nfail-on = 'warning'\nbaseline = 'ci/none.json'\n"
        "[tool.qtool.quantize]\nsamples = 1\n"
    )
    result = _check()
    assert result.stderr.splitlines()[0] == (
        "qtool: settings from ../pyproject.toml: fail-on, baseline"
    )
    shutil.copy(MODELS / "mlp.tflite", "mlp.tflite")
    quantized = run_cli(
        ["quantize", "mlp.tflite", "--data", str(DATA / "mlp_calib.npz"), "--json"], timeout=300
    )
    assert quantized.code == 0, quantized.stderr
    assert quantized.stderr.splitlines()[0] == "qtool: settings from ../pyproject.toml: samples"
    assert json.loads(quantized.stdout)["calibration"][0]["samples"] == 1


@pytest.mark.parametrize("how", ["--isolated first", "--isolated after", "QTOOL_NO_CONFIG=1"])
def test_settings_can_be_switched_off(tree: Path, monkeypatch, how: str) -> None:
    (tree / "repo" / "pyproject.toml").write_text("[tool.qtool.check]\nreference = 'x'\n")
    argv = ["check", "model.tflite"]
    if how == "--isolated first":
        argv.insert(0, "--isolated")
    elif how == "--isolated after":
        argv.append("--isolated")
    else:
        monkeypatch.setenv("QTOOL_NO_CONFIG", "1")
    result = run_cli(argv, timeout=120)
    assert result.code == 1, result.stderr  # the refused key is not even read
    assert result.stderr == ""


SARIF_SUPPRESSION = {"kind": "external", "status": "accepted"}


def test_ignores_from_the_project_are_recorded_in_every_format(tree: Path) -> None:
    project = tree / "repo"
    (project / "pyproject.toml").write_text('[tool.qtool.check]\nignore = ["*"]\n')
    source = "../pyproject.toml: ignore *"

    text = _check()
    assert text.code == 0
    assert "0 errors, 0 warnings, 0 info, 2 suppressed" in text.stdout
    assert f"qtool: 2 finding(s) left out by {source}" in text.stderr

    sarif = json.loads(_check("--format", "sarif").stdout)
    results = sarif["runs"][0]["results"]
    assert len(results) == 2
    assert all(
        r["suppressions"] == [{**SARIF_SUPPRESSION, "justification": source}] for r in results
    )

    report = json.loads(_check("--format", "json").stdout)
    schema = json.loads((ROOT / "schemas" / "check.schema.json").read_text())
    jsonschema.validate(report, schema)
    (model,) = report["models"]
    assert model["findings"] == [] and report["summary"]["suppressed"] == 2
    assert {s["suppression"]["source"] for s in model["suppressed"]} == {source}

    junit = _check("--format", "junit").stdout
    validate_junit(junit)
    suite = ET.fromstring(junit).find("testsuite")
    assert suite.get("skipped") == "2" and suite.get("failures") == "0"
    assert all(source in skipped.get("message") for skipped in suite.iter("skipped")), junit
    validate_sarif(sarif)  # last: skips where the official schema's package is missing


def test_command_line_ignores_and_baselines_are_recorded_too(tree: Path) -> None:
    (tree / "repo" / ".git").mkdir()
    assert _check("--write-baseline", "base.json").code == 1
    sarif = json.loads(
        _check("--ignore", "QT-WEIGHT-RANGE", "--baseline", "base.json", "--format", "sarif").stdout
    )
    justifications = sorted(
        r["suppressions"][0]["justification"] for r in sarif["runs"][0]["results"]
    )
    assert justifications == ["--ignore QT-WEIGHT-RANGE", "baseline base.json"]
    validate_sarif(sarif)


def test_a_short_ignore_pattern_never_matches_a_name_the_model_chose(tree: Path) -> None:
    """`--ignore 'RULE:legacy/*'` is about model files under legacy/: a tensor the model's author
    named `legacy/w` stays reported unless `tensor:` asks for it."""
    from qtool.model import load_model, save_model

    model = load_model("model.tflite")
    report = json.loads(_check("--format", "json", "--isolated").stdout)
    finding = next(f for f in report["models"][0]["findings"] if f["rule"] == "QT-WEIGHT-RANGE")
    model.subgraphs[0].tensors[finding["tensor_index"]].name = "legacy/w"
    save_model(model, "named.tflite")
    argv = ["check", "named.tflite", "--isolated", "--ignore", "QT-WEIGHT-RANGE:legacy/*"]
    assert run_cli(argv, timeout=60).code == 1
    argv[-1] = "QT-WEIGHT-RANGE:tensor:legacy/*"
    assert run_cli(argv, timeout=60).code == 0


def test_readme_configuration_is_the_projects(tree: Path) -> None:
    """The documented example still applies from the project's own pyproject.toml."""
    project = tree / "repo"
    (project / "ci").mkdir()
    (project / "pyproject.toml").write_text(
        textwrap.dedent(
            """\
            [tool.qtool.check]
            fail-on = "warning"
            ignore = ["QT-TINY-SCALE", "QT-TARGET-FALLBACK:legacy/*"]
            baseline = "ci/qtool-baseline.json"
            """
        )
    )
    assert _check("--isolated", "--write-baseline", "../ci/qtool-baseline.json").code == 1
    result = _check()
    assert result.code == 0, result.stderr
    assert "2 finding(s) already in the baseline" in result.stderr


# Options a pyproject.toml may set: none runs code, names a file or lets an output replace one.
# A new option fails this test until it is put here or in COMMAND_LINE_ONLY.
FROM_A_FILE = {
    "analyze": "activations bias_correction calibration debug engine input_shapes int16_patterns "
    "isolated optimize_rounding equalize quiet as_json samples top",
    "array quantize": "as_json axis debug dtype ensure_minimum_range isolated max_values "
    "min_values mode narrow_range quiet round_mode scale zero_point",
    "array dequantize": "as_json axis debug isolated out_dtype quiet scale zero_point",
    "calibrate": "as_json debug engine input_shapes isolated quiet samples",
    "check": "as_json debug fail_on fmt ignores isolated list_rules min_sqnr per_tensor_fc "
    "quiet target baseline min_metric",
    "inspect": "as_json debug isolated ops quiet sizes",
    "quantize": "activations allow_float analyze as_json bias_correction calibration debug engine "
    "int16_patterns io_mode isolated keep_float layer_errors optimize_rounding equalize "
    "per_tensor_fc quiet "
    "samples seed strict synthetic target target_sqnr max_size sparsify input_shapes target_metric "
    "budget mode weight_bits block_size min_weight_elements",
}


def test_every_option_is_either_safe_in_a_file_or_command_line_only(tmp_path: Path) -> None:
    import click

    from qtool.cli import main
    from qtool.cli.config import command_defaults
    from qtool.errors import UsageError

    ctx = click.Context(main)
    commands = {}
    for name in main.list_commands(ctx):
        command = main.get_command(ctx, name)
        subs = getattr(command, "commands", {})
        commands.update({f"{name} {s}": sub for s, sub in subs.items()} or {name: command})
    accepted = {}
    for name, command in commands.items():
        accepted[name] = set()
        for param in command.params:
            if not isinstance(param, click.Option):
                continue
            key = max(param.opts, key=len).lstrip("-")
            try:
                command_defaults(ctx, command, {key: "inside.json"}, "test", tmp_path)
            except UsageError as exc:
                assert "is not read from a file" in str(exc), exc
                continue
            accepted[name].add(param.name)
    assert accepted == {name: set(names.split()) for name, names in FROM_A_FILE.items()}


def test_the_pyproject_read_is_an_input_no_output_replaces(tree: Path) -> None:
    project = tree / "repo"
    (project / "pyproject.toml").write_text("[tool.qtool.check]\nfail-on = 'warning'\n")
    before = (project / "pyproject.toml").read_text()
    result = _check("--format", "json", "-o", "../pyproject.toml")
    assert result.code == 2 and "refusing to overwrite the input file" in result.stderr
    assert (project / "pyproject.toml").read_text() == before

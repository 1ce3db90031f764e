"""File names that become arguments stay data (issue 21).

Found by trying: the pre-commit hook passed file names without `--`, so an empty file named
`--ignore=QT-*:*.tflite` in the repository turned Failed into Passed, and a file named
`-o.tflite` diverted the report. The hook (and every documented CI command) now ends the options
with `--`, and every command honours it.
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.check.conftest import write_model_files
from tests.conftest import DATA, MODELS, ROOT
from tests.fuzz.judge import run_cli

HOOK = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())[0]
# Staged files of a hostile commit, as pre-commit would list them after the hook's args.
HOSTILE_NAMES = ["--ignore=QT-*:*.tflite", "-o.tflite", "--format=junit.tflite", "-q.tflite"]


def _hook_argv(*files: str) -> list[str]:
    """What pre-commit runs: entry, the hook's args, then the file names."""
    return [*shlex.split(HOOK["entry"])[1:], *HOOK.get("args", []), *files]


@pytest.fixture
def repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copy(write_model_files(tmp_path / "..")["errors"], tmp_path / "broken.tflite")
    for name in HOSTILE_NAMES:
        (tmp_path / name).write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    "staged", [["--ignore=QT-*:*.tflite"], ["-o.tflite"], HOSTILE_NAMES], ids=["ignore", "o", "all"]
)
def test_the_hook_fails_on_a_broken_model_whatever_else_is_staged(
    repository: Path, staged: list[str]
) -> None:
    before = sorted(p.name for p in repository.iterdir())
    result = run_cli(_hook_argv(*staged, "broken.tflite"), timeout=120)
    assert result.code != 0, result.stdout
    assert "broken.tflite: 1 error" in result.stdout
    for name in staged:  # each an (empty, unreadable) model, not an option
        assert f"{name}: cannot read" in result.stdout
    assert sorted(p.name for p in repository.iterdir()) == before  # nothing written


@pytest.mark.parametrize(
    "command",
    [
        ["inspect", "--"],
        ["check", "--"],
        ["quantize", "--data", str(DATA / "mlp_calib.npz"), "-o", "out.tflite", "--"],
        ["analyze", "--data", str(DATA / "mlp_calib.npz"), "--quiet", "--"],
        ["calibrate", "--data", str(DATA / "mlp_calib.npz"), "-o", "s.json", "--"],
    ],
)
def test_every_command_reads_a_model_named_like_an_option_after_double_dash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    model = "-o.tflite" if command[0] != "check" else "--fail-on=never.tflite"
    shutil.copy(MODELS / "mlp.tflite", model)
    result = run_cli([*command, model], timeout=300)
    # check finds the float model not quantized (exit 1); the others succeed.
    assert result.code == (1 if command[0] == "check" else 0), result.stderr
    assert "No such option" not in result.stderr and "Invalid value" not in result.stderr


def test_array_reads_an_input_named_like_an_option_after_double_dash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    np.save("--json.npy", np.array([2, -4], np.int8))
    argv = ["array", "dequantize", "--scale", "0.5", "-o", "x.npy", "--", "--json.npy"]
    result = run_cli(argv, timeout=60)
    assert result.code == 0, result.stderr
    assert np.load("x.npy").tolist() == [1.0, -2.0]

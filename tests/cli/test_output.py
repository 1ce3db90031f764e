"""Output people read: whole plain lines off a terminal, progress in logs, -q/--json everywhere."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from rich.console import Console

from qtool.cli import COMMANDS, main
from qtool.cli.render import PlainProgress
from qtool.model import load_model, save_model
from tests.conftest import DATA, MODELS
from tests.quantize.test_cli import qtool as run_qtool

PREFIX = "serving_default_" + "very_long_input_name_shared_by_both_inputs_" * 2


def qtool(*args: str) -> subprocess.CompletedProcess:
    """The installed command as a CI job runs it: no terminal, a narrow default width."""
    return run_qtool(*args, env={"COLUMNS": "60", "TERM": "dumb"})


@pytest.fixture(scope="module")
def lookalike_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """multi_io with two inputs whose long names differ only in their last character."""
    model = load_model(MODELS / "multi_io.tflite")
    subgraph = model.subgraphs[0]
    for suffix, index in zip("AB", subgraph.inputs, strict=True):
        subgraph.tensors[index].name = PREFIX + suffix
    path = tmp_path_factory.mktemp("lookalike") / "lookalike.tflite"
    save_model(model, path)
    return path


def _commands() -> dict[str, click.Command]:
    ctx = click.Context(main)
    commands = {}
    for name in COMMANDS:
        command = main.get_command(ctx, name)
        if isinstance(command, click.Group):
            for sub in command.list_commands(ctx):
                commands[f"{name} {sub}"] = command.get_command(ctx, sub)
        else:
            commands[name] = command
    return commands


def test_quiet_and_json_are_spelled_the_same_on_every_command() -> None:
    commands = _commands()
    assert set(commands) >= {"inspect", "check", "quantize", "array quantize", "array dequantize"}
    for name, command in commands.items():
        options = {tuple(sorted(p.opts)): p for p in command.params if isinstance(p, click.Option)}
        assert ("--quiet", "-q") in options, name
        assert ("--json",) in options, name
        assert options[("--json",)].is_flag and options[("--quiet", "-q")].is_flag, name


def test_quiet_and_json_behave(lookalike_model: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "int8.tflite"
    quiet = runner.invoke(
        main, ["quantize", str(lookalike_model), "--synthetic", "-o", str(out), "-q"]
    )
    assert quiet.exit_code == 0, quiet.output
    assert quiet.stdout.splitlines() == [f"wrote {out}"]
    as_json = runner.invoke(main, ["inspect", str(out), "--json"])
    assert json.loads(as_json.stdout)["summary"]["subgraphs"] == 1
    summary = runner.invoke(main, ["inspect", str(out), "-q"]).stdout.splitlines()
    assert summary[0] == f"model: {out}" and len(summary) == 6
    assert runner.invoke(main, ["check", str(out), "-q"]).stdout.splitlines() == [
        f"{out}: 0 errors, 0 warnings, 0 info"
    ]
    assert json.loads(runner.invoke(main, ["check", str(out), "--json"]).stdout)["models"]


def test_logs_show_every_name_whole(lookalike_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "int8.tflite"
    result = qtool("quantize", str(lookalike_model), "--synthetic", "-o", str(out))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    rows = [line for line in lines if PREFIX in line]
    assert len(rows) == 2 and rows[0] != rows[1]
    assert [row.split()[1] for row in rows] == [PREFIX + "A", PREFIX + "B"]
    assert not any(char in result.stdout for char in "…━│┃")  # no table art, nothing cut
    # Every tensor on its own line, its name whole between the index and dtype columns.
    listing = qtool("inspect", str(out)).stdout.splitlines()
    for index, tensor in enumerate(load_model(out).subgraphs[0].tensors):
        (row,) = [line for line in listing if line.split()[:1] == [str(index)]]
        assert f" {tensor.name} " in row, tensor.name


def test_progress_lines_in_logs(tmp_path: Path) -> None:
    result = qtool(
        "quantize",
        str(MODELS / "cnn.tflite"),
        "--data",
        str(DATA / "cnn_calib.npz"),
        "-o",
        str(tmp_path / "cnn_int8.tflite"),
    )
    assert result.returncode == 0, result.stderr
    (done,) = [line for line in result.stderr.splitlines() if line.startswith("calibrating:")]
    assert done.startswith("calibrating: done, 64/64 samples")
    quiet = qtool(
        "quantize",
        str(MODELS / "cnn.tflite"),
        "--data",
        str(DATA / "cnn_calib.npz"),
        "-o",
        str(tmp_path / "again.tflite"),
        "--force",
        "-q",
    )
    assert "calibrating" not in quiet.stderr


def test_plain_progress_reports_every_interval() -> None:
    now = [0.0]
    buffer = io.StringIO()
    console = Console(file=buffer, width=40)
    bar = PlainProgress(console, "calibrating", interval=5.0, clock=lambda: now[0])
    bar.set_total(100)
    for _ in range(100):
        now[0] += 0.25  # 4 samples a second: a line every 20 samples
        bar.advance(1)
    bar.finish()
    lines = buffer.getvalue().splitlines()
    assert lines[0] == "calibrating: 20/100 samples, 4.0/s, 5.0 s, about 20 s left"
    assert lines[3] == "calibrating: 80/100 samples, 4.0/s, 20.0 s, about 5 s left"
    assert len(lines) == 5 + 1
    assert lines[-1] == "calibrating: done, 100/100 samples, 4.0/s, 25.0 s"


def test_plain_progress_without_a_total_has_no_estimate() -> None:
    now = [0.0]
    buffer = io.StringIO()
    bar = PlainProgress(Console(file=buffer, width=40), "calibrating", 5.0, lambda: now[0])
    for _ in range(30):
        now[0] += 0.25
        bar.advance(1)
    assert buffer.getvalue().splitlines() == ["calibrating: 20 samples, 4.0/s, 5.0 s"]

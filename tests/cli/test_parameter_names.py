"""One message, two audiences: library errors name Python parameters (`data='x'`), the command
line shows the option that sets them (--data x)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import qtool
from qtool.cli import main, option_flags
from qtool.cli.guard import as_options
from qtool.errors import UsageError
from tests.cli.test_conventions import qtool_cli
from tests.conftest import DATA, MODELS

MISSING = "qtool_no_such_module_xyz:samples"


def test_backquoted_parameters_become_the_running_commands_options() -> None:
    flags = {"data": "--data", "force": "--force", "engine": "--engine"}
    message = "`data='a b.npz'`: bad; use `force=True`; `engine` must be; try `engine='litert'`"
    assert as_options(message, flags) == (
        "--data a b.npz: bad; use --force; --engine must be; try --engine litert"
    )
    # Backquoted text that is not a parameter of the command stays as it is.
    assert as_options("`custom_ops` and `x=1`", flags) == "`custom_ops` and `x=1`"


def test_the_flags_are_read_from_the_click_commands() -> None:
    quantize = main.get_command(None, "quantize")  # type: ignore[arg-type]
    flags = option_flags(quantize)
    assert flags["data"] == "--data"
    assert flags["output"] == "--output"
    assert flags["custom_ops"] == "--custom-ops"


def test_python_callers_read_parameter_names() -> None:
    with pytest.raises(UsageError) as raised:
        qtool.quantize_model(MODELS / "mlp.tflite", data=MISSING)
    assert str(raised.value).startswith(f"`data={MISSING!r}`: no module named")
    assert "--" not in str(raised.value)


def test_the_command_line_reads_its_options(tmp_path: Path) -> None:
    model = tmp_path / "mlp.tflite"
    shutil.copy(MODELS / "mlp.tflite", model)
    result = qtool_cli("quantize", str(model), "--data", MISSING, "-o", str(tmp_path / "o.tflite"))
    assert result.returncode == 2
    assert result.stderr.startswith(f"qtool: error: --data {MISSING}: no module named")

    existing = tmp_path / "stats.json"
    existing.write_text("{}")
    data = DATA / "mlp_calib.npz"
    result = qtool_cli("calibrate", str(model), "--data", str(data), "-o", str(existing))
    assert result.returncode == 2
    assert result.stderr.strip().endswith("already exists (use --force to replace it)")

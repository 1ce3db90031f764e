"""Standard output that nobody reads or that cannot hold the output, and measurements that
mean nothing (issue 21).

Found by trying: with stdout closed, a clean model gave a traceback and exit 1 ("findings");
with stdout on /dev/full, exit 3 "internal error"; calibration data at 3e38 gave exit 0 and
`SQNR dB nan`. The convention now: nobody reads stdout (a closed pipe or descriptor) -> quiet
exit 141, as SIGPIPE ends programs; stdout cannot hold the output (a full disk) -> one error
line and exit 2; a NaN accuracy is an error, never a pass.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from qtool.check.gates import accuracy_findings
from qtool.evaluate import Comparison, OutputAccuracy
from tests.conftest import MODELS
from tests.fuzz.judge import run_cli

CLEAN = MODELS / "tf_int8" / "mlp_int8.tflite"


def _run(argv: list[str], stdout) -> subprocess.CompletedProcess:
    closed = stdout == "closed"
    return subprocess.run(
        [sys.executable, "-m", "qtool", *argv],
        stdout=subprocess.DEVNULL if closed else stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=300,
        preexec_fn=(lambda: os.close(1)) if closed else None,
    )


COMMANDS = {
    "check": ["check", str(CLEAN)],
    "check sarif": ["check", "--format", "sarif", str(CLEAN)],
    "inspect json": ["inspect", "--json", str(CLEAN)],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_closed_stdout_ends_quietly_as_sigpipe_would(command: str) -> None:
    result = _run(COMMANDS[command], "closed")
    assert result.returncode == 141, (result.returncode, result.stderr)
    assert result.stderr == ""


@pytest.mark.parametrize("command", list(COMMANDS))
def test_full_stdout_is_one_error_line(command: str) -> None:
    with open(os.devnull if not Path("/dev/full").exists() else "/dev/full", "w") as full:
        result = _run(COMMANDS[command], full)
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert result.stderr.splitlines() == [
        "qtool: error: cannot write standard output: no space left on device"
    ]


def test_data_that_overflows_the_float_model_is_refused_not_measured_as_nan(tmp_path) -> None:
    data = tmp_path / "huge.npy"
    np.save(data, np.full((16, 32), 3e38, np.float32))
    argv = ["quantize", str(MODELS / "mlp.tflite"), "--data", str(data)]
    result = run_cli([*argv, "-o", str(tmp_path / "q.tflite"), "--json"], timeout=300)
    assert result.code == 2, result.stdout[-500:]
    assert "nan" not in result.stdout.lower()
    (line,) = result.stderr.splitlines()
    assert "inf or NaN" in line and "float32 range" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["huge.npy"]


def test_a_nan_sqnr_never_passes_the_accuracy_gate() -> None:
    nan = float("nan")
    output = OutputAccuracy(0, "y", "regression", nan, nan, nan, nan, 4, "litert")
    comparison = Comparison([output], samples=4, engine="litert")
    (finding,) = accuracy_findings(comparison, 20.0, {"QT-SQNR": "info", "QT-SQNR-LOW": "error"})
    assert finding.rule == "QT-SQNR-LOW" and finding.severity == "error"


def test_check_reference_refuses_data_the_float_model_overflows_on(tmp_path) -> None:
    data = tmp_path / "huge.npy"
    np.save(data, np.full((8, 32), 3e38, np.float32))
    argv = ["check", str(CLEAN), "--reference", str(MODELS / "mlp.tflite"), "--data", str(data)]
    result = run_cli(argv, timeout=300)
    assert result.code != 0
    assert "nan" not in result.stdout.lower()

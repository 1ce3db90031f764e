"""The built wheel, installed outside the repository, does what the checkout does: every data
file it reads at run time is packaged, and nothing reaches back into the source tree."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DATA, MODELS, ROOT


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The wheel built from the checkout, unpacked into a directory first on sys.path."""
    work = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(work / "dist"),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = (work / "dist").glob("qtool-*.whl")
    target = work / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    return target


def run(installed: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(installed)}
    return subprocess.run(
        [sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_installed_package_is_the_wheel(installed: Path, tmp_path: Path) -> None:
    found = run(installed, tmp_path, "-c", "import qtool; print(qtool.__file__)")
    assert found.stdout.strip().startswith(str(installed)), found.stdout + found.stderr


def test_wheel_quantizes_checks_analyzes_and_calibrates(installed: Path, tmp_path: Path) -> None:
    model, data = str(MODELS / "cnn.tflite"), str(DATA / "cnn_calib.npz")
    out = tmp_path / "cnn_int8.tflite"
    steps = [
        ("quantize", model, "--data", data, "-o", str(out), "--activations", "int16", "-q"),
        ("check", str(out), "--target", "tflm", "-q"),
        ("analyze", model, "--data", data, "--top", "3", "-q"),
        ("calibrate", model, "--data", data, "-o", str(tmp_path / "s.json"), "-q"),
        ("inspect", str(out), "--json"),
    ]
    for step in steps:
        result = run(installed, tmp_path, "-m", "qtool", *step)
        assert result.returncode in (0, 1), (step, result.stderr)
        assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    api = (
        "import qtool, numpy as np; "
        f"x = np.load({data!r})['serving_default_image:0']; "
        f"print(qtool.quantize({model!r}, x).compliant)"
    )
    assert run(installed, tmp_path, "-c", api).stdout.strip().endswith("True")

"""`qtool quantize` end to end: outputs, report, exit codes, calibration data formats, errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from qtool.model import model_to_bytes
from qtool.model.build import GraphBuilder
from tests.conftest import DATA, MODELS, ROOT

MLP_INPUT = "serving_default_features:0"


def qtool(
    *args: str, cwd: Path | None = None, env: dict | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "qtool", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def mlp(tmp_path: Path) -> Path:
    path = tmp_path / "mlp.tflite"
    shutil.copy(MODELS / "mlp.tflite", path)
    return path


def mlp_calib() -> np.ndarray:
    with np.load(DATA / "mlp_calib.npz") as data:
        (key,) = data.files
        return data[key]


def assert_error(result: subprocess.CompletedProcess, fragment: str, code: int = 2) -> None:
    assert result.returncode == code, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("qtool: error: "), result.stderr
    assert fragment in lines[-1], lines[-1]
    assert "Traceback" not in result.stderr


def test_default_paths_report_and_schema(mlp: Path) -> None:
    result = qtool("quantize", str(mlp), "--data", str(DATA / "mlp_calib.npz"))
    assert result.returncode == 0, result.stderr
    out = mlp.with_name("mlp_int8.tflite")
    report_path = mlp.with_name("mlp_int8.report.json")
    assert out.exists() and report_path.exists()
    report = json.loads(report_path.read_text())
    schema = json.loads((ROOT / "schemas" / "report.schema.json").read_text())
    jsonschema.validate(report, schema)
    assert report["audit"]["errors"] == 0
    assert report["calibration"][0]["samples"] == 64
    assert report["output_model"]["size_bytes"] < report["input_model"]["size_bytes"]
    assert "wrote" in result.stdout


def test_existing_output_needs_force_and_input_is_never_overwritten(mlp: Path) -> None:
    args = ["quantize", str(mlp), "--data", str(DATA / "mlp_calib.npz")]
    assert qtool(*args).returncode == 0
    assert_error(qtool(*args), "already exists")
    assert qtool(*args, "--force").returncode == 0
    before = mlp.read_bytes()
    assert_error(qtool(*args, "-o", str(mlp), "--force"), "overwrite the input")
    assert mlp.read_bytes() == before


def test_json_output(mlp: Path) -> None:
    result = qtool(
        "quantize", str(mlp), "--data", str(DATA / "mlp_calib.npz"), "--json", "--io", "int8"
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["settings"]["io"] == "int8"
    assert {row["role"]: row["dtype"] for row in report["io"]} == {
        "input": "INT8",
        "output": "INT8",
    }
    assert all(row["quantization"]["scale"][0] > 0 for row in report["io"])


def test_without_data_refuses_unless_synthetic(mlp: Path) -> None:
    assert_error(qtool("quantize", str(mlp)), "--data")
    assert not mlp.with_name("mlp_int8.tflite").exists()
    result = qtool("quantize", str(mlp), "--synthetic", "--samples", "8")
    assert result.returncode == 0, result.stderr
    assert "SYNTHETIC" in result.stderr
    report = json.loads(mlp.with_name("mlp_int8.report.json").read_text())
    assert report["calibration"][0]["synthetic"] is True
    assert any("synthetic" in w for w in report["warnings"])


def test_npy_npz_positional_directory_and_generator(mlp: Path, tmp_path: Path) -> None:
    samples = mlp_calib()
    np.save(tmp_path / "calib.npy", samples)
    np.savez(tmp_path / "positional.npz", samples)
    np.savez(tmp_path / "named.npz", features=samples)  # signature name, not tensor name
    per_sample = tmp_path / "dir"
    per_sample.mkdir()
    for i in range(5):
        np.save(per_sample / f"{i:03d}.npy", samples[i])
    (tmp_path / "calib_gen.py").write_text(
        "import numpy as np\n"
        f"DATA = np.load({str(tmp_path / 'calib.npy')!r})\n"
        "def samples():\n"
        "    for row in DATA[:10]:\n"
        "        yield [row[None]]\n"
    )
    sources = {
        "npy": str(tmp_path / "calib.npy"),
        "arr_0": str(tmp_path / "positional.npz"),
        "named": str(tmp_path / "named.npz"),
        "dir": str(per_sample),
        "generator": "calib_gen:samples",
    }
    expected = {"npy": 64, "arr_0": 64, "named": 64, "dir": 5, "generator": 10}
    for label, source in sources.items():
        out = tmp_path / f"{label}.tflite"
        result = qtool(
            "quantize",
            str(mlp),
            "--data",
            source,
            "-o",
            str(out),
            env={"PYTHONPATH": str(tmp_path)},
        )
        assert result.returncode == 0, (label, result.stderr)
        report = json.loads(out.with_name(f"{label}.report.json").read_text())
        assert report["calibration"][0]["samples"] == expected[label], label


def test_data_errors(mlp: Path, tmp_path: Path) -> None:
    samples = mlp_calib()
    np.save(tmp_path / "wrong_shape.npy", samples[:, :5])
    bad = samples.copy()
    bad[3, 2] = np.nan
    np.save(tmp_path / "nan.npy", bad)
    np.savez(tmp_path / "wrong_key.npz", other=samples)
    (tmp_path / "garbage.npy").write_bytes(b"not numpy")
    cases = {
        str(tmp_path / "wrong_shape.npy"): f"input '{MLP_INPUT}' expects samples of shape [32]",
        str(tmp_path / "nan.npy"): "NaN",
        str(tmp_path / "wrong_key.npz"): "no data for input",
        str(tmp_path / "missing.npz"): "no such file",
        str(tmp_path / "garbage.npy"): "not a .npy or .npz file",
    }
    for source, fragment in cases.items():
        result = qtool("quantize", str(mlp), "--data", source, "-o", str(tmp_path / "o.tflite"))
        assert_error(result, fragment)
        assert not (tmp_path / "o.tflite").exists()
        assert not (tmp_path / "o.report.json").exists()


def test_bad_model_and_usage(tmp_path: Path) -> None:
    (tmp_path / "junk.tflite").write_bytes(b"\x00" * 64)
    assert_error(
        qtool("quantize", str(tmp_path / "junk.tflite"), "--synthetic"), "not a TFLite model"
    )
    result = qtool("quantize", str(MODELS / "mlp.tflite"), "--io", "int4")
    assert result.returncode == 2


def test_strict_fails_when_an_op_stays_float(mlp: Path, tmp_path: Path) -> None:
    out = tmp_path / "strict.tflite"
    result = qtool(
        "quantize",
        str(mlp),
        "--data",
        str(DATA / "mlp_calib.npz"),
        "--strict",
        "--keep-float",
        "FULLY_CONNECTED",
        "-o",
        str(out),
    )
    assert_error(result, "strict: 3 operator(s) cannot be int8", code=1)
    assert not out.exists()
    result = qtool(
        "quantize", str(mlp), "--data", str(DATA / "mlp_calib.npz"), "--strict", "-o", str(out)
    )
    assert result.returncode == 0, result.stderr


def test_custom_op_kernel_from_the_command_line(tmp_path: Path) -> None:
    """A custom op runs in calibration through --custom-ops and stays float (no int8 rule)."""
    builder = GraphBuilder()
    x = builder.input("x", [1, 4])
    hidden = builder.fully_connected(x, np.eye(4), np.zeros(4, np.float32), "fc")
    out = builder.custom("Cube", [hidden], [1, 4])
    model_path = tmp_path / "custom.tflite"
    model_path.write_bytes(model_to_bytes(builder.finish([out])))
    np.save(tmp_path / "x.npy", np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32))
    (tmp_path / "cube_kernel.py").write_text(
        "from qtool.runtime import register_custom_op\n"
        "register_custom_op('Cube', lambda ctx: ctx.inputs[0] ** 3)\n"
    )
    args = ["quantize", str(model_path), "--data", str(tmp_path / "x.npy"), "--json"]
    missing = qtool(*args, "-o", str(tmp_path / "a.tflite"))
    assert_error(missing, "register_custom_op")
    result = qtool(
        *args,
        "-o",
        str(tmp_path / "b.tflite"),
        "--custom-ops",
        "cube_kernel",
        env={"PYTHONPATH": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [(row["op"], row["index"]) for row in report["float_ops"]] == [("Cube", 1)]
    assert report["calibration"][0]["engine"] == "numpy"


def test_already_quantized_model_is_refused(tmp_path: Path) -> None:
    for name in ("cnn_int8", "cnn_int8_io"):
        result = qtool(
            "quantize",
            str(MODELS / "tf_int8" / f"{name}.tflite"),
            "--synthetic",
            "-o",
            str(tmp_path / f"{name}.tflite"),
        )
        assert_error(result, "already quantized")
        assert not (tmp_path / f"{name}.tflite").exists()

"""``qtool array quantize`` / ``qtool array dequantize``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from qtool.cli import QtoolGroup
from qtool.cli.array import array_group
from qtool.numerics import activation_params, quantize

# The array group under the same error handling as the real ``qtool`` entry point.
CLI = QtoolGroup("qtool", commands=[array_group])
WORKED = np.array([-10, -3.5, 0, 2.5, 6, 9, 12], np.float32)


def run(*args: str | Path):
    return CliRunner().invoke(CLI, ["array", *map(str, args)])


@pytest.fixture
def worked(tmp_path: Path) -> Path:
    path = tmp_path / "x.npy"
    np.save(path, WORKED)
    return path


@pytest.fixture
def weights(tmp_path: Path) -> Path:
    path = tmp_path / "w.npy"
    np.save(path, (np.arange(12, dtype=np.float32).reshape(3, 4) - 5) / 4)
    return path


def test_tflite_mode_uses_the_data_range(worked: Path, tmp_path: Path) -> None:
    out = tmp_path / "q.npy"
    result = run("quantize", worked, "-o", out)
    assert result.exit_code == 0, result.output
    params = activation_params(-10.0, 12.0)
    np.testing.assert_array_equal(np.load(out), quantize(WORKED, params))
    assert np.load(out).dtype == np.int8
    assert "zero point" in result.stdout and str(params.scale[0]) in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.npy", "x.npy"]  # no temp file left


def test_tflite_mode_json(worked: Path, tmp_path: Path) -> None:
    out = tmp_path / "q.npy"
    result = run(
        "quantize", worked, "-o", out, "--min", "-10", "--max", "9", "--dtype", "uint8", "--json"
    )
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    params = activation_params(-10, 9, np.uint8)
    assert info["mode"] == "tflite" and info["dtype"] == "uint8"
    assert info["scale"] == [float(str(params.scale[0]))]
    assert info["zero_point"] == [134]
    assert info["round_mode"] == "half-away-from-zero"
    assert info["shape"] == [7] and info["output"] == str(out)
    np.testing.assert_array_equal(np.load(out), quantize(WORKED, params, dtype=np.uint8))


@pytest.mark.parametrize(
    ("mode", "dtype", "extra", "expected", "out_range"),
    [
        ("min-combined", "int8", [], [-128, -41, 6, 40, 87, 127, 127], ([-10.0], [9.0])),
        ("min-combined", "uint8", [], [0, 87, 134, 168, 215, 255, 255], ([-10.0], [9.0])),
        ("min-first", "int8", [], [-128, -41, 6, 40, 87, 127, 127], ([-10.0], [9.0])),
        ("scaled", "int8", [], [-128, -45, 0, 32, 77, 115, 127], ([-10.0], [9.921875])),
        ("scaled", "uint8", [], [0, 0, 0, 71, 170, 255, 255], ([0.0], [9.0])),
        (
            "scaled",
            "int8",
            ["--narrow-range"],
            [-127, -44, 0, 32, 76, 114, 127],
            ([-10.0], [10.0]),
        ),
    ],
)
def test_tensorflow_modes_reference_values(
    worked, tmp_path, mode, dtype, extra, expected, out_range
) -> None:
    out = tmp_path / "q.npy"
    result = run(
        "quantize",
        worked,
        "-o",
        out,
        "--mode",
        mode,
        "--dtype",
        dtype,
        "--min",
        "-10",
        "--max",
        "9",
        "--ensure-minimum-range",
        "0",
        "--json",
        *extra,
    )
    assert result.exit_code == 0, result.output
    assert np.load(out).tolist() == expected
    info = json.loads(result.stdout)
    assert (info["output_min"], info["output_max"]) == out_range
    assert info["tf_type"] == "q" + dtype and info["ensure_minimum_range"] == 0.0


def test_tensorflow_mode_per_axis_table(weights: Path, tmp_path: Path) -> None:
    out = tmp_path / "q.npy"
    result = run(
        "quantize",
        weights,
        "-o",
        out,
        "--mode",
        "scaled",
        "--min",
        "-1,-2,-3",
        "--max",
        "1,2,3",
        "--axis",
        "0",
        "--round-mode",
        "HALF_TO_EVEN",
    )
    assert result.exit_code == 0, result.output
    assert "output min" in result.stdout and "half-to-even" in result.stdout
    assert "0.01" in result.stdout  # TensorFlow's default ensure_minimum_range is shown
    assert np.load(out).shape == (3, 4)


def test_affine_mode(weights: Path, tmp_path: Path) -> None:
    out = tmp_path / "q.npy"
    result = run(
        "quantize",
        weights,
        "-o",
        out,
        "--mode",
        "affine",
        "--scale",
        "0.5,0.25,1",
        "--zero-point",
        "1,2,3",
        "--axis",
        "-2",
        "--round-mode",
        "ROUND_DOWN",
        "--dtype",
        "int16",
        "--json",
    )
    assert result.exit_code == 0, result.output
    data = np.load(weights)
    expected = np.floor(data / np.array([[0.5], [0.25], [1.0]])) + np.array([[1], [2], [3]])
    assert np.load(out).dtype == np.int16
    np.testing.assert_array_equal(np.load(out), expected)
    info = json.loads(result.stdout)
    assert info["scale"] == [0.5, 0.25, 1.0] and info["zero_point"] == [1, 2, 3]
    assert info["round_mode"] == "down" and info["axis"] == -2


def test_dequantize_round_trip(worked: Path, tmp_path: Path) -> None:
    q, back = tmp_path / "q.npy", tmp_path / "back.npy"
    assert run("quantize", worked, "-o", q, "--min", "-10", "--max", "12").exit_code == 0
    params = activation_params(-10, 12)
    result = run(
        "dequantize",
        q,
        "-o",
        back,
        "--scale",
        str(params.scale[0]),
        "--zero-point",
        str(params.zero_point[0]),
        "--json",
    )
    assert result.exit_code == 0, result.output
    restored = np.load(back)
    assert restored.dtype == np.float32
    assert (np.abs(restored - WORKED) <= params.scale[0] / 2 + 1e-6).all()
    assert json.loads(result.stdout)["zero_point"] == [int(params.zero_point[0])]


def test_dequantize_per_axis_float16(tmp_path: Path) -> None:
    q, out = tmp_path / "q.npy", tmp_path / "f.npy"
    np.save(q, np.array([[1, 2], [3, 4]], np.int8))
    result = run(
        "dequantize",
        q,
        "-o",
        out,
        "--scale",
        "0.5,2",
        "--zero-point",
        "0,1",
        "--axis",
        "1",
        "--out-dtype",
        "float16",
    )
    assert result.exit_code == 0, result.output
    assert np.load(out).dtype == np.float16
    assert np.load(out).tolist() == [[0.5, 2.0], [1.5, 6.0]]
    assert "float16" in result.stdout


def test_existing_output_is_replaced(worked: Path, tmp_path: Path) -> None:
    out = tmp_path / "q.npy"
    out.write_bytes(b"old")
    assert run("quantize", worked, "-o", out).exit_code == 0
    assert np.load(out).shape == (7,)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.npy", "x.npy"]


QUANTIZE_ERRORS = [
    (["--mode", "bogus"], "invalid --mode 'bogus'"),
    (["--dtype", "int64"], "invalid --dtype"),
    (["--min", "abc"], "--min expects a number"),
    (
        ["--mode", "affine", "--scale", "1", "--zero-point", "1.5"],
        "--zero-point expects an integer",
    ),
    (["--round-mode", "sideways"], "unknown round mode"),
    (["--mode", "min-combined"], "needs --min and --max"),
    (["--mode", "scaled", "--min", "1", "--max", "0"], "min_range must be <= max_range"),
    (
        ["--mode", "min-first", "--min", "-1", "--max", "1", "--round-mode", "half-to-even"],
        "only supported in SCALED",
    ),
    (["--mode", "scaled", "--min", "-1", "--max", "1", "--round-mode", "up"], "no round mode up"),
    (
        ["--mode", "min-combined", "--min", "0", "--max", "0", "--ensure-minimum-range", "0"],
        "NaN or infinity",
    ),
    (["--mode", "scaled", "--min", "-1,-1", "--max", "1,1", "--axis", "0"], "need 7 values"),
    (["--mode", "scaled", "--min", "-1", "--max", "1", "--axis", "3"], "out of range"),
    (["--mode", "min-first", "--min", "-1", "--max", "1", "--axis", "0"], "no per-axis form"),
    (
        ["--mode", "min-combined", "--min", "-1", "--max", "1", "--narrow-range"],
        "--narrow-range cannot be used",
    ),
    (["--mode", "scaled", "--min", "-1", "--max", "1", "--scale", "1"], "--scale cannot be used"),
    (["--mode", "affine"], "needs --scale"),
    (["--mode", "affine", "--scale", "0"], "scale must be finite and > 0"),
    (["--mode", "affine", "--scale", "-2"], "scale must be finite and > 0"),
    (["--mode", "affine", "--scale", "1,2"], "need --axis"),
    (["--mode", "affine", "--scale", "1", "--zero-point", "300"], "outside [-128, 127]"),
    (["--mode", "affine", "--scale", "1", "--min", "0"], "--min cannot be used"),
    (
        ["--mode", "affine", "--scale", "1", "--ensure-minimum-range", "0"],
        "--ensure-minimum-range cannot be used",
    ),
    (["--axis", "0"], "--axis cannot be used with --mode tflite"),
    (["--min", "-1,-2"], "takes one number in tflite mode"),
    (["--min", "2", "--max", "1"], "min > max"),
    (["--min", "nan"], "must be finite"),
    (["--dtype", "uint16"], "TFLite activations are"),
]


@pytest.mark.parametrize(("args", "message"), QUANTIZE_ERRORS)
def test_quantize_errors(worked: Path, tmp_path: Path, args: list[str], message: str) -> None:
    out = tmp_path / "q.npy"
    _assert_one_line_error(run("quantize", worked, "-o", out, *args), message)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.npy"]


def _assert_one_line_error(result, message: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("qtool: error: ")
    assert message in lines[0]
    assert result.stdout == ""


def test_file_errors(worked: Path, tmp_path: Path) -> None:
    out = tmp_path / "q.npy"
    before = worked.read_bytes()
    _assert_one_line_error(run("quantize", worked, "-o", worked), "refusing to overwrite")
    _assert_one_line_error(run("quantize", worked, "-o", tmp_path / "." / "x.npy"), "refusing")
    assert worked.read_bytes() == before
    _assert_one_line_error(run("quantize", worked), "missing -o/--output")
    _assert_one_line_error(run("quantize", tmp_path / "nope.npy", "-o", out), "no such file")
    _assert_one_line_error(run("quantize", tmp_path, "-o", out), "not a file")
    text = tmp_path / "text.npy"
    text.write_text("not numpy")
    _assert_one_line_error(run("quantize", text, "-o", out), "not a .npy file")
    archive = tmp_path / "a.npz"
    np.savez(archive, x=WORKED)
    _assert_one_line_error(run("quantize", archive, "-o", out), ".npz archive")
    objects = tmp_path / "objects.npy"
    np.save(objects, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    _assert_one_line_error(run("quantize", objects, "-o", out), "unreadable .npy file")
    nan = tmp_path / "nan.npy"
    np.save(nan, np.array([1.0, np.nan], np.float32))
    _assert_one_line_error(run("quantize", nan, "-o", out), "contains NaN")
    _assert_one_line_error(run("quantize", nan, "-o", out, "--min", "0", "--max", "1"), "NaN")
    strings = tmp_path / "strings.npy"
    np.save(strings, np.array(["a", "b"]))
    _assert_one_line_error(run("quantize", strings, "-o", out), "expected real numbers")
    _assert_one_line_error(
        run("quantize", worked, "-o", tmp_path / "no" / "q.npy"), "output directory does not exist"
    )
    _assert_one_line_error(run("quantize", worked, "-o", tmp_path), "cannot write")
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "missing --scale"),
        (["--scale", "0"], "scale must be finite and > 0"),
        (["--scale", "1,2"], "no axis was given"),
        (["--scale", "1", "--zero-point", "200"], "outside [-128, 127]"),
        (["--scale", "1", "--axis", "1"], "out of range"),
        (["--scale", "1", "--out-dtype", "float64"], "invalid --out-dtype"),
    ],
)
def test_dequantize_errors(tmp_path: Path, args: list[str], message: str) -> None:
    q, out = tmp_path / "q.npy", tmp_path / "f.npy"
    np.save(q, np.array([1, 2], np.int8))
    _assert_one_line_error(run("dequantize", q, "-o", out, *args), message)
    assert not out.exists()


def test_dequantize_needs_integer_data(worked: Path, tmp_path: Path) -> None:
    out = tmp_path / "f.npy"
    _assert_one_line_error(run("dequantize", worked, "-o", out, "--scale", "1"), "integer data")
    assert not out.exists()

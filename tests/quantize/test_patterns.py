"""Patterns that tell the truth: --keep-float/--int16 match op types as the input model has
them, a pattern matching nothing stops the run, and an op that only reads its input's shape is
no float finding."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import qtool
from qtool.model import Model, TensorType, model_to_bytes
from qtool.model.build import GraphBuilder
from tests.quantize.graph_forms import litert_sqnr

RNG = np.random.default_rng(5)
SAMPLES = RNG.standard_normal((40, 8)).astype(np.float32)


def squared_layer() -> Model:
    """A dense layer squared with SQUARE (which qtool rewrites to MUL(x, x) internally)."""
    b = GraphBuilder()
    x = b.input("x", [1, 8])
    h = b.fully_connected(x, RNG.standard_normal((8, 8)) / 3, RNG.standard_normal(8) / 10, "fc")
    return b.finish([b.op("SQUARE", [h], output_shape=[1, 8], name="energy")])


def computing(model: Model) -> list[tuple[str, int]]:
    """(op type, type of its first output) of every op but the converters."""
    subgraph = model.subgraphs[0]
    return [
        (model.op_type(op), subgraph.tensors[op.outputs[0]].dtype)
        for op in subgraph.operators
        if model.op_type(op) not in ("QUANTIZE", "DEQUANTIZE")
    ]


def test_keep_float_matches_the_op_type_of_the_input_model() -> None:
    model = squared_layer()
    result = qtool.quantize_model(model, SAMPLES, keep_float=("SQUARE",))
    assert computing(result.model) == [
        ("FULLY_CONNECTED", TensorType.INT8),
        ("MUL", TensorType.FLOAT32),  # the SQUARE, computed exactly as MUL(x, x), in float
    ]
    assert [row["op"] for row in result.report["float_ops"]] == ["SQUARE"]
    assert min(litert_sqnr(model_to_bytes(model), result.model_bytes, [SAMPLES], True)) > 30


def test_int16_matches_the_op_type_of_the_input_model() -> None:
    result = qtool.quantize_model(squared_layer(), SAMPLES, int16=("square",))
    assert computing(result.model) == [
        ("FULLY_CONNECTED", TensorType.INT8),
        ("MUL", TensorType.INT16),
    ]


@pytest.mark.parametrize(
    ("option", "pattern"),
    [("--keep-float", "SQARE"), ("--keep-float", "MUL"), ("--int16", "energy_*")],
)
def test_a_pattern_that_matches_nothing_is_an_error(
    tmp_path: Path, option: str, pattern: str
) -> None:
    model = tmp_path / "squared.tflite"
    model.write_bytes(model_to_bytes(squared_layer()))
    np.save(tmp_path / "x.npy", SAMPLES)
    data = str(tmp_path / "x.npy")
    result = subprocess.run(
        [sys.executable, "-m", "qtool", "quantize", str(model), "--data", data, option, pattern],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("qtool: error: ") and repr(pattern) in line, line
    assert "FULLY_CONNECTED, SQUARE" in line  # the types there are, as the input model has them
    assert not (tmp_path / "squared_int8.tflite").exists()


def shape_of_input() -> Model:
    """SHAPE of the float input gives the shape a dense layer's output is reshaped to."""
    b = GraphBuilder()
    x = b.input("x", [1, 8])
    shape = b.shape(x, "shape")
    h = b.fully_connected(x, RNG.standard_normal((8, 8)) / 3, None, "fc")
    return b.finish([b.op("RESHAPE", [h, shape], output_shape=[1, 8], name="out")])


def test_an_op_reading_only_shapes_is_neither_quantized_nor_a_float_finding() -> None:
    model = shape_of_input()
    result = qtool.quantize_model(model, SAMPLES)
    subgraph = result.model.subgraphs[0]
    (shape_op,) = [op for op in subgraph.operators if result.model.op_type(op) == "SHAPE"]
    # It reads the float input itself: no QUANTIZE was added for an op that reads no value.
    assert subgraph.tensors[shape_op.inputs[0]].dtype == TensorType.FLOAT32
    assert sum(result.model.op_type(op) == "QUANTIZE" for op in subgraph.operators) == 1
    audit = qtool.check_model(result.model_bytes)
    assert audit.findings == [], audit.to_dict()
    assert min(litert_sqnr(model_to_bytes(model), result.model_bytes, [SAMPLES], False)) > 30

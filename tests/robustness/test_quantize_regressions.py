"""Reproducers of crash sites fuzzing found past the validator, in the planner and the rewriter:
models that are valid graphs, but that calibration or planning cannot make fully int8."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from qtool.model import TensorType, load_model, model_to_bytes
from qtool.readback import litert_problem
from qtool.runtime import Engine
from tests.conftest import DATA, MODELS
from tests.fuzz.judge import run_cli


def _quantize(tmp_path: Path, model, *extra: str):
    source = tmp_path / "m.tflite"
    source.write_bytes(model_to_bytes(model))
    out = tmp_path / "out"
    out.mkdir()
    argv = ["quantize", str(source), "--synthetic", "-o", str(out / "q.tflite"), *extra]
    result = run_cli(argv, timeout=120)
    assert result.error is None, result.site
    return result, out


def test_an_int8_activation_into_float_weights_is_not_planned_int8(tmp_path: Path) -> None:
    """The planner made such a CONV_2D int8 and the rewriter found no input parameters
    (KeyError); it now stays float, and LiteRT's refusal of that mix stops the write."""
    model = load_model(MODELS / "cnn.tflite")
    model.subgraphs[0].tensors[0].dtype = TensorType.UINT8
    result, out = _quantize(tmp_path, model)
    assert result.code == 1, result.stderr
    assert "the quantized model is not valid, not written: LiteRT refuses it" in result.stderr
    assert list(out.iterdir()) == []


def test_an_output_calibration_never_saw_finite_stays_float_under_io_int8(tmp_path: Path) -> None:
    """Infinite weights make every value of the output NaN: no range, so no int8 parameters
    for it (the rewriter raised KeyError); like such an input, it keeps its float boundary.
    Quantizing from data refuses such a model (no accuracy can be measured against NaN); from
    statistics, with no accuracy to measure, the rewriter meets the output without a range."""
    model = load_model(MODELS / "mlp.tflite")
    subgraph = model.subgraphs[0]
    weights = subgraph.operators[2].inputs[1]
    model.set_tensor_data(
        subgraph, weights, np.full(subgraph.tensors[weights].shape, np.inf, np.float32)
    )
    result, out = _quantize(tmp_path, model, "--io", "int8")
    assert result.code == 2 and "inf or NaN" in result.stderr, result.stderr
    assert list(out.iterdir()) == []
    statistics = tmp_path / "s.json"
    calibrated = run_cli(
        [
            "calibrate",
            str(tmp_path / "m.tflite"),
            "--data",
            str(DATA / "mlp_calib.npz"),
            "-o",
            str(statistics),
        ],
        timeout=120,
    )
    assert calibrated.code == 0, calibrated.stderr
    argv = ["quantize", str(tmp_path / "m.tflite"), "--statistics", str(statistics)]
    result = run_cli([*argv, "-o", str(out / "q.tflite"), "--io", "int8"], timeout=120)
    assert result.error is None, result.site
    assert result.code in (0, 1), result.stderr
    assert "error" not in result.stderr or result.code == 1
    if result.code == 0:
        written = (out / "q.tflite").read_bytes()
        assert litert_problem(written) is None
        quantized = load_model(out / "q.tflite")
        (output,) = quantized.subgraphs[0].outputs
        assert quantized.subgraphs[0].tensors[output].dtype == TensorType.FLOAT32


def test_litert_calibrates_an_input_declared_without_a_leading_one(tmp_path: Path) -> None:
    """An input declared [32] (not [1, 32]): each sample is the whole declared shape. The LiteRT
    calibration engine fed it [1, 32] slices (ValueError: Cannot set tensor: Dimension
    mismatch); it now calibrates the ranges the numpy engine does."""
    model = load_model(MODELS / "unit_norm.tflite")
    model.subgraphs[0].tensors[model.subgraphs[0].inputs[0]].shape = [32]
    source = tmp_path / "m.tflite"
    source.write_bytes(model_to_bytes(model))
    scales = {}
    for engine in ("litert", "numpy"):
        out = tmp_path / f"{engine}.tflite"
        argv = [
            "quantize",
            str(source),
            "--data",
            str(DATA / "unit_norm_calib.npz"),
            "-o",
            str(out),
        ]
        result = run_cli([*argv, "--engine", engine, "--calibration", "minmax", "--quiet"], 120)
        assert (result.code, result.error) == (0, None), result.stderr
        quantized = load_model(out)
        scales[engine] = [
            float(t.quantization.scale[0])
            for t in quantized.subgraphs[0].tensors
            if t.quantization is not None and t.dtype == TensorType.INT8
        ]
    np.testing.assert_allclose(scales["litert"], scales["numpy"], rtol=1e-4)


def test_an_add_written_without_its_options_table_runs_in_int16(tmp_path: Path) -> None:
    """An ADD without AddOptions (TFLite's defaults) under --int16: the rewriter set
    pot_scale_int16 on an operator without a table (KeyError, an internal error)."""
    model = load_model(MODELS / "mixed_ops.tflite")
    operators = model.subgraphs[0].operators
    index = next(i for i, op in enumerate(operators) if model.op_type(op) == "ADD")
    operators[index].options_type, operators[index].options = None, {}
    result, out = _quantize(tmp_path, model, "--int16", "ADD", "--quiet")
    assert result.code == 0, result.stderr
    written = (out / "q.tflite").read_bytes()
    assert litert_problem(written) is None
    quantized = load_model(out / "q.tflite")
    adds = [op for op in quantized.subgraphs[0].operators if quantized.op_type(op) == "ADD"]
    assert [op.option("pot_scale_int_16") for op in adds] == [False, False]


def test_a_model_output_computed_from_constants_is_analysed(tmp_path: Path) -> None:
    """A float16 bias's DEQUANTIZE made a model output (so it is not folded away): the engine
    joined its per-chunk constant as if it held samples (ValueError: cannot reshape), and the
    analysis fed the sub-graph after a place from a value never observed (KeyError)."""
    model = load_model(MODELS / "fp16_weights.tflite")
    subgraph = model.subgraphs[0]
    dequantize = next(
        op
        for op in subgraph.operators
        if model.op_type(op) == "DEQUANTIZE" and len(subgraph.tensors[op.outputs[0]].shape) == 1
    )
    subgraph.outputs.append(dequantize.outputs[0])
    (samples,) = np.load(DATA / "fp16_weights_calib.npz").values()
    outputs = Engine(model).run([samples[:5]])
    bias = model.tensor_data(subgraph.tensors[dequantize.inputs[0]]).astype(np.float32)
    np.testing.assert_array_equal(outputs[-1], np.broadcast_to(bias, (5, *bias.shape)))
    source = tmp_path / "m.tflite"
    source.write_bytes(model_to_bytes(model))
    argv = ["analyze", str(source), "--data", str(DATA / "fp16_weights_calib.npz"), "--quiet"]
    result = run_cli([*argv, "--samples", "8"], 120)
    assert (result.code, result.error, result.stderr) == (0, None, "")


def test_a_float16_bias_reached_through_an_identity_op_is_analysed(tmp_path: Path) -> None:
    """A float16 bias's DEQUANTIZE turned into a one-input CONCATENATION (a fuzz mutant of
    palm_detection_full): the simulation wrote the layer's float32 bias into the float16
    tensor without changing its type, and reading it back failed (ValueError: cannot reshape
    array of size 2n into shape (n,)). New contents now bring their own type."""
    model = load_model(MODELS / "fp16_weights.tflite")
    subgraph = model.subgraphs[0]
    dequantize = next(
        op
        for op in subgraph.operators
        if model.op_type(op) == "DEQUANTIZE" and len(subgraph.tensors[op.outputs[0]].shape) == 1
    )
    dequantize.opcode_index = model.opcode_for("CONCATENATION")
    dequantize.options_type, dequantize.options = "ConcatenationOptions", {"axis": 0}
    source = tmp_path / "m.tflite"
    source.write_bytes(model_to_bytes(model))
    data = str(DATA / "fp16_weights_calib.npz")
    argv = ["analyze", str(source), "--data", data, "--holdout", data, "--quiet"]
    result = run_cli(argv, 120)
    assert (result.code, result.error, result.stderr) == (0, None, "")

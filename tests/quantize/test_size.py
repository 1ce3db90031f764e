"""Size: shared vectors in the writer, the byte breakdown, the report's size section and its
warning, --max-size and --sparsify."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import qtool
from qtool.calibrate import Dataset
from qtool.errors import UsageError
from qtool.model import TensorType, load_model, model_to_bytes, parse_model
from qtool.model.build import GraphBuilder
from qtool.model.sizes import size_breakdown
from qtool.quantize import QuantizeOptions, quantize_loaded
from qtool.refusals import SizeLimit, SizeLimitError
from tests.conftest import DATA, MODELS
from tests.quantize.test_sparse_weights import outputs, pruned

CNN = MODELS / "cnn.tflite"
RNG = np.random.default_rng(5)


def cnn_samples() -> np.ndarray:
    return np.load(DATA / "cnn_calib.npz")["serving_default_image:0"]


def test_equal_small_vectors_are_written_once_and_read_back_the_same() -> None:
    model = qtool.quantize_model(CNN, cnn_samples()).model
    blob = model_to_bytes(model)
    # Every per-axis zero-point vector of one width is the same bytes: stored once.
    widths = [
        t.quantization.zero_point.size
        for t in model.subgraphs[0].tensors
        if t.quantization is not None and t.quantization.per_axis
    ]
    assert len(widths) > len(set(widths))
    zeros = np.zeros(max(widths), np.int64).tobytes()
    assert blob.count(zeros) == 1
    again = parse_model(blob)
    for before, after in zip(model.subgraphs[0].tensors, again.subgraphs[0].tensors, strict=True):
        assert before.shape == after.shape
        if before.quantization is not None:
            np.testing.assert_array_equal(before.quantization.scale, after.quantization.scale)
            np.testing.assert_array_equal(
                before.quantization.zero_point, after.quantization.zero_point
            )


def test_weights_start_on_16_bytes_and_small_constants_on_8(monkeypatch) -> None:
    """Weight data is 16-byte aligned for kernels that read it in place; a small constant (a
    bias, a short vector) needs only its element's alignment, and 16 would pad a small model by
    hundreds of bytes (hand_recrop: 55,712 -> 55,200). LiteRT computes the same either way."""
    import tflite

    from qtool.model import io

    model = qtool.quantize_model(CNN, cnn_samples()).model
    blob = model_to_bytes(model)
    root = tflite.Model.GetRootAsModel(blob, 0)
    kinds = set()
    for i in range(root.BuffersLength()):
        buffer = root.Buffers(i)
        if buffer.DataLength() == 0:
            continue
        start = buffer._tab.Vector(buffer._tab.Offset(4))  # the data's first byte
        large = buffer.DataLength() > io.SMALL_BUFFER
        need = io.BUFFER_ALIGNMENT if large else io.SMALL_BUFFER_ALIGNMENT
        assert start % need == 0, (i, start, buffer.DataLength())
        kinds.add(large)
    assert kinds == {True, False}  # both kinds are present
    monkeypatch.setattr(io, "SMALL_BUFFER_ALIGNMENT", io.BUFFER_ALIGNMENT)
    padded = model_to_bytes(model)
    assert len(padded) > len(blob)
    samples = cnn_samples()[:4]
    for builtin in (True, False):
        np.testing.assert_array_equal(
            outputs(blob, samples, builtin), outputs(padded, samples, builtin)
        )


def test_the_breakdown_accounts_for_every_byte() -> None:
    model = load_model(CNN)
    total = CNN.stat().st_size
    breakdown = size_breakdown(model, total)
    assert sum(breakdown.parts.values()) == total
    assert breakdown.parts["weights FLOAT32"] > 0.8 * total
    assert breakdown.largest[0].role == "weights"
    assert [t.nbytes for t in breakdown.largest] == sorted(
        (t.nbytes for t in breakdown.largest), reverse=True
    )


def test_inspect_sizes_prints_the_breakdown(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "qtool", "inspect", str(CNN), "--sizes", "-q"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "weights FLOAT32" in done.stdout and "largest tensors" in done.stdout
    done = subprocess.run(
        [sys.executable, "-m", "qtool", "inspect", str(CNN), "--sizes", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    sizes = json.loads(done.stdout)["sizes"]
    assert sizes["total_bytes"] == CNN.stat().st_size == sum(sizes["parts"].values())


def wide_float16_depthwise():
    """A float16 model where int8 costs more than it saves: a 1x1 depthwise layer over 512
    channels (1 KB of float16 weights; per channel, int8 adds two float32 scales and an int32
    bias)."""
    b = GraphBuilder()
    x = b.input("x", [1, 2, 2, 512])
    half = b.constant("w_half", RNG.normal(0, 0.5, (1, 1, 1, 512)).astype(np.float16))
    w = b.op("DEQUANTIZE", [half], output_shape=[1, 1, 1, 512], name="w")
    options = {"padding": 1, "stride_w": 1, "stride_h": 1, "depth_multiplier": 1}
    bias_half = b.constant("b_half", np.zeros(512, np.float16))
    bias = b.op("DEQUANTIZE", [bias_half], output_shape=[512], name="b")
    y = b.op(
        "DEPTHWISE_CONV_2D",
        [x, w, bias],
        output_shape=[1, 2, 2, 512],
        options_type="DepthwiseConv2DOptions",
        options=options,
    )
    return b.finish([y])


def test_a_bigger_output_is_said_and_explained() -> None:
    model = wide_float16_depthwise()
    samples = RNG.normal(0, 1, (16, 2, 2, 512)).astype(np.float32)
    result = qtool.quantize_model(model_to_bytes(model), samples)
    size = result.report["size"]
    assert size["bigger_than_input"] and size["ratio"] > 1
    grew = {row["part"] for row in size["grew"]}
    assert "quantization parameters" in grew
    (warning,) = [w for w in result.report["warnings"] if "bigger than its source" in w]
    assert "quantization parameters" in warning


def test_max_size_refuses_a_bigger_model_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "cnn_int8.tflite"
    base = [sys.executable, "-m", "qtool", "quantize", str(CNN), "--data"]
    base += [str(DATA / "cnn_calib.npz"), "-o", str(out)]
    done = subprocess.run([*base, "--max-size", "0.2x"], capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    assert "over --max-size (0.2x the input" in done.stderr
    assert list(tmp_path.iterdir()) == []
    done = subprocess.run([*base, "--max-size", "0.5x"], capture_output=True, text=True)
    assert done.returncode == 0 and out.stat().st_size <= 0.5 * CNN.stat().st_size
    done = subprocess.run([*base, "--max-size", "-3", "--force"], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.startswith("qtool: error: --max-size -3 is")


def test_max_size_from_python() -> None:
    with pytest.raises(SizeLimitError, match="over `max_size` \\(1,000 bytes\\)"):
        qtool.quantize_model(CNN, cnn_samples(), max_size=1000)
    for bad in ("0x", "x", "1.5", "nan", "infx", ""):
        with pytest.raises(UsageError, match="max_size"):
            SizeLimit.parse(bad)
    assert SizeLimit.parse("0.25x").bytes_for(1000) == 250
    assert SizeLimit.parse(2048).bytes_for(10) == 2048


def test_sparsify_stores_pruned_dense_weights_sparse() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 6, 6, 64])
    w = b.constant("w", pruned((96, 1, 1, 64), density=0.2))
    bias = b.constant("b", RNG.normal(0, 0.1, 96).astype(np.float32))
    options = {"padding": 0, "stride_w": 1, "stride_h": 1}
    y = b.op(
        "CONV_2D",
        [x, w, bias],
        output_shape=[1, 6, 6, 96],
        options_type="Conv2DOptions",
        options=options,
    )
    model = b.finish([y])
    samples = RNG.normal(0, 1, (16, 6, 6, 64)).astype(np.float32)
    written = {}
    for sparsify in (False, True):
        options = QuantizeOptions(calibration="minmax", bias_correction=False, sparsify=sparsify)
        result = quantize_loaded(model, Dataset.from_arrays([samples]), options)
        written[sparsify] = model_to_bytes(result.model)
    sparse = [t for t in parse_model(written[True]).subgraphs[0].tensors if t.sparsity is not None]
    assert [t.dtype for t in sparse] == [TensorType.INT8]
    assert not any(t.sparsity is not None for t in parse_model(written[False]).subgraphs[0].tensors)
    assert len(written[True]) < len(written[False]) - 96 * 64 * 0.4
    for builtin in (True, False):
        np.testing.assert_array_equal(
            outputs(written[True], samples, builtin), outputs(written[False], samples, builtin)
        )


def test_a_device_without_densify_gets_dense_weights_and_the_cost_is_said() -> None:
    samples = np.load(DATA / "sparse_weights_calib.npz")
    data = samples[samples.files[0]]
    plain = qtool.quantize_model(MODELS / "sparse_weights.tflite", data)
    dense = qtool.quantize_model(MODELS / "sparse_weights.tflite", data, target="tflm")
    assert any(t.sparsity is not None for t in plain.model.subgraphs[0].tensors)
    assert not any(t.sparsity is not None for t in dense.model.subgraphs[0].tensors)
    (warning,) = [w for w in dense.report["warnings"] if "written dense" in w]
    assert "tflm profile runs no DENSIFY" in warning
    extra = int(warning.rsplit("+", 1)[1].split()[0].replace(",", ""))
    assert extra > 0

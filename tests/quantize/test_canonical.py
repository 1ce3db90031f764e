"""Rewrites into operators with int8 kernels: the same outputs in LiteRT, then int8 that runs."""

from __future__ import annotations

import numpy as np
import pytest

from qtool.calibrate import Dataset
from qtool.check.audit import audit_model
from qtool.model import Model, model_to_bytes, parse_model
from qtool.model.build import GraphBuilder
from qtool.model.graph import Operator
from qtool.model.types import Padding
from qtool.numerics import sqnr_db
from qtool.prepare.canonical import canonicalize
from qtool.quantize import QuantizeOptions, quantize_loaded
from tests.litert import run_litert_samples

SAME, VALID = 1, 2  # TfLitePadding, as the custom op's options store it


def reparsed(model: Model) -> Model:
    return parse_model(model_to_bytes(model))


def op_types(model: Model) -> list[str]:
    return [model.op_type(op) for op in model.subgraphs[0].operators]


def square_model() -> Model:
    builder = GraphBuilder()
    x = builder.input("x", [1, 4, 6])
    squared = builder.op("SQUARE", [x], output_shape=[1, 4, 6], name="square")
    axes = builder.constant("axes", np.array([2], np.int32))
    total = builder.op(
        "SUM",
        [squared, axes],
        output_shape=[1, 4],
        name="sum",
        options_type="ReducerOptions",
        options={"keep_dims": False},
    )
    return reparsed(builder.finish([total]))


def transpose_bias_model(in_shape, kernel, out_c, stride, padding, out_hw) -> Model:
    """MediaPipe's Convolution2DTransposeBias: options (padding, stride_w, stride_h) as int32."""
    rng = np.random.default_rng(sum(in_shape) + padding)
    builder = GraphBuilder()
    x = builder.input("x", [1, *in_shape])
    weights = rng.standard_normal((out_c, *kernel, in_shape[2])).astype(np.float32)
    w = builder.constant("w", weights)
    b = builder.constant("b", rng.standard_normal(out_c).astype(np.float32))
    out = builder.tensor("out", [1, *out_hw, out_c])
    builder.subgraph.operators.append(
        Operator(
            opcode_index=builder.model.custom_opcode_for("Convolution2DTransposeBias"),
            inputs=[x, w, b],
            outputs=[out],
            custom_options=np.array([padding, stride[1], stride[0]], "<i4").tobytes(),
        )
    )
    return reparsed(builder.finish([out]))


def samples(shape: tuple[int, ...], count: int = 32) -> np.ndarray:
    return np.random.default_rng(7).standard_normal((count, *shape)).astype(np.float32)


def check_rewrite(model: Model, x: np.ndarray, into: str) -> None:
    """Rewritten, the model computes the same in LiteRT; quantized, it runs there as int8."""
    rewritten = reparsed(model)
    (done,) = canonicalize(rewritten)
    assert (done.index, done.into) == (0, into) and op_types(rewritten)[0] == into
    reference = run_litert_samples(model_to_bytes(model), [x], reference=False)[0]
    got = run_litert_samples(model_to_bytes(rewritten), [x], reference=False)[0]
    np.testing.assert_allclose(got, reference, rtol=0, atol=1e-5 * np.abs(reference).max())
    result = quantize_loaded(
        model, Dataset.from_arrays([x], "normal"), QuantizeOptions(calibration="minmax")
    )
    assert result.float_ops == []
    assert [(r.op_type, r.into) for r in result.rewritten.values()] == [(done.op_type, into)]
    assert into in op_types(result.model)
    assert [f for f in audit_model(result.model) if f.severity != "info"] == []
    int8 = run_litert_samples(model_to_bytes(result.model), [x], reference=False)[0]
    assert sqnr_db(reference, int8) > 30


def test_square_becomes_mul_of_the_input_by_itself() -> None:
    model = square_model()
    rewritten = reparsed(model)
    canonicalize(rewritten)
    (mul, _) = rewritten.subgraphs[0].operators
    assert mul.inputs == [model.subgraphs[0].inputs[0]] * 2
    check_rewrite(model, samples((4, 6)), "MUL")


# (input HxWxC, kernel, output channels, stride (h, w), padding, output HxW)
TRANSPOSE_CASES = [
    ((8, 8, 3), (2, 2), 1, (2, 2), SAME, (16, 16)),  # selfie_segmentation's last layer
    ((5, 7, 4), (2, 2), 3, (2, 2), VALID, (10, 14)),
    ((5, 6, 2), (3, 3), 4, (2, 2), SAME, (10, 12)),
    ((5, 6, 2), (3, 3), 4, (2, 2), VALID, (11, 13)),
    ((4, 5, 3), (3, 3), 2, (1, 2), SAME, (4, 10)),  # stride_w and stride_h apart
]


@pytest.mark.parametrize(
    ("in_shape", "kernel", "out_c", "stride", "padding", "out_hw"), TRANSPOSE_CASES
)
def test_transpose_conv_bias_becomes_transpose_conv(
    in_shape, kernel, out_c, stride, padding, out_hw
) -> None:
    model = transpose_bias_model(in_shape, kernel, out_c, stride, padding, out_hw)
    rewritten = reparsed(model)
    canonicalize(rewritten)
    (op,) = rewritten.subgraphs[0].operators
    assert op.option("padding") == (Padding.SAME if padding == SAME else Padding.VALID)
    assert (op.option("stride_h"), op.option("stride_w")) == stride
    shape = rewritten.tensor_data(rewritten.subgraphs[0].tensors[op.inputs[0]])
    assert shape.tolist() == [1, *out_hw, out_c]
    check_rewrite(model, samples(in_shape), "TRANSPOSE_CONV")


@pytest.mark.parametrize("options", [b"", np.array([3, 2, 2], "<i4").tobytes()])
def test_unreadable_custom_options_are_left_alone(options: bytes) -> None:
    model = transpose_bias_model((4, 4, 3), (2, 2), 1, (2, 2), SAME, (8, 8))
    model.subgraphs[0].operators[0].custom_options = options
    assert canonicalize(model) == []
    assert op_types(model) == ["Convolution2DTransposeBias"]

"""Each planning rule of the spec holds on the models qtool writes."""

from __future__ import annotations

import numpy as np
import pytest

from qtool.calibrate import Dataset
from qtool.check.audit import audit_model
from qtool.model import Model, TensorType, model_to_bytes, parse_model
from qtool.model.build import GraphBuilder
from qtool.model.sparsity import densify
from qtool.numerics import sqnr_db
from qtool.quantize import QuantizeOptions, quantize_loaded
from qtool.spec import load_spec
from tests.conftest import float_model_names
from tests.litert import make_interpreter, run_litert_samples
from tests.quantize.common import fixture_path, holdout_feeds, quantized, reparsed

SPEC = load_spec()
ALL = float_model_names()


def ops_of(model: Model, op_type: str):
    subgraph = model.subgraphs[0]
    return [op for op in subgraph.operators if model.op_type(op) == op_type]


def int8_ops(model: Model):
    subgraph = model.subgraphs[0]
    for op in subgraph.operators:
        rule = SPEC.rule(model.op_type(op))
        if rule is not None and model.op_type(op) not in ("QUANTIZE", "DEQUANTIZE"):
            yield op, rule, subgraph


@pytest.mark.parametrize("name", ALL)
def test_fixed_output_params(name: str) -> None:
    model = reparsed(quantized(name))
    seen = 0
    for op, rule, subgraph in int8_ops(model):
        for position, t in enumerate(op.outputs):
            operand = rule.output_rule(position)
            if operand is not None and operand.fixed is not None:
                q = subgraph.tensors[t].quantization
                assert q.scale.tolist() == [np.float32(operand.fixed[0])]
                assert q.zero_point.tolist() == [operand.fixed[1]]
                seen += 1
    if name in ("cnn", "mixed_ops", "spec_ops"):
        assert seen > 0


@pytest.mark.parametrize("name", ALL)
def test_same_scale_ops_share_params(name: str) -> None:
    model = reparsed(quantized(name))
    for op, rule, subgraph in int8_ops(model):
        if not rule.same_scale:
            continue
        params = set()
        for position, t in enumerate(op.inputs):
            operand = rule.input_rule(position)
            if t >= 0 and operand is not None and subgraph.tensors[t].dtype == TensorType.INT8:
                q = subgraph.tensors[t].quantization
                params.add((q.scale.tobytes(), q.zero_point.tobytes()))
        for t in op.outputs:
            if subgraph.tensors[t].dtype == TensorType.INT8:
                q = subgraph.tensors[t].quantization
                params.add((q.scale.tobytes(), q.zero_point.tobytes()))
        assert len(params) == 1, f"{name}: {model.op_type(op)} mixes params"


def stored_weights(model, subgraph, index: int) -> np.ndarray:
    """A layer's int8 weights: a constant, or what a DENSIFY expands from a sparse one."""
    producer = subgraph.producers().get(index)
    if producer is None:
        return model.tensor_data(subgraph.tensors[index])
    op = subgraph.operators[producer]
    assert model.op_type(op) == "DENSIFY"
    sparse = subgraph.tensors[op.inputs[0]]
    assert sparse.quantization.same_params(subgraph.tensors[index].quantization)
    return densify(model.tensor_data(sparse), sparse.shape, sparse.sparsity)


@pytest.mark.parametrize("name", ALL)
def test_weights_and_bias_follow_the_spec(name: str) -> None:
    model = reparsed(quantized(name))
    for op, rule, subgraph in int8_ops(model):
        weight_rule, bias_rule = rule.weight_rule(), rule.bias_rule()
        if weight_rule is None or weight_rule.axis is None:  # DENSIFY: its reader's weights
            continue
        weights = subgraph.tensors[op.inputs[weight_rule.index]]
        wq = weights.quantization
        assert weights.dtype == TensorType.INT8
        assert np.all(wq.zero_point == 0)
        values = stored_weights(model, subgraph, op.inputs[weight_rule.index])
        assert values.min() >= -127 and values.max() <= 127
        assert wq.quantized_dimension == weight_rule.axis
        assert len(wq.scale) == weights.shape[weight_rule.axis]
        if bias_rule is None or len(op.inputs) <= bias_rule.index or op.inputs[bias_rule.index] < 0:
            continue
        bias = subgraph.tensors[op.inputs[bias_rule.index]]
        source = subgraph.tensors[op.inputs[bias_rule.bias_scale_inputs[0]]].quantization
        assert bias.dtype == TensorType.INT32
        assert np.all(bias.quantization.zero_point == 0)
        expected = (source.scale[0] * wq.scale).astype(np.float32)
        np.testing.assert_allclose(bias.quantization.scale, expected, rtol=1e-6)


def test_per_tensor_fc_profile() -> None:
    model = reparsed(quantized("mlp", per_tensor_fc=True))
    for op in ops_of(model, "FULLY_CONNECTED"):
        weights = model.subgraphs[0].tensors[op.inputs[1]]
        assert len(weights.quantization.scale) == 1
        bias = model.subgraphs[0].tensors[op.inputs[2]]
        assert len(bias.quantization.scale) == 1
    default = reparsed(quantized("mlp"))
    assert all(
        len(default.subgraphs[0].tensors[op.inputs[1]].quantization.scale) > 1
        for op in ops_of(default, "FULLY_CONNECTED")
    )
    make_interpreter(model_to_bytes(model)).invoke()


def test_depthwise_weights_are_per_channel_on_dim_3() -> None:
    model = reparsed(quantized("cnn"))
    (op,) = ops_of(model, "DEPTHWISE_CONV_2D")
    weights = model.subgraphs[0].tensors[op.inputs[1]]
    assert weights.quantization.quantized_dimension == 3
    assert len(weights.quantization.scale) == weights.shape[3]


# ---------------------------------------------------------------- small purpose-built models


def single_input_dataset(samples: np.ndarray) -> Dataset:
    return Dataset.from_arrays([samples.astype(np.float32)], "test")


def fc(
    builder: GraphBuilder, x: int, rng: np.random.Generator, n_in: int, n_out: int, name: str
) -> int:
    weights = rng.standard_normal((n_out, n_in)).astype(np.float32)
    return builder.fully_connected(x, weights, rng.standard_normal(n_out), name)


def fc_exp_fc_model() -> Model:
    rng = np.random.default_rng(0)
    builder = GraphBuilder()
    x = builder.input("x", [1, 8])
    h = fc(builder, x, rng, 8, 6, "fc1")
    e = builder.op("EXP", [h], output_shape=[1, 6], name="exp")
    y = fc(builder, e, rng, 6, 3, "fc2")
    return parse_model(model_to_bytes(builder.finish([y])))


def test_unsupported_op_stays_float_between_converters() -> None:
    model = fc_exp_fc_model()
    data = np.random.default_rng(1).uniform(-0.5, 0.5, (32, 8)).astype(np.float32)
    result = quantize_loaded(model, single_input_dataset(data))
    assert [(f.index, f.op_type) for f in result.float_ops] == [(1, "EXP")]
    assert "int8 spec" in result.float_ops[0].reason
    types = [result.model.op_type(op) for op in result.model.subgraphs[0].operators]
    assert types == [
        "QUANTIZE",
        "FULLY_CONNECTED",
        "DEQUANTIZE",
        "EXP",
        "QUANTIZE",
        "FULLY_CONNECTED",
        "DEQUANTIZE",
    ]
    blob = model_to_bytes(result.model)
    reference = run_litert_samples(model_to_bytes(model), [data])[0]
    got = run_litert_samples(blob, [data])[0]
    assert sqnr_db(reference, got) > 25


def test_keep_float_pattern() -> None:
    result = quantized("cnn", keep_float=("SOFTMAX",))
    assert [f.op_type for f in result.float_ops] == ["SOFTMAX"]
    assert "keep-float pattern 'SOFTMAX'" in result.float_ops[0].reason
    model = reparsed(result)
    (softmax,) = ops_of(model, "SOFTMAX")
    assert model.subgraphs[0].tensors[softmax.inputs[0]].dtype == TensorType.FLOAT32


@pytest.mark.parametrize("io,dtype", [("int8", np.int8), ("uint8", np.uint8)])
def test_integer_io(io: str, dtype: type) -> None:
    result = quantized("cnn", io=io)
    model = reparsed(result)
    subgraph = model.subgraphs[0]
    for t in subgraph.inputs + subgraph.outputs:
        assert subgraph.tensors[t].dtype == (TensorType.INT8 if io == "int8" else TensorType.UINT8)
    (inp,), (out,) = subgraph.inputs, subgraph.outputs
    qin, qout = subgraph.tensors[inp].quantization, subgraph.tensors[out].quantization
    source = parse_model(fixture_path("cnn").read_bytes())
    feeds = holdout_feeds("cnn", source)
    info = np.iinfo(dtype)
    quantized_input = np.clip(
        np.round(feeds[0] / qin.scale[0]) + qin.zero_point[0], info.min, info.max
    ).astype(dtype)
    raw = run_litert_samples(model_to_bytes(model), [quantized_input])[0]
    got = (raw.astype(np.float32) - qout.zero_point[0]) * qout.scale[0]
    reference = run_litert_samples(fixture_path("cnn").read_bytes(), feeds)[0]
    assert sqnr_db(reference, got) > 20
    if io == "uint8":
        assert (
            qin.zero_point[0]
            == 128
            + quantized("cnn", io="int8")
            .model.subgraphs[0]
            .tensors[quantized("cnn", io="int8").model.subgraphs[0].inputs[0]]
            .quantization.zero_point[0]
        )


def test_concat_of_fixed_output_is_requantized() -> None:
    """LOGISTIC's output is pinned to (1/256, -128); a concat with a wider input needs its own."""
    builder = GraphBuilder()
    x = builder.input("x", [1, 4])
    s = builder.op("LOGISTIC", [x], output_shape=[1, 4], name="sigmoid")
    scale = builder.constant("three", np.float32(3.0))
    wide = builder.op(
        "MUL", [x, scale], output_shape=[1, 4], name="wide", options_type="MulOptions", options={}
    )
    y = builder.op(
        "CONCATENATION",
        [s, wide],
        output_shape=[1, 8],
        name="concat",
        options_type="ConcatenationOptions",
        options={"axis": 1},
    )
    model = parse_model(model_to_bytes(builder.finish([y])))
    data = np.random.default_rng(2).uniform(-2, 2, (32, 4)).astype(np.float32)
    result = quantize_loaded(model, single_input_dataset(data))
    out = reparsed(result)
    types = [out.op_type(op) for op in out.subgraphs[0].operators]
    assert types.count("QUANTIZE") == 2  # model input, and the requantization of the sigmoid
    (concat,) = ops_of(out, "CONCATENATION")
    tensors = out.subgraphs[0].tensors
    params = {
        (tensors[t].quantization.scale[0], tensors[t].quantization.zero_point[0])
        for t in concat.inputs + concat.outputs
    }
    assert len(params) == 1
    (sigmoid,) = ops_of(out, "LOGISTIC")
    q = tensors[sigmoid.outputs[0]].quantization
    assert (q.scale[0], q.zero_point[0]) == (np.float32(1 / 256), -128)
    reference = run_litert_samples(model_to_bytes(model), [data])[0]
    got = run_litert_samples(model_to_bytes(out), [data])[0]
    assert sqnr_db(reference, got) > 30


def test_bias_overflow_enlarges_weight_scale() -> None:
    rng = np.random.default_rng(3)
    builder = GraphBuilder()
    x = builder.input("x", [1, 4])
    weights = rng.standard_normal((2, 4)) * 1e-6
    y = builder.fully_connected(x, weights, np.array([5e4, 1e-6], np.float32), "fc")
    model = parse_model(model_to_bytes(builder.finish([y])))
    data = rng.uniform(-1e-3, 1e-3, (16, 4)).astype(np.float32)
    result = quantize_loaded(model, single_input_dataset(data))
    assert result.notes.enlarged_weight_scales[0]["channels"] == [0]
    out = reparsed(result)
    (op,) = ops_of(out, "FULLY_CONNECTED")
    bias = out.tensor_data(out.subgraphs[0].tensors[op.inputs[2]])
    assert abs(int(bias[0])) <= 2**31 - 1
    dequantized = bias[0] * out.subgraphs[0].tensors[op.inputs[2]].quantization.scale[0]
    assert dequantized == pytest.approx(5e4, rel=1e-6)


def test_shared_bias_is_duplicated_per_op() -> None:
    rng = np.random.default_rng(4)
    builder = GraphBuilder()
    x = builder.input("x", [1, 4])
    b = builder.constant("shared_bias", rng.standard_normal(4).astype(np.float32))
    h = builder.fully_connected(x, rng.standard_normal((4, 4)), b, "fc1")
    y = builder.fully_connected(h, rng.standard_normal((4, 4)) * 3, b, "fc2")
    model = parse_model(model_to_bytes(builder.finish([y])))
    data = rng.standard_normal((16, 4)).astype(np.float32)
    out = reparsed(quantize_loaded(model, single_input_dataset(data), QuantizeOptions()))
    first, second = ops_of(out, "FULLY_CONNECTED")
    assert first.inputs[2] != second.inputs[2]
    make_interpreter(model_to_bytes(out)).invoke()


def test_keep_float_tensor_glob_and_type_glob() -> None:
    by_name = quantized("cnn", keep_float=("cnn_1/logits_1/*",))
    assert [(f.index, f.op_type) for f in by_name.float_ops] == [(8, "FULLY_CONNECTED")]
    by_type = quantized("cnn", keep_float=("*pool*",))
    assert sorted(f.op_type for f in by_type.float_ops) == ["AVERAGE_POOL_2D", "MAX_POOL_2D"]
    for result in (by_name, by_type):
        make_interpreter(model_to_bytes(result.model)).invoke()


def test_integer_model_input_feeds_an_int8_embedding_lookup() -> None:
    """Token ids stay int32; the GATHER table becomes int8 with its output's params."""
    rng = np.random.default_rng(5)
    builder = GraphBuilder()
    ids = builder.input("ids", [1, 6], np.int32)
    table = builder.constant("embedding", rng.standard_normal((50, 8)).astype(np.float32))
    embedded = builder.op(
        "GATHER",
        [table, ids],
        output_shape=[1, 6, 8],
        name="embed",
        options_type="GatherOptions",
        options={"axis": 0, "batch_dims": 0},
    )
    axes = builder.constant("axes", np.array([1], np.int32))
    pooled = builder.op(
        "MEAN",
        [embedded, axes],
        output_shape=[1, 8],
        name="pool",
        options_type="ReducerOptions",
        options={"keep_dims": False},
    )
    logits = builder.fully_connected(
        pooled, rng.standard_normal((3, 8)), rng.standard_normal(3), "fc"
    )
    model = parse_model(model_to_bytes(builder.finish([logits])))
    calibration = rng.integers(0, 50, (32, 6)).astype(np.int32)
    holdout = rng.integers(0, 50, (16, 6)).astype(np.int32)
    out = reparsed(quantize_loaded(model, Dataset.from_arrays([calibration], "ids")))
    (gather,) = ops_of(out, "GATHER")
    tensors = out.subgraphs[0].tensors
    assert tensors[gather.inputs[1]].dtype == TensorType.INT32
    assert tensors[gather.inputs[0]].dtype == TensorType.INT8
    assert tensors[gather.inputs[0]].quantization.same_params(
        tensors[gather.outputs[0]].quantization
    )
    assert audit_model(out) == []
    reference = run_litert_samples(model_to_bytes(model), [holdout], reference=False)[0]
    got = run_litert_samples(model_to_bytes(out), [holdout], reference=False)[0]
    assert sqnr_db(reference, got) > 20

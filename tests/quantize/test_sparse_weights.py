"""Weights stored sparse or as float16 in the source stay that compact in the written model.

Sparse float weights (behind DENSIFY) become int8 sparse constants behind a DENSIFY wherever
LiteRT runs that form (the spec file's `sparse_weights.int8_consumers`, each checked here with
the builtin kernels and XNNPACK), and float16 weights of ops left float stay float16 behind a
DEQUANTIZE. Storage never changes a value: the outputs equal those of the dense model.
"""

from __future__ import annotations

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter, OpResolverType

from qtool.calibrate import Dataset
from qtool.model import Model, TensorType, model_to_bytes, parse_model
from qtool.model.build import GraphBuilder
from qtool.model.sparsity import compact_sparsity, densify
from qtool.numerics import sqnr_db
from qtool.quantize import QuantizeOptions, quantize_loaded
from qtool.quantize.rewrite import rewritten
from qtool.spec import sparse_int8_consumers
from tests.conftest import DATA
from tests.quantize.common import fixture_path, quantized

RNG = np.random.default_rng(11)


def sparse_last_dim(dense: np.ndarray) -> tuple[np.ndarray, dict]:
    """`dense` in the layout MediaPipe's sparse models use: every dimension DENSE but the
    last, which is SPARSE_CSR with the narrowest index vectors that hold it."""
    values, sparsity = compact_sparsity(dense, sparse_dim=dense.ndim - 1)
    np.testing.assert_array_equal(densify(values, dense.shape, sparsity), dense)
    return values, sparsity


def pruned(shape: tuple[int, ...], density: float = 0.25) -> np.ndarray:
    weights = RNG.normal(0, 0.3, shape).astype(np.float32)
    return np.where(RNG.random(shape) < density, weights, 0).astype(np.float32)


def sparse_constant(b: GraphBuilder, name: str, dense: np.ndarray) -> int:
    """A float16 sparse constant behind DENSIFY then DEQUANTIZE, as MediaPipe stores them."""
    values, sparsity = sparse_last_dim(dense.astype(np.float16))
    stored = b.constant(f"{name}_sparse", values.astype(np.float16))
    b.subgraph.tensors[stored].shape = list(dense.shape)
    b.subgraph.tensors[stored].sparsity = sparsity
    half = b.op("DENSIFY", [stored], output_shape=list(dense.shape), output_dtype=np.float16)
    return b.op("DEQUANTIZE", [half], output_shape=list(dense.shape), name=name)


def one_layer(op_type: str) -> tuple[Model, tuple[int, ...]]:
    """A float model of one layer whose weights are stored sparse."""
    b = GraphBuilder()
    if op_type == "FULLY_CONNECTED":
        x = b.input("x", [1, 64])
        w = sparse_constant(b, "w", pruned((32, 64)))
        y = b.op(
            "FULLY_CONNECTED",
            [x, w, -1],
            output_shape=[1, 32],
            options_type="FullyConnectedOptions",
        )
        return b.finish([y]), (64,)
    x = b.input("x", [1, 8, 8, 16])
    if op_type == "CONV_2D":
        w = sparse_constant(b, "w", pruned((24, 1, 1, 16)))
        bias = b.constant("bias", RNG.normal(0, 0.1, 24).astype(np.float32))
        options = {"padding": 0, "stride_w": 1, "stride_h": 1}
        y = b.op(
            "CONV_2D",
            [x, w, bias],
            output_shape=[1, 8, 8, 24],
            options_type="Conv2DOptions",
            options=options,
        )
    elif op_type == "DEPTHWISE_CONV_2D":
        w = sparse_constant(b, "w", pruned((1, 3, 3, 16)))
        bias = b.constant("bias", RNG.normal(0, 0.1, 16).astype(np.float32))
        options = {"padding": 0, "stride_w": 1, "stride_h": 1, "depth_multiplier": 1}
        y = b.op(
            "DEPTHWISE_CONV_2D",
            [x, w, bias],
            output_shape=[1, 8, 8, 16],
            options_type="DepthwiseConv2DOptions",
            options=options,
        )
    else:  # TRANSPOSE_CONV
        w = sparse_constant(b, "w", pruned((8, 2, 2, 16)))
        shape = b.constant("shape", np.array([1, 16, 16, 8], np.int32))
        options = {"padding": 1, "stride_w": 2, "stride_h": 2}
        y = b.op(
            "TRANSPOSE_CONV",
            [shape, w, x, -1],
            output_shape=[1, 16, 16, 8],
            options_type="TransposeConvOptions",
            options=options,
        )
    return b.finish([y]), (8, 8, 16)


def outputs(blob: bytes, samples: np.ndarray, builtin: bool) -> np.ndarray:
    kind = OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES if builtin else OpResolverType.AUTO
    interpreter = Interpreter(model_content=blob, experimental_op_resolver_type=kind)
    interpreter.allocate_tensors()
    source = interpreter.get_input_details()[0]["index"]
    sink = interpreter.get_output_details()[0]["index"]
    found = []
    for sample in samples:
        interpreter.set_tensor(source, sample[None])
        interpreter.invoke()
        found.append(interpreter.get_tensor(sink).copy())
    return np.stack(found)


def quantize_both(model: Model, sample_shape: tuple[int, ...]):
    samples = RNG.normal(0, 1, (24, *sample_shape)).astype(np.float32)
    options = QuantizeOptions(calibration="minmax", bias_correction=False)
    result = quantize_loaded(model, Dataset.from_arrays([samples]), options)
    return result, samples


@pytest.mark.parametrize(
    "op_type", ["CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV", "FULLY_CONNECTED"]
)
def test_sparse_weights_stay_sparse_where_litert_runs_them(op_type: str) -> None:
    model, sample_shape = one_layer(op_type)
    result, samples = quantize_both(model, sample_shape)
    written = parse_model(model_to_bytes(result.model))
    sparse = [t for t in written.subgraphs[0].tensors if t.sparsity is not None]
    types = [written.op_type(op) for op in written.subgraphs[0].operators]
    if op_type in sparse_int8_consumers():
        assert [t.dtype for t in sparse] == [TensorType.INT8] and "DENSIFY" in types
    else:  # XNNPACK fails to prepare it: written dense
        assert sparse == [] and "DENSIFY" not in types
    # The same plans written dense compute the same outputs, bit for bit, on both kernels.
    specs = QuantizeOptions().precision().specs
    dense = model_to_bytes(rewritten(result.float_model, result.plans, specs)[0])
    for builtin in (True, False):
        np.testing.assert_array_equal(
            outputs(model_to_bytes(result.model), samples, builtin),
            outputs(dense, samples, builtin),
        )


def test_the_sparse_fixture_keeps_its_sparse_convolutions() -> None:
    result = quantized("sparse_weights")
    model = result.model
    tensors = model.subgraphs[0].tensors
    sparse = [t for t in tensors if t.sparsity is not None]
    assert sparse and all(t.dtype == TensorType.INT8 for t in sparse)
    for op in model.subgraphs[0].operators:
        if model.op_type(op) == "DENSIFY":
            (reader,) = [o for o in model.subgraphs[0].operators if op.outputs[0] in o.inputs]
            assert model.op_type(reader) in sparse_int8_consumers()
            assert tensors[op.outputs[0]].quantization.same_params(
                tensors[op.inputs[0]].quantization
            )


def test_float16_weights_of_float_ops_stay_float16() -> None:
    """An op kept in float reads its weights as the source stored them: float16 behind a
    DEQUANTIZE, not widened to float32."""
    result = quantized("fp16_weights", keep_float=("CONV_2D",))
    model = result.model
    tensors = model.subgraphs[0].tensors
    float32_constants = [
        t for t in tensors if model.is_constant(t) and t.dtype == TensorType.FLOAT32
    ]
    assert float32_constants == []
    halves = [t for t in tensors if model.is_constant(t) and t.dtype == TensorType.FLOAT16]
    assert halves
    for op in model.subgraphs[0].operators:
        if model.op_type(op) == "CONV_2D":
            weights = tensors[op.inputs[1]]
            assert weights.dtype == TensorType.FLOAT32 and not model.is_constant(weights)


def test_sparse_float32_weights_of_float_ops_stay_sparse() -> None:
    """An op kept in float reads weights the source stored sparse in float32 through a DENSIFY
    of the same sparse values (they were written dense: sparse_weights 24,224 bytes instead of
    the dense copy's), and computes what the source does in LiteRT."""
    result = quantized("sparse_weights", keep_float=("CONV_2D",))
    model = result.model
    tensors = model.subgraphs[0].tensors
    operators = model.subgraphs[0].operators
    densified = [op for op in operators if model.op_type(op) == "DENSIFY"]
    assert len(densified) == 2  # the fixture's two sparse convolutions (the first is dense)
    for op in densified:
        stored = tensors[op.inputs[0]]
        assert stored.dtype == TensorType.FLOAT32 and stored.sparsity is not None
        (reader,) = [o for o in operators if op.outputs[0] in o.inputs]
        assert model.op_type(reader) == "CONV_2D" and reader.inputs[1] == op.outputs[0]
    blob = model_to_bytes(model)
    samples = np.load(DATA / "sparse_weights_holdout.npz")
    (values,) = [samples[k] for k in samples.files]
    source = fixture_path("sparse_weights").read_bytes()
    for builtin in (True, False):
        assert sqnr_db(outputs(source, values, builtin), outputs(blob, values, builtin)) > 25


def test_a_weight_shared_by_two_layers_is_one_int8_buffer() -> None:
    b = GraphBuilder()
    x = b.input("x", [1, 16])
    w = b.constant("shared/weights", RNG.normal(0, 0.5, (16, 16)).astype(np.float32))
    h = b.op(
        "FULLY_CONNECTED", [x, w, -1], output_shape=[1, 16], options_type="FullyConnectedOptions"
    )
    y = b.op(
        "FULLY_CONNECTED", [h, w, -1], output_shape=[1, 16], options_type="FullyConnectedOptions"
    )
    model = b.finish([y])
    samples = RNG.normal(0, 1, (32, 16)).astype(np.float32)
    options = QuantizeOptions(calibration="minmax", bias_correction=False)
    written = quantize_loaded(model, Dataset.from_arrays([samples]), options).model
    weights = {
        written.subgraphs[0].operators[i].inputs[1]
        for i, op in enumerate(written.subgraphs[0].operators)
        if written.op_type(op) == "FULLY_CONNECTED"
    }
    assert len(weights) == 1


def test_xnnpack_refuses_int8_fully_connected_weights_from_densify(monkeypatch) -> None:
    """Why FULLY_CONNECTED is not among `int8_consumers`: written sparse, XNNPACK fails to
    prepare the model (the builtin kernel runs it). When LiteRT learns it, this test says so."""
    from qtool.quantize import constant_store

    monkeypatch.setattr(
        constant_store, "sparse_int8_consumers", lambda: frozenset({"FULLY_CONNECTED"})
    )
    model, sample_shape = one_layer("FULLY_CONNECTED")
    result, samples = quantize_both(model, sample_shape)
    blob = model_to_bytes(result.model)
    assert any(t.sparsity is not None for t in parse_model(blob).subgraphs[0].tensors)
    assert np.isfinite(outputs(blob, samples, builtin=True)).all()
    with pytest.raises(RuntimeError, match="FULLY_CONNECTED"):
        outputs(blob, samples, builtin=False)

"""Same-scale groups of the plan: what joins a group, what sets its scale, what is requantized."""

from __future__ import annotations

import numpy as np
import pytest

from qtool.calibrate import Dataset
from qtool.check.audit import audit_model
from qtool.model import Model, TensorType, model_to_bytes, parse_model
from qtool.model.build import GraphBuilder
from qtool.numerics import activation_params, sqnr_db
from qtool.quantize import QuantizeOptions, QuantizeResult, quantize_loaded
from qtool.quantize.plan import INT8, INT16
from tests.litert import run_litert_samples

ACTIVATIONS = [INT8, INT16]
# SQNR (dB) a single exact op reaches with this activation width on uniform data.
GOOD = {INT8: 38.0, INT16: 80.0}
_TYPES = {INT8: TensorType.INT8, INT16: TensorType.INT16}


def finished(builder: GraphBuilder, outputs: list[int]) -> Model:
    return parse_model(model_to_bytes(builder.finish(outputs)))


def quantized_with(model: Model, samples: np.ndarray, activations: str) -> QuantizeResult:
    options = QuantizeOptions(calibration="minmax", activations=activations)
    return quantize_loaded(model, Dataset.from_arrays([samples], "uniform"), options)


def uniform(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (64, *shape)).astype(np.float32)


def litert_sqnr(model: Model, result: QuantizeResult, samples: np.ndarray) -> list[float]:
    reference = run_litert_samples(model_to_bytes(model), [samples], reference=False)
    got = run_litert_samples(model_to_bytes(result.model), [samples], reference=False)
    return [sqnr_db(r, g) for r, g in zip(reference, got, strict=True) if r.dtype != bool]


def tensor_named(model: Model, name: str):
    return next(t for t in model.subgraphs[0].tensors if t.name == name)


def binary(builder: GraphBuilder, op_type: str, a: int, b: int, name: str, **kw) -> int:
    return builder.op(op_type, [a, b], output_shape=[1, 8], name=name, **kw)


@pytest.mark.parametrize("activations", ACTIVATIONS)
def test_a_huge_constant_does_not_widen_its_group(activations: str) -> None:
    """UnitNormalization's MINIMUM(x, 1e12): the scale comes from x; 1e12 is clamped."""
    builder = GraphBuilder()
    x = builder.input("x", [1, 8])
    limit = builder.constant("limit", np.float32(1e12))
    y = binary(builder, "MINIMUM", x, limit, "min")
    model = finished(builder, [y])
    samples = uniform((8,))
    result = quantized_with(model, samples, activations)
    dtype = np.int8 if activations == INT8 else np.int16
    wanted = activation_params(float(samples.min()), float(samples.max()), dtype=dtype)
    plan = result.plans[0]
    for slot in [*plan.reads.values(), *plan.writes.values()]:
        assert plan.params[slot].scale.tolist() == wanted.scale.tolist(), slot
    constant = tensor_named(result.model, "limit")  # the integer copy keeps the name
    assert constant.dtype == _TYPES[activations]
    assert int(result.model.tensor_data(constant)) == np.iinfo(dtype).max  # clamped
    assert min(litert_sqnr(model, result, samples)) > GOOD[activations]


@pytest.mark.parametrize("activations", ACTIVATIONS)
def test_a_shared_constant_does_not_join_two_groups(activations: str) -> None:
    """TensorFlow shares one 0.0 among many MAXIMUMs: each keeps its own input's scale."""
    builder = GraphBuilder()
    x = builder.input("x", [1, 8])
    zero = builder.constant("zero", np.float32(0.0))
    hundred = builder.constant("hundred", np.float32(100.0))
    wide = binary(builder, "MUL", x, hundred, "wide", options_type="MulOptions", options={})
    narrow_relu = binary(builder, "MAXIMUM", x, zero, "narrow_relu")
    wide_relu = binary(builder, "MAXIMUM", wide, zero, "wide_relu")
    model = finished(builder, [narrow_relu, wide_relu])
    samples = uniform((8,), seed=1)
    result = quantized_with(model, samples, activations)
    plan = result.plans[0]  # operators: MUL, MAXIMUM (narrow), MAXIMUM (wide)
    narrow_scale, wide_scale = (float(plan.params[plan.writes[(i, 0)]].scale[0]) for i in (1, 2))
    assert wide_scale == pytest.approx(100 * narrow_scale, rel=1e-3)
    assert min(litert_sqnr(model, result, samples)) > GOOD[activations]


def comparison_model() -> Model:
    builder = GraphBuilder()
    x = builder.input("x", [1, 8])
    three = builder.constant("three", np.float32(3.0))
    y = binary(builder, "MUL", x, three, "y", options_type="MulOptions", options={})
    above = builder.op("GREATER", [x, y], output_shape=[1, 8], output_dtype=np.bool_, name="gt")
    return finished(builder, [above, y])


@pytest.mark.parametrize("activations", ACTIVATIONS)
def test_comparison_inputs_share_a_group_only_in_int16(activations: str) -> None:
    model = comparison_model()
    samples = uniform((8,), seed=2)
    result = quantized_with(model, samples, activations)
    subgraph = result.model.subgraphs[0]
    (greater,) = [op for op in subgraph.operators if result.model.op_type(op) == "GREATER"]
    params = {
        (subgraph.tensors[t].quantization.scale[0], subgraph.tensors[t].quantization.zero_point[0])
        for t in greater.inputs
    }
    assert all(subgraph.tensors[t].dtype == _TYPES[activations] for t in greater.inputs)
    # int16 kernels compare the integers as they are; int8 kernels rescale both inputs.
    assert len(params) == (1 if activations == INT16 else 2)
    reference = run_litert_samples(model_to_bytes(model), [samples], reference=False)
    got = run_litert_samples(model_to_bytes(result.model), [samples], reference=False)
    assert np.mean(got[0] != reference[0]) < 0.02  # a comparison flips only at near-ties
    assert sqnr_db(reference[1], got[1]) > GOOD[activations]


@pytest.mark.parametrize("activations", ACTIVATIONS)
@pytest.mark.parametrize("threshold", [0.0, 0.3])
def test_a_comparison_constant_of_zeros_is_on_the_activation_grid(
    activations: str, threshold: float
) -> None:
    # Zeros alone have a degenerate range (scale 1), and LiteRT's int8 comparisons abort on an
    # input scale >= 1: they take the activation's parameters. A threshold keeps its own,
    # finer grid.
    builder = GraphBuilder()
    x = builder.input("x", [1, 8])
    limit = builder.constant("limit", np.full([1, 8], threshold, np.float32))
    mask = builder.op("GREATER", [x, limit], output_shape=[1, 8], output_dtype=np.bool_)
    model = finished(builder, [builder.op("SELECT", [mask, x, limit], output_shape=[1, 8])])
    samples = uniform((8,), seed=3)
    result = quantized_with(model, samples, activations)
    subgraph = result.model.subgraphs[0]
    (greater,) = [op for op in subgraph.operators if result.model.op_type(op) == "GREATER"]
    live, constant = (subgraph.tensors[t].quantization for t in greater.inputs)
    same = (constant.scale[0], constant.zero_point[0]) == (live.scale[0], live.zero_point[0])
    assert same == (threshold == 0.0 or activations == INT16)  # int16 compares raw codes
    reference = run_litert_samples(model_to_bytes(model), [samples], reference=False)
    got = run_litert_samples(model_to_bytes(result.model), [samples], reference=False)
    assert sqnr_db(reference[0], got[0]) > GOOD[activations] - 3


@pytest.mark.parametrize(
    ("activations", "fixed"), [(INT8, (1 / 256, -128)), (INT16, (1 / 32768, 0))]
)
def test_logistic_output_into_concatenation_is_requantized(activations: str, fixed) -> None:
    builder = GraphBuilder()
    x = builder.input("x", [1, 8])
    sigmoid = builder.op("LOGISTIC", [x], output_shape=[1, 8], name="sigmoid")
    y = builder.op(
        "CONCATENATION",
        [sigmoid, x],
        output_shape=[1, 16],
        name="concat",
        options_type="ConcatenationOptions",
        options={"axis": 1},
    )
    model = finished(builder, [y])
    samples = uniform((8,), seed=3) * 4
    result = quantized_with(model, samples, activations)
    plan = result.plans[0]
    assert plan.requantized(result.float_model) == [(1, 0)]
    own = plan.params[plan.writes[(0, 0)]]
    assert (float(own.scale[0]), int(own.zero_point[0])) == (np.float32(fixed[0]), fixed[1])
    copy = plan.params[plan.reads[(1, 0)]]
    group = plan.params[plan.writes[(1, 0)]]
    assert copy.scale.tolist() == group.scale.tolist() != own.scale.tolist()
    assert plan.params[plan.reads[(1, 1)]].scale.tolist() == group.scale.tolist()
    types = [result.model.op_type(op) for op in result.model.subgraphs[0].operators]
    assert types.count("QUANTIZE") == 2  # the model input, and the requantized sigmoid
    assert min(litert_sqnr(model, result, samples)) > GOOD[activations] - 10


def test_int16_prelu_keeps_an_int8_alpha() -> None:
    builder = GraphBuilder()
    x = builder.input("x", [1, 4, 4, 3])
    alpha = builder.constant("alpha", np.array([[[0.1, 0.25, -0.5]]], np.float32))
    y = builder.op("PRELU", [x, alpha], output_shape=[1, 4, 4, 3], name="prelu")
    model = finished(builder, [y])
    samples = uniform((4, 4, 3), seed=4)
    result = quantized_with(model, samples, INT16)
    assert result.plans[0].reads[(0, 1)][1] == INT8
    subgraph = result.model.subgraphs[0]
    (prelu,) = [op for op in subgraph.operators if result.model.op_type(op) == "PRELU"]
    dtypes = [subgraph.tensors[t].dtype for t in [*prelu.inputs, *prelu.outputs]]
    assert dtypes == [TensorType.INT16, TensorType.INT8, TensorType.INT16]
    assert [f for f in audit_model(result.model) if f.severity != "info"] == []
    assert min(litert_sqnr(model, result, samples)) > 60

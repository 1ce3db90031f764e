"""The weight modes end to end: `mode` dynamic, weights and float16, int4 weights per channel and
in blocks, on the fixtures and on built models. Every written model is read back, run in LiteRT
with the builtin kernels and with XNNPACK, compared with the float model in dB, and audited
(compliant, its weights recognised)."""

from __future__ import annotations

import numpy as np
import pytest

from qtool.calibrate import Dataset, load_dataset, model_inputs
from qtool.check import check_loaded
from qtool.errors import UsageError
from qtool.jobs import finish_quantization
from qtool.model import Model, TensorType, load_model, model_to_bytes, parse_model
from qtool.numerics import sqnr_db
from qtool.quantize import QuantizeOptions, quantize_loaded
from qtool.quantize.weight_modes import SYNTHETIC_WARNING
from qtool.refusals import TargetNotReachedError
from tests.conftest import DATA, MODELS
from tests.quantize.weight_models import (
    RNG,
    depthwise_fc_model,
    embedding_model,
    fc_model,
    lstm_model,
    run,
)

FIXTURES = ("cnn", "mlp", "fp16_weights", "sparse_weights", "multi_io", "spec_ops")
MODES = {  # mode and weight bits -> the worst output SQNR it must reach on the fixtures (dB)
    ("dynamic", 8): 25.0,
    ("weights", 8): 30.0,
    ("float16", 8): 50.0,
    ("dynamic", 4): 10.0,
    ("weights", 4): 10.0,
}


def options_of(mode: str, bits: int, **more) -> QuantizeOptions:
    """The options of a weight mode, every op's weights narrow however small (dynamic and
    weights)."""
    minimum = 0 if mode in ("dynamic", "weights") else None
    return QuantizeOptions(mode=mode, weight_bits=bits, min_weight_elements=minimum, **more)


def fixture(name: str) -> tuple[Model, Dataset, Dataset]:
    model = load_model(MODELS / f"{name}.tflite")
    inputs = model_inputs(model)
    calibration = load_dataset([str(DATA / f"{name}_calib.npz")], inputs)
    holdout = load_dataset([str(DATA / f"{name}_holdout.npz")], inputs)
    return model, calibration, holdout


def litert_sqnr(reference: Model, candidate: bytes, feeds: list[np.ndarray], kernels: str) -> float:
    """The worst output SQNR of `candidate` against `reference` (its float model), sample by
    sample on `kernels` (builtin or xnnpack), for a single-input model."""
    want = [run(model_to_bytes(reference), x[None], "builtin")[0] for x in feeds[0]]
    got = [run(candidate, x[None], kernels)[0] for x in feeds[0]]
    return sqnr_db(np.stack(want), np.stack(got))


def audited(model: Model):
    """The audit of the written model as `qtool check` reads it."""
    return check_loaded(parse_model(model_to_bytes(model)))


@pytest.mark.parametrize("name", FIXTURES)
@pytest.mark.parametrize(("mode", "bits"), sorted(MODES))
def test_every_mode_on_every_fixture_runs_in_litert_and_is_compliant(name, mode, bits) -> None:
    model, calibration, holdout = fixture(name)
    result = quantize_loaded(model, {0: calibration}, options_of(mode, bits), holdout={0: holdout})
    assert result.accuracy and all(a.measured_in == "LiteRT" for a in result.accuracy)
    assert min(a.sqnr_db for a in result.accuracy) > MODES[(mode, bits)]
    assert "held-out" in result.accuracy_source
    audit = audited(result.model)
    assert [f for f in audit.findings if f.severity != "info"] == []
    assert audit.weights is not None
    written = model_to_bytes(result.model)
    assert len(written) < len(model_to_bytes(model))
    feeds = next(holdout.iter_chunks(4))
    if len(feeds) == 1:
        for kernels in ("builtin", "xnnpack"):
            assert litert_sqnr(model, written, feeds, kernels) > MODES[(mode, bits)] - 3


@pytest.mark.parametrize(
    ("build", "op_types"),
    [
        (fc_model, {"FULLY_CONNECTED"}),
        (depthwise_fc_model, {"DEPTHWISE_CONV_2D", "FULLY_CONNECTED"}),
        (lstm_model, {"UNIDIRECTIONAL_SEQUENCE_LSTM"}),
        (embedding_model, {"EMBEDDING_LOOKUP", "FULLY_CONNECTED"}),
    ],
)
@pytest.mark.parametrize(("mode", "bits"), sorted(MODES))
def test_every_mode_on_built_models(build, op_types, mode, bits) -> None:
    """Without data: measured on synthetic samples, with the warning; every op with weights
    stores them narrow, on the form its kernel reads (int8 where it has no int4 kernel)."""
    model = build()
    result = quantize_loaded(model, None, options_of(mode, bits))
    assert result.warnings[0] == SYNTHETIC_WARNING and result.synthetic
    assert min(a.sqnr_db for a in result.accuracy) > MODES[(mode, bits)]
    forms = {op.op_type: op.form for plan in result.weight_plans.values() for op in plan.ops}
    assert op_types <= set(forms) and None not in forms.values()
    if mode != "float16":
        expected_bits = {
            op: bits if (mode == "weights" or op in ("FULLY_CONNECTED", "EMBEDDING_LOOKUP")) else 8
            for op in forms
        }
        assert {op: form.bits for op, form in forms.items()} == expected_bits
    audit = audited(result.model)
    assert [f for f in audit.findings if f.severity != "info"] == []


def test_tensorflow_converter_conventions() -> None:
    """Hybrid FULLY_CONNECTED and CONV_2D per-axis with asymmetric input quantization and the
    converter's op versions; weights under 1024 elements stay float (and are listed)."""
    model = depthwise_fc_model()
    result = quantize_loaded(model, None, QuantizeOptions(mode="dynamic"))
    graph = result.model.subgraphs[0]
    fc = next(op for op in graph.operators if result.model.op_type(op) == "FULLY_CONNECTED")
    weights = graph.tensors[fc.inputs[1]]
    assert weights.quantization.per_axis and fc.option("asymmetric_quantize_inputs")
    assert result.model.operator_codes[fc.opcode_index].version == 12
    assert [(f.op_type, f.reason.split(",")[0]) for f in result.float_ops] == [
        ("DEPTHWISE_CONV_2D", "72 weights")
    ]


def test_int4_blocks_and_rounding_optimisation() -> None:
    """Blockwise int4 FULLY_CONNECTED with bfloat16-exact float16 scales; with data, the rounding
    of each weight is optimised on its layer's inputs and the held-out SQNR gains."""
    model = fc_model(depth=256, hidden=128)
    mixing = RNG.normal(0, 1, (16, 256))  # inputs with structure: 16 sources mixed

    def inputs(count: int) -> Dataset:
        sources = RNG.normal(0, 1, (count, 16)) @ mixing + RNG.normal(0, 0.1, (count, 256))
        return Dataset.from_arrays([sources.astype(np.float32)])

    data, holdout = inputs(256), inputs(32)
    options = QuantizeOptions(mode="dynamic", weight_bits=4, block_size=32)
    plain = quantize_loaded(model, None, options, holdout={0: holdout})
    rounded = quantize_loaded(model, {0: data}, options, holdout={0: holdout})
    forms = [op.form.label() for op in rounded.weight_plans[0].ops]
    assert forms == ["int4 blockwise 32", "int4 blockwise 32"]
    assert all(op.rounded for op in rounded.weight_plans[0].ops)
    gain = rounded.accuracy[0].sqnr_db - plain.accuracy[0].sqnr_db
    assert gain > 1.0, gain
    assert audited(rounded.model).findings == []


def test_weights_several_ops_read_are_stored_once_rounded_to_nearest() -> None:
    """A rounding fitted to each reader of shared weights would store a copy per reader."""
    from qtool.model.build import GraphBuilder

    b = GraphBuilder()
    x = b.input("x", [1, 128])
    shared = b.constant("shared", RNG.normal(0, 0.1, (64, 128)).astype(np.float32))
    own = b.constant("own", RNG.normal(0, 0.1, (64, 128)).astype(np.float32))
    relu = b.op("RELU", [x], output_shape=[1, 128])
    layers = [
        b.op("FULLY_CONNECTED", [source, weights, -1], output_shape=[1, 64])
        for source, weights in ((x, shared), (relu, shared), (x, own))
    ]
    total = b.op("ADD", layers[:2], output_shape=[1, 64])
    model = b.finish([b.op("ADD", [total, layers[2]], output_shape=[1, 64])])
    data = Dataset.from_arrays([RNG.normal(0, 1, (64, 128)).astype(np.float32)])
    options = QuantizeOptions(mode="dynamic", weight_bits=4)
    plain = quantize_loaded(model, None, options)
    rounded = quantize_loaded(model, {0: data}, options)
    assert [op.rounded for op in rounded.weight_plans[0].ops] == [False, False, True]
    assert len(model_to_bytes(rounded.model)) == len(model_to_bytes(plain.model))
    assert audited(rounded.model).findings == []


def test_float16_keeps_float32_constants_float16_cannot_hold() -> None:
    model = fc_model()
    graph = model.subgraphs[0]
    bias = graph.operators[0].inputs[2]
    model.set_tensor_data(graph, bias, np.full(64, 1e6, np.float32))
    result = quantize_loaded(model, None, QuantizeOptions(mode="float16"))
    assert [f.reason for f in result.float_ops if f.index == 0] == []
    kept = [t for t in result.model.subgraphs[0].tensors if t.name == "fc1/bias"]
    assert [t.dtype for t in kept] == [0]  # FLOAT32: 1e6 is beyond float16


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"mode": "float16", "weight_bits": 4}, "weight_bits does not apply"),
        ({"mode": "dynamic", "block_size": 32}, "weight_bits 4"),
        ({"mode": "weights", "weight_bits": 4, "block_size": 32}, "only hybrid kernels"),
        ({"mode": "dynamic", "weight_bits": 4, "block_size": 48}, "multiple of 32"),
        ({"mode": "dynamic", "io": "int8"}, "io applies to mode full"),
        ({"mode": "float16", "min_weight_elements": 10}, "dynamic and weights modes"),
        ({"mode": "turbo"}, "mode must be one of"),
        ({"mode": "dynamic", "weight_bits": 2}, "8 or 4"),
    ],
)
def test_options_that_do_not_go_together_are_refused(options, message) -> None:
    with pytest.raises(UsageError, match=message):
        QuantizeOptions(**options)


def test_target_sqnr_puts_int4_where_it_holds_and_int8_elsewhere() -> None:
    model = depthwise_fc_model()
    data = Dataset.from_arrays([RNG.normal(0, 1, (96, 8, 8, 8)).astype(np.float32)])
    holdout = Dataset.from_arrays([RNG.normal(0, 1, (32, 8, 8, 8)).astype(np.float32)])
    base = {"mode": "dynamic", "weight_bits": 4, "min_weight_elements": 0}
    plain = quantize_loaded(model, {0: data}, QuantizeOptions(**base), holdout={0: holdout})
    worst = min(a.sqnr_db for a in plain.accuracy)
    target = worst + 5.0
    options = QuantizeOptions(**base, target_sqnr=target)
    result = quantize_loaded(model, {0: data}, options, holdout={0: holdout})
    assert result.searches[0].reached
    assert min(a.sqnr_db for a in result.accuracy) >= target - 1.0
    bits = {op.op_type: op.form.bits for op in result.weight_plans[0].ops}
    assert 8 in bits.values()
    assert result.baseline_size < len(model_to_bytes(result.model))
    with pytest.raises(TargetNotReachedError, match="target SQNR 200 dB not reached"):
        finish_quantization(
            model, {0: data}, {0: holdout}, QuantizeOptions(**base, target_sqnr=200.0)
        )
    floated = QuantizeOptions(**base, target_sqnr=200.0, allow_float=True)
    result = quantize_loaded(model, {0: data}, floated, holdout={0: holdout})
    assert {f.reason for f in result.float_ops} == {"kept in float to reach the target SQNR"}


@pytest.mark.parametrize("name", ["cnn", "mlp", "spec_ops"])
def test_int4_weights_with_int8_activations(name) -> None:
    """The full mode with `weight_bits` 4: FULLY_CONNECTED, CONV_2D and DEPTHWISE_CONV_2D read
    int4 weights (their int8 kernels do), the other ops int8; LiteRT runs it with the builtin
    kernels and XNNPACK, and the audit finds nothing."""
    model, calibration, holdout = fixture(name)
    result = quantize_loaded(model, calibration, QuantizeOptions(weight_bits=4), holdout=holdout)
    assert min(a.sqnr_db for a in result.accuracy) > 12.0
    graph = result.model.subgraphs[0]
    int4 = {
        result.model.op_type(op)
        for op in graph.operators
        if any(t >= 0 and graph.tensors[t].dtype == TensorType.INT4 for t in op.inputs)
    }
    assert int4 and int4 <= {"FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D"}
    assert [f for f in audited(result.model).findings if f.severity != "info"] == []
    feeds = next(holdout.iter_chunks(4))
    if len(feeds) == 1:
        for kernels in ("builtin", "xnnpack"):
            assert litert_sqnr(model, model_to_bytes(result.model), feeds, kernels) > 10.0


def test_keep_float_and_min_weight_elements_say_why_an_op_keeps_float_weights() -> None:
    model = depthwise_fc_model()
    options = QuantizeOptions(mode="weights", keep_float=("DEPTHWISE*",))
    result = quantize_loaded(model, None, options)
    assert [(f.op_type, f.reason) for f in result.float_ops] == [
        ("DEPTHWISE_CONV_2D", "kept in float by keep-float pattern 'DEPTHWISE*'")
    ]
    options = QuantizeOptions(mode="dynamic", min_weight_elements=10_000)
    reasons = [f.reason for f in quantize_loaded(model, None, options).float_ops]
    assert len(reasons) == 2 and all("fewer than 10000" in r for r in reasons)

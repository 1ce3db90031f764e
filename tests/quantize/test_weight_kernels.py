"""Every fact of schemas/weight_modes.json, run in LiteRT: the hybrid forms each op's kernel reads
(with the builtin kernels and XNNPACK), the forms it refuses or computes wrong, what a DEQUANTIZE
expands, and the blockwise facts (scales XNNPACK reads as bfloat16, block sizes it takes, shapes
and kernels that write zeros).

Each model is built here, independently of the quantizer (tests/quantize/weight_models.py), and
compared with the float op on the weights its integers stand for: a hybrid kernel only adds the
quantization of its input at each inference (30-45 dB), a DEQUANTIZE nothing.
"""

from __future__ import annotations

import numpy as np
import pytest

from qtool.model import QuantParams, model_to_bytes
from qtool.numerics import sqnr_db
from qtool.quantize import QuantizeOptions, quantize_loaded
from qtool.weight_spec import BLOCKWISE, PER_AXIS, PER_TENSOR, weight_rules
from tests.quantize.weight_models import (
    RNG,
    Stored,
    accuracy,
    int4_fc,
    int8_model,
    lstm_model,
    one_op,
    run,
    stored_weights,
    with_float16_bias,
)

ONE_OP_TYPES = (
    "FULLY_CONNECTED",
    "CONV_2D",
    "DEPTHWISE_CONV_2D",
    "TRANSPOSE_CONV",
    "BATCH_MATMUL",
    "EMBEDDING_LOOKUP",
)
HYBRID_DB = 30.0  # the input's quantization at each inference, and nothing else
EXACT_DB = 80.0


def _hybrid_forms() -> list[tuple[str, int, str]]:
    return [
        (op_type, int(kind[3:]), granularity)
        for op_type in ONE_OP_TYPES
        for kind, granularities in weight_rules()[op_type].hybrid.items()
        for granularity in granularities
        if granularity != BLOCKWISE
    ]


def _missing_forms() -> list[tuple[str, int, str]]:
    """Forms the data says a hybrid kernel does not read."""
    found = []
    for op_type in ONE_OP_TYPES:
        rule = weight_rules()[op_type]
        for bits in (8, 4):
            for granularity in (PER_AXIS, PER_TENSOR):
                if granularity not in rule.hybrid_granularities(f"int{bits}"):
                    found.append((op_type, bits, granularity))
    return found


@pytest.mark.parametrize(("op_type", "bits", "granularity"), _hybrid_forms())
@pytest.mark.parametrize("kernels", ["builtin", "xnnpack"])
def test_hybrid_kernels_read_the_forms_the_data_lists(op_type, bits, granularity, kernels) -> None:
    found, _ = accuracy(one_op(op_type), Stored(bits, granularity), kernels)
    assert found > HYBRID_DB


@pytest.mark.parametrize(("op_type", "bits", "granularity"), _missing_forms())
def test_hybrid_kernels_refuse_or_miscompute_the_forms_it_leaves_out(
    op_type, bits, granularity
) -> None:
    """Not in the data: LiteRT refuses the model, or computes far from the float op (a
    per-tensor DEPTHWISE_CONV_2D passes Prepare and gives garbage)."""
    try:
        found, _ = accuracy(one_op(op_type), Stored(bits, granularity), "builtin")
    except (RuntimeError, ValueError):
        return
    assert found < 15.0


@pytest.mark.parametrize("op_type", ONE_OP_TYPES)
@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("kernels", ["builtin", "xnnpack"])
def test_a_dequantize_expands_int8_and_int4_weights_of_every_op(op_type, bits, kernels) -> None:
    granularity = PER_AXIS if weight_rules()[op_type].channel_axis is not None else PER_TENSOR
    found, _ = accuracy(one_op(op_type), Stored(bits, granularity, dequantized=True), kernels)
    assert found > EXACT_DB


def test_batch_matmul_reads_per_axis_weights_along_its_output_columns_only() -> None:
    spec = one_op("BATCH_MATMUL")
    assert accuracy(spec, Stored(8, PER_AXIS), "builtin")[0] > HYBRID_DB
    spec.axis = 0  # the contracted dimension: the kernel scales the wrong columns
    assert accuracy(spec, Stored(8, PER_AXIS), "builtin")[0] < 20.0


@pytest.mark.parametrize("op_type", ["FULLY_CONNECTED", "EMBEDDING_LOOKUP"])
@pytest.mark.parametrize("kernels", ["builtin", "xnnpack"])
def test_blockwise_int4_weights_run_where_the_data_says(op_type, kernels) -> None:
    spec = one_op(op_type)
    found, delegated = accuracy(spec, Stored(4, BLOCKWISE, block_size=32), kernels)
    assert found > HYBRID_DB
    if op_type == "FULLY_CONNECTED":
        assert delegated == (kernels == "xnnpack")


def test_blockwise_weights_give_zeros_where_litert_has_no_path_for_them() -> None:
    """The reference FULLY_CONNECTED kernel, a DEQUANTIZE of blockwise weights, and the builtin
    kernel below 4 outputs: no error, outputs far from the float op."""
    spec = one_op("FULLY_CONNECTED")
    assert accuracy(spec, Stored(4, BLOCKWISE), "reference")[0] < 1.0
    assert accuracy(spec, Stored(4, BLOCKWISE, dequantized=True), "builtin")[0] < 1.0
    narrow = one_op("FULLY_CONNECTED", outputs=3)
    assert accuracy(narrow, Stored(4, BLOCKWISE), "builtin")[0] < 1.0
    shallow = one_op("FULLY_CONNECTED", outputs=8, depth=16)
    assert accuracy(shallow, Stored(4, BLOCKWISE, block_size=16), "builtin")[0] < 1.0


def test_xnnpack_reads_block_scales_as_bfloat16() -> None:
    spec = one_op("FULLY_CONNECTED", outputs=64, depth=256)
    for bf16, apart in ((False, (20.0, 70.0)), (True, (100.0, np.inf))):
        blob = model_to_bytes(spec.model(Stored(4, BLOCKWISE, bf16_scales=bf16)))
        builtin, _ = run(blob, spec.feed, "builtin")
        xnnpack, delegated = run(blob, spec.feed, "xnnpack")
        assert delegated
        assert apart[0] < sqnr_db(builtin, xnnpack) <= apart[1]


@pytest.mark.parametrize(("block_size", "taken"), [(32, True), (96, True), (48, False)])
def test_xnnpack_takes_block_sizes_that_are_multiples_of_32(block_size, taken) -> None:
    spec = one_op("FULLY_CONNECTED", outputs=16, depth=192)
    found, delegated = accuracy(spec, Stored(4, BLOCKWISE, block_size=block_size), "xnnpack")
    assert found > HYBRID_DB and delegated == taken


def test_lstm_reads_hybrid_weights_per_tensor_only() -> None:
    """The quantizer's dynamic-range LSTM (per-tensor int8 weights) runs with every kernel; the
    same weights per axis pass Prepare and give garbage."""
    model = lstm_model()
    feed = RNG.normal(0, 1, (1, 6, 16)).astype(np.float32)
    reference, _ = run(model_to_bytes(model), feed, "builtin")
    options = QuantizeOptions(mode="dynamic", min_weight_elements=0)
    hybrid = quantize_loaded(model, None, options).model
    for kernels in ("builtin", "reference", "xnnpack"):
        assert sqnr_db(reference, run(model_to_bytes(hybrid), feed, kernels)[0]) > HYBRID_DB
    subgraph = hybrid.subgraphs[0]
    for position in weight_rules()["UNIDIRECTIONAL_SEQUENCE_LSTM"].weights[:8]:
        tensor = subgraph.tensors[subgraph.operators[0].inputs[position]]
        real = hybrid.tensor_data(tensor).astype(np.float32) * tensor.quantization.scale[0]
        values, scale = stored_weights(real, Stored(8, PER_AXIS), 0)
        hybrid.set_tensor_data(subgraph, subgraph.operators[0].inputs[position], values)
        tensor.quantization = QuantParams.of(scale, 0, 0)
    assert sqnr_db(reference, run(model_to_bytes(hybrid), feed, "builtin")[0]) < 10.0


@pytest.mark.parametrize("op_type", ["FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D"])
@pytest.mark.parametrize("kernels", ["builtin", "reference", "xnnpack"])
def test_int8_kernels_read_int4_weights_where_the_data_says(op_type, kernels) -> None:
    """int8 activations with int4 weights (`int4_with_int8_activations`): the same outputs as
    the int8 kernel on those weights widened to int8, within a code."""
    assert PER_AXIS in weight_rules()[op_type].int4_with_int8_activations
    spec = one_op(op_type)
    values, scale = stored_weights(spec.weights, Stored(4, PER_AXIS), spec.axis)
    feed = np.clip(np.round(spec.feed / 0.05), -128, 127).astype(np.int8)
    outputs = []
    for bits in (8, 4):
        model = int8_model(spec, values, scale, bits)
        outputs.append(run(model_to_bytes(model), feed, kernels)[0].astype(np.int32))
    assert np.abs(outputs[0] - outputs[1]).max() <= 1


def test_the_optimized_4bit_fully_connected_misreads_minus_8() -> None:
    """Why int4 weights are written in [-7, 7]: with a -8 the builtin kernel's optimized 4-bit
    path computes garbage; the reference kernel, XNNPACK and the blockwise path read it."""
    spec = one_op("FULLY_CONNECTED")
    values = RNG.integers(-8, 8, spec.weights.shape).astype(np.int8)
    scale = np.full(spec.weights.shape[0], 0.01, np.float32)
    for low, builtin in ((-8, False), (-7, True)):
        weights = np.clip(values, low, 7)
        blob = model_to_bytes(int4_fc(spec, weights, scale))
        exact = spec.feed @ (weights * scale[:, None]).T
        assert (sqnr_db(exact, run(blob, spec.feed, "builtin")[0]) > HYBRID_DB) == builtin
        for kernels in ("reference", "xnnpack"):
            assert sqnr_db(exact, run(blob, spec.feed, kernels)[0]) > HYBRID_DB


@pytest.mark.parametrize("op_type", ["FULLY_CONNECTED", "CONV_2D"])
def test_xnnpack_refuses_a_hybrid_op_whose_bias_is_a_float16_dequantize(op_type) -> None:
    """Why the weight modes keep a hybrid op's bias float32 (`hybrid_bias`); the builtin
    kernels run it."""
    spec = one_op(op_type)
    blob = model_to_bytes(with_float16_bias(spec, spec.model(Stored(8, PER_AXIS))))
    assert run(blob, spec.feed, "builtin")[0].size
    with pytest.raises(RuntimeError, match=r"XNNPACK|delegate"):
        run(blob, spec.feed, "xnnpack")

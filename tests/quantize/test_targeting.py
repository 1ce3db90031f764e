"""`quantize --target`: ops the device cannot run in int8, but can in float, are planned in float;
ops that only fall back to the CPU, or that no form of can run, stay int8."""

from __future__ import annotations

import numpy as np
from click.testing import CliRunner

from qtool.calibrate import Dataset
from qtool.cli import main
from qtool.model import Model, model_to_bytes
from qtool.numerics import sqnr_db
from qtool.quantize import QuantizeOptions, QuantizeResult, quantize_loaded
from qtool.targets.placement import CANNOT_RUN, FALLBACK, ON_TARGET, place_model
from tests.check.oracles import litert_reference_outputs, tflm_result
from tests.check.target_models import BUILDERS
from tests.litert import run_litert

SAMPLES = 16


def samples(model: Model, seed: int = 3) -> np.ndarray:
    (t,) = model.subgraphs[0].inputs
    shape = model.subgraphs[0].tensors[t].shape[1:]
    return np.random.default_rng(seed).uniform(-1, 1, (SAMPLES, *shape)).astype(np.float32)


def quantized(name: str, target: str | None) -> tuple[Model, QuantizeResult]:
    model = BUILDERS[name]()
    data = Dataset.from_arrays([samples(model)])
    return model, quantize_loaded(model, data, QuantizeOptions(target=target))


def test_tflm_keeps_the_op_it_has_no_int8_kernel_for_in_float() -> None:
    model, result = quantized("negate_after_conv", "tflm")
    [kept] = result.float_ops
    assert (kept.index, kept.op_type) == (1, "NEG")
    assert kept.reason.startswith(
        "tflm cannot run its int8 form ([feature-map-types] Feature maps (activations) must be "
        "one of: float32"
    ), kept.reason
    assert kept.reason.endswith("its float form runs on the TFLite Micro kernels")
    assert all(p.status == ON_TARGET for p in place_model(result.model, "tflm").ops)
    # Only the target moved it: without one, NEG is int8 and TFLite Micro refuses the model.
    _, plain = quantized("negate_after_conv", None)
    assert plain.float_ops == []
    assert not tflm_result(model_to_bytes(plain.model))["runs"]

    data = model_to_bytes(result.model)
    x = samples(model, seed=11)[:1]
    [ours] = run_litert(data, [x])
    [reference] = run_litert(model_to_bytes(model), [x])
    assert sqnr_db(reference, ours) > 30
    ran = tflm_result(data)
    assert ran["runs"], ran.get("error")
    for got, litert in zip(ran["outputs"], litert_reference_outputs(data), strict=True):
        np.testing.assert_allclose(np.asarray(got).reshape(litert.shape), litert, atol=1e-6)


def test_the_rewrite_says_which_planned_op_each_integer_op_is() -> None:
    """`--target` places the integer model and maps its ops back to the plan by position
    (`RewriteNotes.origins`): every planned op once, in order, and None for the converters."""
    _, result = quantized("negate_after_conv", "tflm")
    origins = result.notes.origins[0]
    ops, planned = result.model.subgraphs[0].operators, result.float_model.subgraphs[0].operators
    assert len(origins) == len(ops)
    assert [i for i in origins if i is not None] == list(range(len(planned)))
    for op, origin in zip(ops, origins, strict=True):
        if origin is None:
            assert result.model.op_type(op) in ("QUANTIZE", "DEQUANTIZE")
        else:
            assert result.model.op_type(op) == result.float_model.op_type(planned[origin])
    # NEG stays float between integer ops: converters were added around it.
    assert origins.count(None) >= 2


def test_an_op_falling_back_to_the_cpu_stays_int8() -> None:
    """Vela leaves a stride-4 depthwise convolution to TFLite Micro, which runs it in int8."""
    _, result = quantized("depthwise_stride4", "ethos-u")
    assert result.float_ops == []
    placement = {p.op: p.status for p in place_model(result.model, "ethos-u").ops}
    assert placement["DEPTHWISE_CONV_2D"] == FALLBACK


def test_an_op_no_form_of_can_run_stays_int8_for_the_audit_to_report() -> None:
    """TFLite Micro has no SELECT kernel at all: float would not help, so nothing changes."""
    _, result = quantized("select_op", "tflm")
    _, plain = quantized("select_op", None)
    assert result.float_ops == plain.float_ops == []
    placement = {p.op: p.status for p in place_model(result.model, "tflm").ops}
    assert placement["SELECT"] == CANNOT_RUN


def test_cli_names_the_op_kept_for_the_target(tmp_path) -> None:
    model = BUILDERS["negate_after_conv"]()
    source, data = tmp_path / "neg.tflite", tmp_path / "calib.npy"
    source.write_bytes(model_to_bytes(model))
    np.save(data, samples(model))
    out = CliRunner().invoke(
        main,
        ["quantize", str(source), "--data", str(data), "--target", "tflm"],
        env={"COLUMNS": "200"},
    )
    assert out.exit_code == 0, out.output
    assert "NEG" in out.output and "tflm cannot run its int8 form" in out.output, out.output

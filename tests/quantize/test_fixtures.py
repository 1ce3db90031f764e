"""Every float fixture quantizes, runs in LiteRT, passes the audit, and matches TF's accuracy."""

from __future__ import annotations

import pytest

from qtool.check.audit import audit_model
from qtool.model import TensorType, model_to_bytes
from tests.conftest import float_model_names
from tests.litert import make_interpreter
from tests.quantize.common import (
    TENSORFLOW_ALGORITHM,
    output_sqnr,
    quantized,
    reparsed,
    tf_int8_sqnr,
)

FLOAT_FIXTURES = float_model_names()
# Below this SQNR an output is not a usable approximation of the float model. Comparison and
# argmax outputs (integers) are exempt: they are exact or off by a class.
MIN_SQNR_DB = 15.0


@pytest.mark.parametrize("name", FLOAT_FIXTURES)
def test_fixture_quantizes_and_audit_is_clean(name: str) -> None:
    result = quantized(name)
    model = reparsed(result)
    findings = audit_model(model)
    assert [f for f in findings if f.severity in ("error", "warning")] == []
    assert result.float_ops == []
    interpreter = make_interpreter(model_to_bytes(model))
    interpreter.invoke()
    weights = [
        t
        for t in model.subgraphs[0].tensors
        if model.is_constant(t) and t.dtype == TensorType.FLOAT32
    ]
    assert weights == [], "no float weights may remain in a fully int8 model"


@pytest.mark.parametrize("name", FLOAT_FIXTURES)
def test_sqnr_at_least_tensorflow_minus_half_db(name: str) -> None:
    """With TensorFlow's algorithm (min/max, nearest rounding), the planning is TF's or better."""
    result = quantized(name, algorithm=TENSORFLOW_ALGORITHM)
    ours = output_sqnr(name, model_to_bytes(result.model))
    theirs = tf_int8_sqnr(name)
    if theirs is not None:
        for mine, tf in zip(ours, theirs, strict=True):
            assert mine >= tf - 0.5, f"{name}: qtool {ours} dB vs TensorFlow {theirs} dB"
    else:
        assert min(ours) >= MIN_SQNR_DB, f"{name}: SQNR {ours} dB"


def test_float16_and_sparse_weights_are_folded() -> None:
    """Folded for planning; written int8 (sparse ones int8 sparse: test_sparse_weights.py)."""
    for name, folded_type in (("fp16_weights", "DEQUANTIZE"), ("sparse_weights", "DENSIFY")):
        result = quantized(name)
        assert any(f.op_type == folded_type for f in result.folded)
        assert all(
            t.dtype != TensorType.FLOAT16 and (t.sparsity is None or t.dtype == TensorType.INT8)
            for t in result.model.subgraphs[0].tensors
        )


def test_signatures_names_and_metadata_are_kept() -> None:
    from qtool.model import load_model
    from tests.quantize.common import fixture_path

    for name in FLOAT_FIXTURES:
        source = load_model(fixture_path(name))
        model = reparsed(quantized(name))
        assert [s["signature_key"] for s in model.signature_defs] == [
            s["signature_key"] for s in source.signature_defs
        ]
        for before, after in zip(source.signature_defs, model.signature_defs, strict=True):
            for role in ("inputs", "outputs"):
                for b, a in zip(before[role], after[role], strict=True):
                    assert b["name"] == a["name"]
                    src = source.subgraphs[0].tensors[b["tensor_index"]].name
                    assert model.subgraphs[0].tensors[a["tensor_index"]].name == src
        assert [m["name"] for m in model.metadata] == [m["name"] for m in source.metadata]
        names = [t.name for t in model.subgraphs[0].tensors]
        assert len(names) == len(set(names))


def test_no_signature_model_runs() -> None:
    result = quantized("no_signature")
    assert result.model.signature_defs == []
    sqnr = output_sqnr("no_signature", model_to_bytes(result.model))
    assert min(sqnr) >= MIN_SQNR_DB


@pytest.mark.parametrize("name", ["cnn", "mixed_ops", "multi_io", "mlp", "spec_ops"])
def test_operator_versions_match_tensorflow(name: str) -> None:
    """Runtimes dispatch int8 kernels on the op version: write what TF's converter writes."""
    from qtool.model import load_model
    from tests.conftest import MODELS

    theirs = {
        c.name: c.version
        for c in load_model(MODELS / "tf_int8" / f"{name}_int8.tflite").operator_codes
    }
    ours = {c.name: c.version for c in reparsed(quantized(name)).operator_codes}
    assert ours == theirs


@pytest.mark.parametrize("name", FLOAT_FIXTURES)
@pytest.mark.parametrize("io,per_tensor_fc", [("int8", False), ("uint8", False), ("float", True)])
def test_io_modes_and_profiles_audit_clean_and_run(name: str, io: str, per_tensor_fc: bool) -> None:
    model = reparsed(quantized(name, io=io, per_tensor_fc=per_tensor_fc))
    profiles = ("per-tensor-fc",) if per_tensor_fc else ()
    assert [f for f in audit_model(model, profiles) if f.severity != "info"] == []
    make_interpreter(model_to_bytes(model), reference=False).invoke()


def test_unit_normalization_with_defaults_is_not_below_tensorflow() -> None:
    """Keras UnitNormalization (SQUARE, SUM, RSQRT, MINIMUM with 1e12, MUL): the constant may
    not set the MINIMUM group's scale, and qtool's defaults stay within 0.5 dB of TF's
    converter on 512 held-out samples."""
    result = quantized("unit_norm")
    model = result.model
    graph = model.subgraphs[0]
    minimum = next(op for op in graph.operators if model.op_type(op) == "MINIMUM")
    scales = {
        float(graph.tensors[t].quantization.scale[0]) for t in minimum.inputs + minimum.outputs
    }
    assert len(scales) == 1 and max(scales) < 1.0  # 1e12 / 255 would be ~4e9
    ours = output_sqnr("unit_norm", model_to_bytes(model))
    assert min(ours) >= min(tf_int8_sqnr("unit_norm")) - 0.5

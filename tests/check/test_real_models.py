"""Real models: TensorFlow's own int8 conversions pass; float models are reported, not crashed on."""

from __future__ import annotations

import numpy as np
import pytest

from qtool.check import audit_model, check_paths
from qtool.model import load_model
from tests.check.helpers import TF_INT8, chain_model, tf_model
from tests.conftest import MODELS

TF_MODELS = sorted(TF_INT8.glob("*.tflite"))
FLOAT_MODELS = sorted(MODELS.glob("*.tflite"))


def test_fixtures_are_present() -> None:
    assert len(TF_MODELS) >= 5 and len(FLOAT_MODELS) >= 5


@pytest.mark.parametrize("path", TF_MODELS, ids=lambda p: p.stem)
def test_tf_int8_conversions_have_no_errors_or_warnings(path) -> None:
    """Nothing but for ops TF really left in float (it has no int8 SQUARE: unit_norm)."""
    findings = audit_model(load_model(path))
    assert [f for f in findings if f.severity != "info" and f.rule != "QT-FLOAT-OP"] == []
    assert {f.op for f in findings if f.rule == "QT-FLOAT-OP"} <= {"SQUARE"}


def test_extended_ops_are_reported_as_info() -> None:
    findings = audit_model(tf_model("spec_ops_int8"))
    extended = {f.op for f in findings if f.rule == "QT-OP-EXTENDED"}
    assert "STRIDED_SLICE" in extended
    assert all(f.severity == "info" and f.rule == "QT-OP-EXTENDED" for f in findings)


@pytest.mark.parametrize(
    "path", [p for p in FLOAT_MODELS if p.stem != "fp16_weights"], ids=lambda p: p.stem
)
def test_float_model_is_one_not_quantized_error(path) -> None:
    (finding,) = audit_model(load_model(path))
    assert (finding.rule, finding.severity, finding.op_index) == ("QT-NOT-QUANTIZED", "error", None)
    assert "compute in float" in finding.message


def test_a_float16_weights_model_is_recognised_not_reported_as_unquantized() -> None:
    """Float16 constants behind DEQUANTIZE are a weight mode (what TensorFlow's float16
    quantization writes): no finding, and the result says how the weights are stored."""
    (result,) = check_paths([MODELS / "fp16_weights.tflite"])
    assert result.findings == []
    assert result.weights == {"float16": {"float16": 12}}


def test_uint8_model_boundary_with_quantize_is_fine() -> None:
    assert audit_model(chain_model(["MAX_POOL_2D"], io_dtype=np.uint8)) == []


def test_per_tensor_fc_profile_flags_per_axis_fc_weights() -> None:
    model = tf_model("mlp_int8")
    fcs = [
        i
        for i, op in enumerate(model.subgraphs[0].operators)
        if model.op_type(op) == "FULLY_CONNECTED"
    ]
    assert audit_model(model) == []
    findings = audit_model(model, ("per-tensor-fc",))
    assert [(f.rule, f.severity, f.op_index, f.role) for f in findings] == [
        ("QT-GRANULARITY", "error", i, "weight") for i in fcs
    ]
    assert all("per-tensor-fc" in f.message for f in findings)

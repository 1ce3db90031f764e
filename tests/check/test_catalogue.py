"""The rule catalogue, the registry, and rules read from the spec data (not from Python)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from qtool import spec as spec_module
from qtool.check import RULES, SEVERITIES, audit_model, gates
from qtool.check import config as config_module
from qtool.check.registry import FAMILIES, GATE, VALIDITY
from qtool.model import QuantParams
from tests.check.helpers import int8_conv_model, mutate, op_index, op_tensor, tf_model

# Every family: those the audit runs, and the target and accuracy gates it runs on request.
ALL_FAMILIES = (VALIDITY, GATE, *FAMILIES, gates.target_findings, gates.accuracy_findings)


def test_registry_and_catalogue_agree() -> None:
    emitted = [rule for family in ALL_FAMILIES for rule in family.rules]
    assert len(emitted) == len(set(emitted))  # each rule belongs to exactly one family
    assert [rule.id for rule in emitted if RULES.get(rule.id) is not rule] == []
    assert {rule.id for rule in emitted} == set(RULES)
    for rule in RULES.values():
        assert rule.severity in SEVERITIES and rule.title and rule.help
        if rule.severity == "warning":  # what goes wrong on a device, with the device named
            assert any(
                name in rule.on_device
                for name in ("LiteRT", "TFLite Micro", "Ethos-U", "XNNPACK", "Edge TPU", "Cortex-M")
            ), rule.id


@pytest.fixture
def spec_data(monkeypatch):
    """A mutable copy of the spec file's data that load_spec/load_settings read from."""
    data = copy.deepcopy(spec_module.raw_spec())
    monkeypatch.setattr(spec_module, "raw_spec", lambda scheme="int8": data)
    monkeypatch.setattr(config_module, "raw_spec", lambda: data)
    spec_module.load_spec.cache_clear()
    config_module.load_settings.cache_clear()
    yield data
    spec_module.load_spec.cache_clear()
    config_module.load_settings.cache_clear()


def per_tensor_conv():
    return int8_conv_model(per_tensor_weights=True)


def test_profile_changes_severities_from_data(spec_data) -> None:
    spec_data["profiles"]["strict-test"] = {
        "description": "test profile",
        "overrides": {},
        "check": {"severity": {"QT-WEIGHT-PER-TENSOR": "error", "QT-OP-EXTENDED": "off"}},
    }
    model = per_tensor_conv()
    assert [f.severity for f in audit_model(model)] == ["warning"]
    assert [f.severity for f in audit_model(model, ("strict-test",))] == ["error"]
    spec_ops = tf_model("spec_ops_int8")
    assert audit_model(spec_ops) and audit_model(spec_ops, ("strict-test",)) == []


def test_profile_with_unknown_rule_is_rejected(spec_data) -> None:
    spec_data["profiles"]["typo"] = {"overrides": {}, "check": {"severity": {"QT-NOPE": "error"}}}
    with pytest.raises(KeyError, match="QT-NOPE"):
        audit_model(per_tensor_conv(), ("typo",))


def test_tolerances_come_from_the_spec_data(spec_data) -> None:
    base = tf_model("cnn_int8")
    conv = op_index(base, "CONV_2D")
    bias = op_tensor(base, conv, "input", 2)

    def edit(m) -> None:
        m.subgraphs[0].tensors[bias].quantization.scale[0] *= 1 + 1e-4

    mutated, _ = mutate(base, edit)
    assert [f.rule for f in audit_model(mutated)] == ["QT-BIAS-SCALE"]
    spec_data["tolerances"]["bias_scale_rtol"] = 1e-3
    spec_module.load_spec.cache_clear()
    assert audit_model(mutated) == []


def test_fixed_outputs_come_from_the_spec_data(spec_data) -> None:
    model = tf_model("cnn_int8")
    softmax = op_index(model, "SOFTMAX")
    spec_data["ops"]["SOFTMAX"]["outputs"][0]["fixed"] = {"scale": 0.5, "zero_point": 0}
    (finding,) = audit_model(model)
    assert (finding.rule, finding.op_index) == ("QT-FIXED-OUTPUT", softmax)
    assert "0.5" in finding.message


def test_risk_thresholds_come_from_the_spec_data(spec_data) -> None:
    model = int8_conv_model()
    x = model.subgraphs[0].tensors[op_tensor(model, 1, "input", 0)]
    x.quantization = QuantParams.of(np.float32(1e-6), 0)  # also breaks the bias scale
    assert "QT-TINY-SCALE" not in {f.rule for f in audit_model(model)}
    spec_data["check"]["risk"]["tiny_scale"] = 1e-5
    config_module.load_settings.cache_clear()
    assert "QT-TINY-SCALE" in {f.rule for f in audit_model(model)}

"""The rule catalogue, the registry, and rules read from the spec data (not from Python)."""

from __future__ import annotations

import ast
import copy
import inspect
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest

import qtool
from qtool import spec as spec_module
from qtool.check import (
    RULES,
    SEVERITIES,
    RuleInfo,
    audit_model,
    gates,
    qparams,
    rulebook,
    structure,
)
from qtool.check import settings as settings_module
from qtool.check import severities as severities_module
from qtool.check.families import FAMILIES, GATE, VALIDITY
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


# Families whose findings are made elsewhere: the parameter structure family reports the problems
# `param_problems` found (the audit context keeps them to skip tensors with broken parameters).
EMITTED_BY = {structure.check_param_structure.run: qparams.param_problems}


def _rules_named_in(function) -> set[RuleInfo]:
    """The rule declarations the body of `function` refers to (its decorator left out)."""
    (definition,) = ast.parse(textwrap.dedent(inspect.getsource(function))).body
    names = {n.id for s in definition.body for n in ast.walk(s) if isinstance(n, ast.Name)}
    scope = vars(inspect.getmodule(function))
    return {scope[name] for name in names if isinstance(scope.get(name), RuleInfo)}


@pytest.mark.parametrize("fam", ALL_FAMILIES, ids=lambda fam: fam.name)
def test_each_family_names_the_rules_its_check_emits(fam) -> None:
    emitter = EMITTED_BY.get(fam.run, fam.run)
    assert _rules_named_in(emitter) == set(fam.rules)


ID_LITERAL = re.compile(r"""["']QT-""")


def test_each_rule_id_is_written_once_in_its_declaration() -> None:
    """No rule id is spelled out in qtool/ but where `rule()` declares it (a grep of the source)."""
    package = Path(qtool.__file__).parent
    literals, declarations = [], []
    for path in sorted(package.rglob("*.py")):
        where = str(path.relative_to(package))
        source = path.read_text()
        literals += [
            (where, source.count("\n", 0, m.start()) + 1) for m in ID_LITERAL.finditer(source)
        ]
        for node in ast.walk(ast.parse(source)):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "rule"
                and str(getattr(node.args[0], "value", "")).startswith("QT-")
            ):
                declarations.append((where, node.args[0].lineno, node.args[0].value))
    assert sorted(literals) == sorted((where, line) for where, line, _ in declarations)
    assert sorted(rule_id for *_, rule_id in declarations) == sorted(RULES)


def test_declarations_are_checked() -> None:
    with pytest.raises(ValueError, match="unknown severity"):
        rulebook.rule("QT-EXAMPLE", "fatal", title="example", help="example")
    with pytest.raises(ValueError, match="what goes wrong on a device"):
        rulebook.rule("QT-EXAMPLE", "warning", title="example", help="example")
    with pytest.raises(ValueError, match="not of the form"):
        rulebook.rule("QT_EXAMPLE", "info", title="example", help="example")
    example = rulebook.rule("QT-EXAMPLE", "info", title="example", help="example")
    with pytest.raises(ValueError, match="listed twice"):
        rulebook.catalogue(example, example)
    with pytest.raises(ValueError, match="names no rules"):
        rulebook.family("example")


@pytest.fixture
def spec_data(monkeypatch):
    """A mutable copy of the spec file's data that load_spec/load_settings read from."""
    data = copy.deepcopy(spec_module.raw_spec())
    monkeypatch.setattr(spec_module, "raw_spec", lambda scheme="int8": data)
    monkeypatch.setattr(settings_module, "raw_spec", lambda: data)
    monkeypatch.setattr(severities_module, "raw_spec", lambda: data)
    caches = (
        spec_module.load_spec,
        settings_module.load_settings,
        severities_module.rule_severities,
    )
    for cache in caches:
        cache.cache_clear()
    yield data
    for cache in caches:
        cache.cache_clear()


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
    settings_module.load_settings.cache_clear()
    assert "QT-TINY-SCALE" in {f.rule for f in audit_model(model)}

"""schemas/int8_spec.json and int16x8_spec.json: well-formed, operands stated once (role
defaults, then only what differs), and the int8 file a faithful transcription of the reference
op table."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from qtool import spec as spec_module
from qtool.spec import OperandRule, expand_operand, load_spec, raw_spec
from tests.conftest import ROOT

REFERENCE_TABLE = ROOT.parent / "shared" / "reference" / "int8-op-table.txt"
SCHEMES = ("int8", "int16")


@pytest.mark.parametrize("scheme", SCHEMES)
def test_spec_file_matches_its_schema(scheme: str) -> None:
    schema = json.loads((ROOT / "schemas" / "int8_spec.schema.json").read_text())
    jsonschema.validate(raw_spec(scheme), schema)


def written_operands(raw: dict):
    """(op, "inputs"/"outputs", entry as written) for every operand of a spec file."""
    for name, op in {**raw["ops"], **raw["extended_ops"]}.items():
        for kind in ("inputs", "outputs"):
            for entry in op[kind]:
                yield name, kind, entry


def rule_from(index: int | str, fields: dict) -> OperandRule:
    return OperandRule(
        index=index,
        dtype=fields["dtype"],
        range=tuple(fields["range"]),
        granularity=fields["granularity"],
        zero_point=fields.get("zero_point"),
    )


@pytest.mark.parametrize("scheme", SCHEMES)
def test_an_index_alone_is_the_default_activation(scheme: str) -> None:
    raw = raw_spec(scheme)
    spec = load_spec((), scheme)
    activation = raw["operand_defaults"]["activation"]
    plain = [(n, k, e) for n, k, e in written_operands(raw) if not isinstance(e, dict)]
    total = sum(1 for _ in written_operands(raw))
    assert len(plain) > total / 2  # the common case: written as an index, nothing else
    for name, kind, index in plain:
        lookup = spec.rule(name).input_rule if kind == "inputs" else spec.rule(name).output_rule
        assert lookup(0 if index == "*" else index) == rule_from(index, activation), (name, index)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_written_fields_are_only_what_differs_from_the_role_default(scheme: str) -> None:
    """Each rule is stated once: an operand object never repeats its role's default."""
    raw = raw_spec(scheme)
    for name, kind, entry in written_operands(raw):
        if not isinstance(entry, dict):
            continue
        role = entry.get("role", "activation")
        assert role != "activation" or "role" not in entry, (name, entry)
        # Outputs are activations, but for an op that only changes how weights are stored
        # (DENSIFY: sparse int8 weights in, the same weights dense out).
        assert kind == "inputs" or role == "activation" or name == "DENSIFY", (name, entry)
        assert set(entry) - {"index", "role"} or role != "activation", (
            name,
            "write the index alone",
        )
        defaults = raw["operand_defaults"][role]
        repeated = {k: v for k, v in entry.items() if k in defaults and defaults[k] == v}
        assert not repeated, (name, entry["index"], repeated)


def test_written_fields_override_their_role_defaults() -> None:
    int8, int16 = load_spec(), load_spec((), "int16")
    conv = int8.rule("CONV_2D")
    assert conv.weight_rule() == OperandRule(
        1, "int8", (-127, 127), "per-axis", role="weight", axis=0, zero_point=0
    )
    assert conv.bias_rule() == OperandRule(
        2,
        "int32",
        (-(2**31), 2**31 - 1),
        "per-axis",
        role="bias",
        zero_point=0,
        bias_scale_inputs=(0, 1),
    )
    assert int8.rule("FULLY_CONNECTED").bias_rule().granularity == "per-tensor"  # the op table
    assert int8.rule("SOFTMAX").output_rule(0).fixed == (1 / 256, -128)
    assert int16.rule("CONV_2D").bias_rule().dtype == "int64"
    alpha = int16.rule("PRELU").input_rule(1)  # null drops the int16 default zero point 0
    assert (alpha.dtype, alpha.range, alpha.zero_point) == ("int8", (-128, 127), None)
    assert int16.rule("PRELU").input_rule(0).zero_point == 0


def test_an_operand_is_written_out_from_its_role_defaults() -> None:
    defaults = raw_spec("int16")["operand_defaults"]
    assert expand_operand(2, defaults) == {"index": 2, **defaults["activation"]}
    weight = expand_operand({"index": 1, "role": "weight", "axis": 3}, defaults)
    assert weight == {"index": 1, "role": "weight", "axis": 3, **defaults["weight"]}
    dropped = expand_operand({"index": 1, "zero_point": None}, defaults)
    assert "zero_point" not in dropped and dropped["dtype"] == "int16"


def test_a_profile_patches_the_expanded_operand() -> None:
    weight = load_spec(("per-tensor-fc",)).rule("FULLY_CONNECTED").weight_rule()
    assert (weight.granularity, weight.range, weight.zero_point, weight.role) == (
        "per-tensor",
        (-127, 127),
        0,
        "weight",
    )


def test_defaults_are_read_from_the_data(monkeypatch) -> None:
    data = raw_spec()
    data["operand_defaults"]["activation"]["range"] = [-127, 127]
    data["operand_defaults"]["weight"]["zero_point"] = 3
    written = json.dumps(data["ops"])
    monkeypatch.setattr(spec_module, "raw_spec", lambda scheme="int8": data)
    load_spec.cache_clear()
    try:
        spec = load_spec()
    finally:
        load_spec.cache_clear()
    assert spec.rule("ADD").input_rule(1).range == (-127, 127)
    assert spec.rule("CONCATENATION").input_rule(5).range == (-127, 127)
    assert spec.rule("CONV_2D").weight_rule().zero_point == 3
    assert spec.rule("CONV_2D").bias_rule().zero_point == 0
    assert json.dumps(data["ops"]) == written  # loading leaves the data as written


def parse_reference_table(text: str) -> dict[str, dict]:
    """The reference op table as {op: {"inputs"/"outputs": {index: {field: value}}}}."""
    ops: dict[str, dict] = {}
    operand: dict = {}
    current: dict = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):
            current = ops.setdefault(line.split()[0], {"inputs": {}, "outputs": {}})
            continue
        stripped = line.strip()
        header = re.match(r"(Input|Output) (\d+|\.\.\.)", stripped)
        if header:
            kind = "inputs" if header.group(1) == "Input" else "outputs"
            index = "*" if header.group(2) == "..." else int(header.group(2))
            operand = current[kind].setdefault(index, {})
            continue
        key, _, value = (part.strip() for part in stripped.partition(":"))
        if key == "restriction" and value.startswith("Input and outputs"):
            current["same_scale"] = True
        else:
            operand.setdefault(key, []).append(value)
    return ops


@pytest.mark.skipif(
    not REFERENCE_TABLE.exists(),
    reason="the reference folder (../shared/reference) is not beside this clone",
)
def test_every_reference_rule_is_in_the_spec_data() -> None:
    reference = parse_reference_table(Path(REFERENCE_TABLE).read_text())
    spec = load_spec()
    assert {name: rule.origin for name, rule in spec.ops.items() if name in reference} == {
        name: "op-table" for name in reference
    }
    for name, entry in reference.items():
        rule = spec.rule(name)
        assert rule.same_scale == entry.get("same_scale", False), name
        for kind, operands in (("inputs", entry["inputs"]), ("outputs", entry["outputs"])):
            for index, fields in operands.items():
                lookup = rule.input_rule if kind == "inputs" else rule.output_rule
                operand = lookup(0 if index == "*" else index)
                assert operand is not None, (name, kind, index)
                assert operand.dtype == fields["data_type"][0], (name, index)
                low, high = fields["range"][0].strip("[]").split(", ")
                limits = {"int32_min": -(2**31), "int32_max": 2**31 - 1}
                assert operand.range == (
                    limits.get(low) or int(low),
                    limits.get(high) or int(high),
                ), (name, index)
                granularity = fields["granularity"][0]
                assert operand.granularity == granularity.split(" ")[0], (name, index)
                if "dim =" in granularity:
                    assert operand.axis == int(granularity.split("dim = ")[1].rstrip(")"))
                for restriction in fields.get("restriction", []):
                    if restriction == "zero_point = 0":
                        assert operand.zero_point == 0
                    elif "input0_scale" in restriction:
                        assert operand.bias_scale_inputs == (0, 1) and operand.zero_point == 0
                    else:
                        scale_text, zero_point = restriction.split("= (")[1].rstrip(")").split(", ")
                        numerator, denominator = (float(v) for v in scale_text.split("/"))
                        assert operand.fixed == (numerator / denominator, int(zero_point))

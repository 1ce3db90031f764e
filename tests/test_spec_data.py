"""schemas/int8_spec.json: well-formed, and a faithful transcription of the reference op table."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from qtool.spec import load_spec, raw_spec
from tests.conftest import ROOT

REFERENCE_TABLE = ROOT.parent / "shared" / "reference" / "int8-op-table.txt"


def test_spec_file_matches_its_schema() -> None:
    schema = json.loads((ROOT / "schemas" / "int8_spec.schema.json").read_text())
    jsonschema.validate(raw_spec(), schema)


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

"""schemas/ops.json: well-formed, complete for the engine, and satisfied by every real model."""

from __future__ import annotations

import json

import jsonschema
import pytest

from qtool.model import load_model
from qtool.model.reflect import enum_values, table_layout, union_members
from qtool.model.shape_rules import RULES
from qtool.model.validate import model_problems
from qtool.op_facts import load_op_facts, raw_facts
from qtool.runtime.registry import builtin_kernels
from tests.conftest import MODELS, ROOT


def test_facts_match_their_schema() -> None:
    schema = json.loads((ROOT / "schemas" / "ops.schema.json").read_text())
    jsonschema.validate(raw_facts(), schema)


def test_every_name_in_the_facts_exists() -> None:
    raw = raw_facts()
    tables = set(union_members("BuiltinOptions").values())
    for name, op in raw["ops"].items():
        for operand in op["inputs"] + op["outputs"]:
            if isinstance(operand["types"], str):
                assert operand["types"] in raw["type_classes"], (name, operand)
        assert op["options"] is None or op["options"] in tables, name
        assert op["shape"] in RULES, name
    for option, enum in raw["option_domains"].items():
        assert enum_values(enum), enum
        assert any(field.name == option for table in tables for field in table_layout(table)[0]), (
            option
        )


def test_every_kernel_of_the_engine_has_facts() -> None:
    """The engine only runs operators the validator checked against their facts."""
    assert set(builtin_kernels()) <= set(load_op_facts().ops)


def test_only_the_last_operand_repeats() -> None:
    for op in load_op_facts().ops.values():
        for operands in (op.inputs, op.outputs):
            assert not any(o.repeat for o in operands[:-1]), op.name


@pytest.mark.parametrize(
    "path", sorted(MODELS.glob("**/*.tflite")), ids=lambda p: str(p.relative_to(MODELS))
)
def test_every_fixture_is_valid(path) -> None:
    assert model_problems(load_model(path, validate=False)) == []

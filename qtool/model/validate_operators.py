"""The validator's operator checks (`validate.py`): a known operator code, the input and
output counts and operand types of `schemas/ops.json`, the options table and the values of its
enum options, constant operands where the operator needs them, sparse inputs only through
DENSIFY, and the shape rule (`shape_rules.py`)."""

from __future__ import annotations

from qtool.model import (  # noqa: F401  (they register rules)
    shape_rules_layout,
    shape_rules_nn,
    shape_rules_state,
)
from qtool.model.graph import Model, Operator, Subgraph
from qtool.model.reflect import enum_values
from qtool.model.shape_rules import RULES, OpView, ShapeError, declared_shape, same_shape
from qtool.model.types import BuiltinOperator, dtype_name, known_builtin
from qtool.op_facts import OpFacts, load_op_facts


def stored_constants(model: Model, subgraph: Subgraph) -> set[int]:
    """Tensors that hold a constant: stored ones, and what a DEQUANTIZE or DENSIFY of a stored
    one writes (LiteRT expands those once; TensorFlow's float16 models give an LSTM its weights
    so)."""
    stored = {t for t, tensor in enumerate(subgraph.tensors) if model.is_constant(tensor)}
    for op in subgraph.operators:
        if model.op_type(op) in ("DEQUANTIZE", "DENSIFY") and op.inputs and op.inputs[0] in stored:
            stored.update(op.outputs)
    return stored


def operator_message(
    model: Model, subgraph: Subgraph, op: Operator, stored: set[int]
) -> str | None:
    """What is wrong with operator `op` (its code, operands, options, shape), or None;
    `stored`: the tensors that hold a constant (`stored_constants`)."""
    code = model.operator_codes[op.opcode_index]
    op_type = model.op_type(op)
    message = _code_message(code.builtin_code, code.custom_code, code.version)
    if message is None:
        table = load_op_facts()
        facts = (
            table.custom(op_type)
            if code.builtin_code == BuiltinOperator.CUSTOM
            else table.facts(op_type)
        )
        message = _sparse_message(model, subgraph, op, op_type)
        if facts is not None and message is None:
            message = _facts_message(model, subgraph, op, facts, stored)
    return message


def _code_message(builtin: int, custom: str | None, version: int) -> str | None:
    if not known_builtin(builtin):
        return f"unknown builtin operator code {builtin}"
    if builtin == BuiltinOperator.CUSTOM and not custom:
        return "custom operator without a custom code"
    if version < 1:
        return f"operator code version {version} (versions start at 1)"
    return None


def _sparse_message(model: Model, subgraph: Subgraph, op: Operator, op_type: str) -> str | None:
    if op_type == "DENSIFY":
        return None
    for position, t in enumerate(op.inputs):
        if t >= 0 and subgraph.tensors[t].sparsity is not None:
            return f"input {position} is a sparse tensor; qtool reads sparse weights only through DENSIFY"
    return None


def _count_message(kind: str, count: int, bounds: tuple[int, int | None]) -> str | None:
    low, high = bounds
    if count < low or (high is not None and count > high):
        wanted = (
            f"{low}"
            if low == high
            else (f"{low} to {high}" if high is not None else f"at least {low}")
        )
        return f"has {count} {kind}s, takes {wanted}"
    return None


def _facts_message(
    model: Model, subgraph: Subgraph, op: Operator, facts: OpFacts, stored: set[int]
) -> str | None:
    message = _count_message("input", len(op.inputs), facts.input_count) or _count_message(
        "output", len(op.outputs), facts.output_count
    )
    if message:
        return message
    for kind, indices, lookup in (
        ("input", op.inputs, facts.input),
        ("output", op.outputs, facts.output),
    ):
        for position, t in enumerate(indices):
            operand = lookup(position)
            if t < 0:
                if not operand.optional:
                    return f"{kind} {position} ({operand.name}) is missing"
                continue
            tensor = subgraph.tensors[t]
            if dtype_name(tensor.dtype) not in operand.types:
                allowed = ", ".join(sorted(operand.types))
                return f"{kind} {position} ({operand.name}) is {dtype_name(tensor.dtype)}, must be one of {allowed}"
            if operand.constant and t not in stored:
                return f"{kind} {position} ({operand.name}) must be a constant"
    if op.options_type is not None and op.options_type != facts.options:
        expected = facts.options or "no options table"
        return f"has options table {op.options_type}, {facts.name} takes {expected}"
    return _option_message(op) or _shape_message(model, subgraph, op, facts)


def _option_message(op: Operator) -> str | None:
    """An option outside the enum it takes its values from (padding 7, output_type 99...)."""
    for name, enum in load_op_facts().option_domains.items():
        value = op.options.get(name)
        if value is not None and value not in enum_values(enum):
            return f"option {name} is {value}, not a {enum}"
    return None


def _shape_message(model: Model, subgraph: Subgraph, op: Operator, facts: OpFacts) -> str | None:
    view = OpView(model, subgraph, op, facts)
    try:
        inferred = RULES[facts.shape](view)
    except ShapeError as exc:
        return str(exc)
    for position, (t, shape) in enumerate(zip(op.outputs, inferred, strict=True)):
        declared = declared_shape(subgraph.tensors[t])
        if shape is not None and not same_shape(shape, declared):
            shown = [d if d is not None else -1 for d in shape]
            return f"computes output {position} of shape {shown}, the model declares {list(subgraph.tensors[t].shape)}"
    return None

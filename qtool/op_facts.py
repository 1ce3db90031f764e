"""What a well-formed operator looks like, loaded once from `schemas/ops.json`.

Per builtin (and per custom op qtool has a kernel for, or that a device compiler writes): its operands in order (name, allowed tensor types, optional, repeated, constant, runtime buffer),
its options table and the name of the shape rule relating its operand shapes; the enums that
options such as `padding` take their values from; and the limits on what a model may make qtool
allocate. The model validator checks models against these facts and
the engine reads options through them, so each fact exists once: in the data file.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

FACTS_FILE = "ops.json"


@dataclass(frozen=True)
class OperandFacts:
    """One operand slot of an operator as ops.json declares it."""

    name: str
    types: frozenset[str]  # TensorType names, e.g. "FLOAT32"
    optional: bool = False  # may be absent (index -1, or left off the end)
    listed: bool = False  # optional, but listed (as -1 when absent): LiteRT reads the slot
    repeat: bool = False  # the last operand may occur any number of times (at least once)
    constant: bool = False  # must be a constant tensor
    shape_only: bool = False  # only its shape is read, never its values (SHAPE's input)
    runtime_buffer: bool = False  # a buffer the runtime places: no data and no producer


@dataclass(frozen=True)
class OpFacts:
    """What a well-formed operator of one type looks like (builtin, or custom with a kernel)."""

    name: str
    inputs: tuple[OperandFacts, ...]
    outputs: tuple[OperandFacts, ...]
    options: str | None  # the BuiltinOptions table the operator takes
    shape: str  # the shape rule (qtool/model/shape_rules.py)
    custom_options: tuple[str, ...] = ()  # a custom op's raw C struct: its int32 fields in order
    compiled_for: str | None = None  # the target whose compiler wrote the op (its program)

    @staticmethod
    def _count(operands: tuple[OperandFacts, ...]) -> tuple[int, int | None]:
        required = sum(not o.optional or o.listed for o in operands)
        return required, None if operands and operands[-1].repeat else len(operands)

    @property
    def input_count(self) -> tuple[int, int | None]:
        """(fewest, most) inputs; most is None for a repeated last operand."""
        return self._count(self.inputs)

    @property
    def output_count(self) -> tuple[int, int | None]:
        """(fewest, most) outputs; most is None for a repeated last operand."""
        return self._count(self.outputs)

    @staticmethod
    def _at(operands: tuple[OperandFacts, ...], position: int) -> OperandFacts | None:
        if position < len(operands):
            return operands[position]
        return operands[-1] if operands and operands[-1].repeat else None

    def input(self, position: int) -> OperandFacts | None:
        """The facts of the input at `position` (a repeated last operand covers every later one);
        None past the last."""
        return self._at(self.inputs, position)

    def output(self, position: int) -> OperandFacts | None:
        """The facts of the output at `position` (a repeated last operand covers every later
        one); None past the last."""
        return self._at(self.outputs, position)


@dataclass(frozen=True)
class Limits:
    """What a model may make qtool allocate, checked by the validator before anything runs."""

    max_rank: int
    max_activation_elements: int  # per tensor, as declared (one sample)
    max_activation_bytes: int


@dataclass(frozen=True)
class OpTable:
    """Everything ops.json says: each builtin's facts, the custom ops qtool has kernels for,
    option domains and limits."""

    ops: dict[str, OpFacts]
    limits: Limits
    option_domains: dict[str, str]  # option name -> the schema enum its values come from
    custom_ops: dict[str, OpFacts]  # by custom code: with a kernel, or compiled for a device

    def facts(self, op_type: str) -> OpFacts | None:
        """The facts of a builtin op type; None when qtool has none."""
        return self.ops.get(op_type)

    def custom(self, custom_code: str) -> OpFacts | None:
        """The facts of a custom op by its custom code; None when qtool knows none."""
        return self.custom_ops.get(custom_code)

    def compiled_for(self, op_type: str) -> str | None:
        """The target whose compiler wrote ops of `op_type` (Vela's `ethos-u`), or None."""
        facts = self.custom_ops.get(op_type)
        return None if facts is None else facts.compiled_for


def raw_facts() -> dict[str, Any]:
    """`schemas/ops.json` as the package ships it (`qtool/_schemas`), parsed."""
    text = resources.files("qtool").joinpath("_schemas", FACTS_FILE).read_text()
    return json.loads(text)


def _operand(raw: dict[str, Any], classes: dict[str, list[str]]) -> OperandFacts:
    types = raw["types"]
    return OperandFacts(
        name=raw["name"],
        types=frozenset(classes[types] if isinstance(types, str) else types),
        optional=raw.get("optional", False),
        listed=raw.get("listed", False),
        repeat=raw.get("repeat", False),
        constant=raw.get("constant", False),
        shape_only=raw.get("shape_only", False),
        runtime_buffer=raw.get("runtime_buffer", False),
    )


def _op(name: str, op: dict[str, Any], classes: dict[str, list[str]]) -> OpFacts:
    return OpFacts(
        name=name,
        inputs=tuple(_operand(o, classes) for o in op["inputs"]),
        outputs=tuple(_operand(o, classes) for o in op["outputs"]),
        options=op["options"],
        shape=op["shape"],
        custom_options=tuple(op.get("custom_options", ())),
        compiled_for=op.get("compiled_for"),
    )


@functools.cache
def load_op_facts() -> OpTable:
    """The op table, read once."""
    raw = raw_facts()
    classes = raw["type_classes"]
    return OpTable(
        ops={name: _op(name, op, classes) for name, op in raw["ops"].items()},
        limits=Limits(**raw["limits"]),
        option_domains=raw["option_domains"],
        custom_ops={name: _op(name, op, classes) for name, op in raw["custom_ops"].items()},
    )


@functools.cache
def type_class(name: str) -> frozenset[str]:
    """The tensor type names of one of `schemas/ops.json`'s type classes: "floating" (every
    floating-point type, what computes in float), "quantized" (the integer types only quantized
    tensors use), ... One list for the validator, the audit and the planner."""
    return frozenset(raw_facts()["type_classes"][name])


def shape_only_inputs(op_type: str) -> frozenset[int]:
    """Input positions of an operator type whose values it never reads, only their shape: a
    float tensor there carries no real-valued data into the op (SHAPE does no arithmetic)."""
    facts = load_op_facts().facts(op_type)
    if facts is None:
        return frozenset()
    return frozenset(p for p, operand in enumerate(facts.inputs) if operand.shape_only)


def options_table(op_type: str) -> str | None:
    """The options table an operator type takes (None when it has none or qtool lacks facts)."""
    facts = load_op_facts().facts(op_type)
    return None if facts is None else facts.options

"""The model as the rules see it: operators with their operands, spec rules and compute mode.

Built once per audit so that every rule family shares the same view: which ops compute in int8,
which operands the op table covers, which tensors have broken parameters, and where a tensor-level
finding should point (the op that produces the tensor, else its first reader).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from qtool.check.findings import Finding
from qtool.check.qparams import param_problems
from qtool.check.rulebook import RuleInfo
from qtool.check.settings import load_settings
from qtool.model import Model, Tensor, TensorType, dtype_name
from qtool.model.types import tensor_types
from qtool.op_facts import load_op_facts, shape_only_inputs, type_class
from qtool.spec import QUANTIZED, Mode, OperandRule, OpRule, load_spec
from qtool.weight_spec import weight_rule

FLOAT_TYPES = tensor_types(type_class("floating"))
# Integer types that only quantized tensors use; their presence makes an op an int8 op.
QUANTIZED_TYPES = tensor_types(type_class("quantized"))

# Activation types of the schemes: a QUANTIZE may convert between any two of them.
ACTIVATION_TYPES = frozenset({TensorType.INT8, TensorType.UINT8, TensorType.INT16})


@dataclass(frozen=True)
class Operand:
    """One tensor an operator reads or writes, with the op table's rule for its position."""

    kind: str  # "input" | "output"
    position: int
    index: int  # tensor index in the subgraph
    tensor: Tensor
    rule: OperandRule | None  # None: the op table says nothing about this operand
    constant: bool = False  # the tensor holds constant data

    @property
    def role(self) -> str:
        """ "weight" or "bias" for those operands, else its side and position ("input 0", "output
        0")."""
        if self.rule is not None and self.rule.role in ("weight", "bias"):
            return self.rule.role
        return f"{self.kind} {self.position}"

    @property
    def label(self) -> str:
        """The operand as messages name it: its role and tensor name ("input 0 'x'")."""
        return f"{self.role} '{self.tensor.name}'"


@dataclass(frozen=True)
class OpView:
    """One operator as the rules see it: its spec rule, its operands (absent ones left out) and
    how it computes."""

    subgraph: int
    index: int
    type: str
    rule: OpRule | None
    inputs: tuple[Operand, ...]
    outputs: tuple[Operand, ...]
    boundary: bool  # QUANTIZE/DEQUANTIZE: one side may be float (or uint8) by design
    mode: Mode  # INT8 or INT16 (computes in integers), FLOAT, or INTEGER (neither)
    scheme: str = "int8"  # the spec table audited against: "int8", or "int16" (16x8)
    # The target whose compiler wrote the op (Vela's ethos-u): its program computes in integers
    # on the device, its operands are the device's (audited where CPU ops read and write them).
    compiled_for: str | None = None

    @property
    def operands(self) -> tuple[Operand, ...]:
        """Inputs, then outputs."""
        return self.inputs + self.outputs

    def input_at(self, position: int) -> Operand | None:
        """The input at `position`; None when it is absent."""
        return next((o for o in self.inputs if o.position == position), None)

    def output_at(self, position: int) -> Operand | None:
        """The output at `position`; None when it is absent."""
        return next((o for o in self.outputs if o.position == position), None)


def _compute_mode(
    op_type: str,
    inputs: tuple[Operand, ...],
    outputs: tuple[Operand, ...],
    rule: OpRule | None,
    scheme: Mode,
) -> Mode:
    # Weights and biases do not decide the mode: a float op with int8 weights is a hybrid
    # (dynamic-range) op, which computes in float. Without the op table's roles, constants
    # are taken for weights (a hybrid LSTM's twelve int8 weight tensors); a constant where
    # LiteRT's hybrid kernel reads weights is one too (BATCH_MATMUL's right operand). Nor do
    # operands whose values the op never reads (SHAPE's input): they bring no real-valued data.
    narrow = weight_rule(op_type)
    hybrid_weights = set(narrow.weights) if narrow is not None else set()
    if rule is None:
        deciding = tuple(o for o in inputs if not o.constant) + outputs
    else:
        deciding = tuple(
            o
            for o in inputs
            if o.rule
            and o.rule.role == "activation"
            and not (o.constant and o.position in hybrid_weights)
        )
        deciding += tuple(o for o in outputs if o.rule)
    if any(o.tensor.dtype in QUANTIZED_TYPES for o in deciding):
        return scheme
    if any(o.tensor.dtype in FLOAT_TYPES for o in deciding):
        return Mode.FLOAT
    return Mode.INTEGER


class AuditContext:
    """One model prepared for the rule families: the spec tables under the audit's profiles,
    every operator's view, and which ops read and write each tensor. `severity` maps rule ids to
    the level each is reported at."""

    def __init__(
        self, model: Model, severity: Mapping[str, str], profiles: tuple[str, ...] = ()
    ) -> None:
        self.model = model
        self.profiles = profiles
        self.severity = severity  # rule id -> level under the profiles (check.severities)
        self.spec = load_spec(profiles)
        self.spec16 = load_spec(profiles, "int16")  # ops whose activations are int16 (16x8)
        self.base_spec = load_spec(())
        self.settings = load_settings()
        self.ops = [
            self._view(s, i)
            for s, subgraph in enumerate(model.subgraphs)
            for i in range(len(subgraph.operators))
        ]
        self._uses: list[dict[int, list[tuple[OpView, Operand]]]] = [{} for _ in model.subgraphs]
        for op in self.ops:
            # Producers first, so that a tensor-level finding points at the op that wrote it.
            for operand in op.outputs + op.inputs:
                uses = self._uses[op.subgraph].setdefault(operand.index, [])
                if operand.kind == "output":
                    uses.insert(0, (op, operand))
                else:
                    uses.append((op, operand))

    def _view(self, s: int, i: int) -> OpView:
        op = self.model.subgraphs[s].operators[i]
        tensors = self.model.subgraphs[s].tensors
        op_type = self.model.op_type(op)
        spec = self.scheme(op, op_type, tensors)
        rule = spec.rule(op_type)

        def operands(kind: str, indices: list[int]) -> tuple[Operand, ...]:
            lookup = (rule.input_rule if kind == "input" else rule.output_rule) if rule else None
            return tuple(
                Operand(
                    kind,
                    p,
                    t,
                    tensors[t],
                    lookup(p) if lookup and real(t) else None,
                    self.model.is_constant(tensors[t]),
                )
                for p, t in enumerate(indices)
                if t >= 0
            )

        def real(t: int) -> bool:
            """Whether tensor t is audited under the op's rule: a control-flow op passes its
            condition and integer operands on untouched, only real-valued ones are quantized."""
            passed = rule is not None and rule.control_flow is not None
            return not passed or tensors[t].dtype in FLOAT_TYPES | QUANTIZED_TYPES

        inputs, outputs = operands("input", op.inputs), operands("output", op.outputs)
        scheme = Mode.INT16 if spec is self.spec16 else Mode.INT8
        device = load_op_facts().compiled_for(op_type)
        if device is not None:  # nothing for the int8 spec's rules to read
            return OpView(s, i, op_type, None, inputs, outputs, False, Mode.INTEGER, "int8", device)
        shape_only = shape_only_inputs(op_type)
        valued = tuple(o for o in inputs if o.position not in shape_only)
        return OpView(
            s,
            i,
            op_type,
            rule,
            inputs,
            outputs,
            boundary=op_type in self.settings.boundary_ops,
            mode=_compute_mode(op_type, valued, outputs, rule, scheme),
            scheme=scheme.value,
        )

    def scheme(self, op, op_type: str, tensors: list[Tensor]):
        """The spec an op is audited against: the 16x8 table when its first activation input or
        its first output is int16 (the scheme's activation type), the int8 table otherwise.
        The first activation input is the first the int8 table quantizes (ASSIGN_VARIABLE's
        value, after the variable's handle), else input 0; control flow, which passes counters
        and conditions on beside real values, is 16x8 when any operand is int16."""
        rule = self.spec.rule(op_type)
        indices = [r.index for r in rule.inputs if isinstance(r.index, int)] if rule else []
        position = indices[0] if indices else 0
        first = [op.inputs[position]] if len(op.inputs) > position >= 0 else []
        first = [t for t in first if t >= 0] + op.outputs[:1]
        if rule is not None and rule.control_flow is not None:
            first = [t for t in op.inputs + op.outputs if t >= 0]
        if any(tensors[t].dtype == TensorType.INT16 for t in first):
            return self.spec16
        return self.spec

    # ------------------------------------------------------------------ classification

    @functools.cached_property
    def quantized(self) -> bool:
        """Whether any op (besides the boundary conversions) computes in int8, on the CPU or in
        a device's compiled program."""
        return any(
            (op.mode in QUANTIZED or op.compiled_for is not None) and not op.boundary
            for op in self.ops
        )

    def int8_ops(self) -> Iterator[OpView]:
        """Ops that compute in int8 and that the spec has rules for."""
        return (op for op in self.ops if op.mode in QUANTIZED and op.rule is not None)

    def checked_operands(self, op: OpView) -> Iterator[Operand]:
        """Operands the op table covers, minus the other side of a boundary op: float, legacy
        uint8, or the other scheme's activation type (QUANTIZE between int8 and int16)."""
        for operand in op.operands:
            if operand.rule is None:
                continue
            if op.boundary and operand.kind == "input" and operand.constant:
                continue  # a DEQUANTIZE of constant weights (weight-only): weight_rules.py
            if op.boundary and (
                operand.tensor.dtype in FLOAT_TYPES
                or self.is_legacy(operand)
                or (
                    operand.tensor.dtype in ACTIVATION_TYPES
                    and not self.is_dtype(operand.tensor, operand.rule.dtype)
                )
            ):
                continue
            yield operand

    def param_operands(self) -> Iterator[tuple[OpView, Operand]]:
        """Checked operands of int8 ops that are sound (see `sound`)."""
        for op in self.int8_ops():
            for operand in self.checked_operands(op):
                if self.sound(op, operand):
                    yield op, operand

    def sound(self, op: OpView, operand: Operand) -> bool:
        """Whether an operand's type and parameters are right enough to check relations on.

        Operands with a wrong type or broken parameters have their own finding already; the
        rules relating parameters skip them instead of reporting consequences.
        """
        return (
            operand.tensor.quantized
            and (op.subgraph, operand.index) not in self.broken
            and self.dtype_ok(op, operand)
        )

    def dtype_ok(self, op: OpView, operand: Operand) -> bool:
        """The rule's dtype, its legacy form when the whole op uses the legacy form, or int4
        weights where the op's int8 kernel reads them (`schemas/weight_modes.json`)."""
        if self.is_dtype(operand.tensor, operand.rule.dtype):
            return True
        if operand.rule.role == "weight" and operand.tensor.dtype == TensorType.INT4:
            weights = weight_rule(op.type)
            q = operand.tensor.quantization
            granularity = "per-axis" if q is not None and q.per_axis else "per-tensor"
            return weights is not None and granularity in weights.int4_with_int8_activations
        return self.is_legacy(operand) and all(
            self.is_legacy(o)
            for o in self.checked_operands(op)
            if o.rule.dtype in self.settings.legacy_dtypes
        )

    def is_dtype(self, tensor: Tensor, name: str) -> bool:
        """Whether the tensor has the spec's dtype `name` ("int8", "int32", ...)."""
        return dtype_name(tensor.dtype).lower() == name

    def is_legacy(self, operand: Operand) -> bool:
        """Whether the operand has the legacy form of its rule's dtype (uint8 for int8)."""
        legacy = self.settings.legacy_dtypes.get(operand.rule.dtype)
        return legacy is not None and self.is_dtype(operand.tensor, legacy)

    # ------------------------------------------------------------------ parameters

    @functools.cached_property
    def broken(self) -> dict[tuple[int, int], list[tuple[RuleInfo, str]]]:
        """Tensors with unsound parameters: (subgraph, tensor) -> [(rule, message)]."""
        ranges = self.spec.dtype_ranges
        found = {
            (s, t): param_problems(tensor, ranges)
            for s, subgraph in enumerate(self.model.subgraphs)
            for t, tensor in enumerate(subgraph.tensors)
        }
        return {key: problems for key, problems in found.items() if problems}

    def profile_note(self, op: OpView, operand: Operand) -> str:
        """A note naming the target profiles when they, not the op table, set this rule."""
        base = self.base_spec.rule(op.type)
        if base is None or not self.profiles:
            return ""
        lookup = base.input_rule if operand.kind == "input" else base.output_rule
        if lookup(operand.position) == operand.rule:
            return ""
        return f" (target profile {', '.join(self.profiles)})"

    # ------------------------------------------------------------------ graph

    def uses(self, subgraph: int, tensor_index: int) -> list[tuple[OpView, Operand]]:
        """The ops that write (first) and read a tensor, with the tensor's operand in each."""
        return self._uses[subgraph].get(tensor_index, [])

    def origin(self, subgraph: int, tensor_index: int) -> str:
        """Where a tensor's value comes from, for messages."""
        producer = next(
            (op for op, o in self.uses(subgraph, tensor_index) if o.kind == "output"), None
        )
        if producer is not None:
            return f"written by op {producer.index} {producer.type}"
        if tensor_index in self.model.subgraphs[subgraph].inputs:
            return "a model input"
        tensor = self.model.subgraphs[subgraph].tensors[tensor_index]
        return "a constant" if self.model.is_constant(tensor) else "never written"

    # ------------------------------------------------------------------ findings

    def finding(
        self, rule: RuleInfo, message: str, op: OpView | None = None, operand: Operand | None = None
    ) -> Finding:
        """A finding at an op (and operand), with the severity the active profiles give it."""
        return rule.finding(
            self.severity,
            message,
            subgraph=None if op is None else op.subgraph,
            op_index=None if op is None else op.index,
            op=None if op is None else op.type,
            role=None if operand is None else operand.role,
            tensor=None if operand is None else operand.tensor.name,
            tensor_index=None if operand is None else operand.index,
        )

    def tensor_finding(
        self, rule: RuleInfo, message: str, subgraph: int, tensor_index: int
    ) -> Finding:
        """A finding about a tensor, placed at the op that writes it (else its first reader)."""
        uses = self.uses(subgraph, tensor_index)
        if uses:
            return self.finding(rule, message, *uses[0])
        tensor = self.model.subgraphs[subgraph].tensors[tensor_index]
        return rule.finding(
            self.severity,
            message,
            subgraph=subgraph,
            tensor=tensor.name,
            tensor_index=tensor_index,
        )

    def quantized_tensors(self) -> Iterator[tuple[int, int, Tensor]]:
        """(subgraph, index, tensor) of every tensor with sound quantization parameters."""
        for s, subgraph in enumerate(self.model.subgraphs):
            for t, tensor in enumerate(subgraph.tensors):
                if tensor.quantized and (s, t) not in self.broken:
                    yield s, t, tensor

"""The model validator: runs right after reading, before any engine, planner or audit rule.

It checks, against the operator facts in `schemas/ops.json`:
- structure: every index (operator codes, tensors, buffers, subgraphs) in range, constants
  holding exactly the bytes their shape needs;
- tensors: a type qtool can hold, shapes without negative or absurd dimensions, activations
  within the documented size limits, shape signatures that fit their shapes;
- the graph: every tensor produced once, and before it is read (runtimes execute operators in
  the stored order, so this also rules out cycles), valid subgraph inputs, outputs, signatures;
  every subgraph an operator calls exists, and no call comes back to a running subgraph
  (`calls.py`);
- every operator: a known operator code, its input/output counts and operand types, its options
  table, constant operands where it needs them, and its shape rule (`shape_rules.py`;
  `validate_operators.py`).

Each problem names where it is (`operator N (TYPE)`, a tensor, a subgraph) and what is wrong.
`validate_model` raises the first as an `InvalidModelError`; `model_problems` lists them all
(what `qtool check` turns into findings).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from qtool.errors import ModelError
from qtool.model.calls import call_problems
from qtool.model.graph import Model, Operator, Subgraph, Tensor
from qtool.model.types import (
    BuiltinOperator,
    TensorType,
    dtype_name,
    known_tensor_type,
    numpy_dtype,
    tensor_types,
)
from qtool.model.validate_operators import operator_message, stored_constants
from qtool.op_facts import load_op_facts, type_class

SCHEMA_VERSION = 3
MAX_PROBLEMS = 50
_OPAQUE = (TensorType.STRING, TensorType.RESOURCE, TensorType.VARIANT)
_FLOATS = tensor_types(type_class("floating"))


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a model, and where: the operator or tensor it concerns (indices in
    `subgraph`), or the whole model when they are None."""

    message: str
    subgraph: int | None = None
    op_index: int | None = None
    op_type: str | None = None
    tensor_index: int | None = None
    tensor_name: str | None = None

    def location(self) -> str:
        """Where the problem is, as text ("operator 3 (ADD)", "subgraph 1 tensor 2 ('x')"); the
        subgraph is named only when it is not 0, and the text is empty for a problem of the whole
        model."""
        prefix = f"subgraph {self.subgraph} " if self.subgraph else ""
        if self.op_index is not None:
            return f"{prefix}operator {self.op_index} ({self.op_type})"
        if self.tensor_index is not None:
            return f"{prefix}tensor {self.tensor_index} ({self.tensor_name!r})"
        return prefix.strip()

    def text(self, name: str) -> str:
        """The one-line message for model `name`: "name: location: message"."""
        where = self.location()
        return f"{name}: {where}: {self.message}" if where else f"{name}: {self.message}"


class InvalidModelError(ModelError):
    """The file decodes, but the graph is not one qtool (or any TFLite runtime) can run."""

    def __init__(self, name: str, problems: list[Problem], operators: list[tuple[int, int, str]]):
        super().__init__(problems[0].text(name))
        self.name = name
        self.problems = problems
        self.operators = operators  # (subgraph, index, type) of every operator, for reports


def validate_model(model: Model, name: str = "model") -> None:
    """Raise InvalidModelError naming the first problem of `model`, if it has any."""
    problems = model_problems(model)
    if problems:
        raise InvalidModelError(name, problems, operator_list(model))


def op_type_name(model: Model, op: Operator) -> str:
    """An operator's type, or `?` when its operator code index is out of range."""
    if 0 <= op.opcode_index < len(model.operator_codes):
        return model.op_type(op)
    return "?"


def operator_list(model: Model) -> list[tuple[int, int, str]]:
    """(subgraph, index, type) of every operator, `?` for types of out-of-range codes."""
    return [(s, i, op_type_name(model, op)) for s, i, _, op in model.iter_ops()]


def model_problems(model: Model) -> list[Problem]:
    """Every problem of `model`, structure first: later checks assume valid indices."""
    problems = _structure(model)
    if not problems:
        for s, i, message in call_problems(model):
            problems.append(_op(s, i, model.op_type(model.subgraphs[s].operators[i]), message))
        for s, subgraph in enumerate(model.subgraphs):
            bad = _tensor_problems(model, s, subgraph, problems)
            _graph_problems(model, s, subgraph, problems)
            stored = stored_constants(model, subgraph)
            for i, op in enumerate(subgraph.operators):
                if bad.intersection(op.inputs + op.outputs):
                    continue
                message = operator_message(model, subgraph, op, stored)
                if message is not None:
                    problems.append(_op(s, i, model.op_type(op), message))
        _signature_problems(model, problems)
    return problems[:MAX_PROBLEMS]


# --------------------------------------------------------------------------- structure


def _structure(model: Model) -> list[Problem]:
    problems: list[Problem] = []
    if model.version != SCHEMA_VERSION:
        problems.append(Problem(f"unsupported schema version {model.version} (qtool reads 3)"))
    if not model.subgraphs:
        problems.append(Problem("the model has no subgraph"))
    n_buffers, n_codes = len(model.buffers), len(model.operator_codes)
    for s, subgraph in enumerate(model.subgraphs):
        n_tensors = len(subgraph.tensors)
        for t, tensor in enumerate(subgraph.tensors):
            if not 0 <= tensor.buffer < max(n_buffers, 1):
                problems.append(
                    _tensor(
                        s, t, tensor, f"refers to buffer {tensor.buffer}, the model has {n_buffers}"
                    )
                )
        for kind, indices in (("input", subgraph.inputs), ("output", subgraph.outputs)):
            for t in indices:
                if not 0 <= t < n_tensors:
                    problems.append(
                        Problem(f"{kind} refers to tensor {t}, the subgraph has {n_tensors}", s)
                    )
        for i, op in enumerate(subgraph.operators):
            if not 0 <= op.opcode_index < n_codes:
                problems.append(
                    Problem(
                        f"uses operator code {op.opcode_index}, the model has {n_codes}", s, i, "?"
                    )
                )
                continue
            for kind, indices, low in (
                ("input", op.inputs, -1),
                ("output", op.outputs, 0),
                ("intermediate", op.intermediates, 0),
            ):
                bad = [t for t in indices if not low <= t < n_tensors]
                if bad:
                    problems.append(
                        _op(
                            s,
                            i,
                            model.op_type(op),
                            f"{kind} refers to tensor {bad[0]}, the subgraph has {n_tensors}",
                        )
                    )
    for meta in model.metadata:
        if not 0 <= meta["buffer"] < n_buffers:
            problems.append(
                Problem(f"metadata {meta.get('name')!r} refers to buffer {meta['buffer']}")
            )
    for signature in model.signature_defs:
        s = signature["subgraph_index"]
        key = signature.get("signature_key")
        if not 0 <= s < len(model.subgraphs):
            problems.append(Problem(f"signature {key!r} refers to subgraph {s}"))
            continue
        n_tensors = len(model.subgraphs[s].tensors)
        for entry in (signature["inputs"] or []) + (signature["outputs"] or []):
            if not 0 <= entry["tensor_index"] < n_tensors:
                problems.append(
                    Problem(
                        f"signature {key!r} entry {entry.get('name')!r} refers to tensor "
                        f"{entry['tensor_index']}, the subgraph has {n_tensors}"
                    )
                )
    return problems


def _op(s: int, i: int, op_type: str, message: str) -> Problem:
    return Problem(message, s, i, op_type)


def _tensor(s: int, t: int, tensor: Tensor, message: str) -> Problem:
    return Problem(message, s, tensor_index=t, tensor_name=tensor.name)


# --------------------------------------------------------------------------- tensors


def _tensor_problems(model: Model, s: int, subgraph: Subgraph, problems: list[Problem]) -> set[int]:
    """Append each tensor's problem; return the indices of the tensors that have one."""
    bad: set[int] = set()
    for t, tensor in enumerate(subgraph.tensors):
        message = _tensor_message(model, tensor)
        if message:
            problems.append(_tensor(s, t, tensor, message))
            bad.add(t)
    return bad


def _tensor_message(model: Model, tensor: Tensor) -> str | None:
    limits = load_op_facts().limits
    if not known_tensor_type(tensor.dtype):
        return f"has an unknown tensor type (code {tensor.dtype})"
    shape = tensor.shape
    if len(shape) > limits.max_rank:
        return f"has rank {len(shape)}, more than {limits.max_rank}"
    if any(d < 0 for d in shape):  # a dynamic dimension is 1 here and -1 in the signature
        return f"has an invalid shape {shape}"
    signature = tensor.shape_signature
    if signature is not None and (
        len(signature) != len(shape)
        or any(g != -1 and g != d for g, d in zip(signature, shape, strict=True))
    ):
        return f"has a shape signature {signature} that does not fit its shape {shape}"
    if model.is_constant(tensor):
        return _constant_message(model, tensor)
    count = math.prod(max(d, 1) for d in shape)  # an empty tensor costs what one element would
    itemsize = 1 if tensor.dtype in _OPAQUE else max(numpy_dtype(tensor.dtype).itemsize, 1)
    if count > limits.max_activation_elements or count * itemsize > limits.max_activation_bytes:
        return (
            f"declares {count:,} elements ({count * itemsize:,} bytes), over qtool's limit of "
            f"{limits.max_activation_elements:,} elements and {limits.max_activation_bytes:,} bytes"
        )
    return None


def _constant_message(model: Model, tensor: Tensor) -> str | None:
    if tensor.dtype in _OPAQUE:
        return None
    if tensor.sparsity is not None:  # DENSIFY checks the encoding; the values must be whole
        itemsize = numpy_dtype(tensor.dtype).itemsize
        have = model.buffers[tensor.buffer].nbytes
        if have % itemsize:
            return f"holds {have} bytes, no whole number of {dtype_name(tensor.dtype)} values"
        return None
    count = math.prod(tensor.shape)
    itemsize = numpy_dtype(tensor.dtype).itemsize
    needed = (count + 1) // 2 if tensor.dtype == TensorType.INT4 else count * itemsize
    have = model.buffers[tensor.buffer].nbytes
    if have != needed:
        return (
            f"needs {needed} bytes of {dtype_name(tensor.dtype)} data for shape {tensor.shape}, "
            f"but its buffer {tensor.buffer} holds {have}"
        )
    if tensor.dtype in _FLOATS and np.isnan(model.tensor_data(tensor)).any():
        return "is a constant holding NaN"
    return None


# --------------------------------------------------------------------------- graph


def _sources(model: Model, subgraph: Subgraph) -> set[int]:
    """Tensors that hold values before any operator runs."""
    return set(subgraph.inputs) | {
        t
        for t, tensor in enumerate(subgraph.tensors)
        if model.is_constant(tensor) or tensor.is_variable
    }


def _runtime_buffers(model: Model, subgraph: Subgraph) -> set[int]:
    """Tensors a compiled op reads as buffers the runtime places (Vela's scratch areas)."""
    table = load_op_facts()
    placed = set()
    for op in subgraph.operators:
        code = model.operator_codes[op.opcode_index]
        facts = (
            table.custom(code.custom_code) if code.builtin_code == BuiltinOperator.CUSTOM else None
        )
        if facts is None:
            continue
        for position, t in enumerate(op.inputs):
            operand = facts.input(position)
            if t >= 0 and operand is not None and operand.runtime_buffer:
                placed.add(t)
    return placed


def _graph_problems(model: Model, s: int, subgraph: Subgraph, problems: list[Problem]) -> None:
    sources = _sources(model, subgraph) | _runtime_buffers(model, subgraph)
    written = {t for op in subgraph.operators for t in op.outputs}
    # An empty tensor no operator writes is an empty constant (an empty axis list, say).
    sources |= {
        t
        for t, tensor in enumerate(subgraph.tensors)
        if 0 in tensor.shape and t not in written and tensor.dtype not in _OPAQUE
    }
    # A variable tensor holds state before any operator runs, and an operator may also set it:
    # TensorFlow's float16 models initialise an LSTM's state variables with a DEQUANTIZE.
    fixed = sources - {t for t, tensor in enumerate(subgraph.tensors) if tensor.is_variable}
    producer: dict[int, int] = {}
    inputs = set(subgraph.inputs)
    for i, op in enumerate(subgraph.operators):
        op_type = model.op_type(op)
        # Sets, not list lookups: an operator may list 100,000 outputs (linear, not quadratic).
        twice = {t for t, n in Counter(op.outputs).items() if n > 1}
        for t in op.outputs:
            if t in producer or t in fixed or t in twice:
                what = (
                    f"operator {producer[t]}"
                    if t in producer
                    else ("a model input" if t in inputs else "a constant")
                )
                problems.append(_op(s, i, op_type, f"writes tensor {t}, already {what}"))
            producer.setdefault(t, i)
    for i, op in enumerate(subgraph.operators):
        for position, t in enumerate(op.inputs):
            message = None
            if t >= 0 and t not in sources and t not in producer:
                message = "which is no constant, no model input and no operator's output"
            elif t >= 0 and t not in sources and producer[t] >= i:
                # Runtimes execute operators in the stored order.
                message = f"which operator {producer[t]} only writes later"
            if message:
                name = subgraph.tensors[t].name
                problems.append(
                    _op(
                        s,
                        i,
                        model.op_type(op),
                        f"input {position} reads tensor {t} ({name!r}), {message}",
                    )
                )
    for t in subgraph.outputs:
        if t not in sources and t not in producer:
            problems.append(Problem(f"output tensor {t} is produced by no operator", s))
    if len(set(subgraph.inputs)) != len(subgraph.inputs):
        problems.append(Problem(f"lists a model input twice: {subgraph.inputs}", s))
    for role, indices in (("input", subgraph.inputs), ("output", subgraph.outputs)):
        for t in indices:
            if model.is_constant(subgraph.tensors[t]):
                problems.append(
                    _tensor(s, t, subgraph.tensors[t], f"is a model {role} but a constant")
                )
    for t in subgraph.inputs:
        tensor = subgraph.tensors[t]
        if tensor.dtype in _OPAQUE:
            problems.append(
                _tensor(
                    s,
                    t,
                    tensor,
                    f"is a model input of type {dtype_name(tensor.dtype)}; qtool reads numeric inputs only",
                )
            )


# --------------------------------------------------------------------------- signatures


def _signature_problems(model: Model, problems: list[Problem]) -> None:
    keys = Counter(sig.get("signature_key") for sig in model.signature_defs)
    for key in (k for k, n in keys.items() if n > 1):
        problems.append(Problem(f"signature key {key!r} is used twice"))
    for signature in model.signature_defs:
        key = signature.get("signature_key")
        entries = (signature["inputs"] or []) + (signature["outputs"] or [])
        if not key or not all(e.get("name") for e in entries):
            problems.append(Problem(f"signature {key!r} lacks a key or an entry name"))
            continue
        subgraph = model.subgraphs[signature["subgraph_index"]]
        inputs = [e["tensor_index"] for e in signature["inputs"] or []]
        outputs = [e["tensor_index"] for e in signature["outputs"] or []]
        if sorted(inputs) != sorted(subgraph.inputs):
            problems.append(
                Problem(
                    f"signature {key!r} inputs {inputs} are not its subgraph's inputs {subgraph.inputs}"
                )
            )
        if not set(outputs) <= set(subgraph.outputs):
            problems.append(
                Problem(f"signature {key!r} outputs {outputs} are not among its subgraph's outputs")
            )
        for kind in ("inputs", "outputs"):
            names = [e.get("name") for e in signature[kind] or []]
            if len(set(names)) != len(names):
                problems.append(Problem(f"signature {key!r} names two {kind} alike: {names}"))

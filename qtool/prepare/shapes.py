"""Static shapes for a model whose inputs are declared dynamic: every tensor's shape at the
input shapes the user (or the data) chose.

Exporters write dynamic dimensions as -1 in `shape_signature` and 1 in `shape`
(openWakeWord's melspectrogram declares its input [1, 1], signature [-1, -1], and is fed 1760
samples). The engine, LiteRT's runner and the planner all work at one static shape, so the
chosen input shapes are propagated through the graph by the validator's shape rules (the rules
compute each operator's output shapes from its inputs). Shape arithmetic that reads a shape at
run time (SHAPE, and the STRIDED_SLICE/PACK chains after it) is evaluated with the engine's
kernels once the shapes it reads are known, so a RESHAPE to a computed shape is resolved too.

The resized model keeps every `shape_signature` as it was: LiteRT allocates it at the new
shapes and may still resize it to any other size the signature allows, as it could the float
model. A shape the signature fixes differently, or an operator that cannot run at the chosen
shape, is a UsageError naming the tensor or operator; so is a shape that cannot be known before
running (an operator without a shape rule, control flow) when an input was resized, while a
model kept at its declared shapes is then left as it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from qtool.errors import UsageError
from qtool.model import Model, numpy_dtype
from qtool.model.calls import callees
from qtool.model.edit import clone_model
from qtool.model.shape_rules import RULES, OpView, ShapeError
from qtool.model.types import TensorType, tensor_type
from qtool.op_facts import load_op_facts, shape_only_inputs
from qtool.runtime.registry import lookup


def fits_signature(shape: Sequence[int], signature: Sequence[int] | None) -> bool:
    """Whether a static shape is one the signature allows (-1: any size)."""
    if signature is None:
        return False
    return len(shape) == len(signature) and all(
        s == -1 or s == d for s, d in zip(signature, shape, strict=True)
    )


def is_dynamic(model: Model, subgraph_index: int = 0) -> bool:
    """Whether any input of the subgraph declares a dimension dynamic (-1 in its signature)."""
    subgraph = model.subgraphs[subgraph_index]
    return any(-1 in (subgraph.tensors[t].shape_signature or ()) for t in subgraph.inputs)


def resized(model: Model, shapes: Mapping[int, Sequence[int]], subgraph_index: int = 0) -> Model:
    """A copy of `model` with the inputs `shapes` names (subgraph input tensor -> shape) at
    those shapes, the other inputs at their declared ones, and every tensor of the subgraph
    at the static shape that follows; signatures unchanged."""
    subgraph = model.subgraphs[subgraph_index]
    for t, shape in shapes.items():
        tensor = subgraph.tensors[t]
        if list(shape) == list(tensor.shape):
            continue
        if not fits_signature(shape, tensor.shape_signature):
            fixed = tensor.shape_signature or tensor.shape
            raise UsageError(
                f"input {tensor.name!r} cannot take shape {list(shape)}: the model declares "
                f"it {list(fixed)} (-1 marks the dimensions a runtime may choose)"
            )
    try:
        found = _propagated(model, subgraph_index, shapes)
    except _Unknown as unknown:
        changed = any(
            list(shape) != _model_shape(model, subgraph_index, t) for t, shape in shapes.items()
        )
        if changed:
            raise UsageError(str(unknown)) from None
        return model  # at its declared shapes: the engines follow the graph as it runs
    work = clone_model(model)
    tensors = work.subgraphs[subgraph_index].tensors
    for t, shape in found.items():
        tensor = tensors[t]
        signature = tensor.shape_signature
        if (
            signature is not None
            and len(signature) == len(shape)
            and not fits_signature(shape, signature)
        ):
            raise UsageError(
                f"at the input shapes {_described(model, subgraph_index, shapes)}, tensor "
                f"{tensor.name!r} would have shape {list(shape)}, which the model fixes as "
                f"{list(signature)}"
            )
        tensor.shape = list(shape)
    return work


def _described(model: Model, subgraph_index: int, shapes: Mapping[int, Sequence[int]]) -> str:
    tensors = model.subgraphs[subgraph_index].tensors
    inputs = model.subgraphs[subgraph_index].inputs
    chosen = {t: list(shapes.get(t, tensors[t].shape)) for t in inputs}
    return ", ".join(f"{tensors[t].name}={shape}" for t, shape in chosen.items())


class _Unknown(Exception):
    """A shape after some operator is not known before running the model."""


def _propagated(
    model: Model, subgraph_index: int, shapes: Mapping[int, Sequence[int]]
) -> dict[int, list[int]]:
    """The static shape of every non-constant tensor of the subgraph at the input `shapes`.

    Works on a scratch copy whose signatures are dropped (the rules then see every dimension
    as static) and in which evaluated shape arithmetic becomes constant."""
    scratch = clone_model(model)
    subgraph = scratch.subgraphs[subgraph_index]
    for tensor in subgraph.tensors:
        tensor.shape_signature = None
    for t, shape in shapes.items():
        subgraph.tensors[t].shape = list(shape)
    facts_of = load_op_facts()
    found = {t: list(subgraph.tensors[t].shape) for t in subgraph.inputs}
    for index in subgraph.topological_order():
        op = subgraph.operators[index]
        op_type = scratch.op_type(op)
        facts = facts_of.facts(op_type)
        where = f"operator {index} ({op_type})"
        if facts is None or any(callees(op, op_type)):  # control flow: shapes of its own
            changed = [
                t
                for t in op.inputs
                if t in found and found[t] != _model_shape(model, subgraph_index, t)
            ]
            if changed:
                raise _Unknown(
                    f"at the input shapes {_described(model, subgraph_index, shapes)}, {where} "
                    "has no shape rule in qtool that follows a resized input, so the shapes "
                    "after it are unknown"
                )
            found.update({t: list(subgraph.tensors[t].shape) for t in op.outputs})
            continue
        if _evaluate(scratch, subgraph_index, index):
            found.update({t: list(subgraph.tensors[t].shape) for t in op.outputs})
            continue
        try:
            inferred = RULES[facts.shape](OpView(scratch, subgraph, op, facts))
        except ShapeError as exc:
            raise UsageError(
                f"the model cannot run at the input shapes "
                f"{_described(model, subgraph_index, shapes)}: {where}: {exc} (give the shape "
                "it runs at: --input-shape NAME=DIMS, or data of that shape)"
            ) from None
        for t, shape in zip(op.outputs, inferred, strict=True):
            if shape is None or None in shape:
                raise _Unknown(
                    f"at the input shapes {_described(model, subgraph_index, shapes)}, the "
                    f"shape of {subgraph.tensors[t].name!r} ({where}) depends on values known "
                    "only at run time"
                )
            subgraph.tensors[t].shape = [int(d) for d in shape]
            found[t] = list(subgraph.tensors[t].shape)
    return found


def _model_shape(model: Model, subgraph_index: int, t: int) -> list[int]:
    """A tensor's declared shape."""
    return list(model.subgraphs[subgraph_index].tensors[t].shape)


def _evaluate(model: Model, subgraph_index: int, index: int) -> bool:
    """Evaluate an operator of shape arithmetic whose values are all known now (constants, or
    read only for their shape, which is static), making its outputs constants of the scratch
    model. False when it reads a run-time value or qtool has no kernel for it."""
    subgraph = model.subgraphs[subgraph_index]
    op = subgraph.operators[index]
    op_type = model.op_type(op)
    shape_only = shape_only_inputs(op_type)
    present = [(p, t) for p, t in enumerate(op.inputs) if t >= 0]
    if not present or any(
        p not in shape_only and not model.is_constant(subgraph.tensors[t]) for p, t in present
    ):
        return False
    code = model.operator_codes[op.opcode_index]
    entry = lookup(op_type, False) if code.custom_code is None else None
    if entry is None:
        return False

    def value_of(t: int) -> np.ndarray:
        tensor = subgraph.tensors[t]
        if model.is_constant(tensor):
            return model.tensor_data(tensor)
        return np.zeros(tensor.shape, numpy_dtype(tensor.dtype))  # read only for its shape

    for t, value in zip(op.outputs, entry.fold(model, subgraph, index, value_of), strict=True):
        value = np.asarray(value, order="C")  # a scalar stays 0-d
        model.set_tensor_data(subgraph, t, value)
        tensor = subgraph.tensors[t]
        tensor.dtype = tensor_type(value.dtype) if value.dtype != np.bool_ else TensorType.BOOL
    return True

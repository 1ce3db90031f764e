"""Fold constant operators into float32 constants before planning.

Float models in the wild store weights as float16 behind DEQUANTIZE, or sparse behind DENSIFY;
converters also leave shape arithmetic on constants. Evaluating such operators once with the
engine's kernels turns them into plain constants, so that planning sees ordinary float weights.
How such a weight was stored (float16, sparse) is remembered, by tensor name, so that the
written model can store it as compactly again (`StoredForm`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qtool.model import Model, TensorType
from qtool.model.types import tensor_type
from qtool.runtime.registry import lookup


@dataclass(frozen=True)
class StoredForm:
    """How the source model stored a constant that folding turned into float32: the type of
    its stored values (FLOAT16 behind a DEQUANTIZE, or FLOAT32) and its sparsity parameters
    (a sparse tensor behind a DENSIFY), or None when dense."""

    dtype: int
    sparsity: dict | None = None


# The folded operators that only change how values are stored, not what they are.
_STORAGE_OPS = ("DENSIFY", "DEQUANTIZE")


@dataclass(frozen=True)
class FoldedOp:
    """An operator replaced by constants because all its inputs were constant; `outputs` names
    the tensors it produced."""

    subgraph: int
    index: int  # operator index in the original subgraph
    op_type: str
    outputs: tuple[str, ...]


def fold_constants(
    model: Model, subgraph_index: int = 0, forms: dict[str, StoredForm] | None = None
) -> list[FoldedOp]:
    """Replace every operator whose inputs are all constant by constants; return what went.

    `forms`, when given, receives the stored form of each constant that came out of a
    DENSIFY or of a float16 DEQUANTIZE, by tensor name."""
    subgraph = model.subgraphs[subgraph_index]
    folded: list[FoldedOp] = []
    kept: list[int] = []  # indices of the operators that stay
    graph_outputs = set(subgraph.outputs)
    for index in subgraph.topological_order():
        op = subgraph.operators[index]
        code = model.operator_codes[op.opcode_index]
        inputs = [t for t in op.inputs if t >= 0]
        foldable = (
            inputs
            and all(model.is_constant(subgraph.tensors[t]) for t in inputs)
            and not graph_outputs.intersection(op.outputs)
            and code.custom_code is None
        )
        entry = lookup(code.name, False) if foldable else None
        if entry is None:
            kept.append(index)
            continue
        if forms is not None:
            _record_form(model, subgraph, op, code.name, forms)
        results = entry.fold(
            model, subgraph, index, lambda t: model.tensor_data(subgraph.tensors[t])
        )
        for t, value in zip(op.outputs, results, strict=True):
            value = np.asarray(value, order="C")  # a folded scalar stays 0-d
            tensor = subgraph.tensors[t]
            model.set_tensor_data(subgraph, t, value)
            tensor.dtype = tensor_type(value.dtype) if value.dtype != np.bool_ else TensorType.BOOL
            tensor.quantization = None
            tensor.sparsity = None
        folded.append(
            FoldedOp(
                subgraph_index,
                index,
                code.name,
                tuple(subgraph.tensors[t].name for t in op.outputs),
            )
        )
    subgraph.operators = [subgraph.operators[index] for index in sorted(kept)]
    return folded


def _record_form(model: Model, subgraph, op, op_type: str, forms: dict[str, StoredForm]) -> None:
    """The stored form of a storage op's output: its input's, carried through the chain
    (a sparse float16 weight goes through DENSIFY, then DEQUANTIZE)."""
    if op_type not in _STORAGE_OPS or len(op.inputs) != 1 or len(op.outputs) != 1:
        return
    source = subgraph.tensors[op.inputs[0]]
    if op_type == "DEQUANTIZE" and (source.dtype != TensorType.FLOAT16 or source.quantized):
        return  # int8 dequantized: the values themselves change with a re-quantization
    earlier = forms.get(source.name)
    sparsity = source.sparsity if source.sparsity is not None else earlier and earlier.sparsity
    forms[subgraph.tensors[op.outputs[0]].name] = StoredForm(
        earlier.dtype if earlier is not None else source.dtype, sparsity
    )

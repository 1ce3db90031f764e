"""Fold constant operators into float32 constants before planning.

Float models in the wild store weights as float16 behind DEQUANTIZE, or sparse behind DENSIFY;
converters also leave shape arithmetic on constants. Evaluating such operators once with the
engine's kernels turns them into plain constants, so that planning sees ordinary float weights
and the quantized model has no trace of those operators.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qtool.model import Model, TensorType
from qtool.model.types import tensor_type
from qtool.runtime.registry import lookup


@dataclass(frozen=True)
class FoldedOp:
    subgraph: int
    index: int  # operator index in the original subgraph
    op_type: str
    outputs: tuple[str, ...]


def fold_constants(model: Model, subgraph_index: int = 0) -> list[FoldedOp]:
    """Replace every operator whose inputs are all constant by constants; return what went."""
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

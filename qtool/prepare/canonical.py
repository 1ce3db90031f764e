"""Rewrites into equivalent operators that have integer kernels, before calibration.

- SQUARE(x) -> MUL(x, x): TFLite has no int8 SQUARE, and int8 MUL of a tensor by itself is exact
  up to the output rounding (Keras' UnitNormalization and L2 losses export SQUARE).
- Convolution2DTransposeBias (a MediaPipe custom op: transposed convolution plus bias) ->
  TRANSPOSE_CONV with its bias input, which has an int8 kernel. The output shape becomes the
  constant first input; padding and strides move from the raw C struct of the custom options to
  TransposeConvOptions.

Each rewrite keeps the operator's position and output tensor, so reports still point at the
input model's operator.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qtool.errors import ModelError
from qtool.model import Model, Operator, Subgraph, Tensor, TensorType
from qtool.model.custom_options import struct_options
from qtool.op_facts import load_op_facts


@dataclass(frozen=True)
class RewrittenOp:
    """An operator rewritten into an equivalent one with an integer kernel (SQUARE -> MUL, ...)."""

    subgraph: int
    index: int  # operator index (unchanged by the rewrite)
    op_type: str  # before
    into: str  # after


def _square(model: Model, subgraph: Subgraph, op: Operator) -> str | None:
    op.opcode_index = model.opcode_for("MUL")
    op.inputs = [op.inputs[0], op.inputs[0]]
    op.options_type, op.options = "MulOptions", {}
    return "MUL"


def _transpose_conv_bias(model: Model, subgraph: Subgraph, op: Operator) -> str | None:
    fields = load_op_facts().custom("Convolution2DTransposeBias").custom_options
    try:
        options = struct_options(op, fields)
    except ModelError:  # the validator refuses such a model; left alone here
        return None
    if len(op.inputs) != 3:
        return None
    output = subgraph.tensors[op.outputs[0]]
    shape = np.asarray(output.shape, np.int32)
    shape_tensor = subgraph.add_tensor(
        Tensor(
            name=f"{output.name}/output_shape",
            shape=[len(shape)],
            dtype=TensorType.INT32,
            buffer=model.add_buffer(shape),
        )
    )
    x, filters, bias = op.inputs
    op.opcode_index = model.opcode_for("TRANSPOSE_CONV", 3)  # version 3: the bias input
    op.inputs = [shape_tensor, filters, x, bias]
    op.custom_options = None
    op.options_type = "TransposeConvOptions"
    op.options = {name: options[name] for name in ("padding", "stride_w", "stride_h")}
    return "TRANSPOSE_CONV"


_REWRITES = {"SQUARE": _square, "Convolution2DTransposeBias": _transpose_conv_bias}


def canonicalize(model: Model, subgraph_index: int = 0) -> list[RewrittenOp]:
    """Rewrite the operators of a subgraph that have an equivalent with an int8 kernel."""
    subgraph = model.subgraphs[subgraph_index]
    done = []
    for i, op in enumerate(subgraph.operators):
        op_type = model.op_type(op)
        rewrite = _REWRITES.get(op_type)
        if rewrite is None:
            continue
        into = rewrite(model, subgraph, op)
        if into is not None:
            done.append(RewrittenOp(subgraph_index, i, op_type, into))
    return done

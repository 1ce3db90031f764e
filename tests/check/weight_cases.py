"""Injection cases of the weight modes' rules (registered in CASES on import): hybrid and
blockwise models written by `qtool quantize --mode dynamic`, one edit each."""

from __future__ import annotations

import functools

import numpy as np

from qtool.model import Model
from qtool.model.lowbit import blockwise_of
from qtool.numerics import pack_int4
from qtool.numerics.lowbit import quantize_weights
from qtool.quantize import QuantizeOptions, quantize_loaded
from tests.check.cases import Case, case, params
from tests.check.helpers import op_index, op_tensor
from tests.quantize.weight_models import depthwise_fc_model, fc_model


@functools.cache
def hybrid() -> Model:
    """DEPTHWISE_CONV_2D then FULLY_CONNECTED, both reading per-axis int8 weights."""
    options = QuantizeOptions(mode="dynamic", min_weight_elements=0)
    return quantize_loaded(depthwise_fc_model(), None, options).model


@functools.cache
def blockwise() -> Model:
    """Two FULLY_CONNECTED reading int4 weights in blocks of 32."""
    options = QuantizeOptions(mode="dynamic", weight_bits=4, block_size=32, min_weight_elements=0)
    return quantize_loaded(fc_model(), None, options).model


def _fc_weights(model: Model) -> tuple[int, int]:
    op = op_index(model, "FULLY_CONNECTED")
    return op, op_tensor(model, op, "input", 1)


@case
def hybrid_kernel() -> Case:
    op = op_index(hybrid(), "DEPTHWISE_CONV_2D")
    w = op_tensor(hybrid(), op, "input", 1)

    def edit(m: Model) -> None:  # per-tensor: LiteRT's hybrid kernel reads it as per-axis
        params(m, w).scale = params(m, w).scale.max(keepdims=True)
        params(m, w).zero_point = params(m, w).zero_point[:1]

    return Case(hybrid(), edit, [("QT-HYBRID-KERNEL", "error", op, "weight")])


@case
def hybrid_params() -> Case:
    op, w = _fc_weights(hybrid())

    def edit(m: Model) -> None:
        params(m, w).zero_point = np.full_like(params(m, w).zero_point, 3)

    return Case(hybrid(), edit, [("QT-HYBRID-PARAMS", "error", op, "weight")])


def _blocks(m: Model, w: int) -> dict:
    return m.subgraphs[0].tensors[w].quantization.extra["details"]


@case
def blockwise_untiled() -> Case:
    op, w = _fc_weights(blockwise())

    def edit(m: Model) -> None:  # blocks of 48 do not tile rows of 128 values
        _blocks(m, w)["block_size"] = 48

    return Case(blockwise(), edit, [("QT-BLOCKWISE", "error", op, "weight")])


@case
def block_scale() -> Case:
    op, w = _fc_weights(blockwise())

    def edit(m: Model) -> None:  # scales with more mantissa bits than bfloat16 holds
        holder = blockwise_of(m.subgraphs[0].tensors[w]).scales
        scales = m.tensor_data(m.subgraphs[0].tensors[holder]).astype(np.float32)
        m.set_tensor_data(m.subgraphs[0], holder, (scales * 1.001).astype(np.float16))

    return Case(blockwise(), edit, [("QT-BLOCK-SCALE", "warning", op, "weight")])


@case
def block_size() -> Case:
    op, w = _fc_weights(blockwise())

    def edit(m: Model) -> None:  # blocks of 16, which XNNPACK leaves to the builtin kernel
        graph = m.subgraphs[0]
        tensor = graph.tensors[w]
        real = fc_model_weights()
        q = quantize_weights(real, 4, block_size=16, mantissa_bits=7)
        tensor.buffer = m.add_buffer(pack_int4(q.values))
        holder = blockwise_of(tensor).scales
        m.set_tensor_data(graph, holder, q.scale.astype(np.float16))
        _blocks(m, w)["block_size"] = 16

    return Case(blockwise(), edit, [("QT-BLOCK-SIZE", "warning", op, "weight")])


def fc_model_weights() -> np.ndarray:
    """The first FULLY_CONNECTED's float weights of `fc_model`."""
    model = fc_model()
    graph = model.subgraphs[0]
    op = op_index(model, "FULLY_CONNECTED")
    return np.asarray(model.tensor_data(graph.tensors[op_tensor(model, op, "input", 1)]))

"""Injection cases of the numerical-risk rules (registered in CASES on import)."""

from __future__ import annotations

import numpy as np

from qtool.model import Model
from tests.check.cases import Case, case, cnn, conv_operands, logits, params, set_values
from tests.check.helpers import chain_model, op_index, op_tensor, tf_model


@case
def bias_saturated() -> Case:
    op, _, _, bias = conv_operands(cnn())

    def edit(m: Model) -> None:
        set_values(m, bias, lambda v: v.__setitem__(0, 2**31 - 1))

    return Case(cnn(), edit, [("QT-BIAS-SATURATED", "warning", op, "bias")])


@case
def range_underused() -> Case:
    fc, _, tensor = logits(cnn())

    def edit(m: Model) -> None:
        q = params(m, tensor)
        q.min, q.max = np.array([-1.0], np.float32), np.array([1.0], np.float32)

    return Case(cnn(), edit, [("QT-RANGE-UNDERUSED", "warning", fc, "output 0")])


@case
def weight_codes() -> Case:
    op, _, w, _ = conv_operands(cnn())

    def edit(m: Model) -> None:
        set_values(m, w, lambda v: v.__setitem__(0, v[0] // 20))

    return Case(cnn(), edit, [("QT-WEIGHT-CODES", "warning", op, "weight")])


def _last_add() -> tuple[Model, int, int, int]:
    """mixed_ops' last ADD: (model, op, input 0, output) - its output only feeds DEQUANTIZE."""
    base = tf_model("mixed_ops_int8")
    add = [i for i, op in enumerate(base.subgraphs[0].operators) if base.op_type(op) == "ADD"][-1]
    return base, add, op_tensor(base, add, "input", 0), op_tensor(base, add, "output", 0)


@case
def rescale_abort() -> Case:
    base, add, first, out = _last_add()

    def edit(m: Model) -> None:  # output scale 2^20 times below the input scale
        params(m, out).scale = params(m, first).scale / np.float32(2**20)

    return Case(base, edit, [("QT-RESCALE-ABORT", "error", add, "output 0")], litert="abort")


@case
def rescale_flush() -> Case:
    base, add, first, out = _last_add()

    def edit(m: Model) -> None:  # input 0 so coarse that input 1's multiplier is below 2^-31
        params(m, first).scale = np.array([1e7], np.float32)
        params(m, out).scale = np.array([1e7], np.float32)

    return Case(base, edit, [("QT-RESCALE-FLUSH", "warning", add, "input 1")], litert="ok")


@case
def tiny_scale() -> Case:
    base = chain_model(["MAX_POOL_2D"])

    def edit(m: Model) -> None:  # pooling keeps the scale: both int8 tensors change together
        for tensor in m.subgraphs[0].tensors:
            if tensor.quantized:
                tensor.quantization.scale = np.array([1e-12], np.float32)

    return Case(
        base,
        edit,
        [("QT-TINY-SCALE", "warning", 0, "output 0"), ("QT-TINY-SCALE", "warning", 1, "output 0")],
        litert="ok",
    )


@case
def comparison_scale_abort() -> Case:
    base = tf_model("spec_ops_int8")
    greater = op_index(base, "GREATER")
    threshold = op_tensor(base, greater, "input", 1)

    def edit(m: Model) -> None:  # the scale a constant of zeros gets when quantized alone
        params(m, threshold).scale = np.array([1.0], np.float32)

    return Case(base, edit, [("QT-RESCALE-ABORT", "error", greater, "input 1")], litert="abort")

"""The injection cases of test_mutations: a valid base model, one edit, the findings it must
raise (and, where the spec text predicts it, LiteRT's verdict)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from qtool.model import Model, QuantParams
from tests.check.helpers import op_index, op_tensor, tf_model


@dataclass
class Case:
    base: Model
    edit: Callable[[Model], None]
    expected: list[tuple[str, str, int, str | None]]  # (rule, severity, op index, operand role)
    litert: str | None = None  # the LiteRT verdict the spec text predicts, when it does


CASES: dict[str, Callable[[], Case]] = {}


def case(function: Callable[[], Case]) -> Callable[[], Case]:
    CASES[function.__name__] = function
    return function


@functools.cache
def cnn() -> Model:
    return tf_model("cnn_int8")


def params(model: Model, tensor: int) -> QuantParams:
    return model.subgraphs[0].tensors[tensor].quantization


def set_values(model: Model, tensor: int, change: Callable[[np.ndarray], None]) -> None:
    values = model.tensor_data(model.subgraphs[0].tensors[tensor]).copy()
    change(values)
    model.set_tensor_data(model.subgraphs[0], tensor, values)


def conv_operands(model: Model) -> tuple[int, int, int, int]:
    """(op index, input, weight, bias tensors) of the first CONV_2D."""
    op = op_index(model, "CONV_2D")
    return op, *(op_tensor(model, op, "input", p) for p in range(3))


def logits(model: Model) -> tuple[int, int, int]:
    """(FC op, SOFTMAX op, tensor between them): an activation nothing else constrains."""
    softmax = op_index(model, "SOFTMAX")
    tensor = op_tensor(model, softmax, "input", 0)
    fc = next(i for i, op in enumerate(model.subgraphs[0].operators) if tensor in op.outputs)
    return fc, softmax, tensor

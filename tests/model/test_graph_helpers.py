"""Graph helpers: producers, consumers, topological order, tensor data views."""

from __future__ import annotations

import numpy as np
import pytest

from qtool.errors import ModelError
from qtool.model import TensorType, load_model
from qtool.model.build import GraphBuilder
from tests.conftest import MODELS


def diamond():
    builder = GraphBuilder()
    x = builder.input("x", [1, 4])
    a = builder.op("RELU", [x], output_shape=[1, 4], name="a")
    b = builder.op("TANH", [x], output_shape=[1, 4], name="b")
    c = builder.op("ADD", [a, b], output_shape=[1, 4], name="c", options_type="AddOptions")
    return builder.finish([c]), (x, a, b, c)


def test_producers_consumers_and_order() -> None:
    model, (x, a, b, c) = diamond()
    subgraph = model.subgraphs[0]
    assert subgraph.producers() == {a: 0, b: 1, c: 2}
    assert subgraph.consumers() == {x: [0, 1], a: [2], b: [2]}
    subgraph.operators.reverse()  # stored out of order: the order is recomputed
    order = [model.op_type(subgraph.operators[i]) for i in subgraph.topological_order()]
    assert order.index("ADD") == 2


def test_cycle_is_a_model_error() -> None:
    model, (*_, c) = diamond()
    model.subgraphs[0].operators[0].inputs = [c]
    with pytest.raises(ModelError, match="cycle"):
        model.subgraphs[0].topological_order()


def test_tensor_data_views_have_dtype_and_shape() -> None:
    model = load_model(MODELS / "tf_int8" / "cnn_int8.tflite")
    subgraph = model.subgraphs[0]
    weights = next(
        t for t in subgraph.tensors if t.dtype == TensorType.INT8 and model.is_constant(t)
    )
    values = model.tensor_data(weights)
    assert values.dtype == np.int8 and list(values.shape) == weights.shape
    assert not values.flags.writeable  # a view of the mapped file
    activation = subgraph.tensors[subgraph.inputs[0]]
    assert model.tensor_data(activation) is None

"""Build models programmatically: single-op test models, benchmarks, and graph rewrites."""

from __future__ import annotations

from typing import Any

import numpy as np

from qtool.model.graph import Buffer, Model, Operator, QuantParams, Subgraph, Tensor
from qtool.model.types import TensorType, tensor_type
from qtool.model.validate import SCHEMA_VERSION


class GraphBuilder:
    """Accumulates tensors and operators of one subgraph and produces a Model.

    Example::

        b = GraphBuilder()
        x = b.input("x", [1, 8, 8, 3])
        w = b.constant("w", weights)
        y = b.op("CONV_2D", [x, w, -1], [1, 8, 8, 4], options={"padding": 0, ...})
        model = b.finish(outputs=[y])
    """

    def __init__(self, model: Model | None = None, subgraph_index: int = 0) -> None:
        if model is None:
            model = Model(
                version=SCHEMA_VERSION,
                operator_codes=[],
                subgraphs=[Subgraph(tensors=[], inputs=[], outputs=[], operators=[], name="main")],
                buffers=[Buffer()],
                description="qtool",
            )
        self.model = model
        self.subgraph = model.subgraphs[subgraph_index]

    def tensor(
        self,
        name: str,
        shape: list[int],
        dtype: Any = np.float32,
        quantization: QuantParams | None = None,
        buffer: int = 0,
    ) -> int:
        """Append a tensor to the subgraph and return its index. `dtype` is a numpy dtype or a
        TensorType code; `buffer` 0 (the default) makes it an activation."""
        code = dtype if isinstance(dtype, int) else tensor_type(dtype)
        return self.subgraph.add_tensor(
            Tensor(
                name=name, shape=list(shape), dtype=code, buffer=buffer, quantization=quantization
            )
        )

    def input(
        self,
        name: str,
        shape: list[int],
        dtype: Any = np.float32,
        quantization: QuantParams | None = None,
    ) -> int:
        """Append a tensor and list it among the subgraph's inputs; returns its index."""
        index = self.tensor(name, shape, dtype, quantization)
        self.subgraph.inputs.append(index)
        return index

    def constant(
        self,
        name: str,
        values: np.ndarray,
        dtype: Any = None,
        quantization: QuantParams | None = None,
    ) -> int:
        """Append a constant tensor holding `values` (cast to `dtype` when given) in a buffer of
        its own; returns its index."""
        values = np.asarray(values if dtype is None else np.asarray(values).astype(dtype))
        buffer = self.model.add_buffer(values)
        code = tensor_type(values.dtype) if values.dtype != np.bool_ else TensorType.BOOL
        return self.tensor(name, list(values.shape), code, quantization, buffer=buffer)

    def op(
        self,
        op_type: str,
        inputs: list[int],
        outputs: list[int] | None = None,
        *,
        output_shape: list[int] | None = None,
        output_dtype: Any = np.float32,
        options_type: str | None = None,
        options: dict[str, Any] | None = None,
        version: int = 1,
        name: str | None = None,
    ) -> int:
        """Append an operator; with no `outputs`, create one output tensor and return its index."""
        created = outputs is None
        if created:
            outputs = [
                self.tensor(
                    name or f"{op_type.lower()}_{len(self.subgraph.operators)}",
                    output_shape or [],
                    output_dtype,
                )
            ]
        self.subgraph.operators.append(
            Operator(
                opcode_index=self.model.opcode_for(op_type, version),
                inputs=list(inputs),
                outputs=list(outputs),
                options_type=options_type,
                options=dict(options or {}),
            )
        )
        return outputs[0] if created else len(self.subgraph.operators) - 1

    def custom(
        self, custom_code: str, inputs: list[int], output_shape: list[int], name: str | None = None
    ) -> int:
        """Append a custom op (float output of `output_shape`); returns its output tensor."""
        output = self.tensor(name or custom_code.lower(), output_shape)
        self.subgraph.operators.append(
            Operator(
                opcode_index=self.model.custom_opcode_for(custom_code),
                inputs=list(inputs),
                outputs=[output],
            )
        )
        return output

    def shape(self, x: int, name: str | None = None) -> int:
        """SHAPE of tensor `x`: its dimensions as an int32 vector."""
        return self.op(
            "SHAPE",
            [x],
            output_shape=[len(self.subgraph.tensors[x].shape)],
            output_dtype=np.int32,
            name=name,
            options_type="ShapeOptions",
            options={"out_type": TensorType.INT32},
        )

    def fully_connected(
        self,
        x: int,
        weights: np.ndarray,
        bias: np.ndarray | int | None,
        name: str,
        activation: int = 0,
    ) -> int:
        """A dense layer on a [1, in] activation: FULLY_CONNECTED with constant weights
        [out, in] and a bias (an array, an existing tensor index, or None for none)."""
        w = self.constant(f"{name}/weights", np.asarray(weights, np.float32))
        if isinstance(bias, np.ndarray):
            bias = self.constant(f"{name}/bias", bias.astype(np.float32))
        return self.op(
            "FULLY_CONNECTED",
            [x, w, -1 if bias is None else bias],
            output_shape=[1, int(np.shape(weights)[0])],
            name=name,
            options_type="FullyConnectedOptions",
            options={"fused_activation_function": activation},
        )

    def finish(self, outputs: list[int]) -> Model:
        """Set the subgraph's outputs and return the model (the one the builder edits, not a
        copy)."""
        self.subgraph.outputs = list(outputs)
        return self.model

"""One operator as target constraints see it: its tensors, geometry, options and cost in MACs."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from qtool.model import Model, Operator, Tensor, dtype_name
from qtool.model.types import activation_name, padding_name
from qtool.spec import weighted_operands

POOLS = ("AVERAGE_POOL_2D", "MAX_POOL_2D", "L2_POOL_2D")


@dataclass(frozen=True)
class TargetOp:
    """One operator of a model as target constraints see it: its type, operator version and
    tensors."""

    model: Model
    subgraph: int
    index: int
    type: str
    version: int
    operator: Operator

    @functools.cached_property
    def tensors(self) -> list[Tensor]:
        """The tensors of the op's subgraph."""
        return self.model.subgraphs[self.subgraph].tensors

    @functools.cached_property
    def inputs(self) -> tuple[Tensor | None, ...]:
        """The op's input tensors, None where an optional input is absent."""
        return tuple(self.tensors[t] if t >= 0 else None for t in self.operator.inputs)

    @functools.cached_property
    def outputs(self) -> tuple[Tensor, ...]:
        """The op's output tensors."""
        return tuple(self.tensors[t] for t in self.operator.outputs)

    def input(self, position: int) -> Tensor | None:
        """The tensor at input `position`; None when absent or past the last input."""
        return self.inputs[position] if position < len(self.inputs) else None

    def constant(self, tensor: Tensor | None) -> bool:
        """Whether `tensor` is given and constant."""
        return tensor is not None and self.model.is_constant(tensor)

    def values(self, position: int) -> np.ndarray | None:
        """The constant value at input `position`; None when absent or computed at run time."""
        tensor = self.input(position)
        return None if tensor is None else self.model.tensor_data(tensor)

    def option(self, name: str, default=None):
        """An option by name; `default` when the op's options table has no such field."""
        try:
            return self.operator.option(name)
        except KeyError:
            return default

    # ------------------------------------------------------------------ tensors by role

    @property
    def weights(self) -> Tensor | None:
        """The weight tensor of an op with weights (the spec's weighted operands); None for other
        ops."""
        operands = weighted_operands(self.type)
        return None if operands is None else self.input(operands.weights)

    @property
    def bias(self) -> Tensor | None:
        """The bias tensor of an op with weights; None when absent or the op takes none."""
        operands = weighted_operands(self.type)
        return None if operands is None or operands.bias is None else self.input(operands.bias)

    @property
    def weight_axis(self) -> int | None:
        """The output-channel axis of the op's weights (the spec's per-axis dimension)."""
        operands = weighted_operands(self.type)
        return None if operands is None else operands.axis

    @functools.cached_property
    def feature_maps(self) -> tuple[Tensor, ...]:
        """Activations the op reads and writes (non-constant inputs, and outputs)."""
        reads = tuple(t for t in self.inputs if t is not None and not self.constant(t))
        return reads + self.outputs

    @functools.cached_property
    def data_tensors(self) -> tuple[Tensor, ...]:
        """Feature maps and weights: the tensors an accelerator computes on."""
        weights = self.weights
        return self.feature_maps + ((weights,) if weights is not None else ())

    @property
    def ifm(self) -> Tensor | None:
        """The input feature map: the first non-constant input; None when every input is
        constant."""
        return next((t for t in self.inputs if t is not None and not self.constant(t)), None)

    @property
    def ofm(self) -> Tensor | None:
        """The output feature map: the first output; None when the op has none."""
        return self.outputs[0] if self.outputs else None

    @staticmethod
    def type_name(tensor: Tensor) -> str:
        """A tensor's type as profiles spell it: "int8", "float32"."""
        return dtype_name(tensor.dtype).lower()

    # ------------------------------------------------------------------ geometry

    @property
    def stride(self) -> tuple[int, int]:
        """(height, width) stride; (1, 1) for ops without strides."""
        return int(self.option("stride_h", 1) or 1), int(self.option("stride_w", 1) or 1)

    @property
    def dilation(self) -> tuple[int, int]:
        """(height, width) dilation factors; (1, 1) for ops without dilation."""
        return (
            int(self.option("dilation_h_factor", 1) or 1),
            int(self.option("dilation_w_factor", 1) or 1),
        )

    @property
    def padding(self) -> str | None:
        """The padding's schema name ("SAME", "VALID"); None for ops without padding."""
        value = self.option("padding")
        return None if value is None else padding_name(int(value))

    @property
    def activation(self) -> str:
        """The fused activation's schema name ("NONE" for ops without one)."""
        return activation_name(int(self.option("fused_activation_function", 0) or 0))

    @property
    def pads_nothing(self) -> bool:
        """Whether the op reads no padding: VALID, or SAME where the window tiles the input."""
        if self.padding != "SAME":
            return True
        kernel, ifm = self.kernel, self.ifm
        if kernel is None or ifm is None or len(ifm.shape) != 4:
            return False
        for size, k, s, d in zip(ifm.shape[1:3], kernel, self.stride, self.dilation, strict=True):
            extent = (k - 1) * d + 1
            if (-(-size // s) - 1) * s + extent - size > 0:
                return False
        return True

    @property
    def kernel(self) -> tuple[int, int] | None:
        """(height, width) of the filter window of convolutions and pools."""
        if self.type in POOLS:
            return int(self.option("filter_height", 1)), int(self.option("filter_width", 1))
        weights = self.weights
        if self.type in ("CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV") and weights is not None:
            return int(weights.shape[1]), int(weights.shape[2])
        return None

    # ------------------------------------------------------------------ cost

    @functools.cached_property
    def macs(self) -> int:
        """Multiply-accumulates of one inference (convolutions, matrix products, pools)."""
        out = self.ofm
        if out is None:
            return 0
        outputs = int(np.prod(out.shape, dtype=np.int64)) if out.shape else 1
        weights = self.weights
        if self.type in ("CONV_2D", "CONV_3D") and weights is not None:
            return outputs * int(np.prod(weights.shape[1:], dtype=np.int64))
        if self.type == "DEPTHWISE_CONV_2D" and weights is not None:
            return outputs * int(weights.shape[1] * weights.shape[2])
        if self.type == "FULLY_CONNECTED" and weights is not None:
            return outputs * int(weights.shape[-1])
        if self.type == "TRANSPOSE_CONV" and weights is not None and self.input(2) is not None:
            ifm = self.input(2)
            return int(np.prod(ifm.shape, dtype=np.int64)) * int(
                np.prod(weights.shape[:3], dtype=np.int64)
            )
        if self.type == "BATCH_MATMUL" and self.input(0) is not None and self.input(0).shape:
            return outputs * int(self.input(0).shape[-1])
        if self.type in POOLS:
            height, width = self.kernel
            return outputs * height * width
        return 0


def target_ops(model: Model) -> list[TargetOp]:
    """Every operator of every subgraph, in the model's (execution) order."""
    return [
        TargetOp(model, s, i, model.op_type(op), model.operator_codes[op.opcode_index].version, op)
        for s, i, _, op in model.iter_ops()
    ]

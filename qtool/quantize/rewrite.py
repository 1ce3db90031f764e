"""Rewriting a planned float graph into its int8 form.

Each float activation tensor lives in the domain of its producer: int8 when an int8 operator (or
an integer model input) produces it, float otherwise. A consumer in the other domain reads a
converted copy, made once by a QUANTIZE (float -> int8) or DEQUANTIZE (int8 -> float) placed just
before the first such consumer. Model inputs and outputs keep their tensor indices (signature
defs refer to them) in the domain `--io` asks for; the producer of an output in another domain
writes a fresh tensor that a converter turns into the output.

Constant operands of int8 operators get quantized copies per use: symmetric per-axis weights,
int32 biases at input_scale * weight_scale[c] (weight scales enlarged where a bias would overflow),
asymmetric constants for elementwise operands. The float originals are dropped when unused.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from qtool.model import Model, Operator, QuantParams, Subgraph, Tensor, TensorType
from qtool.model.edit import NameAllocator
from qtool.numerics import (
    activation_params,
    bias_overflow,
    bias_scale,
    qrange,
    quantize,
    quantize_bias,
    symmetric_params,
)
from qtool.quantize.plan import INT8, Plan, activation_positions
from qtool.spec import Int8Spec, OpRule

FLOAT = "float"
UINT8 = "uint8"
_DTYPES = {INT8: TensorType.INT8, UINT8: TensorType.UINT8, FLOAT: TensorType.FLOAT32}


@dataclass
class RewriteNotes:
    warnings: list[str] = field(default_factory=list)
    enlarged_weight_scales: list[dict] = field(default_factory=list)


class _Rewriter:
    def __init__(
        self,
        model: Model,
        plan: Plan,
        spec: Int8Spec,
        io: str,
        subgraph_index: int,
        notes: RewriteNotes,
    ) -> None:
        self.model = model
        self.plan = plan
        self.spec = spec
        self.io = {"float": FLOAT, "int8": INT8, "uint8": UINT8}[io]
        self.subgraph_index = subgraph_index
        self.subgraph: Subgraph = model.subgraphs[subgraph_index]
        self.names = NameAllocator(self.subgraph)
        self.versions: dict[int, dict[str, int]] = {}
        self.home: dict[int, str] = {}
        self.emitted: list[Operator] = []
        self.constant_copies: dict[tuple, int] = {}
        self.notes = notes

    # ------------------------------------------------------------------ domains

    def _assign_homes(self) -> None:
        tensors = self.subgraph.tensors
        for t in self.subgraph.inputs:
            if tensors[t].dtype == TensorType.FLOAT32 and t in self.plan.params:
                self.home[t] = self.io
                self.versions[t] = {self.io: t}
        for op in self.subgraph.operators:
            int8_op = self.plan.decision(op).mode == INT8
            rule = self.spec.rule(self.model.op_type(op)) if int8_op else None
            for position, t in enumerate(op.outputs):
                if tensors[t].dtype != TensorType.FLOAT32:
                    continue
                domain = INT8 if rule is not None and rule.output_rule(position) else FLOAT
                self.home[t] = domain
                # Like an input, an output without calibrated params keeps its float boundary.
                at_boundary = t in self.subgraph.outputs and t in self.plan.params
                boundary = self.io if at_boundary else domain
                self.versions[t] = {boundary: t}
                if boundary != domain:
                    self.versions[t][domain] = self._copy_tensor(t, domain)

    def _copy_tensor(self, t: int, domain: str) -> int:
        original = self.subgraph.tensors[t]
        return self.subgraph.add_tensor(
            Tensor(
                name=self.names(f"{original.name}_{domain}"),
                shape=list(original.shape),
                dtype=TensorType.FLOAT32,
                shape_signature=original.shape_signature,
            )
        )

    def _set_domain(self, t: int, domain: str, source: int) -> None:
        """Give tensor `t` the dtype and params of `domain`, for the activation `source`."""
        tensor = self.subgraph.tensors[t]
        tensor.dtype = _DTYPES[domain]
        if domain == FLOAT:
            tensor.quantization = None
            return
        params = self.plan.params[source]
        # uint8 at the boundary is the int8 tensor shifted by the difference of the type minimums.
        shift = qrange(np.uint8)[0] - qrange(np.int8)[0] if domain == UINT8 else 0
        zero_point = params.zero_point + shift
        tensor.quantization = QuantParams.of(params.scale, zero_point)

    def need(self, t: int, domain: str) -> int:
        """The index of activation `t` in `domain`, adding a converter before the current op."""
        versions = self.versions.setdefault(t, {FLOAT: t})
        if domain in versions:
            return versions[domain]
        home = self.home.get(t, FLOAT)
        source = versions[home] if home in versions else next(iter(versions.values()))
        target = self._copy_tensor(t, domain)
        versions[domain] = target
        self._emit_converter(source, target, dst_domain=domain)
        return target

    def _emit_converter(self, source: int, target: int, dst_domain: str) -> None:
        op_type = "DEQUANTIZE" if dst_domain == FLOAT else "QUANTIZE"
        version = self.spec.rule(op_type).int8_version
        self.emitted.append(
            Operator(
                opcode_index=self.model.opcode_for(op_type, version),
                inputs=[source],
                outputs=[target],
            )
        )

    # ------------------------------------------------------------------ constants

    def _constant_copy(
        self, t: int, key: tuple, values: np.ndarray, dtype: int, params: QuantParams, suffix: str
    ) -> int:
        cache_key = (t, *key)
        if cache_key in self.constant_copies:
            return self.constant_copies[cache_key]
        original = self.subgraph.tensors[t]
        copy = self.subgraph.add_tensor(
            Tensor(
                name=self.names(f"{original.name}{suffix}"),
                shape=list(values.shape),
                dtype=dtype,
                buffer=self.model.add_buffer(values),
                quantization=params,
            )
        )
        self.constant_copies[cache_key] = copy
        return copy

    def _quantize_activation_constant(self, t: int) -> int:
        values = self.model.tensor_data(self.subgraph.tensors[t])
        params = self.plan.params.get(t)
        if params is None:
            params = activation_params(float(np.min(values)), float(np.max(values)))
        data = quantize(values, params, dtype=np.int8)
        return self._constant_copy(
            t,
            ("act", params.scale.tobytes(), params.zero_point.tobytes()),
            data,
            TensorType.INT8,
            QuantParams.of(params.scale, params.zero_point),
            "_int8",
        )

    def _quantize_weights_and_bias(self, op: Operator, rule: OpRule, position: int) -> None:
        weight_rule = rule.input_rule(position)
        t = op.inputs[position]
        weights = self.model.tensor_data(self.subgraph.tensors[t])
        axis = weight_rule.axis if weight_rule.granularity == "per-axis" else None
        params = symmetric_params(weights, axis=axis)
        scale = params.scale
        bias_rule = rule.bias_rule()
        bias_position = bias_rule.index if bias_rule is not None else None
        bias_t = (
            op.inputs[bias_position]
            if bias_position is not None and bias_position < len(op.inputs)
            else -1
        )
        input_scale = None
        if bias_t >= 0:
            input_position = bias_rule.bias_scale_inputs[0]
            input_scale = self.plan.params[op.inputs[input_position]].scale
            bias = self.model.tensor_data(self.subgraph.tensors[bias_t]).astype(np.float32)
            overflow, enlarged = bias_overflow(bias, input_scale, scale)
            if overflow.any():
                channels = np.flatnonzero(overflow).tolist()
                self.notes.enlarged_weight_scales.append(
                    {
                        "subgraph": self.subgraph_index,
                        "op_index": self.plan.decision(op).source_index,
                        "tensor": self.subgraph.tensors[t].name,
                        "channels": channels,
                    }
                )
                self.notes.warnings.append(
                    f"subgraph {self.subgraph_index} op {self.plan.decision(op).source_index} "
                    f"({self.model.op_type(op)}): bias "
                    f"would overflow int32 in {len(channels)} channel(s); their weight scales "
                    "were enlarged"
                )
                scale = enlarged
        dim = axis if axis is not None else 0
        data = quantize(
            weights,
            scale,
            np.zeros(scale.shape, np.int64),
            dtype=np.int8,
            axis=axis,
            narrow_range=True,
        )
        op.inputs[position] = self._constant_copy(
            t,
            ("weight", scale.tobytes()),
            data,
            TensorType.INT8,
            QuantParams.of(scale, 0, quantized_dimension=dim),
            "_int8",
        )
        if bias_t >= 0:
            bias_values = quantize_bias(bias, input_scale, scale)
            op.inputs[bias_position] = self._constant_copy(
                bias_t,
                ("bias", input_scale.tobytes(), scale.tobytes()),
                bias_values,
                TensorType.INT32,
                QuantParams.of(bias_scale(input_scale, scale), 0, quantized_dimension=0),
                "_int32",
            )

    # ------------------------------------------------------------------ operators

    def _rewrite_int8(self, op: Operator) -> None:
        rule = self.spec.rule(self.model.op_type(op))
        tensors = self.subgraph.tensors
        code = self.model.operator_codes[op.opcode_index]
        code.version = max(code.version, rule.int8_version)
        weight_rule = rule.weight_rule()
        if (
            weight_rule is not None
            and isinstance(weight_rule.index, int)
            and len(op.inputs) > weight_rule.index
            and op.inputs[weight_rule.index] >= 0
        ):
            self._quantize_weights_and_bias(op, rule, weight_rule.index)
        for position in activation_positions(rule, op, tensors):
            t = op.inputs[position]
            if self.model.is_constant(tensors[t]):
                op.inputs[position] = self._quantize_activation_constant(t)
            else:
                op.inputs[position] = self.need(t, INT8)

    def _rewrite_float(self, op: Operator) -> None:
        tensors = self.subgraph.tensors
        for position, t in enumerate(op.inputs):
            if t >= 0 and tensors[t].dtype == TensorType.FLOAT32 and t in self.home:
                op.inputs[position] = self.need(t, FLOAT)

    def run(self) -> RewriteNotes:
        self._assign_homes()
        original_ops = list(self.subgraph.operators)
        for op in original_ops:
            mode = self.plan.decision(op).mode
            if mode == INT8:
                self._rewrite_int8(op)
            elif mode == FLOAT:
                self._rewrite_float(op)
            boundary_outputs = []
            for position, t in enumerate(op.outputs):
                if t in self.home:
                    home = self.home[t]
                    op.outputs[position] = self.versions[t][home]
                    if self.versions[t][home] != t:
                        boundary_outputs.append(t)
            self.emitted.append(op)
            for t in boundary_outputs:
                home = self.home[t]
                boundary = next(d for d, index in self.versions[t].items() if index == t)
                self._emit_converter(self.versions[t][home], t, boundary)
        for t, versions in self.versions.items():
            for domain, index in versions.items():
                self._set_domain(index, domain, t)
        self.subgraph.operators = self.emitted
        return self.notes


def rewrite(
    model: Model,
    plan: Plan,
    spec: Int8Spec,
    io: str = "float",
    subgraph_index: int = 0,
    notes: RewriteNotes | None = None,
) -> RewriteNotes:
    """Turn a planned float subgraph (in place) into its int8 form.

    Tensor indices stay valid (the float originals remain, unused) so that several subgraphs can
    be rewritten one after the other; `remove_unused` drops the leftovers at the end.
    """
    return _Rewriter(model, plan, spec, io, subgraph_index, notes or RewriteNotes()).run()

"""Storing the constants of a rewritten subgraph: the rewrite's part that writes data.

The planned weights and biases of integer operators (`Plan.weights`) and constants read as
activations get quantized copies, keyed by content so that a constant several operators read
alike is stored once; the integer LSTM's operands get integer constants, state tensors and
intermediates; int8 weights are stored sparse behind a DENSIFY where that is smaller, and folded
float constants go back to the form the source stored them in (float16 behind a DEQUANTIZE,
sparse behind a DENSIFY). Each copy takes its float original's name back once the original is
gone (`RewriteNotes.copies`).
"""

from __future__ import annotations

import copy
import hashlib

import numpy as np

from qtool.model import Operator, QuantParams, TensorType
from qtool.model.sparsity import compact_sparsity, sparsity_nbytes, stored_values
from qtool.numerics import AffineParams, pack_int4, quantize
from qtool.prepare.fold import StoredForm
from qtool.quantize.decisions import INT8, INT16
from qtool.quantize.plan import Slot
from qtool.quantize.recurrent import TENSOR_TYPES, RecurrentOperands
from qtool.quantize.weight_store import WeightStore
from qtool.quantize.weights import LayerWeights
from qtool.spec import sparse_int8_consumers
from qtool.weight_spec import dequantize_version, weight_rule

_NUMPY_TYPES = {INT8: np.int8, INT16: np.int16}
_BIAS_TYPES = {np.dtype(np.int32): TensorType.INT32, np.dtype(np.int64): TensorType.INT64}


class ConstantStore(WeightStore):
    """The rewriter's methods for constants. They use the rewriter's model, plan, subgraph, name
    allocator, notes, stored forms, constant caches and emitted operators (`rewrite._Rewriter`)."""

    def _constant_copy(
        self, t: int, key: tuple, values: np.ndarray, dtype: int, params: QuantParams, suffix: str
    ) -> int:
        cache_key = (t, *key)
        if cache_key in self.constant_copies:
            return self.constant_copies[cache_key]
        original = self.subgraph.tensors[t]
        stored = pack_int4(values) if dtype == TensorType.INT4 else values
        copy = self._add_tensor(
            f"{original.name}{suffix}",
            values.shape,
            dtype,
            buffer=self.model.add_buffer(stored),
            quantization=params,
        )
        self.constant_copies[cache_key] = copy
        self._renamable(copy, original.name)
        return copy

    def _renamable(self, t: int, base: str) -> None:
        self.notes.copies.append((self.plan.subgraph_index, self.subgraph.tensors[t], base))

    def _quantized_constant(self, t: int, slot: Slot) -> int:
        values = self.model.tensor_data(self.subgraph.tensors[t])
        params = self.plan.params[slot]
        dtype = slot[1]
        data = quantize(values, params, dtype=_NUMPY_TYPES[dtype])
        return self._constant_copy(
            t,
            ("act", dtype, params.scale.tobytes(), params.zero_point.tobytes()),
            data,
            TENSOR_TYPES[dtype],
            QuantParams.of(params.scale, params.zero_point),
            f"_{dtype}",
        )

    def _store_weights(self, op_index: int, op: Operator, layer: LayerWeights) -> None:
        t = op.inputs[layer.weight_position]
        params = QuantParams.of(layer.scale, 0, quantized_dimension=layer.quantized_dimension)
        # Keyed by content: a float weight shared by several layers stays one int8 buffer when
        # they quantize it alike (rounding optimisation may make them differ).
        key = ("weight", _digest(layer.values), layer.scale.tobytes(), layer.quantized_dimension)
        form = self.stored_forms.get(self.subgraph.tensors[t].name)
        source_sparsity = None if form is None else form.sparsity
        dense = None
        if (source_sparsity is not None or self.sparsify) and (
            self.model.op_type(op) in sparse_int8_consumers() and layer.bits == 8
        ):
            dense = self._sparse_weights(t, key, layer.values, params, source_sparsity)
        kind, suffix = (TensorType.INT4, "_int4") if layer.bits == 4 else (TensorType.INT8, "_int8")
        op.inputs[layer.weight_position] = (
            dense
            if dense is not None
            else self._constant_copy(t, (*key, layer.bits), layer.values, kind, params, suffix)
        )
        if layer.bits == 4:  # the version TensorFlow's converter gives int4 weights
            version = weight_rule(self.model.op_type(op)).version("int8 activations int4")
            code = self.model.operator_codes[op.opcode_index]
            code.version = max(code.version, version)
        if layer.enlarged_channels:
            source = self.plan.decisions[op_index].source_index
            self.notes.enlarged_weight_scales.append(
                {
                    "subgraph": self.plan.subgraph_index,
                    "op_index": source,
                    "tensor": self.subgraph.tensors[t].name,
                    "channels": layer.enlarged_channels,
                }
            )
            self.notes.warnings.append(
                f"subgraph {self.plan.subgraph_index} op {source} ({self.model.op_type(op)}): "
                f"bias would overflow int32 in {len(layer.enlarged_channels)} channel(s); their "
                "weight scales were enlarged"
            )
        if layer.bias is None:
            return
        position = layer.bias_position
        while len(op.inputs) <= position:
            op.inputs.append(-1)
        bias_t = op.inputs[position]
        if bias_t < 0:  # a correction gave a bias-less layer a bias
            bias_t = self._add_tensor(
                f"{self.subgraph.tensors[op.outputs[0]].name}/bias",
                [layer.bias.size],
                TensorType.FLOAT32,
            )
        op.inputs[position] = self._constant_copy(
            bias_t,
            ("bias", _digest(layer.bias), layer.bias_scale.tobytes()),
            layer.bias,
            _BIAS_TYPES[layer.bias.dtype],
            QuantParams.of(layer.bias_scale, 0, quantized_dimension=0),
            f"_{layer.bias.dtype.name}",
        )

    def _store_recurrent(self, op: Operator, operands: RecurrentOperands) -> None:
        """An integer LSTM's own operands: its constants, its state tensors made integer
        variable tensors in place, its intermediates."""
        for position, constant in operands.constants.items():
            t = op.inputs[position]
            scale = np.array([constant.scale], np.float32)
            op.inputs[position] = self._constant_copy(
                t,
                ("recurrent", _digest(constant.values), scale.tobytes()),
                constant.values,
                TENSOR_TYPES[constant.dtype],
                QuantParams.of(scale, 0),
                f"_{constant.dtype}",
            )
        for position, (dtype, params) in operands.states.items():
            op.inputs[position] = self._integer_copy(op.inputs[position], dtype, params, True)
        op.intermediates = [
            self._integer_copy(t, dtype, params, False)
            for t, (dtype, params) in zip(op.intermediates, operands.intermediates, strict=True)
        ]

    def _integer_copy(self, t: int, dtype: str, params: AffineParams, variable: bool) -> int:
        """An integer tensor in place of float tensor `t` (no data: a state or an intermediate),
        named like it once it is gone."""
        original = self.subgraph.tensors[t]
        copy_index = self._add_tensor(
            f"{original.name}_{dtype}",
            original.shape,
            TENSOR_TYPES[dtype],
            quantization=QuantParams.of(params.scale, params.zero_point),
            is_variable=variable,
            shape_signature=original.shape_signature,
        )
        self._renamable(copy_index, original.name)
        return copy_index

    def _sparse_weights(
        self, t: int, key: tuple, values: np.ndarray, params: QuantParams, sparsity: dict | None
    ) -> int | None:
        """Int8 weights stored sparse behind a DENSIFY that gives the layer its dense weights;
        None where the sparse form would not be smaller."""
        if (t, *key, "dense") in self.constant_copies:
            return self.constant_copies[(t, *key, "dense")]
        # The source's own encoding, or one from the int8 values (weights rounded to 0 drop
        # out; indices narrowed to a byte): whichever is smaller, if smaller than dense.
        candidates = [compact_sparsity(values)]
        if sparsity is not None:
            candidates.append((stored_values(values, sparsity), sparsity))
        stored, sparsity = min(candidates, key=lambda c: c[0].nbytes + sparsity_nbytes(c[1]))
        if stored.nbytes + sparsity_nbytes(sparsity) >= values.nbytes:
            return None
        original = self.subgraph.tensors[t]
        sparse = self._add_tensor(
            f"{original.name}_int8_sparse",
            values.shape,
            TensorType.INT8,
            buffer=self.model.add_buffer(stored),
            quantization=copy.deepcopy(params),
            sparsity=copy.deepcopy(sparsity),
        )
        dense = self._add_tensor(
            f"{original.name}_int8",
            values.shape,
            TensorType.INT8,
            quantization=copy.deepcopy(params),
        )
        self._emit(self._storage_op("DENSIFY", sparse, dense), None)
        self.constant_copies[(t, *key, "dense")] = dense
        self._renamable(dense, original.name)
        return dense

    def _storage_op(self, op_type: str, source: int, target: int, version: int = 1) -> Operator:
        return Operator(
            opcode_index=self.model.opcode_for(op_type, version), inputs=[source], outputs=[target]
        )

    def _restored_float(self, t: int, form: StoredForm | None = None) -> int:
        """A folded float32 constant that a float operator reads, stored again as the source
        stored it (float16 behind a DEQUANTIZE, sparse behind a DENSIFY): never wider; or as
        `form` says (`--mode float16`: every float constant float16)."""
        if t in self.restored:
            return self.restored[t]
        original = self.subgraph.tensors[t]
        explicit = form is not None
        form = form or self.stored_forms.get(original.name)
        if form is None or (form.dtype != TensorType.FLOAT16 and form.sparsity is None):
            return t
        if form.dtype != TensorType.FLOAT16:  # float32 stored sparse: DENSIFY gives float32
            self.restored[t] = self._stored_as(original, form, original.name)
            return self.restored[t]
        source = self._stored_as(original, form, f"{original.name}_float16")
        widened = self._add_tensor(original.name, original.shape, TensorType.FLOAT32)
        # The version TensorFlow's converter gives a float16 DEQUANTIZE, in the float16 mode
        # (elsewhere the source's DEQUANTIZE comes back as it was).
        version = dequantize_version("float16") if explicit else 1
        self._emit(self._storage_op("DEQUANTIZE", source, widened, version), None)
        self.restored[t] = widened
        return widened

    def _stored_as(self, original, form: StoredForm, name: str) -> int:
        """A tensor `name` holding `original`'s values in `form`'s type: a constant, or, for a
        sparse form, the output of a DENSIFY of its stored values."""
        dtype = np.float16 if form.dtype == TensorType.FLOAT16 else np.float32
        values = self.model.tensor_data(original).astype(dtype)
        if form.sparsity is None:
            buffer = self.model.add_buffer(values)
            return self._add_tensor(name, original.shape, form.dtype, buffer=buffer)
        stored = self._add_tensor(
            f"{name}_sparse",
            original.shape,
            form.dtype,
            buffer=self.model.add_buffer(stored_values(values, form.sparsity)),
            sparsity=copy.deepcopy(form.sparsity),
        )
        dense = self._add_tensor(name, original.shape, form.dtype)
        self._emit(self._storage_op("DENSIFY", stored, dense), None)
        return dense


def _digest(values: np.ndarray) -> bytes:
    """A short fingerprint of an array's type, shape and bytes (constants keyed by content)."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"{values.dtype.str}{values.shape}".encode())
    digest.update(np.ascontiguousarray(values).view(np.uint8).reshape(-1).data)
    return digest.digest()

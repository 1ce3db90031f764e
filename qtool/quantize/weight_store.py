"""Storing the weights of float ops narrow: the weight modes' part of the rewrite.

A hybrid op reads its int8 or int4 constant directly (its kernel quantizes the float input at
each inference); a weight-only op reads the output of a DEQUANTIZE of it; in the float16 mode
every float constant is stored float16 behind a DEQUANTIZE, which the rewriter already does for
float16 sources (`_restored_float`). Int4 values are packed two a byte; blockwise scales are a
float16 constant that the weights' quantization parameters name. A constant read by several ops
in the same form is stored once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from qtool.model import Operator, QuantParams, Tensor, TensorType
from qtool.model.lowbit import blockwise_params
from qtool.numerics import pack_int4
from qtool.numerics.lowbit import LowBitWeights
from qtool.op_facts import options_table
from qtool.prepare.fold import StoredForm
from qtool.weight_spec import BLOCKWISE, dequantize_version, weight_rule

HYBRID, DEQUANTIZED, FLOAT16 = "hybrid", "weight-only", "float16"
_TYPES = {8: TensorType.INT8, 4: TensorType.INT4}


@dataclass(frozen=True)
class WeightForm:
    """How a weight operand is stored: read by a hybrid kernel, expanded by a DEQUANTIZE
    (weight-only), or float16 behind a DEQUANTIZE; the type, granularity and block size."""

    kind: str  # HYBRID, DEQUANTIZED or FLOAT16
    bits: int | None = None  # 8 or 4 (None: float16)
    granularity: str | None = None  # per-axis, per-tensor or blockwise
    block_size: int | None = None

    @property
    def weight_type(self) -> str:
        """The stored type: "int8", "int4" or "float16"."""
        return FLOAT16 if self.bits is None else f"int{self.bits}"

    def label(self) -> str:
        """The form as reports say it: "int4 blockwise 32", "int8 per-axis", "float16"."""
        if self.bits is None:
            return FLOAT16
        size = f" {self.block_size}" if self.block_size else ""
        return f"{self.weight_type} {self.granularity}{size}"


@dataclass(frozen=True)
class NarrowWeight:
    """One weight operand of a float op as the weight modes store it: its form, the op's type,
    and its quantized values (None for float16)."""

    form: WeightForm
    op_type: str
    values: LowBitWeights | None = None


class WeightStore:
    """The rewriter's methods for narrow weights. They use the rewriter's model, subgraph,
    name allocator, emitted operators and constant cache (`rewrite._Rewriter`)."""

    def _add_tensor(self, name: str, shape: Sequence[int], dtype: int, **fields) -> int:
        """A new tensor of the subgraph, named `name` (made unique), with `fields` of `Tensor`."""
        return self.subgraph.add_tensor(
            Tensor(name=self.names(name), shape=list(shape), dtype=dtype, **fields)
        )

    def is_hybrid(self, index: int, op: Operator) -> bool:
        """Whether operator `index` reads hybrid weights: its other constants (the bias) stay
        float32 (XNNPACK fails to prepare a hybrid op whose bias comes from a float16
        DEQUANTIZE, measured)."""
        return any(
            (index, position) in self.plan.narrow
            and self.plan.narrow[(index, position)].form.kind == HYBRID
            for position in range(len(op.inputs))
        )

    def store_narrow(self, op: Operator, t: int, narrow: NarrowWeight) -> int:
        """The tensor `op` reads in place of float constant `t`, stored as `narrow` says; a
        hybrid op also gets the options and version its hybrid kernel needs."""
        if narrow.form.kind == FLOAT16:
            original = self.subgraph.tensors[t]
            sparsity = self.stored_forms.get(original.name)
            return self._restored_float(
                t, StoredForm(TensorType.FLOAT16, None if sparsity is None else sparsity.sparsity)
            )
        stored = self._narrow_constant(t, narrow)
        if narrow.form.kind == HYBRID:
            self._hybrid_op(op, narrow)
            return stored
        return self._dequantized(t, stored, narrow)

    def _narrow_constant(self, t: int, narrow: NarrowWeight) -> int:
        """The int8/int4 constant (and its block scales) of `narrow`, created once."""
        q = narrow.values
        key = (
            t,
            "narrow",
            narrow.form.bits,
            narrow.form.granularity,
            q.values.tobytes(),
            q.scale.tobytes(),
        )
        if key in self.constant_copies:
            return self.constant_copies[key]
        original = self.subgraph.tensors[t]
        suffix = f"_int{narrow.form.bits}"
        if narrow.form.granularity == BLOCKWISE:
            scales = self._add_tensor(
                f"{original.name}_scales",
                q.scale.shape,
                TensorType.FLOAT16,
                buffer=self.model.add_buffer(q.scale.astype(np.float16)),
            )
            params = blockwise_params(scales, q.block_size)
        else:
            params = QuantParams.of(q.scale, 0, quantized_dimension=q.axis or 0)
        data = pack_int4(q.values) if narrow.form.bits == 4 else q.values
        stored = self._add_tensor(
            f"{original.name}{suffix}",
            q.values.shape,
            _TYPES[narrow.form.bits],
            buffer=self.model.add_buffer(data),
            quantization=params,
        )
        self.constant_copies[key] = stored
        if narrow.form.kind == HYBRID:  # the op reads it: it takes the float original's name
            self._renamable(stored, original.name)
        return stored

    def _dequantized(self, t: int, stored: int, narrow: NarrowWeight) -> int:
        """A float32 tensor a DEQUANTIZE expands `stored` into (one per stored constant)."""
        key = (stored, "dequantized")
        if key in self.constant_copies:
            return self.constant_copies[key]
        original = self.subgraph.tensors[t]
        widened = self._add_tensor(
            f"{original.name}_dequantized", original.shape, TensorType.FLOAT32
        )
        form = (f"int{narrow.form.bits}", narrow.form.granularity)
        self._emit(self._storage_op("DEQUANTIZE", stored, widened, dequantize_version(*form)), None)
        self.constant_copies[key] = widened
        self._renamable(widened, original.name)
        return widened

    def _hybrid_op(self, op: Operator, narrow: NarrowWeight) -> None:
        """The options a hybrid kernel needs (asymmetric input quantization) and the version
        TensorFlow's converter writes for the form."""
        rule = weight_rule(narrow.op_type)
        if rule.hybrid_options and op.options_type is None:
            op.options_type = options_table(narrow.op_type)
        for name, value in rule.hybrid_options.items():
            op.set_option(name, value)
        code = self.model.operator_codes[op.opcode_index]
        version = rule.version(HYBRID, f"int{narrow.form.bits}", narrow.form.granularity)
        code.version = max(code.version, version)

"""The mutable in-memory graph of a TFLite model, and the helpers every other layer uses.

Every table keeps the fields qtool has no typed attribute for in `extra`, exactly as decoded, so
that a load -> save round trip never drops a field (debug metadata indices, variant tensors, ...).
"""

from __future__ import annotations

import fnmatch
import math
import mmap
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from qtool.errors import ModelError
from qtool.model.reflect import table_layout
from qtool.model.types import BuiltinOperator, TensorType, numpy_dtype, op_type_name, tensor_type


@dataclass
class QuantParams:
    """Affine quantization of a tensor: real = scale * (q - zero_point).

    One scale and zero point for the whole tensor, or one per slice along `quantized_dimension`
    (per-axis). A QuantParams with `min`/`max` and no scale only records a float range.
    """

    scale: np.ndarray  # float32, one per tensor or per slice of quantized_dimension
    zero_point: np.ndarray  # int64, same length as scale
    quantized_dimension: int = 0
    min: np.ndarray | None = None
    max: np.ndarray | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # custom quantization details

    @classmethod
    def of(
        cls,
        scale: Any,
        zero_point: Any = 0,
        quantized_dimension: int = 0,
    ) -> QuantParams:
        """Parameters from scalars or sequences: scale as float32, zero points as int64; a single
        zero point is repeated to match per-axis scales."""
        scale = np.atleast_1d(np.asarray(scale, dtype=np.float32))
        zero_point = np.atleast_1d(np.asarray(zero_point, dtype=np.int64))
        if zero_point.size == 1 and scale.size > 1:
            zero_point = np.repeat(zero_point, scale.size)
        return cls(scale=scale, zero_point=zero_point, quantized_dimension=quantized_dimension)

    @property
    def is_quantized(self) -> bool:
        """Whether scale/zero_point are set (min/max alone only record a float range)."""
        return self.scale is not None and len(self.scale) > 0

    @property
    def per_axis(self) -> bool:
        """Whether it holds more than one scale (one per slice of quantized_dimension)."""
        return self.is_quantized and len(self.scale) > 1

    def same_params(self, other: QuantParams | None) -> bool:
        """Whether both are quantized with equal scales and zero points (quantized_dimension and
        min/max are not compared); False when `other` is None or either lacks a scale."""
        if other is None or not (self.is_quantized and other.is_quantized):
            return False
        return np.array_equal(self.scale, other.scale) and np.array_equal(
            self.zero_point, other.zero_point
        )


@dataclass
class Tensor:
    """One tensor of a subgraph: a constant when its buffer holds data, an activation otherwise.

    Attributes:
        name: the name the model gives it (names need not be unique).
        shape: the declared dimensions; `shape_signature` says which are dynamic.
        dtype: a TensorType code (`qtool.model.types.TensorType`).
        buffer: index into Model.buffers; activations point at an empty buffer (by convention 0).
        quantization: None when the model writes no quantization table.
        is_variable: a variable tensor, state that operators update from one invocation to the next.
        shape_signature: the shape with -1 for dynamic dimensions; None when the model writes none.
        sparsity: the decoded SparsityParameters table; the buffer then holds the compressed values.
        extra: fields qtool has no attribute for, as decoded, written back unchanged.
    """

    name: str
    shape: list[int]
    dtype: int  # TensorType
    buffer: int = 0
    quantization: QuantParams | None = None
    is_variable: bool = False
    shape_signature: list[int] | None = None
    sparsity: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def quantized(self) -> bool:
        """Whether the tensor has quantization parameters with a scale."""
        return self.quantization is not None and self.quantization.is_quantized

    @property
    def num_elements(self) -> int:
        """The number of elements of the declared shape (1 for a scalar)."""
        return math.prod(self.shape)  # exact: numpy's int64 product could wrap around


@dataclass
class Operator:
    """One operator: its operand tensors by index in its subgraph and its options as decoded dicts.

    Attributes:
        opcode_index: index into Model.operator_codes (`Model.op_type` gives its name).
        inputs: tensor indices; -1 marks an absent optional input.
        outputs: tensor indices of the results.
        options: the options table keyed by snake_case field name (`option` fills in defaults).
        custom_options: a custom operator's raw option bytes (a flexbuffer or a C struct).
        intermediates: tensor indices of intermediate results some kernels keep (LSTM's).
        extra: fields qtool has no attribute for, as decoded, written back unchanged.
    """

    opcode_index: int
    inputs: list[int]
    outputs: list[int]
    options_type: str | None = None  # BuiltinOptions union member, e.g. "Conv2DOptions"
    options: dict[str, Any] = field(default_factory=dict)
    options_2_type: str | None = None  # BuiltinOptions2 union member (StableHLO ops)
    options_2: dict[str, Any] = field(default_factory=dict)
    custom_options: bytes | None = None
    intermediates: list[int] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def option(self, name: str, table: str | None = None) -> Any:
        """An option by its snake_case name; absent options take the schema's default.

        `table` is the options table the operator's type takes: an operator written without
        one (TFLite then uses the defaults) reads its defaults from there.
        """
        if name in self.options:
            return self.options[name]
        layout = self.options_type or table
        if layout is not None:
            for spec in table_layout(layout)[0]:
                if spec.name == name:
                    return spec.default
        raise KeyError(f"operator has no option {name!r} (options type {self.options_type})")

    def set_option(self, schema_name: str, value: Any) -> None:
        """Set an option given by its name in the flatbuffer schema ("pot_scale_int16"), which
        may split words differently from the decoded name ("pot_scale_int_16")."""
        wanted = schema_name.replace("_", "")
        for spec in table_layout(self.options_type)[0] if self.options_type else ():
            if spec.name.replace("_", "") == wanted:
                self.options[spec.name] = value
                return
        raise KeyError(f"options type {self.options_type} has no field {schema_name!r}")


@dataclass
class OperatorCode:
    """An entry of the model's operator code table: a BuiltinOperator code, or CUSTOM with the
    custom op's name in `custom_code`, and the operator version the runtime's kernel must
    support."""

    builtin_code: int
    custom_code: str | None = None
    version: int = 1
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The builtin's name ("CONV_2D"), or a custom op's code ("CUSTOM" if it has none)."""
        if self.builtin_code == BuiltinOperator.CUSTOM:
            return self.custom_code or "CUSTOM"
        return op_type_name(self.builtin_code)


@dataclass
class Buffer:
    """Raw bytes of a constant, as stored in the file (little-endian)."""

    data: np.ndarray | None = None  # uint8 view; None or empty for activations
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        """The number of bytes held (0 for an empty buffer)."""
        return 0 if self.data is None else int(self.data.size)


@dataclass
class Subgraph:
    """One graph of a model: its tensors, its operators in execution order, and the indices of
    the tensors that are its inputs and outputs. Subgraph 0 is the one a runtime runs by default;
    others are reached through signatures or control-flow operators (WHILE, IF, CALL_ONCE)."""

    tensors: list[Tensor]
    inputs: list[int]
    outputs: list[int]
    operators: list[Operator]
    name: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def leading_one(self, tensor_index: int) -> bool:
        """Whether the tensor is declared with a leading 1: the axis a batch of samples takes."""
        return self.tensors[tensor_index].shape[:1] == [1]

    def inputs_lead_with_one(self) -> bool:
        """Whether every input has a leading 1, so that N samples travel as one [N, ...] batch
        (otherwise a sample is an input's whole declared shape)."""
        return all(self.leading_one(t) for t in self.inputs)

    def producers(self) -> dict[int, int]:
        """Tensor index -> index of the operator that writes it."""
        return {t: i for i, op in enumerate(self.operators) for t in op.outputs if t >= 0}

    def consumers(self) -> dict[int, list[int]]:
        """Tensor index -> indices of the operators that read it (in operator order)."""
        out: dict[int, list[int]] = {}
        for i, op in enumerate(self.operators):
            for t in dict.fromkeys(op.inputs):
                if t >= 0:
                    out.setdefault(t, []).append(i)
        return out

    def topological_order(self) -> list[int]:
        """Operator indices in an order where every operator follows the producers of its inputs.

        TFLite stores operators in execution order already; this keeps that order where it is
        valid and raises on a cycle or on a tensor read before anything can produce it.
        """
        producer = self.producers()
        state = [0] * len(self.operators)  # 0 unvisited, 1 on stack, 2 done
        order: list[int] = []
        for root in range(len(self.operators)):
            stack = [(root, iter(self.operators[root].inputs))]
            if state[root]:
                continue
            state[root] = 1
            while stack:
                node, pending = stack[-1]
                for t in pending:
                    dep = producer.get(t)
                    if dep is None or state[dep] == 2:
                        continue
                    if state[dep] == 1:
                        raise ModelError(f"subgraph has a cycle through operator {dep}")
                    state[dep] = 1
                    stack.append((dep, iter(self.operators[dep].inputs)))
                    break
                else:
                    state[node] = 2
                    order.append(node)
                    stack.pop()
        return order

    def add_tensor(self, tensor: Tensor) -> int:
        """Append a tensor and return its index."""
        self.tensors.append(tensor)
        return len(self.tensors) - 1

    def tensor_index(self, name: str) -> int:
        """The index of the first tensor named `name`; KeyError when there is none."""
        for i, tensor in enumerate(self.tensors):
            if tensor.name == name:
                return i
        raise KeyError(f"no tensor named {name!r}")


@dataclass
class Model:
    """A TFLite model decoded into mutable Python objects (`qtool.model.io` reads and writes it).

    Attributes:
        version: the schema version (qtool reads and writes 3).
        operator_codes: the table that Operator.opcode_index points into.
        subgraphs: subgraph 0 first, the graph a runtime runs by default.
        buffers: the constants' bytes; buffer 0 is empty by convention, the one activations use.
        description: free text naming the producer.
        metadata: named metadata entries, each {"name", "buffer"} pointing into buffers.
        signature_defs: the decoded SignatureDef tables (signature_key, subgraph_index, and inputs
            and outputs as lists of {"name", "tensor_index"}).
        metadata_buffer: the deprecated list of metadata buffer indices, kept for round trips.
        extra: fields qtool has no attribute for, as decoded, written back unchanged.
        source_path: the resolved path the model was read from (None for a built one); `save_model`
            refuses to write over it; not compared by ==.
    """

    version: int
    operator_codes: list[OperatorCode]
    subgraphs: list[Subgraph]
    buffers: list[Buffer]
    description: str | None = None
    metadata: list[dict[str, Any]] = field(default_factory=list)  # {"name", "buffer"}
    signature_defs: list[dict[str, Any]] = field(default_factory=list)
    metadata_buffer: list[int] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    source_path: str | None = field(default=None, compare=False)
    # The file's bytes as read (the buffers are views of them): what the model is, even if
    # the file changes afterwards (the report's size and sha256 come from these). A large
    # file's are a read-only mapping of a private copy (`qtool.model.source`).
    source_data: bytes | mmap.mmap | None = field(default=None, compare=False, repr=False)

    # ----------------------------------------------------------------- operator codes

    def op_type(self, op: Operator) -> str:
        """BuiltinOperator name of an operator ("CONV_2D"), or its custom code."""
        return self.operator_codes[op.opcode_index].name

    def opcode_for(self, name: str, version: int = 1) -> int:
        """Index of the operator code for builtin `name`, added if the model lacks it.

        An existing code is reused with its version raised when needed, since one model may not
        list the same builtin twice.
        """
        code = getattr(BuiltinOperator, name)
        for i, existing in enumerate(self.operator_codes):
            if existing.builtin_code == code and code != BuiltinOperator.CUSTOM:
                existing.version = max(existing.version, version)
                return i
        self.operator_codes.append(OperatorCode(builtin_code=code, version=version))
        return len(self.operator_codes) - 1

    def custom_opcode_for(self, custom_code: str) -> int:
        """Index of the operator code of custom op `custom_code`, added if missing."""
        for i, existing in enumerate(self.operator_codes):
            if (
                existing.builtin_code == BuiltinOperator.CUSTOM
                and existing.custom_code == custom_code
            ):
                return i
        self.operator_codes.append(
            OperatorCode(builtin_code=BuiltinOperator.CUSTOM, custom_code=custom_code)
        )
        return len(self.operator_codes) - 1

    # ----------------------------------------------------------------- buffers and tensors

    def add_buffer(self, data: np.ndarray | bytes | None = None) -> int:
        """Append a buffer and return its index: bytes as they are, an array (or numpy scalar) as
        its raw bytes in memory order, None as an empty buffer."""
        if isinstance(data, bytes | bytearray | memoryview):
            data = np.frombuffer(bytes(data), dtype=np.uint8)
        elif data is not None:  # arrays and numpy scalars (0-d results of numpy math)
            data = np.ascontiguousarray(np.asarray(data)).reshape(-1).view(np.uint8)
        self.buffers.append(Buffer(data=data))
        return len(self.buffers) - 1

    def is_constant(self, tensor: Tensor) -> bool:
        """Whether the tensor points at a buffer that exists and holds data."""
        return 0 <= tensor.buffer < len(self.buffers) and self.buffers[tensor.buffer].nbytes > 0

    def tensor_data(self, tensor: Tensor) -> np.ndarray | None:
        """The constant value of a tensor as a read-only numpy view of its shape and dtype.

        Returns None for activations. Sparse tensors return their stored (compressed) values;
        INT4 tensors return the packed bytes.
        """
        if not self.is_constant(tensor):
            return None
        raw = self.buffers[tensor.buffer].data
        if tensor.dtype == TensorType.STRING:
            return raw
        dtype = numpy_dtype(tensor.dtype)
        if tensor.sparsity is not None or tensor.dtype == TensorType.INT4:
            return raw.view(dtype)
        values = raw.view(dtype)
        return values.reshape(tensor.shape) if tensor.shape else values.reshape(())

    def set_tensor_data(self, subgraph: Subgraph, index: int, values: np.ndarray) -> None:
        """Give tensor `index` new constant contents in a buffer of its own.

        A fresh buffer is used because buffers may be shared by several tensors (TFLite
        deduplicates equal constants) and the others must keep their values.
        """
        tensor = subgraph.tensors[index]
        values = np.asarray(values, order="C")  # ascontiguousarray would make a scalar 1-d
        tensor.buffer = self.add_buffer(values)
        tensor.shape = list(values.shape)
        if _stored_dtype(tensor.dtype) != values.dtype:  # float32 values for a float16 tensor
            tensor.dtype = tensor_type(values.dtype)
        if tensor.shape_signature is not None:
            tensor.shape_signature = list(values.shape)

    def iter_ops(self) -> Iterator[tuple[int, int, Subgraph, Operator]]:
        """(subgraph index, operator index, subgraph, operator) of every operator, in order."""
        for s, subgraph in enumerate(self.subgraphs):
            for i, op in enumerate(subgraph.operators):
                yield s, i, subgraph, op

    def op_matches(
        self, op: Operator, subgraph: Subgraph, pattern: str, op_type: str | None = None
    ) -> bool:
        """Whether an operator matches a user pattern: a glob over its type (any case, e.g.
        "conv*"; `op_type` when given: the type it had before a rewrite), or over the names of
        the tensors it produces (case-sensitive)."""
        if fnmatch.fnmatchcase((op_type or self.op_type(op)).upper(), pattern.upper()):
            return True
        names = [subgraph.tensors[t].name for t in op.outputs]
        return any(fnmatch.fnmatchcase(name, pattern) for name in names)

    def weights_nbytes(self) -> int:
        """The bytes held by all buffers together (every constant, weights or not)."""
        return sum(buffer.nbytes for buffer in self.buffers)


def _stored_dtype(code: int) -> np.dtype | None:
    """The numpy dtype a tensor type is stored as; None for types numpy has no form of."""
    try:
        return numpy_dtype(code)
    except KeyError:
        return None

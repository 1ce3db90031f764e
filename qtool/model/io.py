"""Reading and writing .tflite files: decode, validate, encode, atomic write (`qtool.files`).

Reading copies the file once, and weight buffers are numpy views of that copy (also the buffers
stored after the flatbuffer, offset/size, the >2 GiB layout): into memory, or for a large file
into a private temporary copy mapped read-only (`qtool.model.source`). Never a map of the user's
file: one truncated or rewritten while qtool runs would end a mapped read in SIGBUS (no message)
or in bytes that changed under the validator. A file that changes while it is read is one
error. Writing inlines buffers unless they would push the
flatbuffer past its 2 GiB limit, in which case they are appended after it with offsets, as the
TFLite converter does.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import flatbuffers
import numpy as np

from qtool.errors import ModelError, exception_summary
from qtool.files import (
    InputFiles,
    NotRegularFile,
    open_regular,
    os_reason,
    refuse_input,
    write_atomic,
)
from qtool.model.graph import (
    Buffer,
    Model,
    Operator,
    OperatorCode,
    QuantParams,
    Subgraph,
    Tensor,
)
from qtool.model.reflect import (
    DecodeBudget,
    DecodeError,
    Prebuilt,
    SharingBuilder,
    create_numpy_vector,
    decode_table,
    encode_table,
    union_codes,
    union_members,
)
from qtool.model.source import SourceChanged, read_source
from qtool.model.types import BuiltinOperator
from qtool.model.validate import validate_model

FILE_IDENTIFIER = b"TFL3"
BUFFER_ALIGNMENT = 16
# Small constants (biases, a layer's scales) need only their element's alignment (8 bytes covers
# every tensor type); 16 bytes each would pad a small model by hundreds of bytes for no reader.
SMALL_BUFFER = 256
SMALL_BUFFER_ALIGNMENT = 8
# The flatbuffers builder cannot exceed 2 GiB; leave headroom for the graph itself.
INLINE_BUFFER_LIMIT = 2**31 - 2**26


# =========================================================================== reading


def load_model(path: str | os.PathLike, validate: bool = True) -> Model:
    """Read a .tflite file into a Model; any problem raises ModelError naming it.

    With `validate` (the default) the graph must also pass the validator (`validate.py`), which
    raises InvalidModelError; without, only a file that does not decode is an error.
    """
    path = Path(path)
    try:
        handle = open_regular(path)
    except NotRegularFile as exc:
        raise ModelError(f"{path}: is {exc}") from None
    except FileNotFoundError:
        raise ModelError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise ModelError(f"{path}: cannot read ({os_reason(exc)})") from None
    try:
        with handle:
            size = os.fstat(handle.fileno()).st_size
            if size == 0:
                raise ModelError(f"{path}: empty file")
            data = read_source(handle, size)
    except SourceChanged as exc:
        raise ModelError(_changed(path, size, exc.copied)) from None
    except OSError as exc:
        raise ModelError(f"{path}: cannot read ({os_reason(exc)})") from None
    if len(data) != size:
        raise ModelError(_changed(path, size, len(data)))
    model = parse_model(data, name=str(path), validate=validate)
    model.source_path = str(path.resolve())
    model.source_data = data
    return model


def _changed(path: Path, size: int, read: int) -> str:
    return f"{path}: changed while it was read ({size:,} bytes, then {read:,})"


def parse_model(
    data: bytes | bytearray | memoryview | mmap.mmap, name: str = "model", validate: bool = True
) -> Model:
    """Decode and validate TFLite flatbuffer bytes (zero-copy: buffers view `data`)."""
    if len(data) < 8:
        raise ModelError(f"{name}: truncated file ({len(data)} bytes), not a TFLite model")
    identifier = bytes(data[4:8])
    if identifier != FILE_IDENTIFIER:
        raise ModelError(
            f"{name}: not a TFLite model (file identifier {identifier!r}, expected {FILE_IDENTIFIER!r})"
        )
    try:
        root = flatbuffers.encode.Get(flatbuffers.packer.uoffset, data, 0)
        budget = DecodeBudget(len(data))
        raw = decode_table("Model", flatbuffers.table.Table(data, root), budget)
        model = _model_from_dict(raw, data, budget)
    except ModelError:
        raise
    except (DecodeError, Exception) as exc:  # any malformed flatbuffer surfaces as one error
        raise ModelError(f"{name}: corrupt TFLite flatbuffer ({_describe(exc)})") from None
    if validate:
        validate_model(model, name)
    return model


def _describe(exc: Exception) -> str:
    if isinstance(exc, struct.error | IndexError):
        return "an offset or length points past the end of the data: truncated or not TFLite"
    return exception_summary(exc)


def _split(raw: dict[str, Any], known: tuple[str, ...]) -> tuple[dict, dict]:
    return {k: raw[k] for k in known}, {k: v for k, v in raw.items() if k not in known}


def _ints(values: Any) -> list[int]:
    return [] if values is None else [int(v) for v in values]


def _model_from_dict(raw: dict[str, Any], data: Any, budget: DecodeBudget) -> Model:
    known, extra = _split(
        raw,
        (
            "version",
            "operator_codes",
            "subgraphs",
            "buffers",
            "description",
            "metadata",
            "signature_defs",
            "metadata_buffer",
        ),
    )
    return Model(
        version=known["version"],
        operator_codes=[_opcode_from_dict(c) for c in known["operator_codes"] or []],
        subgraphs=[_subgraph_from_dict(s) for s in known["subgraphs"] or []],
        buffers=[_buffer_from_dict(b, data, budget) for b in known["buffers"] or []],
        description=known["description"],
        metadata=[dict(m) for m in known["metadata"] or []],
        signature_defs=known["signature_defs"] or [],
        metadata_buffer=_ints(known["metadata_buffer"]),
        extra=extra,
    )


def _opcode_from_dict(raw: dict[str, Any]) -> OperatorCode:
    # Old files only set the deprecated int8 field; newer ones set both (the int8 one saturates at
    # PLACEHOLDER_FOR_GREATER_OP_CODES for codes above 127).
    code = max(raw["builtin_code"], raw["deprecated_builtin_code"])
    known, extra = _split(raw, ("builtin_code", "custom_code", "version"))
    extra.pop("deprecated_builtin_code")
    return OperatorCode(
        builtin_code=code, custom_code=known["custom_code"], version=known["version"], extra=extra
    )


def _buffer_from_dict(raw: dict[str, Any], data: Any, budget: DecodeBudget) -> Buffer:
    offset, size = raw["offset"], raw["size"]
    extra = {k: v for k, v in raw.items() if k not in ("data", "offset", "size")}
    if offset > 1:
        if offset + size > len(data):
            raise ModelError(
                f"buffer stored at offset {offset} (+{size} bytes) lies past the end of the file"
            )
        budget.spend(size)  # buffers stored after the flatbuffer may overlap too
        return Buffer(
            data=np.frombuffer(data, dtype=np.uint8, count=size, offset=offset), extra=extra
        )
    return Buffer(data=raw["data"], extra=extra)


def _subgraph_from_dict(raw: dict[str, Any]) -> Subgraph:
    known, extra = _split(raw, ("tensors", "inputs", "outputs", "operators", "name"))
    return Subgraph(
        tensors=[_tensor_from_dict(t) for t in known["tensors"] or []],
        inputs=_ints(known["inputs"]),
        outputs=_ints(known["outputs"]),
        operators=[_operator_from_dict(o) for o in known["operators"] or []],
        name=known["name"],
        extra=extra,
    )


def _tensor_from_dict(raw: dict[str, Any]) -> Tensor:
    known, extra = _split(
        raw,
        (
            "shape",
            "type",
            "buffer",
            "name",
            "quantization",
            "is_variable",
            "sparsity",
            "shape_signature",
        ),
    )
    return Tensor(
        name=known["name"] if known["name"] is not None else "",
        shape=_ints(known["shape"]),
        dtype=known["type"],
        buffer=known["buffer"],
        quantization=_quant_from_dict(known["quantization"]),
        is_variable=bool(known["is_variable"]),
        shape_signature=None
        if known["shape_signature"] is None
        else _ints(known["shape_signature"]),
        sparsity=known["sparsity"],
        extra=extra,
    )


def _quant_from_dict(raw: dict[str, Any] | None) -> QuantParams | None:
    if raw is None:
        return None
    known, extra = _split(raw, ("scale", "zero_point", "quantized_dimension", "min", "max"))

    def array(values: Any, dtype: type) -> np.ndarray:
        return np.zeros(0, dtype) if values is None else np.array(values, dtype=dtype)

    return QuantParams(
        scale=array(known["scale"], np.float32),
        zero_point=array(known["zero_point"], np.int64),
        quantized_dimension=known["quantized_dimension"],
        min=None if known["min"] is None else array(known["min"], np.float32),
        max=None if known["max"] is None else array(known["max"], np.float32),
        extra=extra,
    )


def _operator_from_dict(raw: dict[str, Any]) -> Operator:
    known, extra = _split(
        raw,
        (
            "opcode_index",
            "inputs",
            "outputs",
            "builtin_options_type",
            "builtin_options",
            "builtin_options_2_type",
            "builtin_options_2",
            "custom_options",
            "intermediates",
        ),
    )
    custom = known["custom_options"]
    return Operator(
        opcode_index=known["opcode_index"],
        inputs=_ints(known["inputs"]),
        outputs=_ints(known["outputs"]),
        options_type=union_members("BuiltinOptions").get(known["builtin_options_type"]),
        options=known["builtin_options"] or {},
        options_2_type=union_members("BuiltinOptions2").get(known["builtin_options_2_type"]),
        options_2=known["builtin_options_2"] or {},
        custom_options=None if custom is None else bytes(custom),
        intermediates=_ints(known["intermediates"]),
        extra=extra,
    )


# =========================================================================== writing


def serialize_model(
    model: Model, inline_limit: int = INLINE_BUFFER_LIMIT
) -> list[bytes | memoryview]:
    """Encode a model as the chunks of a .tflite file (flatbuffer, then any external buffers)."""
    total = model.weights_nbytes()
    if total <= inline_limit:
        return [_build(model, offsets=None)]
    sizes = [b.nbytes for b in model.buffers]
    # Offsets are uint64 fields written in every Buffer table, so the flatbuffer has the same
    # length whatever their values: build once with placeholders to learn where data starts.
    placeholder = [1 << 40 if n else 0 for n in sizes]
    head_len = len(_build(model, offsets=placeholder))
    offsets, cursor = [], _align(head_len)
    for n in sizes:
        offsets.append(cursor if n else 0)
        cursor = _align(cursor + n) if n else cursor
    head = _build(model, offsets=offsets)
    if len(head) != head_len:
        raise AssertionError("flatbuffer length changed between the two encoding passes")
    chunks: list[bytes | memoryview] = [head]
    position = head_len
    for buffer, offset in zip(model.buffers, offsets, strict=True):
        if not offset:
            continue
        chunks.append(b"\0" * (offset - position))
        chunks.append(memoryview(buffer.data))
        position = offset + buffer.nbytes
    return chunks


def _align(n: int) -> int:
    return (n + BUFFER_ALIGNMENT - 1) // BUFFER_ALIGNMENT * BUFFER_ALIGNMENT


def model_to_bytes(model: Model, inline_limit: int = INLINE_BUFFER_LIMIT) -> bytes:
    """The model as the bytes of a .tflite file; models with more weight bytes than
    `inline_limit` keep their buffers after the flatbuffer (see `serialize_model`)."""
    return b"".join(serialize_model(model, inline_limit))


def _build(model: Model, offsets: list[int] | None) -> memoryview:
    # Room for the weights and the tables up front: a flatbuffers builder that fills up
    # doubles its buffer and copies it (a 100 MB model held 300 MB at once).
    builder = SharingBuilder(
        _tables_room(model) + (model.weights_nbytes() if offsets is None else 0)
    )
    raw = _model_to_dict(model, builder, offsets)
    root = encode_table(builder, "Model", raw)
    builder.Finish(root, file_identifier=FILE_IDENTIFIER)
    # A view of the builder's buffer, not a copy (its Output() slices the bytearray): a file
    # written from the chunks (`save_model`) never holds the model twice; `model_to_bytes`
    # copies once.
    return memoryview(builder.Bytes)[builder.Head() :]


def _tables_room(model: Model) -> int:
    """More than the bytes the flatbuffer's tables take beside the buffers: 512 a tensor or
    operator, plus what grows with them (per-axis quantization vectors: the int8 model of a
    100-layer 100 MB FULLY_CONNECTED stack outgrew 512 a tensor, and the builder's doubling
    held 3x the model's size)."""
    room = 1 << 16
    for subgraph in model.subgraphs:
        room += 512 * (len(subgraph.tensors) + len(subgraph.operators))
        for tensor in subgraph.tensors:
            room += len(tensor.name) + 8 * len(tensor.shape)
            q = tensor.quantization
            if q is not None:
                room += q.scale.nbytes + q.zero_point.nbytes
                room += sum(v.nbytes for v in (q.min, q.max) if v is not None)
        for op in subgraph.operators:
            room += len(op.custom_options or b"") + 4 * (len(op.inputs) + len(op.outputs))
    return room


def _model_to_dict(model: Model, builder: flatbuffers.Builder, offsets: list[int] | None) -> dict:
    # Buffer data is placed first (deepest in the file) with 16-byte alignment so that the
    # interpreter can use weights in place; the generic encoder then refers to these offsets.
    buffer_dicts = []
    for i, buffer in enumerate(model.buffers):
        entry = dict(buffer.extra)
        if offsets is not None and buffer.nbytes:
            entry.update(offset=offsets[i], size=buffer.nbytes)
        elif buffer.data is not None:
            alignment = BUFFER_ALIGNMENT if buffer.nbytes > SMALL_BUFFER else SMALL_BUFFER_ALIGNMENT
            entry["data"] = Prebuilt(create_numpy_vector(builder, buffer.data, alignment=alignment))
        buffer_dicts.append(entry)
    return {
        **model.extra,
        "version": model.version,
        "operator_codes": [_opcode_to_dict(c) for c in model.operator_codes],
        "subgraphs": [_subgraph_to_dict(s) for s in model.subgraphs],
        "buffers": buffer_dicts,
        "description": model.description,
        "metadata": model.metadata,
        "signature_defs": model.signature_defs,
        "metadata_buffer": model.metadata_buffer or None,
    }


def _opcode_to_dict(code: OperatorCode) -> dict:
    deprecated = min(code.builtin_code, BuiltinOperator.PLACEHOLDER_FOR_GREATER_OP_CODES)
    return {
        **code.extra,
        "builtin_code": code.builtin_code,
        "deprecated_builtin_code": deprecated,
        "custom_code": code.custom_code,
        "version": code.version,
    }


def _subgraph_to_dict(subgraph: Subgraph) -> dict:
    return {
        **subgraph.extra,
        "tensors": [_tensor_to_dict(t) for t in subgraph.tensors],
        "inputs": subgraph.inputs,
        "outputs": subgraph.outputs,
        "operators": [_operator_to_dict(o) for o in subgraph.operators],
        "name": subgraph.name,
    }


def _tensor_to_dict(tensor: Tensor) -> dict:
    q = tensor.quantization
    quant = None
    if q is not None:
        quant = {
            **q.extra,
            "scale": q.scale if len(q.scale) else None,
            "zero_point": q.zero_point if len(q.zero_point) else None,
            "quantized_dimension": q.quantized_dimension,
            "min": q.min,
            "max": q.max,
        }
    return {
        **tensor.extra,
        "shape": tensor.shape,
        "type": tensor.dtype,
        "buffer": tensor.buffer,
        "name": tensor.name,
        "quantization": quant,
        "is_variable": tensor.is_variable,
        "sparsity": tensor.sparsity,
        "shape_signature": tensor.shape_signature,
    }


def _operator_to_dict(op: Operator) -> dict:
    return {
        **op.extra,
        "opcode_index": op.opcode_index,
        "inputs": op.inputs,
        "outputs": op.outputs,
        "builtin_options_type": union_codes("BuiltinOptions")[op.options_type]
        if op.options_type
        else 0,
        "builtin_options": op.options if op.options_type else None,
        "builtin_options_2_type": union_codes("BuiltinOptions2")[op.options_2_type]
        if op.options_2_type
        else 0,
        "builtin_options_2": op.options_2 if op.options_2_type else None,
        "custom_options": None
        if op.custom_options is None
        else np.frombuffer(op.custom_options, dtype=np.uint8),
        "intermediates": op.intermediates or None,
    }


def save_model(
    model: Model,
    path: str | os.PathLike,
    *,
    overwrite: bool = True,
    inline_limit: int = INLINE_BUFFER_LIMIT,
) -> None:
    """Write a model atomically; never over the file it was read from."""
    if model.source_path:
        refuse_input_overwrite(path, [model.source_path])
    chunks = serialize_model(model, inline_limit)
    write_atomic(path, chunks, overwrite=overwrite)


def refuse_input_overwrite(output: str | os.PathLike, inputs: Iterable[str | os.PathLike]) -> None:
    """Raise UsageError when `output` is one of `inputs` (by device and inode: the same path, a
    spelling with `..`, a symbolic or a hard link): qtool never overwrites a file it reads."""
    refuse_input(output, InputFiles.of(inputs))

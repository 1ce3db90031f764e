"""A generic, lossless codec for TFLite flatbuffer tables, driven by the schema as data.

Rather than writing a reader and a writer by hand for each of the ~200 option tables (and
silently dropping the fields of ops qtool does not know), every table is read and written from
its layout in `tflite_schema.json`: for each field its vtable slot and whether it is a scalar
(with its flatbuffers type and default), a string, a table, a vector of those, or a union. That
file is generated at build time from the flatc-generated classes of the `tflite` package
(`qtool/model/schema_gen.py`), so at run time qtool imports no `tflite` and reads no Python source:
bytecode-only installs work. Decoding turns a table into a plain dict keyed by snake_case field
names; encoding builds the same table back.

Scalar vectors decode to numpy arrays that are views into the source bytes (zero copy), which is
what keeps multi-gigabyte weight buffers cheap to read.
"""

from __future__ import annotations

import functools
import json
import re
import struct
from dataclasses import dataclass
from importlib import resources
from typing import Any

import flatbuffers
import numpy as np
from flatbuffers import number_types as nt

SCHEMA_RESOURCE = "tflite_schema.json"
# The schema's parts newer than the last `tflite` release (blockwise quantization), by hand.
LATER_SCHEMA_RESOURCE = "tflite_schema_later.json"

_FLAG_DTYPES = {
    "Bool": np.bool_,
    "Int8": np.int8,
    "Uint8": np.uint8,
    "Int16": np.int16,
    "Uint16": np.uint16,
    "Int32": np.int32,
    "Uint32": np.uint32,
    "Int64": np.int64,
    "Uint64": np.uint64,
    "Float32": np.float32,
    "Float64": np.float64,
}


class DecodeError(ValueError):
    """The bytes are not a well-formed table of the expected type."""


@dataclass(frozen=True)
class Field:
    """One field of a table as the codec reads it.

    Attributes:
        slot: its position in the table's vtable.
    """

    name: str  # snake_case key in decoded dicts
    slot: int
    kind: str  # scalar | string | table | union | scalar_vector | string_vector | table_vector
    scalar: str | None = None  # flatbuffers type name (Int32, Float32, ...) for scalars/vectors
    default: Any = None
    child: str | None = None  # table class name, or union enum name for unions


def scalar_dtype(flatbuffers_type: str) -> np.dtype:
    """The numpy dtype of a flatbuffers scalar type name ("Int32", "Float32", ...)."""
    return np.dtype(_FLAG_DTYPES[flatbuffers_type])


def snake_case(name: str) -> str:
    """The decoded dict key of a flatc accessor name: "FusedActivationFunction" ->
    "fused_activation_function", with digits split off ("PotScaleInt16" -> "pot_scale_int_16")."""
    snake = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name)
    snake = re.sub(r"(?<=[A-Z])([A-Z][a-z])", r"_\1", snake)
    return re.sub(r"(?<=[a-zA-Z])(\d+)", r"_\1", snake).lower()


@functools.cache
def schema() -> dict[str, Any]:
    """The shipped schema data (tables and enums), read once: the generated table with the
    later schema's additions where it lacks them."""
    generated = json.loads(resources.files(__package__).joinpath(SCHEMA_RESOURCE).read_text())
    return with_additions(generated, later_schema())


def later_schema() -> dict[str, Any]:
    """The hand-written parts of the schema newer than the last `tflite` release."""
    return json.loads(resources.files(__package__).joinpath(LATER_SCHEMA_RESOURCE).read_text())


def with_additions(base: dict[str, Any], later: dict[str, Any]) -> dict[str, Any]:
    """`base` with the tables and enum values of `later` that it lacks (what it has wins)."""
    tables = {**later["tables"], **base["tables"]}
    enums = {
        name: {**later["enums"].get(name, {}), **base["enums"].get(name, {})}
        for name in {**base["enums"], **later["enums"]}
    }
    return {**base, "tables": tables, "enums": enums}


@functools.cache
def enum_members(enum_name: str) -> dict[str, int]:
    """The values of a schema enum by name, e.g. enum_members("TensorType")["INT8"] == 9."""
    return dict(schema()["enums"][enum_name])


@functools.cache
def union_members(enum_name: str) -> dict[int, str]:
    """A union enum's type codes -> the table each names (NONE left out)."""
    return {code: key for key, code in enum_members(enum_name).items() if key != "NONE"}


@functools.cache
def enum_values(enum_name: str) -> frozenset[int]:
    """The values a schema enum (Padding, TensorType, ...) defines."""
    return frozenset(enum_members(enum_name).values())


@functools.cache
def union_codes(enum_name: str) -> dict[str, int]:
    """The inverse of `union_members`: table name -> the union's type code."""
    return {member: code for code, member in union_members(enum_name).items()}


@functools.cache
def table_layout(name: str) -> tuple[tuple[Field, ...], int]:
    """The fields of table `name` and its vtable size (number of slots)."""
    table = schema()["tables"][name]
    fields = tuple(
        Field(snake_case(accessor), slot, kind, scalar, default, child)
        for accessor, slot, kind, scalar, default, child in table["fields"]
    )
    return fields, table["slots"]


# --------------------------------------------------------------------------- decoding


def _check_span(buf_len: int, start: int, nbytes: int) -> None:
    if start < 0 or start + nbytes > buf_len:
        raise DecodeError(f"data at offset {start} (+{nbytes} bytes) lies outside the file")


class DecodeBudget:
    """How much a file may decode to, counted each time an offset is followed: strings and
    vectors by their bytes, tables by 4 bytes (what each one takes in the file at least).

    A flatbuffer stores each object once, so a file written by a flatbuffers builder decodes to
    about its own size. Offsets may point at one object from many places, though: 20,000 tensor
    entries sharing one table with a 1 MiB name decode to 20 GB from a 1.1 MB file, and every
    layer after the reader would pay for each copy again. A bound of a few times the file size
    refuses that while leaving room for the little sharing builders do (deduplicated strings).
    """

    FACTOR = 4
    MINIMUM = 1 << 20

    def __init__(self, file_size: int) -> None:
        self.limit = max(self.FACTOR * file_size, self.MINIMUM)
        self.left = self.limit

    def spend(self, nbytes: int) -> None:
        """Count `nbytes` decoded; DecodeError once the file's budget is spent."""
        self.left -= nbytes
        if self.left < 0:
            raise DecodeError(
                f"its offsets point at shared data that decodes to more than {self.limit:,} "
                f"bytes ({self.FACTOR}x the file): not a flatbuffer a TFLite writer makes"
            )


@functools.cache
def _decoding_layout(name: str) -> tuple[tuple[Field, ...], tuple[Any, ...], int]:
    """Table `name`'s fields, for each scalar one (unpack_from, byte width, Python type) as the
    flatbuffers runtime reads it (None for the others), and its vtable size."""
    fields, num_slots = table_layout(name)
    readers = []
    for field in fields:
        if field.kind != "scalar":
            readers.append(None)
            continue
        flags = getattr(nt, f"{field.scalar}Flags")
        unpack = struct.Struct(flags.packer_type.format).unpack_from
        readers.append((unpack, flags.bytewidth, flags.py_type))
    return fields, tuple(readers), num_slots


def _slot_offsets(tab: flatbuffers.table.Table, num_slots: int) -> list[int] | None:
    """Every slot's offset in the table's vtable, read at once (what `Table.Offset` reads one
    slot at a time, 0 past the vtable's end); None where the vtable does not lie within the
    data, for `Table.Offset` to fail on the very field it would fail on. 2x faster decoding
    of a model's tables."""
    try:
        vtable = tab.Pos - _SOFFSET.unpack_from(tab.Bytes, tab.Pos)[0]
        if vtable < 0:  # Table.Offset refuses it (unpack_from would count from the end)
            return None
        end = _VOFFSET.unpack_from(tab.Bytes, vtable)[0]
        present = min(num_slots, max(0, (end - 3) // 2))
        slots = list(struct.unpack_from(f"<{present}H", tab.Bytes, vtable + 4)) if present else []
    except struct.error:
        return None
    return slots + [0] * (num_slots - present)


_SOFFSET = struct.Struct(nt.SOffsetTFlags.packer_type.format)
_VOFFSET = struct.Struct(nt.VOffsetTFlags.packer_type.format)


def decode_table(
    name: str, tab: flatbuffers.table.Table, budget: DecodeBudget | None = None
) -> dict[str, Any]:
    """Decode one table into a dict with every field present (absent fields take the default).
    `budget` bounds what following the offsets may decode to (see DecodeBudget)."""
    fields, readers, num_slots = _decoding_layout(name)
    buf = tab.Bytes
    buf_len = len(buf)
    _check_span(buf_len, tab.Pos, 4)
    if budget is None:
        budget = DecodeBudget(buf_len)
    budget.spend(4)
    slots = _slot_offsets(tab, num_slots)
    out: dict[str, Any] = {}
    for field, reader in zip(fields, readers, strict=True):
        off = slots[field.slot] if slots is not None else tab.Offset(4 + 2 * field.slot)
        if reader is not None:
            if off:
                unpack, size, py_type = reader
                _check_span(buf_len, tab.Pos + off, size)
                value = py_type(unpack(buf, tab.Pos + off)[0])
            else:
                value = field.default
            out[field.name] = value
            continue
        if not off:
            out[field.name] = None
            continue
        _check_span(buf_len, tab.Pos + off, 4)
        if field.kind == "string":
            out[field.name] = _decode_string(tab, tab.Pos + off, buf_len, budget)
        elif field.kind == "table":
            sub = _sub_table(tab, tab.Pos + off, buf_len)
            out[field.name] = decode_table(field.child, sub, budget)
        elif field.kind == "union":
            code = out.get(field.name + "_type", 0)
            members = union_members(field.child)
            if code not in members:
                raise DecodeError(f"unknown {field.child} union type {code}")
            sub = flatbuffers.table.Table(buf, 0)
            tab.Union(sub, off)
            _check_span(buf_len, sub.Pos, 4)
            out[field.name] = decode_table(members[code], sub, budget)
        else:
            out[field.name] = _decode_vector(field, tab, off, buf_len, budget)
    return out


def _sub_table(tab: flatbuffers.table.Table, at: int, buf_len: int) -> flatbuffers.table.Table:
    pos = tab.Indirect(at)
    _check_span(buf_len, pos, 4)
    return flatbuffers.table.Table(tab.Bytes, pos)


def _decode_string(
    tab: flatbuffers.table.Table, at: int, buf_len: int, budget: DecodeBudget
) -> str:
    start = tab.Indirect(at)
    _check_span(buf_len, start, 4)
    length = flatbuffers.encode.Get(nt.UOffsetTFlags.packer_type, tab.Bytes, start)
    _check_span(buf_len, start + 4, length)
    budget.spend(4 + length)
    # Flatbuffer strings are UTF-8; bytes that are not come out escaped (\\xff), so that every
    # name is printable text everywhere (console, JSON, reports) and is written back so.
    return bytes(tab.Bytes[start + 4 : start + 4 + length]).decode("utf-8", "backslashreplace")


def _decode_vector(
    field: Field, tab: flatbuffers.table.Table, off: int, buf_len: int, budget: DecodeBudget
) -> Any:
    start = tab.Vector(off)
    length = tab.VectorLen(off)
    if field.kind == "scalar_vector":
        dtype = np.dtype(_FLAG_DTYPES[field.scalar]).newbyteorder("<")
        _check_span(buf_len, start, length * dtype.itemsize)
        budget.spend(4 + length * dtype.itemsize)  # a view, but every user reads it again
        return np.frombuffer(tab.Bytes, dtype=dtype, count=length, offset=start)
    _check_span(buf_len, start, 4 * length)
    budget.spend(4 + 4 * length)
    items = []
    for i in range(length):
        at = start + 4 * i
        if field.kind == "string_vector":
            items.append(_decode_string(tab, at, buf_len, budget))
        else:
            items.append(decode_table(field.child, _sub_table(tab, at, buf_len), budget))
    return items


# --------------------------------------------------------------------------- encoding


class Prebuilt(int):
    """The offset of an object already in the builder, given in place of a field's value."""


@functools.cache
def _encoding_layout(
    name: str,
) -> tuple[tuple[Field, ...], tuple[tuple[str, int, Any, Any], ...], int]:
    """Table `name` as `encode_table` walks it: the fields written before the table (strings,
    vectors, tables), then every field in schema order as (key, slot, default, scalar flags or
    None for an offset), and the vtable size. Built once per table: the flags and defaults are
    not looked up again for each of the thousands of tensors a model holds."""
    fields, num_slots = table_layout(name)
    children = tuple(f for f in fields if f.kind != "scalar")
    slots = tuple(
        (f.name, f.slot, f.default, getattr(nt, f"{f.scalar}Flags") if f.kind == "scalar" else None)
        for f in fields
    )
    return children, slots, num_slots


def encode_table(builder: flatbuffers.Builder, name: str, values: dict[str, Any]) -> int:
    """Build table `name` from a dict as produced by `decode_table`; returns its offset."""
    children, slots, num_slots = _encoding_layout(name)
    offsets: dict[str, int] = {}
    for field in children:
        value = values.get(field.name)
        if value is None:
            continue
        if isinstance(value, Prebuilt):
            offsets[field.name] = int(value)
        else:
            offsets[field.name] = _encode_child(builder, field, value, values)
    builder.StartObject(num_slots)
    for key, slot, default, flags in slots:
        if flags is None:
            if key in offsets:
                builder.PrependUOffsetTRelativeSlot(slot, offsets[key], 0)
            continue
        value = values.get(key, default)
        # A value equal to its default is left out of the table (the builder's own rule,
        # checked here to spare the call for the many fields at their default).
        if value is None or value == default:
            continue
        builder.PrependSlot(flags, slot, value, default)
    return builder.EndObject()


def _encode_child(builder: flatbuffers.Builder, field: Field, value: Any, values: dict) -> int:
    if field.kind == "string":
        return builder.CreateString(value)
    if field.kind == "table":
        return encode_table(builder, field.child, value)
    if field.kind == "union":
        code = values.get(field.name + "_type", 0)
        return encode_table(builder, union_members(field.child)[code], value)
    if field.kind == "scalar_vector":
        dtype = scalar_dtype(field.scalar)
        return create_numpy_vector(builder, np.asarray(value, dtype=dtype))
    if field.kind == "string_vector":
        children = [builder.CreateString(item) for item in value]
    else:
        children = [encode_table(builder, field.child, item) for item in value]
    builder.StartVector(4, len(children), 4)
    for child in reversed(children):
        builder.PrependUOffsetTRelative(child)
    return builder.EndVector()


class SharingBuilder(flatbuffers.Builder):
    """A builder that writes each distinct scalar vector once and points every table holding
    the same values at it (FlatBuffers lets any number of tables refer to one vector).

    Quantized models repeat small vectors many times: every per-axis weight and bias carries
    a zero-point vector of C int64 zeros, and layers of equal width share their length, so
    they are written once (on face_detection_short_range, 53,604 bytes of quantization
    parameters became 20,568: `tests/model/test_shared_vectors.py`).
    """

    def __init__(self, initial_size: int = 1024) -> None:
        super().__init__(initial_size)
        self.shared_vectors: dict[tuple[str, int, bytes], int] = {}


# Vectors below this size are shared by content; larger ones (weights) are shared by the model's
# own buffer list already, and hashing them would cost time for nothing.
SHARED_VECTOR_LIMIT = 1 << 16


def create_numpy_vector(builder: flatbuffers.Builder, array: np.ndarray, alignment: int = 0) -> int:
    """Like Builder.CreateNumpyVector, with an optional stronger alignment for weight data; a
    `SharingBuilder` reuses an equal vector written before."""
    flat = np.ascontiguousarray(array).reshape(-1)
    little = flat.astype(flat.dtype.newbyteorder("<"), copy=False)
    nbytes = little.nbytes
    shared = getattr(builder, "shared_vectors", None)
    key = None
    if shared is not None and nbytes <= SHARED_VECTOR_LIMIT:
        key = (little.dtype.str, alignment, little.tobytes())
        if key in shared:
            return shared[key]
    builder.StartVector(flat.itemsize, flat.size, max(alignment, flat.dtype.alignment))
    builder.head = builder.head - nbytes
    builder.Bytes[builder.head : builder.head + nbytes] = memoryview(little.view(np.uint8))
    builder.vectorNumElems = flat.size
    offset = builder.EndVector()
    if key is not None:
        shared[key] = offset
    return offset

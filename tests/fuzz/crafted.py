"""Inputs crafted to make small files cost a lot, or to crash the tools that read them (issue 21):
shared flatbuffer offsets, .npz archives with members never used, subgraphs that call each
other, and graphs of 100,000 entries. Used by the regression tests and the fuzz campaign."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import flatbuffers
import numpy as np

from qtool.model import Model, load_model
from qtool.model.graph import Operator, Subgraph
from qtool.model.reflect import Prebuilt, encode_table


def _vector(builder: flatbuffers.Builder, offsets: list[int]) -> int:
    builder.StartVector(4, len(offsets), 4)
    for offset in reversed(offsets):
        builder.PrependUOffsetTRelative(offset)
    return builder.EndVector()


def shared_offsets_model(count: int = 20_000, name_bytes: int = 1 << 20) -> bytes:
    """A flatbuffer whose `count` tensor entries all point at one Tensor table with a name of
    `name_bytes`: 1.1 MB that decode naively to `count` x `name_bytes` (20 GB)."""
    builder = flatbuffers.Builder(name_bytes + 1024)
    name = builder.CreateString("n" * name_bytes)
    tensor = encode_table(builder, "Tensor", {"shape": [1], "buffer": 0, "name": Prebuilt(name)})
    tensors = _vector(builder, [tensor] * count)
    subgraph = encode_table(
        builder,
        "SubGraph",
        {"tensors": Prebuilt(tensors), "inputs": [], "outputs": [], "operators": []},
    )
    model = encode_table(
        builder,
        "Model",
        {
            "version": 3,
            "subgraphs": Prebuilt(_vector(builder, [subgraph])),
            "buffers": Prebuilt(_vector(builder, [encode_table(builder, "Buffer", {})])),
            "operator_codes": Prebuilt(_vector(builder, [])),
        },
    )
    builder.Finish(model, file_identifier=b"TFL3")
    return bytes(builder.Output())


def npz_with_unused_members(
    path: Path, arrays: dict[str, np.ndarray], unused: int = 3, member_bytes: int = 1 << 20
) -> Path:
    """`arrays` as members, and `unused` more members of `member_bytes` zeros each (which
    compress to almost nothing), plus one member whose data is corrupt: none of those is ever
    used, so none should be decompressed."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, array in arrays.items():
            buffer = io.BytesIO()
            np.save(buffer, array)
            archive.writestr(f"{name}.npy", buffer.getvalue())
        header = io.BytesIO()
        count = member_bytes // 4
        np.lib.format.write_array_header_1_0(
            header, {"descr": "<f4", "fortran_order": False, "shape": (count,)}
        )
        for m in range(unused):
            with archive.open(f"unused_{m}.npy", "w", force_zip64=True) as member:
                member.write(header.getvalue())
                member.write(bytes(count * 4))
        archive.writestr("corrupt.npy", header.getvalue() + bytes(64))
    data = bytearray(path.read_bytes())
    position = data.rfind(b"corrupt.npy", 0, data.find(b"PK\x01\x02"))  # its local header
    data[position + 20 : position + 40] = b"\xff" * 20  # its compressed data, now invalid
    path.write_bytes(bytes(data))
    return path


CALLS = {
    "CALL_ONCE": ("CallOnceOptions", "init_subgraph_index"),
    "CALL": ("CallOptions", "subgraph"),
    "IF": ("IfOptions", "then_subgraph_index"),
    "WHILE": ("WhileOptions", "body_subgraph_index"),
}


def recursive_model(source: Path, kind: str = "CALL_ONCE") -> Model:
    """`source` with two subgraphs that call each other through `kind` ops, and subgraph 0
    calling the first of them before its own operators."""
    model = load_model(source)
    code = model.opcode_for(kind)
    table, field = CALLS[kind]

    def call(target: int) -> Operator:
        return Operator(code, [], [], table, {field: target})

    model.subgraphs[0].operators.insert(0, call(1))
    model.subgraphs.append(Subgraph([], [], [], [call(2)], name="ping"))
    model.subgraphs.append(Subgraph([], [], [], [call(1)], name="pong"))
    return model

"""load -> save -> load is lossless, for every fixture and every builtin options table."""

from __future__ import annotations

import flatbuffers
import numpy as np
import pytest

from qtool.model import load_model, model_to_bytes, parse_model
from qtool.model.build import GraphBuilder
from qtool.model.reflect import decode_table, scalar_dtype, table_layout, union_members
from tests.conftest import MODELS, float_model_names, tf_int8_model_paths
from tests.litert import make_interpreter

ALL_FIXTURES = [MODELS / f"{name}.tflite" for name in float_model_names()] + tf_int8_model_paths()


def plain(value):
    """A comparable structure: arrays become lists, dataclasses dicts (without the fields that
    take no part in comparisons: where a model was read from)."""
    if isinstance(value, np.ndarray):
        return ("array", str(value.dtype), value.tolist())
    if hasattr(value, "__dataclass_fields__"):
        return {
            k: plain(getattr(value, k)) for k, f in value.__dataclass_fields__.items() if f.compare
        }
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def random_table(name: str, rng: np.random.Generator, depth: int = 0) -> dict:
    """Every field of table `name` set to a non-default value."""
    fields, _ = table_layout(name)
    values = {}
    for field in fields:
        if field.kind == "scalar":
            if field.scalar == "Bool":
                values[field.name] = not field.default
            elif field.scalar.startswith("Float"):
                values[field.name] = float(np.float32(rng.uniform(-4, 4)))
            elif field.name.endswith("_type") and any(
                f.kind == "union" and f.name + "_type" == field.name for f in fields
            ):
                continue  # set together with its union below
            else:
                values[field.name] = int(rng.integers(1, 100))
        elif field.kind == "scalar_vector":
            dtype = scalar_dtype(field.scalar)
            values[field.name] = rng.integers(0, 100, size=3).astype(dtype)
        elif field.kind == "string":
            values[field.name] = f"{field.name}-{rng.integers(1000)}"
        elif field.kind == "string_vector":
            values[field.name] = ["a", "bc"]
        elif depth < 2 and field.kind == "table":
            values[field.name] = random_table(field.child, rng, depth + 1)
        elif depth < 2 and field.kind == "table_vector":
            values[field.name] = [random_table(field.child, rng, depth + 1) for _ in range(2)]
        elif depth < 2 and field.kind == "union":
            code, member = next(iter(union_members(field.child).items()))
            values[field.name + "_type"] = code
            values[field.name] = random_table(member, rng, depth + 1)
    return values


def options_model(options_type: str, options: dict, slot: int):
    builder = GraphBuilder()
    x = builder.input("x", [1, 4])
    y = builder.op("ADD", [x, x], output_shape=[1, 4])
    op = builder.subgraph.operators[-1]
    if slot == 1:
        op.options_type, op.options = options_type, options
    else:
        op.options_2_type, op.options_2 = options_type, options
    return builder.finish([y])


@pytest.mark.parametrize("union,slot", [("BuiltinOptions", 1), ("BuiltinOptions2", 2)])
def test_every_options_table_round_trips(union: str, slot: int) -> None:
    rng = np.random.default_rng(0)
    members = union_members(union)
    assert len(members) > 20
    for member in members.values():
        options = random_table(member, rng)
        model = options_model(member, options, slot)
        # Every table on one ADD: a codec test, not a valid graph.
        again = parse_model(model_to_bytes(model), validate=False)
        op = again.subgraphs[0].operators[0]
        got_type, got = (
            (op.options_type, op.options) if slot == 1 else (op.options_2_type, op.options_2)
        )
        assert got_type == member
        expected = {f.name: f.default for f in table_layout(member)[0] if f.kind == "scalar"}
        expected.update({f.name: None for f in table_layout(member)[0] if f.kind != "scalar"})
        expected.update(options)
        assert plain(got) == plain(expected), member


@pytest.mark.parametrize("path", ALL_FIXTURES, ids=lambda p: p.name)
def test_fixture_round_trip_is_lossless(path) -> None:
    model = load_model(path)
    data = model_to_bytes(model)
    again = parse_model(data)
    assert plain(again) == plain(model)
    assert model_to_bytes(again) == data  # writing is deterministic


@pytest.mark.parametrize("path", ALL_FIXTURES, ids=lambda p: p.name)
def test_litert_outputs_bit_identical_after_rewrite(path) -> None:
    original = path.read_bytes()
    rewritten = model_to_bytes(load_model(path))
    outputs = []
    for blob in (original, rewritten):
        interpreter = make_interpreter(blob)
        rng = np.random.default_rng(1)
        for detail in interpreter.get_input_details():
            if np.issubdtype(detail["dtype"], np.floating):
                value = rng.standard_normal(detail["shape"]).astype(detail["dtype"])
            else:
                value = rng.integers(-100, 100, detail["shape"]).astype(detail["dtype"])
            interpreter.set_tensor(detail["index"], value)
        interpreter.invoke()
        outputs.append(
            [interpreter.get_tensor(d["index"]).copy() for d in interpreter.get_output_details()]
        )
    for a, b in zip(*outputs, strict=True):
        assert a.tobytes() == b.tobytes()


def test_external_buffers_round_trip_and_run(tmp_path) -> None:
    """Models over 2 GiB keep buffers after the flatbuffer; exercised with a tiny threshold."""
    path = next(iter(ALL_FIXTURES))
    model = load_model(path)
    blob = model_to_bytes(model, inline_limit=0)
    assert len(blob) > 0
    root = flatbuffers.encode.Get(flatbuffers.packer.uoffset, blob, 0)
    stored = decode_table("Model", flatbuffers.table.Table(blob, root))["buffers"]
    assert any(b["offset"] > 1 and b["data"] is None for b in stored)
    again = parse_model(blob)
    assert plain(again) == plain(model)
    make_interpreter(blob).invoke()


def test_mmap_buffers_are_views(tmp_path) -> None:
    path = next(iter(ALL_FIXTURES))
    model = load_model(path)
    constant = next(b for b in model.buffers if b.nbytes)
    assert constant.data.base is not None  # a view into the mapped file, not a copy

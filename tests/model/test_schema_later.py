"""The schema's parts newer than the `tflite` package (qtool/model/tflite_schema_later.json):
they only add to the generated table, round-trip, and the tensors they name survive edits."""

from __future__ import annotations

import json

import numpy as np

from qtool.model import model_to_bytes, parse_model
from qtool.model.build import GraphBuilder
from qtool.model.edit import remove_unused
from qtool.model.lowbit import blockwise_of, blockwise_params, blockwise_scales
from qtool.model.reflect import later_schema
from qtool.model.schema_gen import SCHEMA_FILE, conflicts


def test_the_later_schema_only_adds_to_the_generated_table() -> None:
    generated = json.loads(SCHEMA_FILE.read_text())
    later = later_schema()
    assert not set(later["tables"]) & set(generated["tables"])
    for name, values in later["enums"].items():
        assert not set(values) & set(generated["enums"].get(name, {}))
        assert not set(values.values()) & set(generated["enums"].get(name, {}).values())
    merged = {**generated, "tables": {**generated["tables"], **later["tables"]}}
    assert conflicts(generated, merged) == []


def blockwise_model():
    b = GraphBuilder()
    x = b.input("x", [1, 64])
    unused = b.constant("unused", np.ones(3, np.float32))  # dropped by remove_unused
    scales = b.constant("w_scales", np.full((8, 2), 0.25, np.float16))
    w = b.tensor(
        "w",
        [8, 64],
        17,
        blockwise_params(scales, 32),
        buffer=b.model.add_buffer(np.zeros(256, np.uint8)),
    )
    y = b.op("FULLY_CONNECTED", [x, w, -1], output_shape=[1, 8])
    return b.finish([y]), unused


def test_blockwise_parameters_round_trip_and_their_scales_survive_remove_unused() -> None:
    model, _ = blockwise_model()
    read = parse_model(model_to_bytes(model))
    remove_unused(read)
    graph = read.subgraphs[0]
    (weights,) = [t for t in graph.tensors if t.name == "w"]
    found = blockwise_of(weights)
    assert (found.zero_points, found.block_size) == (-1, 32)
    assert graph.tensors[found.scales].name == "w_scales"
    assert [t.name for t in graph.tensors if t.name == "unused"] == []
    np.testing.assert_array_equal(blockwise_scales(read, graph.tensors, weights), 0.25)
    assert parse_model(model_to_bytes(read)).subgraphs[0].tensors[found.scales].name == "w_scales"

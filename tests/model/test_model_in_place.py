"""A large model reaches LiteRT as a file it maps (qtool.model.temporary), computing what its
bytes compute, and the writer's builder has room for the tables up front."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import numpy as np
from ai_edge_litert.interpreter import Interpreter

from qtool.calibrate import Dataset
from qtool.model import Model, model_to_bytes, parse_model
from qtool.model import temporary as temporary_module
from qtool.model.build import GraphBuilder
from qtool.model.io import _tables_room
from qtool.model.temporary import TemporaryModelFile, interpreter_source, model_for_litert
from qtool.quantize import QuantizeOptions, quantize_loaded

WIDTH = 64


def fc_stack(layers: int = 3, seed: int = 0) -> Model:
    """FULLY_CONNECTED layers of WIDTH x WIDTH random weights, ReLU between them."""
    rng = np.random.default_rng(seed)
    builder = GraphBuilder()
    x = builder.input("x", [1, WIDTH])
    for layer in range(layers):
        weights = rng.normal(0, 1 / np.sqrt(WIDTH), (WIDTH, WIDTH)).astype(np.float32)
        bias = rng.normal(0, 0.1, WIDTH).astype(np.float32)
        x = builder.fully_connected(x, weights, bias, f"fc{layer}", activation=1)
    return builder.finish([x])


def _outputs(source: dict, samples: np.ndarray) -> np.ndarray:
    interpreter = Interpreter(**source, num_threads=1)
    interpreter.allocate_tensors()
    index = interpreter.get_input_details()[0]["index"]
    output = interpreter.get_output_details()[0]["index"]
    found = []
    for sample in samples:
        interpreter.set_tensor(index, sample[None])
        interpreter.invoke()
        found.append(interpreter.get_tensor(output).copy())
    return np.concatenate(found)


def test_litert_computes_from_the_file_what_it_computes_from_the_bytes() -> None:
    model = fc_stack()
    samples = np.random.default_rng(1).normal(size=(4, WIDTH)).astype(np.float32)
    in_file = TemporaryModelFile(model)
    try:
        # The buffers follow the flatbuffer, as qtool's writer lays out models beyond 2 GiB.
        assert parse_model(Path(in_file.path).read_bytes()).buffers[1].nbytes == WIDTH * WIDTH * 4
        from_file = _outputs(interpreter_source(in_file), samples)
        from_bytes = _outputs(interpreter_source(model_to_bytes(model)), samples)
        np.testing.assert_array_equal(from_file, from_bytes)
    finally:
        in_file.close()
    assert not os.path.exists(in_file.path)


def test_an_interpreter_runs_on_after_its_mapped_pages_are_dropped() -> None:
    model = fc_stack()
    samples = np.random.default_rng(2).normal(size=(3, WIDTH)).astype(np.float32)
    in_file = TemporaryModelFile(model)
    interpreter = Interpreter(model_path=in_file.path, num_threads=1)
    interpreter.allocate_tensors()
    index = interpreter.get_input_details()[0]["index"]
    output = interpreter.get_output_details()[0]["index"]
    in_file.release_pages()  # read again from the file where an operator still needs them
    found = []
    for sample in samples:
        interpreter.set_tensor(index, sample[None])
        interpreter.invoke()
        found.append(interpreter.get_tensor(output).copy())
    expected = _outputs(interpreter_source(model_to_bytes(model)), samples)
    np.testing.assert_array_equal(np.concatenate(found), expected)
    in_file.close()


def test_only_a_model_of_large_weights_goes_as_a_file(monkeypatch) -> None:
    model = fc_stack()
    assert isinstance(model_for_litert(model), bytes)
    monkeypatch.setattr(temporary_module, "IN_FILE_BYTES", model.weights_nbytes() - 1)
    in_file = model_for_litert(model)
    assert isinstance(in_file, TemporaryModelFile)
    path = in_file.path
    del in_file  # collected: the file goes with it
    assert not os.path.exists(path)


def test_the_builder_has_room_for_per_axis_quantization_vectors() -> None:
    # The int8 model of a 100-layer 512-wide FULLY_CONNECTED stack carries 4 KB of distinct
    # scales a layer, where 512 bytes a tensor or operator were counted: the builder then
    # doubled its buffer and copied it (a 26 MB model held 77 MB). Here 64 tensors carry 4 KB
    # of scales each.
    rng = np.random.default_rng(3)
    samples = rng.normal(size=(8, WIDTH)).astype(np.float32)
    options = QuantizeOptions(calibration="minmax", bias_correction=False)
    model = quantize_loaded(fc_stack(), Dataset.from_arrays([samples]), options).model
    subgraph = model.subgraphs[0]
    template = next(t for t in subgraph.tensors if t.quantization is not None)
    for k in range(64):
        tensor = copy.deepcopy(template)
        tensor.name = f"scaled{k}"
        tensor.quantization.scale = rng.uniform(0.01, 1, 1024).astype(np.float32)
        tensor.quantization.zero_point = np.zeros(1024, np.int64)
        subgraph.tensors.append(tensor)
    written = model_to_bytes(model)
    assert len(written) - model.weights_nbytes() <= _tables_room(model)


def test_a_model_file_is_removed_when_writing_it_fails(monkeypatch) -> None:
    made: list[str] = []
    mkstemp = temporary_module.tempfile.mkstemp

    def record(*args, **kwargs):
        handle, path = mkstemp(*args, **kwargs)
        made.append(path)
        return handle, path

    def full_disk(model, inline_limit):
        yield b"TFL3"
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(temporary_module.tempfile, "mkstemp", record)
    monkeypatch.setattr(temporary_module, "serialize_model", full_disk)
    monkeypatch.setattr(temporary_module, "IN_FILE_BYTES", 0)
    model = fc_stack()
    # No file: LiteRT gets the bytes instead.
    assert model_for_litert(model) == model_to_bytes(model)
    assert made and not any(os.path.exists(path) for path in made)

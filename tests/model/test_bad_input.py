"""Bad model files: one-line error, exit code 2, no traceback, no output; the reader never crashes."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qtool.errors import ModelError, UsageError
from qtool.model import load_model, model_to_bytes, parse_model
from tests.conftest import MODELS, float_model_names

SMALL = MODELS / "mlp.tflite"


def run_qtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "qtool", *args], capture_output=True, text=True, timeout=60
    )


def assert_one_line_error(result: subprocess.CompletedProcess, fragment: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("qtool: error: ")
    assert fragment in lines[0]
    assert "Traceback" not in result.stderr


def mutated(edit) -> bytes:
    model = load_model(SMALL)
    edit(model)
    return model_to_bytes(model)


def _bad_tensor_buffer(model):
    model.subgraphs[0].tensors[0].buffer = len(model.buffers) + 5


def _bad_opcode(model):
    model.subgraphs[0].operators[0].opcode_index = 99


def _bad_op_input(model):
    model.subgraphs[0].operators[0].inputs[0] = 1000


def _short_buffer(model):
    tensor = next(t for t in model.subgraphs[0].tensors if model.is_constant(t))
    model.buffers[tensor.buffer].data = model.buffers[tensor.buffer].data[:-4]


def _bad_subgraph_output(model):
    model.subgraphs[0].outputs = [12345]


CASES = {
    "missing": (lambda d: d / "nope.tflite", "no such file"),
    "directory": (lambda d: d, "is a directory"),
    "empty": (lambda d: _write(d / "e.tflite", b""), "empty file"),
    "truncated": (lambda d: _write(d / "t.tflite", SMALL.read_bytes()[:200]), "corrupt"),
    "random": (
        lambda d: _write(d / "r.tflite", np.random.default_rng(0).bytes(5000)),
        "not a TFLite model",
    ),
    "foreign flatbuffer": (
        lambda d: _write(d / "f.tflite", b"\x0c\x00\x00\x00ABCD" + bytes(64)),
        "not a TFLite model",
    ),
    "tensor buffer index": (
        lambda d: _write(d / "b.tflite", mutated(_bad_tensor_buffer)),
        "refers to buffer",
    ),
    "opcode index": (lambda d: _write(d / "o.tflite", mutated(_bad_opcode)), "operator code"),
    "op input index": (
        lambda d: _write(d / "i.tflite", mutated(_bad_op_input)),
        "refers to tensor 1000",
    ),
    "short buffer": (lambda d: _write(d / "s.tflite", mutated(_short_buffer)), "holds"),
    "subgraph output": (
        lambda d: _write(d / "g.tflite", mutated(_bad_subgraph_output)),
        "refers to tensor 12345",
    ),
}


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_model_is_one_line_error(case: str, tmp_path: Path) -> None:
    make, fragment = CASES[case]
    path = make(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    result = run_qtool("inspect", str(path))
    assert_one_line_error(result, fragment)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


@pytest.mark.parametrize("case", sorted(CASES))
def test_library_raises_model_error(case: str, tmp_path: Path) -> None:
    make, _ = CASES[case]
    with pytest.raises(ModelError):
        load_model(make(tmp_path))


def test_save_refuses_to_overwrite_input(tmp_path: Path) -> None:
    path = _write(tmp_path / "m.tflite", SMALL.read_bytes())
    model = load_model(path)
    with pytest.raises(UsageError, match="overwrite the input"):
        from qtool.model import save_model

        save_model(model, path)
    assert path.read_bytes() == SMALL.read_bytes()


def _fixture_bytes() -> list[bytes]:
    return [(MODELS / f"{name}.tflite").read_bytes() for name in float_model_names()]


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fuzz_mutated_fixtures_only_raise_model_error(data) -> None:
    """Flipped bytes, truncations and splices of real models never escape as other errors."""
    blobs = _fixture_bytes()
    blob = bytearray(data.draw(st.sampled_from(blobs)))
    for _ in range(data.draw(st.integers(1, 8))):
        position = data.draw(st.integers(0, len(blob) - 1))
        blob[position] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        blob = blob[: data.draw(st.integers(0, len(blob)))]
    with contextlib.suppress(ModelError):
        parse_model(bytes(blob))


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=0, max_size=512))
def test_fuzz_random_bytes_with_identifier(blob: bytes) -> None:
    data = blob[:4] + b"TFL3" + blob[4:]
    with contextlib.suppress(ModelError):
        parse_model(data)

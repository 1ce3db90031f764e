"""Models with several signatures: every entry subgraph is calibrated and quantized."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from qtool.check.audit import audit_model
from qtool.errors import UsageError
from qtool.jobs import QuantizeJob, quantize_file
from qtool.model import Model, Subgraph, TensorType, model_to_bytes, parse_model
from qtool.model.build import GraphBuilder
from qtool.numerics import sqnr_db
from tests.litert import make_interpreter


def add_dense(
    builder: GraphBuilder,
    x: int,
    rng: np.random.Generator,
    n_in: int,
    n_out: int,
    name: str,
    activation: int,
) -> int:
    weights = rng.standard_normal((n_out, n_in)) / 3
    return builder.fully_connected(x, weights, rng.standard_normal(n_out) / 10, name, activation)


def two_signature_model() -> Model:
    """encode: 8 -> 4 (RELU); decode: 4 -> 8 -> LOGISTIC. Two subgraphs, two signatures."""
    rng = np.random.default_rng(0)
    encoder = GraphBuilder()
    encoder.subgraph.name = "encode"
    x = encoder.input("encode_x", [1, 8])
    code = add_dense(encoder, x, rng, 8, 4, "enc", activation=1)
    model = encoder.finish([code])
    model.subgraphs.append(Subgraph(tensors=[], inputs=[], outputs=[], operators=[], name="decode"))
    decoder = GraphBuilder(model, 1)
    z = decoder.input("decode_z", [1, 4])
    logits = add_dense(decoder, z, rng, 4, 8, "dec", activation=0)
    y = decoder.op("LOGISTIC", [logits], output_shape=[1, 8], name="probs")
    decoder.finish([y])
    model.signature_defs = [
        {
            "inputs": [{"name": "x", "tensor_index": x}],
            "outputs": [{"name": "code", "tensor_index": code}],
            "signature_key": "encode",
            "subgraph_index": 0,
        },
        {
            "inputs": [{"name": "z", "tensor_index": z}],
            "outputs": [{"name": "probs", "tensor_index": y}],
            "signature_key": "decode",
            "subgraph_index": 1,
        },
    ]
    return parse_model(model_to_bytes(model))


@pytest.fixture
def model_and_data(tmp_path: Path) -> tuple[Path, Path, Path]:
    model_path = tmp_path / "two.tflite"
    model_path.write_bytes(model_to_bytes(two_signature_model()))
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "encode.npz", x=rng.standard_normal((32, 8)).astype(np.float32))
    np.savez(tmp_path / "decode.npz", z=rng.uniform(0, 2, (32, 4)).astype(np.float32))
    return model_path, tmp_path / "encode.npz", tmp_path / "decode.npz"


def run_signature(blob: bytes, key: str, **inputs: np.ndarray) -> np.ndarray:
    runner = make_interpreter(blob, reference=False).get_signature_runner(key)
    return next(iter(runner(**inputs).values()))


def test_every_signature_is_quantized(model_and_data, tmp_path: Path) -> None:
    model_path, encode, decode = model_and_data
    outcome = quantize_file(
        QuantizeJob(
            str(model_path),
            str(tmp_path / "q.tflite"),
            data=(f"encode={encode}", f"decode={decode}"),
        )
    )
    model = outcome.result.model
    assert audit_model(model) == []
    for subgraph in model.subgraphs:
        compute = [
            op for op in subgraph.operators if model.op_type(op) not in ("QUANTIZE", "DEQUANTIZE")
        ]
        assert compute
        for op in compute:
            assert all(
                subgraph.tensors[t].dtype in (TensorType.INT8, TensorType.INT32)
                for t in op.inputs + op.outputs
                if t >= 0
            ), model.op_type(op)
    report = json.loads(Path(outcome.report_path).read_text())
    assert [(c["subgraph"], c["signature"]) for c in report["calibration"]] == [
        (0, "encode"),
        (1, "decode"),
    ]
    float_blob = model_path.read_bytes()
    quantized_blob = model_to_bytes(model)
    with np.load(encode) as enc, np.load(decode) as dec:
        for key, name, samples in (("encode", "x", enc["x"]), ("decode", "z", dec["z"])):
            reference = np.concatenate(
                [run_signature(float_blob, key, **{name: s[None]}) for s in samples]
            )
            got = np.concatenate(
                [run_signature(quantized_blob, key, **{name: s[None]}) for s in samples]
            )
            assert sqnr_db(reference, got) > 30, key


def test_each_signature_needs_its_data(model_and_data, tmp_path: Path) -> None:
    model_path, encode, _ = model_and_data
    with pytest.raises(UsageError, match="give each source as KEY=PATH"):
        quantize_file(QuantizeJob(str(model_path), str(tmp_path / "a.tflite"), data=(str(encode),)))
    with pytest.raises(UsageError, match="no `data` for signature"):
        quantize_file(
            QuantizeJob(str(model_path), str(tmp_path / "b.tflite"), data=(f"encode={encode}",))
        )
    assert not (tmp_path / "a.tflite").exists() and not (tmp_path / "b.tflite").exists()


def test_synthetic_data_covers_every_signature(model_and_data, tmp_path: Path) -> None:
    model_path, _, _ = model_and_data
    outcome = quantize_file(
        QuantizeJob(str(model_path), str(tmp_path / "s.tflite"), synthetic=True, samples=8)
    )
    assert sorted(outcome.result.calibrations) == [0, 1]
    assert make_interpreter(model_to_bytes(outcome.result.model)).get_signature_list().keys() == {
        "encode",
        "decode",
    }

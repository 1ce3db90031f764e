"""Candidate models run in a LiteRT child process: outputs as LiteRT gives them, and a model
LiteRT aborts on costs the child, never the caller."""

from __future__ import annotations

import numpy as np
import pytest

from qtool.calibrate import Dataset
from qtool.model import model_to_bytes, parse_model
from qtool.model.build import GraphBuilder
from qtool.quantize import QuantizeOptions, litert_worker, quantize_loaded
from qtool.quantize.litert_worker import litert_outputs
from tests.litert import run_litert_samples


def _greater_than_zero() -> tuple[bytes, np.ndarray]:
    """An int8 model comparing x with a constant 0, and samples for it."""
    builder = GraphBuilder()
    x = builder.input("x", [1, 8])
    zero = builder.constant("zero", np.zeros([1, 8], np.float32))
    mask = builder.op("GREATER", [x, zero], output_shape=[1, 8], output_dtype=np.bool_)
    model = builder.finish([builder.op("SELECT", [mask, x, zero], output_shape=[1, 8])])
    samples = np.random.default_rng(0).uniform(-1, 1, (16, 8)).astype(np.float32)
    result = quantize_loaded(model, Dataset.from_arrays([samples]), QuantizeOptions())
    return model_to_bytes(result.model), samples


def test_outputs_are_litert_outputs() -> None:
    blob, samples = _greater_than_zero()
    (got,) = litert_outputs(blob, [samples[:, None, :]], leading_one=False)
    (expected,) = run_litert_samples(blob, [samples], reference=False)
    np.testing.assert_array_equal(got.reshape(expected.shape), expected)


def test_a_model_litert_aborts_on_gives_none_and_the_next_one_runs() -> None:
    blob, samples = _greater_than_zero()
    broken = parse_model(blob)
    subgraph = broken.subgraphs[0]
    (greater,) = [op for op in subgraph.operators if broken.op_type(op) == "GREATER"]
    # LiteRT's int8 comparison takes the input scale as a multiplier below 1: it aborts.
    subgraph.tensors[greater.inputs[1]].quantization.scale = np.array([1.0], np.float32)
    assert litert_outputs(model_to_bytes(broken), [samples[:, None, :]], False) is None
    assert litert_outputs(blob, [samples[:, None, :]], False) is not None


def test_an_interrupted_call_starts_a_fresh_child(monkeypatch) -> None:
    blob, samples = _greater_than_zero()
    assert litert_outputs(blob, [samples[:, None, :]], False) is not None
    receive = litert_worker._Worker.receive

    def interrupt(self):  # a Ctrl-C after the requests went out, before the replies
        monkeypatch.setattr(litert_worker._Worker, "receive", receive)
        raise KeyboardInterrupt

    monkeypatch.setattr(litert_worker._Worker, "receive", interrupt)
    with pytest.raises(KeyboardInterrupt):
        litert_outputs(blob, [samples[:, None, :]], False)
    other = -samples  # the replies to the interrupted requests must not answer this one
    (got,) = litert_outputs(blob, [other[:, None, :]], False)
    (expected,) = run_litert_samples(blob, [other], reference=False)
    np.testing.assert_array_equal(got.reshape(expected.shape), expected)


def test_inputs_travel_once_per_set_of_samples(monkeypatch) -> None:
    blob, samples = _greater_than_zero()
    sent: list[bool] = []
    write = litert_worker._write

    def counted(stream, request) -> None:
        sent.append(request[1] is not None)
        write(stream, request)

    monkeypatch.setattr(litert_worker, "_write", counted)
    first, second = [samples[:, None, :]], [-samples[:, None, :]]
    runs = [litert_outputs(blob, inputs, False) for inputs in (first, first, second, first)]
    children = len(litert_worker._shares(len(samples)))
    assert sent == [flag for flag in (True, False, True, True) for _ in range(children)]
    for inputs, (got,) in zip((first, first, second, first), runs, strict=True):
        (expected,) = run_litert_samples(blob, [inputs[0][:, 0, :]], reference=False)
        np.testing.assert_array_equal(got.reshape(expected.shape), expected)


@pytest.mark.parametrize("samples", [1, 2, 5, 16])
def test_samples_are_shared_out_in_order_and_whole(samples: int) -> None:
    shares = litert_worker._shares(samples)
    assert 1 <= len(shares) <= litert_worker.MAX_CHILDREN
    assert [i for share in shares for i in range(samples)[share]] == list(range(samples))
    assert all(share.stop > share.start for share in shares)


def test_children_that_cannot_start_leave_models_to_the_simulation(monkeypatch) -> None:
    blob, samples = _greater_than_zero()
    litert_worker._stop()

    def refuse(self) -> None:
        raise OSError("no such interpreter")

    monkeypatch.setattr(litert_worker._Worker, "__init__", refuse)
    litert_worker.start_children()  # nothing started, nothing raised
    assert litert_outputs(blob, [samples[:, None, :]], False) is None

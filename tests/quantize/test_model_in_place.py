"""The calibration runner and LiteRT's children given a large model as a file (and the runner's
interpreters resized rather than rebuilt) compute what they compute from bytes: the same
statistics, the same written model."""

from __future__ import annotations

import numpy as np

from qtool.calibrate import Dataset
from qtool.calibrate.calibrator import activation_tensors
from qtool.calibrate.statistics import new_subgraph_statistics
from qtool.model import load_model, model_to_bytes
from qtool.model import temporary as temporary_module
from qtool.model.temporary import TemporaryModelFile
from qtool.quantize import QuantizeOptions, quantize_loaded
from qtool.quantize.litert_worker import litert_outputs
from qtool.quantize.quantizer import calibrate_loaded
from qtool.runtime.litert import XnnpackRunner
from tests.conftest import FIXTURES
from tests.model.test_model_in_place import WIDTH, fc_stack
from tests.quantize.test_real_models import images


def _statistics(model, samples: np.ndarray) -> tuple:
    tensors = activation_tensors(model)
    statistics = new_subgraph_statistics(model, 0, tensors, batched=True)
    runner = XnnpackRunner(model, tensors, ordered=statistics.ordered_tensors)
    runner.run([samples], [statistics])
    statistics.flush()
    return runner, (statistics.histograms.state(), statistics.means.state())


def test_the_runner_observes_the_same_from_a_file(monkeypatch) -> None:
    model = fc_stack(4)
    samples = np.random.default_rng(4).normal(size=(12, WIDTH)).astype(np.float32)
    by_bytes, expected = _statistics(model, samples)
    assert isinstance(by_bytes.blob, bytes)
    monkeypatch.setattr(temporary_module, "IN_FILE_BYTES", 0)
    by_file, found = _statistics(model, samples)
    assert isinstance(by_file.blob, TemporaryModelFile)
    assert found == expected


def test_a_resized_interpreter_observes_what_a_new_one_does() -> None:
    # Weights outweigh the activations of a FULLY_CONNECTED stack: the runner resizes its
    # idle interpreter to the next run's batch instead of building (and packing) another.
    model = fc_stack(3)
    rng = np.random.default_rng(5)
    first, second = (rng.normal(size=(n, WIDTH)).astype(np.float32) for n in (8, 3))
    tensors = activation_tensors(model)
    runner = XnnpackRunner(model, tensors)
    runner.run([first], [])
    (interpreter,) = runner._free[8]
    seen: dict[int, list[np.ndarray]] = {}
    runner.run([second], [lambda t, v: seen.setdefault(t, []).append(v.copy())])
    assert runner._free[3] == [interpreter] and not runner._free[8]
    fresh: dict[int, list[np.ndarray]] = {}
    XnnpackRunner(model, tensors).run(
        [second], [lambda t, v: fresh.setdefault(t, []).append(v.copy())]
    )
    assert seen.keys() == fresh.keys()
    for t, values in fresh.items():
        np.testing.assert_array_equal(np.concatenate(seen[t]), np.concatenate(values))


def test_children_compute_from_a_file_what_they_compute_from_bytes() -> None:
    model = fc_stack(2)
    samples = np.random.default_rng(6).normal(size=(6, 1, WIDTH)).astype(np.float32)
    in_file = TemporaryModelFile(model)
    try:
        (from_file,) = litert_outputs(in_file, [samples], leading_one=False)
    finally:
        in_file.close()
    (from_bytes,) = litert_outputs(model_to_bytes(model), [samples], leading_one=False)
    np.testing.assert_array_equal(from_file, from_bytes)


def test_a_real_model_quantizes_to_the_same_bytes_through_files(monkeypatch) -> None:
    # Every model LiteRT gets (the runner's, the children's float model and candidates) as a
    # file, against every one as bytes: the written model is the same, byte for byte.
    model = load_model(FIXTURES / "real" / "face_detection_short_range.tflite")
    data = Dataset.from_arrays([images("face_detection_short_range", 16, seed=7)])
    options = QuantizeOptions(calibration="minmax")
    expected = model_to_bytes(quantize_loaded(model, data, options).model)
    monkeypatch.setattr(temporary_module, "IN_FILE_BYTES", 0)
    assert model_to_bytes(quantize_loaded(model, data, options).model) == expected


def test_no_plan_keeps_a_float_copy_of_the_weights() -> None:
    # The dequantized integer weights are a float copy of every weight (the model's size):
    # kept across a search's plans for the bias correction, they took the CLI's peak on a
    # 300 MB model from 906 to 1,263 MiB. The planner's cache holds the integer weights and
    # the scales only, with a correction too.
    model = fc_stack(2)
    samples = np.random.default_rng(8).normal(size=(16, WIDTH)).astype(np.float32)
    data = Dataset.from_arrays([samples])
    for correct in (False, True):
        options = QuantizeOptions(calibration="minmax", bias_correction=correct)
        calibrated = calibrate_loaded(model, data, options)
        planner = calibrated.planners[0]
        plan = planner.plan(calibrated.collected[0].statistics, calibrated.start)
        assert all(layer.bias_shift is not None for layer in plan.weights.values()) == correct
        held = [*vars(planner._weights).values()]
        arrays = [a for kept in held for a in kept.values()]
        assert {a.dtype for a in arrays} <= {np.dtype(np.int8), np.dtype(np.float32)}
        assert sum(a.nbytes for a in arrays if a.dtype == np.float32) == 2 * WIDTH * 4

"""One calibration pass with a selection fold and an estimate fold: which samples are held out,
and what for."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from qtool.calibrate import Dataset, load_dataset, model_inputs
from qtool.calibrate.collect import (
    CROSS_FOLD,
    ESTIMATE_FOLD,
    FOLD_WINDOW,
    HELD_OUT,
    MIN_SAMPLES_FOR_CROSS,
    MIN_SAMPLES_FOR_HOLDOUT,
    SELECTION_FOLD,
    collect,
    from_statistics,
)
from qtool.model import Model, load_model, model_to_bytes, parse_model
from qtool.model.build import GraphBuilder
from qtool.model.types import Padding
from qtool.numerics import sqnr_db
from qtool.quantize.litert_worker import submit_model
from qtool.runtime import Engine
from tests.quantize.common import DATA, fixture_path


def identity_model() -> Model:
    """x [1, 4] -> FULLY_CONNECTED with identity weights: every sample carries its index."""
    builder = GraphBuilder()
    x = builder.input("x", [1, 4])
    y = builder.fully_connected(x, np.eye(4), np.zeros(4, np.float32), "fc")
    return parse_model(model_to_bytes(builder.finish([y])))


def numbered(count: int, start: int = 0) -> np.ndarray:
    return np.repeat(np.arange(start, start + count, dtype=np.float32)[:, None], 4, axis=1)


def dataset(samples: np.ndarray, size_known: bool = True) -> Dataset:
    data = Dataset.from_arrays([samples])
    if not size_known:  # a generator: the size is only known once it has been read
        data.size_hint = None
    return data


def indices(batches) -> list[int]:
    return [int(v) for batch in batches for v in batch[0][:, 0]]


def assert_spread(fold: list[int], count: int) -> None:
    """A quarter of the first FOLD_WINDOW samples, in order, in step with no period."""
    assert fold == sorted(set(fold)) and max(fold) < FOLD_WINDOW
    assert abs(len(fold) - min(count, FOLD_WINDOW) / 4) <= 3
    for period in (2, 3, 4, 8) if len(fold) >= 8 else ():
        shares = [sum(1 for i in fold if i % period == r) for r in range(period)]
        assert max(shares) <= len(fold) / 2 + 1, (period, shares)


@pytest.mark.parametrize("size_known", [True, False])
@pytest.mark.parametrize("count", [8, 40, 200])
def test_a_quarter_each_for_selection_and_estimate(count: int, size_known: bool) -> None:
    model = identity_model()
    found = collect(model, dataset(numbered(count), size_known), engine="numpy")
    chosen, estimated = indices([found.selection.inputs]), indices([found.estimate.inputs])
    assert (found.selection.source, found.estimate.source) == (SELECTION_FOLD, ESTIMATE_FOLD)
    assert not found.shared and not set(chosen) & set(estimated)
    for fold in (chosen, estimated):
        assert_spread(fold, count)
    for evaluation in (found.selection, found.estimate):
        (reference,) = evaluation.reference
        np.testing.assert_array_equal(reference, Engine(model).run(evaluation.inputs)[0])
    # The fitting fold is exactly the other samples, every time it is read.
    others = [i for i in range(count) if i not in chosen + estimated]
    assert indices(found.fit_data.iter_chunks(3)) == others
    assert indices(found.fit_data.iter_chunks(64)) == others
    assert found.fit.samples == len(others)
    assert found.fit.histogram(0).max == max(others)
    # The estimated plan is fitted on the fitting and selection folds, never on the estimate's.
    fitted = sorted(others + chosen)
    assert found.estimate_fit.samples == len(fitted)
    assert found.estimate_fit.histogram(0).max == max(fitted)
    # The final statistics have seen every sample.
    assert found.statistics.samples == found.calibration.samples == count
    assert (found.statistics.histogram(0).min, found.statistics.histogram(0).max) == (0, count - 1)
    assert found.statistics.means.counts[0] == count


@pytest.mark.parametrize("holdout", [False, True])
@pytest.mark.parametrize("count", [MIN_SAMPLES_FOR_CROSS, 40, 200])
def test_the_cross_fold_is_a_quarter_of_the_fitting_fold_judged_without_it(
    count: int, holdout: bool
) -> None:
    model = identity_model()
    samples = numbered(count)
    held_out = dataset(numbered(6, start=1000)) if holdout else None
    found = collect(model, dataset(samples), engine="numpy", holdout=held_out)
    chosen, crossed = indices([found.selection.inputs]), indices([found.cross.inputs])
    assert found.cross.source == CROSS_FOLD
    assert_spread(crossed, count)
    assert found.judging == [(found.fit, found.selection), (found.cross_fit, found.cross)]
    (reference,) = found.cross.reference
    np.testing.assert_array_equal(reference, Engine(model).run(found.cross.inputs)[0])
    # It belongs to the fitting fold (the folds' candidates and the final plan see it)...
    fitting = indices(found.fit_data.iter_chunks(5))
    assert set(crossed) < set(fitting) and not set(chosen) & set(fitting)
    assert found.statistics.samples == count
    if not holdout:
        assert not set(crossed) & set(indices([found.estimate.inputs]))

    def exactly(rows: list[int]) -> tuple:
        subset = Dataset.from_arrays([samples[sorted(rows)]])
        return _state(collect(model, subset, engine="numpy", evaluate=False).statistics)

    # ...and its candidates are fitted on the fitting fold without it, plus the selection fold.
    assert _state(found.fit) == exactly(fitting)
    assert _state(found.cross_fit) == exactly([i for i in fitting if i not in crossed] + chosen)
    assert found.cross_fit.samples == len(fitting) - len(crossed) + len(chosen)


@pytest.mark.parametrize("count", [MIN_SAMPLES_FOR_HOLDOUT, MIN_SAMPLES_FOR_CROSS - 1, 40])
def test_no_cross_fold_below_its_minimum_or_for_a_generator(count: int) -> None:
    # A generator's count is unknown until read: the fitting fold without a cross fold could
    # turn out empty.
    for size_known in (False, True) if count < MIN_SAMPLES_FOR_CROSS else (False,):
        found = collect(identity_model(), dataset(numbered(count), size_known), engine="numpy")
        assert found.cross is None and found.cross_fit is None
        assert found.judging == [(found.fit, found.selection)]


@pytest.mark.parametrize("size_known", [True, False])
@pytest.mark.parametrize("count", [1, 5, MIN_SAMPLES_FOR_HOLDOUT - 1])
def test_too_few_samples_keep_no_fold(count: int, size_known: bool) -> None:
    found = collect(identity_model(), dataset(numbered(count), size_known), engine="numpy")
    assert found.selection is None and found.estimate is None
    assert found.fit.samples == found.statistics.samples == count
    assert indices(found.fit_data.iter_chunks(4)) == list(range(count))
    assert found.fit.histogram(0).max == count - 1


def test_a_holdout_dataset_is_the_estimate_and_never_calibrates() -> None:
    model = identity_model()
    held_out = numbered(6, start=1000)
    found = collect(model, dataset(numbered(40)), engine="numpy", holdout=dataset(held_out))
    assert found.estimate.source == HELD_OUT and not found.shared
    np.testing.assert_array_equal(found.estimate.inputs[0], held_out)
    np.testing.assert_array_equal(found.estimate.reference[0], Engine(model).run([held_out])[0])
    # Choices are judged on a quarter of the calibration samples, never on the held-out data.
    chosen = indices([found.selection.inputs])
    assert found.selection.source == SELECTION_FOLD
    assert_spread(chosen, 40)
    assert found.fit.samples == 40 - len(chosen)
    # The estimate measures the final plan: every calibration sample, none held out.
    assert found.statistics.samples == 40 and found.estimate_fit is found.statistics
    assert (found.statistics.histogram(0).min, found.statistics.histogram(0).max) == (0, 39)


def test_with_few_calibration_samples_the_holdout_judges_the_choices_too() -> None:
    held_out = numbered(6, start=1000)
    found = collect(
        identity_model(), dataset(numbered(5)), engine="numpy", holdout=dataset(held_out)
    )
    assert found.shared and found.selection is found.estimate
    assert found.fit.samples == found.statistics.samples == 5


def test_statistics_with_a_holdout_share_it() -> None:
    model = identity_model()
    statistics = collect(model, dataset(numbered(40)), engine="numpy", evaluate=False).statistics
    found = from_statistics(model, statistics, holdout=dataset(numbered(6, start=1000)))
    assert found.shared and found.estimate.source == HELD_OUT


def test_without_evaluation_every_sample_calibrates() -> None:
    found = collect(identity_model(), dataset(numbered(40)), engine="numpy", evaluate=False)
    assert found.selection is None and found.estimate is None
    assert found.fit.samples == found.statistics.samples == 40


@pytest.mark.parametrize("name", ["cnn", "multi_io", "mixed_ops"])
def test_the_fold_reference_is_the_same_on_either_engine(name: str) -> None:
    # LiteRT computes the fold's float outputs (and its statistics) when it calibrated.
    model = load_model(fixture_path(name))
    dataset = load_dataset([str(DATA / f"{name}_calib.npz")], model_inputs(model))
    by_numpy = collect(model, dataset, engine="numpy")
    by_litert = collect(model, dataset, engine="litert")
    assert by_litert.calibration.engine == "litert"
    for fold in ("selection", "estimate"):
        pairs = zip(
            getattr(by_numpy, fold).reference, getattr(by_litert, fold).reference, strict=True
        )
        for expected, got in pairs:
            assert got.shape == expected.shape
            assert sqnr_db(expected, got) > 90
    assert by_litert.statistics.samples == by_numpy.statistics.samples


def _state(statistics) -> tuple:
    statistics.flush()
    return (
        {
            t: (h.min, h.max, h.counts.tobytes())
            for t, h in statistics.histograms.histograms.items()
        },
        statistics.means.state(),
    )


def detector() -> Model:
    """CONV_2D -> RESHAPE to [1, -1, 2], MediaPipe's detector heads: a LiteRT interpreter
    resized to a batch folds the samples into the output's middle axis."""
    rng = np.random.default_rng(2)
    builder = GraphBuilder()
    x = builder.input("x", [1, 4, 4, 3])
    conv = builder.op(
        "CONV_2D",
        [
            x,
            builder.constant("w", rng.standard_normal((2, 1, 1, 3)).astype(np.float32)),
            builder.constant("b", np.zeros(2, np.float32)),
        ],
        output_shape=[1, 4, 4, 2],
        options_type="Conv2DOptions",
        options={"padding": Padding.SAME, "stride_h": 1, "stride_w": 1},
    )
    boxes = builder.op(
        "RESHAPE",
        [conv, builder.constant("shape", np.array([1, -1, 2], np.int32))],
        output_shape=[1, 16, 2],
        options_type="ReshapeOptions",
        options={"new_shape": [1, -1, 2]},
    )
    return parse_model(model_to_bytes(builder.finish([boxes])))


@pytest.mark.parametrize("outcome", ["outputs", "none"])
def test_fold_outputs_computed_elsewhere_change_nothing(outcome: str) -> None:
    # Where the calibration's batched run folds the outputs (a detector's), `float_outputs`
    # has the children compute the fold's float outputs and this process only observes; when
    # they cannot (None), LiteRT computes them here after all.
    model = detector()
    samples = np.random.default_rng(3).standard_normal((40, 4, 4, 3)).astype(np.float32)
    dataset = Dataset.from_arrays([samples])
    asked = []

    def elsewhere(inputs):
        asked.append(inputs)
        wait = submit_model(model, inputs).result
        return wait if outcome == "outputs" else lambda: None

    here = collect(model, dataset, engine="litert")
    split = collect(model, dataset, engine="litert", float_outputs=elsewhere)
    folds = ("cross", "selection", "estimate")
    assert [id(a) for a in asked] == [id(getattr(split, fold).inputs) for fold in folds]
    for fold in folds:
        pairs = zip(getattr(here, fold).reference, getattr(split, fold).reference, strict=True)
        for expected, got in pairs:
            assert got.shape == expected.shape
            np.testing.assert_array_equal(got, expected)
    assert _state(split.statistics) == _state(here.statistics)
    assert _state(split.fit) == _state(here.fit)
    assert _state(split.estimate_fit) == _state(here.estimate_fit)
    assert _state(split.cross_fit) == _state(here.cross_fit)


@pytest.mark.parametrize("name", ["cnn", "multi_io"])
def test_fold_outputs_in_place_are_read_in_the_calibration_s_run(name: str) -> None:
    # Outputs the batched run hands over in their own places are read there: no child runs
    # the float model again, and they are LiteRT's outputs sample by sample, to the bit.
    model = load_model(fixture_path(name))
    dataset = load_dataset([str(DATA / f"{name}_calib.npz")], model_inputs(model))

    def elsewhere(inputs):
        raise AssertionError("the outputs were asked of the children")

    found = collect(model, dataset, engine="litert", float_outputs=elsewhere)
    for fold in (found.selection, found.estimate):
        expected = submit_model(model, fold.inputs).result()
        for want, got in zip(expected, fold.reference, strict=True):
            np.testing.assert_array_equal(got, want.reshape(got.shape))


def test_fold_outputs_are_not_asked_elsewhere_when_the_numpy_engine_calibrates() -> None:
    model = load_model(fixture_path("cnn"))
    dataset = load_dataset([str(DATA / "cnn_calib.npz")], model_inputs(model))

    def elsewhere(inputs):
        raise AssertionError("the numpy engine computes its own reference")

    found = collect(model, dataset, engine="numpy", float_outputs=elsewhere)
    assert found.estimate is not None and found.estimate.reference


def test_the_fold_observed_here_reuses_the_calibration_runner(monkeypatch) -> None:
    # One LiteRT interpreter (and one packing of XNNPACK's weights) for every fold.
    collect_module = importlib.import_module("qtool.calibrate.collect")
    calibrate_module = importlib.import_module("qtool.calibrate.calibrator")
    built = []

    class Counted(collect_module.XnnpackRunner):
        def __init__(self, *args, **kwargs) -> None:
            built.append(args[1])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(collect_module, "XnnpackRunner", Counted)
    monkeypatch.setattr(calibrate_module, "XnnpackRunner", Counted)
    model = load_model(fixture_path("cnn"))
    dataset = load_dataset([str(DATA / "cnn_calib.npz")], model_inputs(model))
    found = collect(
        model, dataset, engine="litert", float_outputs=lambda x: submit_model(model, x).result
    )
    assert found.selection is not None and found.estimate is not None and len(built) == 1

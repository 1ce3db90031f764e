"""The calibration engines: LiteRT on XNNPACK (batched where samples stay apart) and the rule of
`--engine auto`."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from qtool.calibrate import Dataset, MinMaxObserver, activation_tensors, calibrate
from qtool.calibrate.calibrator import choose_engine
from qtool.calibrate.collect import collect
from qtool.calibrate.statistics import new_subgraph_statistics
from qtool.model.build import GraphBuilder
from qtool.model.types import ActivationFunctionType, Padding
from qtool.runtime import register_custom_op
from qtool.runtime.litert import XnnpackRunner


def _conv_model(reshape_to: list[int] | None):
    """CONV_2D -> ADD (-> RESHAPE to a constant: [1, 128] a batch cannot take; [1, -1] folds
    LiteRT's batch into the last axis, the samples one after another)."""
    rng = np.random.default_rng(0)
    builder = GraphBuilder()
    x = builder.input("x", [1, 8, 8, 3])
    w = builder.constant("w", rng.standard_normal((2, 3, 3, 3)).astype(np.float32))
    b = builder.constant("b", rng.standard_normal(2).astype(np.float32))
    conv = builder.op(
        "CONV_2D",
        [x, w, b],
        output_shape=[1, 8, 8, 2],
        options_type="Conv2DOptions",
        options={
            "padding": Padding.SAME,
            "stride_h": 1,
            "stride_w": 1,
            "fused_activation_function": ActivationFunctionType.RELU,
        },
    )
    out = builder.op(
        "ADD", [conv, conv], output_shape=[1, 8, 8, 2], options_type="AddOptions", options={}
    )
    if reshape_to is not None:
        shape = builder.constant("shape", np.array(reshape_to, np.int32))
        out = builder.op(
            "RESHAPE",
            [out, shape],
            output_shape=[1, 128],
            options_type="ReshapeOptions",
            options={"new_shape": reshape_to},
        )
    return builder.finish([out])


def _ranges(model, samples: np.ndarray, engine: str) -> dict[int, tuple[float, float]]:
    observer = MinMaxObserver(activation_tensors(model))
    return calibrate(model, Dataset.from_arrays([samples], "test"), engine, observer).ranges


@pytest.mark.parametrize(("reshape", "batched"), [(None, True), ([1, 128], False), ([1, -1], True)])
def test_litert_batches_when_samples_stay_apart(reshape: list[int] | None, batched: bool) -> None:
    model = _conv_model(reshape)
    samples = np.random.default_rng(1).standard_normal((37, 8, 8, 3)).astype(np.float32)
    runner = XnnpackRunner(model, activation_tensors(model), threads=2)
    runner.run([samples], [])
    assert (runner.batch > 1) == batched
    by_numpy = _ranges(model, samples, "numpy")
    by_litert = _ranges(model, samples, "litert")
    assert by_litert.keys() == by_numpy.keys() == set(activation_tensors(model))
    for t, (low, high) in by_numpy.items():
        assert by_litert[t] == pytest.approx((low, high), rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_batch_litert_refuses_late_observes_no_sample_twice(threads: int, monkeypatch) -> None:
    # 3 samples at a batch of 2 run as parts of 1 and 2 samples. When the numpy engine cannot
    # vouch for batching (None) and LiteRT refuses the batch of 2 (a RESHAPE to a constant
    # [1, 128]), the runner falls back to one sample at a time: before observing anything,
    # or the first sample would be observed twice.
    litert = importlib.import_module("qtool.runtime.litert")
    monkeypatch.setattr(litert, "_keeps_samples_apart", lambda model: None)
    model = _conv_model([1, 128])
    samples = np.random.default_rng(5).standard_normal((3, 8, 8, 3)).astype(np.float32)
    runner = XnnpackRunner(model, activation_tensors(model), threads=threads)
    runner.batch = 2
    seen: list[np.ndarray] = []
    runner.run([samples], [lambda t, v: seen.append(v.copy()) if t == 0 else None])
    assert runner.batch == 1
    np.testing.assert_array_equal(np.concatenate(seen), samples)


def test_litert_observers_see_every_sample_in_order() -> None:
    model = _conv_model(None)
    samples = np.random.default_rng(2).standard_normal((21, 8, 8, 3)).astype(np.float32)
    runner = XnnpackRunner(model, activation_tensors(model), threads=2)
    seen: list[np.ndarray] = []
    runner.run([samples], [lambda t, v: seen.append(v.copy()) if t == 0 else None])
    np.testing.assert_array_equal(np.concatenate(seen), samples)


@pytest.mark.parametrize("threads", [1, 2])
def test_litert_runs_on_while_a_view_of_the_last_run_is_still_referenced(threads: int) -> None:
    # As Dask's worker profiler does when it holds a frame: LiteRT refuses to invoke an
    # interpreter whose memory is still referenced, so the runner leaves it and takes a new one.
    model = _conv_model(None)
    samples = np.random.default_rng(3).standard_normal((40, 8, 8, 3)).astype(np.float32)
    runner = XnnpackRunner(model, activation_tensors(model), threads=threads)
    runner.batch = 4
    kept: list[np.ndarray] = []
    copies: list[np.ndarray] = []
    output = model.subgraphs[0].outputs[0]

    def keep(t: int, value: np.ndarray) -> None:
        if t == output:
            kept.append(value)
            copies.append(value.copy())

    runner.run([samples], [keep])
    plain: list[np.ndarray] = []
    XnnpackRunner(model, activation_tensors(model)).run(
        [samples], [lambda t, v: plain.append(v.copy()) if t == output else None]
    )
    np.testing.assert_array_equal(np.concatenate(copies), np.concatenate(plain))
    assert len(kept) == 10


@pytest.mark.parametrize("threads", [2, 3])
def test_xnnpack_thread_count_changes_no_statistic(threads: int, monkeypatch) -> None:
    # The runner gives XNNPACK every engine thread: sound because XNNPACK's values do not
    # depend on its thread count.
    model = _conv_model(None)
    samples = np.random.default_rng(5).standard_normal((24, 8, 8, 3)).astype(np.float32)
    tensors = activation_tensors(model)
    states = []
    for count in (1, threads):
        monkeypatch.setenv("QTOOL_THREADS", str(count))
        statistics = new_subgraph_statistics(model, 0, tensors, batched=True)
        runner = XnnpackRunner(model, tensors, ordered=statistics.ordered_tensors)
        assert runner.xnnpack_threads == count
        runner.batch = 4
        runner.run([samples], [statistics])
        statistics.flush()
        states.append((statistics.histograms.state(), statistics.means.state()))
    assert states[0] == states[1]


def test_parts_differ_in_size_by_one_at_most() -> None:
    model = _conv_model(None)
    samples = np.random.default_rng(6).standard_normal((64, 8, 8, 3)).astype(np.float32)
    runner = XnnpackRunner(model, activation_tensors(model))
    runner.batch = 17
    sizes: list[int] = []
    runner.run([samples], [lambda t, v: sizes.append(len(v)) if t == 0 else None])
    assert sizes == [16, 16, 16, 16]  # one interpreter size, not 17, 17, 17 and 13


def test_auto_prefers_litert_and_falls_back_to_numpy() -> None:
    assert choose_engine(_conv_model(None), "auto") == "litert"
    register_custom_op("TimesThree", lambda ctx: ctx.inputs[0] * 3)
    builder = GraphBuilder()
    x = builder.input("x", [1, 4])
    model = builder.finish([builder.custom("TimesThree", [x], [1, 4])])
    assert choose_engine(model, "auto") == "numpy"  # LiteRT cannot load the custom op


def test_auto_calibration_loads_the_model_in_litert_once(monkeypatch) -> None:
    # Building LiteRT's runner is the test of whether LiteRT runs the model: no probe first.
    calibrate_module = importlib.import_module("qtool.calibrate.calibrator")

    def probe(*args, **kwargs):
        raise AssertionError("the runner itself tells whether LiteRT runs the model")

    monkeypatch.setattr(calibrate_module, "litert_can_run", probe)
    samples = np.random.default_rng(1).standard_normal((5, 1, 8, 8, 3)).astype(np.float32)
    result = calibrate(_conv_model(None), Dataset.from_arrays([samples[:, 0]], "test"), "auto")
    assert result.engine == "litert"
    assert result.ranges == _ranges(_conv_model(None), samples[:, 0], "litert")


def test_auto_calibration_falls_back_to_numpy_where_litert_cannot_load_the_model() -> None:
    register_custom_op("TimesTwo", lambda ctx: ctx.inputs[0] * 2)
    builder = GraphBuilder()
    x = builder.input("x", [1, 4])
    model = builder.finish([builder.custom("TimesTwo", [x], [1, 4])])
    samples = np.arange(12, dtype=np.float32).reshape(3, 4)
    result = calibrate(model, Dataset.from_arrays([samples], "test"), "auto")
    assert result.engine == "numpy"
    assert result.ranges[model.subgraphs[0].outputs[0]] == (0.0, 22.0)


def test_samples_folded_into_one_axis_and_concatenated_keep_their_places() -> None:
    # Two heads RESHAPEd to [1, -1, 2] and concatenated along axis 1 (MediaPipe's detectors):
    # batched, LiteRT lays out every sample of the first head before those of the second, so
    # the outputs (the fold's reference) and per-element means are read sample by sample.
    rng = np.random.default_rng(5)
    builder = GraphBuilder()
    x = builder.input("x", [1, 4, 4, 3])
    heads = []
    for name in ("a", "b"):
        w = builder.constant(f"w{name}", rng.standard_normal((2, 1, 1, 3)).astype(np.float32))
        conv = builder.op(
            "CONV_2D",
            [x, w, builder.constant(f"b{name}", np.zeros(2, np.float32))],
            output_shape=[1, 4, 4, 2],
            options_type="Conv2DOptions",
            options={"padding": Padding.SAME, "stride_h": 1, "stride_w": 1},
        )
        shape = builder.constant(f"s{name}", np.array([1, -1, 2], np.int32))
        heads.append(
            builder.op(
                "RESHAPE",
                [conv, shape],
                output_shape=[1, 16, 2],
                options_type="ReshapeOptions",
                options={"new_shape": [1, -1, 2]},
            )
        )
    joined = builder.op(
        "CONCATENATION",
        heads,
        output_shape=[1, 32, 2],
        options_type="ConcatenationOptions",
        options={"axis": 1},
    )
    model = builder.finish([joined])
    samples = rng.standard_normal((40, 4, 4, 3)).astype(np.float32)
    by_numpy = collect(model, Dataset.from_arrays([samples], "test"), engine="numpy")
    by_litert = collect(model, Dataset.from_arrays([samples], "test"), engine="litert")
    (expected,), (got,) = by_numpy.estimate.reference, by_litert.estimate.reference
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)

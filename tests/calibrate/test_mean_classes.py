"""Layer inputs summed per class of positions (qtool/calibrate/mean_classes.py): bias correction
reads the same mean output error as from per-element means, the C kernel's class sums equal the
numpy passes' bit for bit, and class sums merge and travel exactly."""

from __future__ import annotations

import numpy as np
import pytest

import qtool.calibrate.histogram as histogram_module
from qtool.calibrate.histogram import Histogram
from qtool.calibrate.mean_classes import ClassSums, PositionClasses, position_classes
from qtool.calibrate.observers import MeanObserver
from qtool.calibrate.statistics import CalibrationStatistics
from qtool.errors import DataError
from qtool.model.types import Padding
from qtool.quantize.bias_correction import mean_output_error
from tests.calibrate.test_observe_kernel import KERNEL, hostile, numpy_passes  # noqa: F401
from tests.calibrate.test_statistics import recorded, statistics_of
from tests.quantize.layers import LAYERS, Layer


def conv(
    op_type: str, size, channels, kernel, stride, padding, dilation=1, depthwise=False, multiplier=1
):
    """A one-layer model's geometry (output size as TFLite computes it)."""
    effective = (kernel - 1) * dilation + 1
    out = [
        (s + stride - 1) // stride if padding == Padding.SAME else (s - effective) // stride + 1
        for s in size
    ]
    options = {
        "padding": padding,
        "stride_h": stride,
        "stride_w": stride,
        "dilation_h_factor": dilation,
        "dilation_w_factor": dilation,
    }
    if depthwise:
        return Layer(
            op_type,
            (*size, channels),
            (1, kernel, kernel, channels * multiplier),
            (*out, channels * multiplier),
            "DepthwiseConv2DOptions",
            {**options, "depth_multiplier": multiplier},
            axis=3,
        )
    return Layer(
        op_type,
        (*size, channels),
        (3, kernel, kernel, channels),
        (*out, 3),
        "Conv2DOptions",
        options,
    )


GEOMETRIES = {
    "conv 3x3 s1 same": conv("CONV_2D", (9, 8), 2, 3, 1, Padding.SAME),
    "conv 3x3 s2 same, odd": conv("CONV_2D", (11, 9), 2, 3, 2, Padding.SAME),
    "conv 5x5 s2 valid": conv("CONV_2D", (13, 12), 3, 5, 2, Padding.VALID),
    "conv 3x3 dilated 2": conv("CONV_2D", (12, 10), 2, 3, 1, Padding.SAME, dilation=2),
    "conv 1x1 s2": conv("CONV_2D", (10, 9), 4, 1, 2, Padding.SAME),
    "conv 1x1 s1": conv("CONV_2D", (6, 7), 4, 1, 1, Padding.SAME),
    "depthwise 5x5 s1": conv("DEPTHWISE_CONV_2D", (12, 12), 3, 5, 1, Padding.SAME, depthwise=True),
    "depthwise 3x3 s2 even": conv(
        "DEPTHWISE_CONV_2D", (10, 10), 2, 3, 2, Padding.SAME, depthwise=True
    ),
    "depthwise 3x3 s1, multiplier 2": conv(
        "DEPTHWISE_CONV_2D", (9, 7), 2, 3, 1, Padding.SAME, depthwise=True, multiplier=2
    ),
    "fully connected": Layer(
        "FULLY_CONNECTED", (5, 6), (4, 6), (5, 4), "FullyConnectedOptions", {"keep_num_dims": True}
    ),
}


def structured_inputs(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Samples whose mean differs from position to position (a gradient, a bright border):
    where pooling the wrong positions would show."""
    base = rng.normal(0, 1, shape) + np.linspace(-2, 3, int(np.prod(shape))).reshape(shape)
    return (base + rng.normal(0, 0.5, (24, *shape))).astype(np.float32)


@pytest.mark.parametrize("name", sorted(GEOMETRIES))
def test_class_means_give_the_per_element_means_correction(name: str) -> None:
    layer = GEOMETRIES[name]
    rng = np.random.default_rng(len(name))
    weights = layer.random_weights(rng)
    model = layer.model(weights, rng.normal(0, 1, layer.output_shape[-1]))
    t = model.subgraphs[0].operators[0].inputs[0]
    classes = position_classes(model, 0, {t: layer.input_shape})[t]
    positions = int(np.prod(layer.input_shape[:-1]))
    assert classes.count * 2 <= positions  # the point: far fewer sums than elements
    x = structured_inputs(rng, layer.input_shape)
    per_element = MeanObserver([t], {t: layer.input_shape})
    per_class = MeanObserver([t], {t: layer.input_shape}, {t: classes})
    for observer in (per_element, per_class):
        for part in np.array_split(x, 3):
            observer(t, part)
    error = (rng.normal(0, 0.05, weights.shape)).astype(np.float32)
    found = [
        mean_output_error(model, model.subgraphs[0], 0, 0, o.mean(t), 1, error, 2)
        for o in (per_element, per_class)
    ]
    np.testing.assert_allclose(found[1], found[0], rtol=1e-5, atol=1e-7)
    # ... and pooling really happened: the class means are not the element means.
    assert not np.allclose(per_class.mean(t), per_element.mean(t), atol=1e-3)


def test_layers_the_classes_do_not_know_keep_per_element_means() -> None:
    layer = LAYERS["TRANSPOSE_CONV"]
    model = layer.model(layer.random_weights(np.random.default_rng(0)), None)
    t = model.subgraphs[0].operators[0].inputs[2]
    assert position_classes(model, 0, {t: layer.input_shape}) == {}


@pytest.mark.parametrize(
    "rows,grid,channels,count",
    [
        (3, (6, 5), 4, (2, 3)),
        (300, (4, 4), 3, (2, 1)),  # more than a row class's float64 run (128) in one call
        (2, (5, 3), 2100, (4, 2)),  # rows wider than the kernel's block of columns
        (2, (7, 1), 5, (1, 1)),  # a position per row, all alike
        (1, (1, 1), 1, (1, 1)),
    ],
)
def test_kernel_class_sums_equal_the_numpy_passes(numpy_passes, rows, grid, channels, count):  # noqa: F811
    rng = np.random.default_rng(rows + channels)
    row_class = np.concatenate([np.arange(count[0]), rng.integers(0, count[0], grid[0] - count[0])])
    column_class = np.concatenate(
        [np.arange(count[1]), rng.integers(0, count[1], grid[1] - count[1])]
    )
    classes = PositionClasses(row_class.astype(np.int32), column_class.astype(np.int32), channels)
    shape = (*grid, channels)
    values = hostile(rng, (rows, *shape)).reshape(rows, -1)
    found = []
    for kernel in (True, False):
        numpy_passes(kernel)
        means = MeanObserver([0], {0: shape}, {0: classes})
        histogram = Histogram()
        for part in np.array_split(values, 2):
            if not len(part):
                continue
            if kernel:
                histogram.add(part, channels, classes=means.class_target(0, part))
            else:
                means(0, part)  # no bound known: clipped, NaN as 0
        found.append(means.state())
    assert found[0] == found[1]
    # The exact sums, in Python integers.
    units = np.rint(np.clip(np.nan_to_num(values, nan=0.0), -(2.0**22), 2.0**22) * 2.0**24)
    exact = [0] * (classes.count * channels)
    for p, k in enumerate(classes.of_position):
        for c in range(channels):
            exact[k * channels + c] += sum(int(u) for u in units[:, p * channels + c])
    assert found[0]["means"]["0"]["sum"] == exact


def test_sums_beyond_64_bits_stay_exact() -> None:
    sums = ClassSums(3)
    big = np.array([2**62, -(2**62), 2**53], np.int64)
    for _ in range(40):
        sums.add_int64(big)
    assert sums.integers() == [40 * 2**62, -40 * 2**62, 40 * 2**53]
    twice = ClassSums.from_integers(sums.integers())
    twice.add(sums)
    assert twice.integers() == [80 * 2**62, -80 * 2**62, 80 * 2**53]


def test_older_per_element_statistics_merge_into_class_sums(tmp_path) -> None:
    """A version 1 file (per-element sums) merges with a new one, in either order, into the
    statistics of one run."""
    model, values = recorded("cnn")
    assert statistics_of(model, values, slice(0, 24)).subgraphs[0].means.classes
    single = statistics_of(model, values, slice(0, 24))
    old = statistics_of(model, values, slice(0, 10))
    old.subgraphs[0].flush()
    old.subgraphs[0].means.classes.clear()  # as qtool wrote them before: per element
    old.subgraphs[0].means._class_sums.clear()
    for t, shape in old.subgraphs[0].means.sample_shapes.items():
        old.subgraphs[0].means.sums[t] = (
            np.rint(values[t][0:10].astype(np.float64) * 2.0**24)
            .sum(axis=0)
            .astype(np.int64)
            .reshape(shape)
        )
        old.subgraphs[0].means.counts[t] = 10
    state = old.state()
    state["version"] = 1
    for first_old in (True, False):
        new = statistics_of(model, values, slice(10, 24))
        older = CalibrationStatistics.from_state(state)
        merged = older if first_old else new
        merged.merge(new if first_old else older)
        assert merged.state()["subgraphs"] == single.state()["subgraphs"]


@pytest.mark.parametrize(
    "change",
    [
        lambda m: m.update(row_classes=[0, 2, 2]),  # a class number skipped
        lambda m: m.update(column_classes=[]),
        lambda m: m.update(row_classes=[0.5] * len(m["row_classes"])),
        lambda m: m.update(channels=0),
        lambda m: m.update(sum=m["sum"][:-1]),
        lambda m: m.update(sum=[2**130] * len(m["sum"])),
        lambda m: m.update(sum=[True] * len(m["sum"])),
        lambda m: m.update(column_classes=m["column_classes"][:-1]),
    ],
)
def test_malformed_class_sums_are_refused(change) -> None:
    model, values = recorded("cnn")
    state = statistics_of(model, values, slice(0, 4)).state()
    means = state["subgraphs"]["0"]["means"]
    change(next(m for m in means.values() if "row_classes" in m))
    with pytest.raises(DataError, match="malformed calibration statistics"):
        CalibrationStatistics.from_state(state)


def test_statistics_pooling_other_positions_do_not_merge() -> None:
    model, values = recorded("cnn")
    mine = statistics_of(model, values, slice(0, 4))
    theirs = statistics_of(model, values, slice(4, 8))
    classes = theirs.subgraphs[0].means.classes
    t, found = next(iter(classes.items()))
    classes[t] = PositionClasses(
        np.zeros_like(found.row_class), np.zeros_like(found.column_class), found.channels
    )
    theirs.subgraphs[0].means._class_sums[t] = ClassSums(found.channels)
    with pytest.raises(DataError, match="pool different positions"):
        mine.merge(theirs)


def test_the_kernel_refuses_classes_that_do_not_fit() -> None:
    values = np.zeros((1, 12), np.float32)
    high, low = np.zeros(6, np.int64), np.zeros(6, np.uint64)
    rows, columns = np.array([0, 1, 2, 3], np.int32), np.array([0, 1, 2], np.int32)
    with pytest.raises(ValueError, match="do not agree"):  # row class 3 of 2 (6 / 3 targets)
        KERNEL(values, 1, 12, 1, None, None, (rows, columns, 3, high, low))
    with pytest.raises(ValueError, match="do not agree"):  # target 5 of 3
        KERNEL(values, 1, 12, 1, None, None, (rows % 2, columns + 3, 3, high, low))
    with pytest.raises(ValueError, match="do not fit"):  # 12 values are not rows of 5
        KERNEL(values, 1, 12, 1, None, None, (np.zeros(5, np.int32), columns, 3, high, low))
    with pytest.raises(ValueError, match="int32"):
        KERNEL(values, 1, 12, 1, None, None, (rows.astype(np.int64), columns, 3, high, low))
    assert histogram_module.one_pass is KERNEL

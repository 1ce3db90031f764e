"""Which positions of a layer input bias correction may pool into one mean.

Bias correction (qtool/quantize/bias_correction.py) needs, for each layer with weights, the
mean over samples and output positions of the layer applied to its input with the weights'
rounding error as weights. That mean is linear in the input, and an input position enters it
through the kernel taps that read it: two positions read by the same taps enter it alike. So
the mean over samples of each input element is more than bias correction can use; the mean of
each *class* of positions (the same set of taps, per channel) gives the same correction, and
expanding the class means back over their positions gives an input on which the layer's own
kernel computes it exactly as before.

The classes are few: a FULLY_CONNECTED layer or a 1x1 unstrided convolution reads every
position through its one tap (one class); a k x k convolution with stride s has a class per
border row and column pattern and per phase of the stride (palm_detection_full's 5 x 5
depthwise layers at stride 1: 25 classes). Calibration adds a sample's rows into the sums of
their row class, a few rows of the grid that stay in cache, instead of into per-element sums of
the tensor's size in memory: the statistics are kilobytes a tensor (palm_detection_full's file:
66 -> 4.3 MB), and observing pose_landmark_full's layer inputs costs 3.2 ms a sample, not 5.0
(docs/performance.md, "a fourth look").
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from qtool.errors import ModelError
from qtool.model import Model, Operator
from qtool.runtime.kernels.conv import out_size_and_padding
from qtool.spec import weighted_operands

_PIECE = 512  # values below 2^53 added in int64: 512 * 2^53 = 2^62
_SPATIAL = {"CONV_2D": "Conv2DOptions", "DEPTHWISE_CONV_2D": "DepthwiseConv2DOptions"}


@dataclass(frozen=True)
class PositionClasses:
    """The class of every position of a sample, on a grid: a sample's positions (its shape
    without the last axis, which holds `channels`) in C order are rows of columns (an image:
    its rows, each of its columns; positions all alike: one column), and a position's class is
    `row_class * column_classes + column_class`. The kernel adds a row of a sample (all its
    columns and channels) at once."""

    row_class: np.ndarray  # int32, per row
    column_class: np.ndarray  # int32, per column
    channels: int

    def __post_init__(self) -> None:
        # Shared by every statistics set of a model (and cached across models): never written.
        self.row_class.setflags(write=False)
        self.column_class.setflags(write=False)

    @cached_property
    def column_classes(self) -> int:
        """How many column classes there are."""
        return int(self.column_class.max()) + 1

    @cached_property
    def count(self) -> int:
        """How many classes there are."""
        return (int(self.row_class.max()) + 1) * self.column_classes

    @cached_property
    def of_position(self) -> np.ndarray:
        """The class of each position (int32, C order)."""
        grid = self.row_class[:, None] * self.column_classes + self.column_class[None, :]
        return grid.reshape(-1).astype(np.int32)

    @cached_property
    def sizes(self) -> np.ndarray:
        """How many positions each class holds."""
        return np.bincount(self.of_position, minlength=self.count)

    def kernel_argument(self, sums: ClassSums) -> tuple:
        """The one-pass kernel's `classes` argument that adds to `sums` (`_observe.c`)."""
        targets = self.column_classes * self.channels
        return self.row_class, self._column_target, targets, sums.high, sums.low

    @cached_property
    def _column_target(self) -> np.ndarray:
        channel = np.arange(self.channels, dtype=np.int32)
        return (self.column_class[:, None] * self.channels + channel[None, :]).reshape(-1)

    @cached_property
    def _order(self) -> np.ndarray:
        return np.argsort(self.of_position, kind="stable")

    def add_positions(self, sums: ClassSums, totals: np.ndarray) -> None:
        """Add int64 totals per position and channel, each below 2^53 in magnitude, to their
        classes' sums: in int64 over at most `_PIECE` positions at a time (no overflow)."""
        ordered = totals.reshape(-1, self.channels)[self._order]
        bounds = np.concatenate([[0], np.cumsum(self.sizes)])
        pieces = [
            (start, k)
            for k in range(self.count)
            for start in range(int(bounds[k]), int(bounds[k + 1]), _PIECE)
        ]
        partials = np.add.reduceat(ordered, [start for start, _ in pieces], axis=0)
        for (_, k), partial in zip(pieces, partials, strict=True):
            sums.add_int64(partial, k * self.channels)

    def reduce_integers(self, per_position: np.ndarray) -> list[int]:
        """Exact per-element integer sums (positions x channels) added up per class."""
        ordered = per_position.astype(object).reshape(-1, self.channels)[self._order]
        bounds = np.concatenate([[0], np.cumsum(self.sizes)[:-1]])
        return np.add.reduceat(ordered, bounds, axis=0).reshape(-1).tolist()

    def expand(self, class_means: np.ndarray) -> np.ndarray:
        """Per position and channel: the mean of its class ((count, channels) in), in its
        dtype."""
        return class_means.reshape(self.count, self.channels)[self.of_position]

    def __deepcopy__(self, memo: dict) -> PositionClasses:
        # Never changed once made: copies of statistics share it, and what it has cached.
        return self

    @classmethod
    def checked(cls, row_class: object, column_class: object, channels: object) -> PositionClasses:
        """Classes read from a file: ValueError unless the row and column classes are numbered
        from 0 without gaps and channels is positive."""
        grid = [_dense(row_class, "row"), _dense(column_class, "column")]
        if isinstance(channels, bool) or not isinstance(channels, int) or channels < 1:
            raise ValueError("channels must be a positive integer")
        return cls(grid[0], grid[1], channels)


def _dense(classes: object, what: str) -> np.ndarray:
    found = np.asarray(classes)
    if found.ndim != 1 or not found.size or found.dtype.kind not in "iu":
        raise ValueError(f"{what} classes must be a non-empty list of integers")
    if found.min() < 0 or np.unique(found).size != int(found.max()) + 1:
        raise ValueError(f"{what} classes must number every class from 0")
    return found.astype(np.int32)


def position_classes(
    model: Model, subgraph_index: int, sample_shapes: Mapping[int, tuple[int, ...]]
) -> dict[int, PositionClasses]:
    """For each layer input of `sample_shapes`, the classes of its positions that every layer
    reading it agrees on; left out where some reader needs each element's own mean (a layer
    of another kind, or shapes that do not fit), and where classes would save nothing."""
    subgraph = model.subgraphs[subgraph_index]
    readers: dict[int, list[Operator]] = {t: [] for t in sample_shapes}
    for op in subgraph.operators:
        operands = weighted_operands(model.op_type(op))
        if operands is not None and operands.activation < len(op.inputs):
            readers.get(op.inputs[operands.activation], []).append(op)
    found = {}
    for t, shape in sample_shapes.items():
        classes = _classes(model, subgraph_index, readers[t], tuple(shape))
        if classes is not None:
            found[t] = classes
    return found


def _classes(
    model: Model, subgraph_index: int, readers: list[Operator], sample_shape: tuple[int, ...]
) -> PositionClasses | None:
    if not readers or not sample_shape or min(sample_shape) < 1:
        return None
    try:
        readings = tuple(_reading(model, subgraph_index, op, sample_shape) for op in readers)
    except _Unread:
        return None
    return _grid_classes(readings, sample_shape)


@functools.cache  # every statistics set of a model asks again (PositionClasses never changes)
def _grid_classes(
    readings: tuple[tuple[tuple[int, ...], tuple[int, ...]] | None, ...],
    sample_shape: tuple[int, ...],
) -> PositionClasses | None:
    """The classes of a sample's positions for readers that read them as `readings` say (per
    reader, the (padding, size, kernel, stride, dilation) of its rows and of its columns; None
    for one that reads every position alike)."""
    positions = int(np.prod(sample_shape[:-1], dtype=np.int64))
    planes = [tuple(_axis_key(*axis) for axis in reading) for reading in readings if reading]
    if not planes:
        # Every position alike: an image's rows are the grid's rows (long rows to add), other
        # shapes a position per row.
        rows, columns = positions, 1
        if len(sample_shape) >= 3:
            rows, columns = positions // sample_shape[-2], sample_shape[-2]
        row_class, column_class = np.zeros(rows, np.int32), np.zeros(columns, np.int32)
    else:
        # Rows alike for every reader share a row class; columns likewise; a position's class
        # is the pair (every pair occurs: the plane is every row with every column). Leading
        # axes (a declared batch of several) repeat the plane's rows: the mean is over them.
        plane_rows = _numbered(np.stack([r for r, _ in planes], axis=1))
        row_class = np.tile(plane_rows, positions // (plane_rows.size * sample_shape[-2]))
        column_class = _numbered(np.stack([c for _, c in planes], axis=1))
    classes = PositionClasses(
        row_class.astype(np.int32), column_class.astype(np.int32), sample_shape[-1]
    )
    if classes.count * 2 > positions:
        return None  # nearly an element each: per-element sums cost no more
    return classes


def _numbered(keys: np.ndarray) -> np.ndarray:
    """Each row's number among the distinct rows of `keys`, from 0."""
    return np.unique(keys, axis=0, return_inverse=True)[1].reshape(-1)


class _Unread(Exception):
    """A reader whose way of reading its input is not understood: per-element means."""


def _reading(
    model: Model, subgraph_index: int, op: Operator, sample_shape: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """How `op` reads its input's rows and columns: the (padding, size, kernel, stride,
    dilation) of each axis of a spatial layer; None for a layer that reads every position
    alike (FULLY_CONNECTED); `_Unread` where the op's reading is not understood."""
    op_type = model.op_type(op)
    subgraph = model.subgraphs[subgraph_index]
    weights = subgraph.tensors[op.inputs[weighted_operands(op_type).weights]].shape
    if op_type == "FULLY_CONNECTED":
        # Each row of `channels` inputs is multiplied by the same weights.
        if len(weights) != 2 or weights[1] != sample_shape[-1]:
            raise _Unread
        return None
    table = _SPATIAL.get(op_type)
    if table is None or len(sample_shape) < 3 or len(weights) != 4:
        raise _Unread
    padding = int(op.option("padding", table))
    axes = []
    for axis, kernel, name in ((-3, weights[1], "h"), (-2, weights[2], "w")):
        geometry = (
            padding,
            int(sample_shape[axis]),
            int(kernel),
            int(op.option(f"stride_{name}", table)),
            int(op.option(f"dilation_{name}_factor", table)),
        )
        if _axis_key(*geometry) is None:
            raise _Unread
        axes.append(geometry)
    return axes[0], axes[1]


@functools.cache  # a model asks for the same few axes many times; the keys are read-only
def _axis_key(
    padding: int, size: int, kernel: int, stride: int, dilation: int
) -> np.ndarray | None:
    """Per index along one spatial axis, the bit set of the kernel taps that read it."""
    if kernel < 1 or stride < 1 or dilation < 1 or kernel > 62:
        return None
    try:
        out, before = out_size_and_padding(padding, size, kernel, stride, dilation)
    except ModelError:  # a padding this reading does not know
        return None
    if out < 1:
        return None
    key = np.zeros(size, np.int64)
    outputs = np.arange(out)
    for tap in range(kernel):
        read = outputs * stride + tap * dilation - before
        read = read[(read >= 0) & (read < size)]
        key[read] |= 1 << tap
    key.setflags(write=False)
    return key


class ClassSums:
    """Exact integer sums, one per class and channel, as 128-bit integers: a signed `high` and
    an unsigned `low` word each (`high * 2^64 + low`), which the C kernel adds into in place.
    A class of an image-sized layer input takes thousands of values a sample, each up to 2^46
    units: no 64-bit integer would hold a calibration's sum."""

    def __init__(self, size: int) -> None:
        self.high = np.zeros(size, np.int64)
        self.low = np.zeros(size, np.uint64)

    def add_int64(self, values: np.ndarray, start: int = 0) -> None:
        """Add int64 `values` to the sums from index `start` on."""
        values = np.asarray(values, np.int64).reshape(-1)
        stop = start + values.size
        low = self.low[start:stop]
        total = low + values.view(np.uint64)  # wraps modulo 2^64: the carry says where
        self.high[start:stop] += (total < low).astype(np.int64) - (values < 0)
        low[...] = total

    def add(self, other: ClassSums) -> None:
        """Add another set of sums of the same size."""
        total = self.low + other.low
        self.high += other.high + (total < self.low)
        self.low = total

    def floats(self) -> np.ndarray:
        """The sums as float64 (rounded to 53 bits)."""
        return self.high.astype(np.float64) * 2.0**64 + self.low.astype(np.float64)

    def integers(self) -> list[int]:
        """The sums as Python integers (exact)."""
        return [(int(h) << 64) + int(lo) for h, lo in zip(self.high, self.low, strict=True)]

    @classmethod
    def from_integers(cls, values: list[int]) -> ClassSums:
        """Sums of Python integers; ValueError for a value that is not a 128-bit integer."""
        sums = cls(len(values))
        for k, value in enumerate(values):
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not -(2**127) <= value < 2**127
            ):
                raise ValueError("a class sum is not a 128-bit integer")
            sums.high[k] = value >> 64
            sums.low[k] = value & (2**64 - 1)
        return sums

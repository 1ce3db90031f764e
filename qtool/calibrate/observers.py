"""Observers record statistics of tensors as an engine produces them.

Every observer is mergeable (`merge`) and serialisable (`state` / `from_state`), so calibration
can be sharded across processes or machines and combined exactly (same result, whatever the
split or the order).

- `MinMaxObserver`: the global min/max of each tensor (TensorFlow's calibration rule).
- `HistogramObserver`: exact min/max plus a histogram on a fixed grid (`histogram.py`), from
  which every calibration method of `ranges.py` reads its range.
- `MeanObserver`: the sum of a tensor over samples, per element or per class of positions
  (`mean_classes.py`), for bias correction (the mean input of a layer).
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from qtool.calibrate.histogram import Histogram
from qtool.calibrate.mean_classes import ClassSums, PositionClasses


class RangeObserver(abc.ABC):
    """Base: sees (tensor index, value) pairs (a chunk of samples along axis 0)."""

    kind = "base"
    # Whether calls for different tensors may run at once (qtool.runtime.parallel): true of
    # statistics kept tensor by tensor, as every observer here keeps them.
    tensors_apart = False
    # Tensors whose values must arrive element by element as the model laid them out: none,
    # a range takes its values in any order (XnnpackRunner batches freely).
    ordered_tensors: frozenset[int] = frozenset()

    def __init__(self, tensors: Iterable[int]) -> None:
        self.tensors = frozenset(tensors)

    def __call__(self, tensor_index: int, value: np.ndarray) -> None:
        if tensor_index in self.tensors and value.size:
            self.update(tensor_index, value)

    @abc.abstractmethod
    def update(self, tensor_index: int, value: np.ndarray) -> None:
        """Fold one produced value of a tensor (all samples of a chunk) into the statistic."""

    @abc.abstractmethod
    def ranges(self) -> dict[int, tuple[float, float]]:
        """The (min, max) of every observed tensor."""

    @abc.abstractmethod
    def merge(self, other: RangeObserver) -> None:
        """Combine the statistics of another shard of the same calibration."""

    @abc.abstractmethod
    def state(self) -> dict[str, Any]:
        """A JSON-ready form of the statistics, for sharded calibration."""


class MinMaxObserver(RangeObserver):
    """Global min/max over every sample: TensorFlow's calibrator rule, not a moving average."""

    kind = "minmax"
    tensors_apart = True

    def __init__(self, tensors: Iterable[int]) -> None:
        super().__init__(tensors)
        self._min: dict[int, float] = {}
        self._max: dict[int, float] = {}

    def update(self, tensor_index: int, value: np.ndarray) -> None:
        """Widen the tensor's range to the chunk's finite minimum and maximum (a chunk with no
        finite value changes nothing)."""
        low = float(np.min(value))
        high = float(np.max(value))
        if not (np.isfinite(low) and np.isfinite(high)):
            finite = value[np.isfinite(value)]
            if not finite.size:
                return
            low, high = float(finite.min()), float(finite.max())
        self._min[tensor_index] = min(low, self._min.get(tensor_index, low))
        self._max[tensor_index] = max(high, self._max.get(tensor_index, high))

    def ranges(self) -> dict[int, tuple[float, float]]:
        """The (min, max) of every tensor that had a finite value."""
        return {t: (self._min[t], self._max[t]) for t in self._min}

    def merge(self, other: RangeObserver) -> None:
        """Widen every range to include the other observer's."""
        for t, (low, high) in other.ranges().items():
            self._min[t] = min(low, self._min.get(t, low))
            self._max[t] = max(high, self._max.get(t, high))

    def state(self) -> dict[str, Any]:
        """{"kind", "ranges": {tensor index: [min, max]}}, JSON-ready."""
        return {
            "kind": self.kind,
            "ranges": {str(t): [lo, hi] for t, (lo, hi) in self.ranges().items()},
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> MinMaxObserver:
        """The observer a `state()` describes."""
        observer = cls(int(t) for t in state["ranges"])
        for t, (low, high) in state["ranges"].items():
            observer._min[int(t)] = float(low)
            observer._max[int(t)] = float(high)
        return observer


class HistogramObserver(RangeObserver):
    """A `Histogram` per tensor. `sample_elements[t]` is how many elements one sample of t holds
    (the engine may hold several rows per sample), `channels[t]` its last dimension."""

    kind = "histogram"
    tensors_apart = True

    def __init__(
        self,
        tensors: Iterable[int],
        sample_elements: Mapping[int, int] | None = None,
        channels: Mapping[int, int] | None = None,
    ) -> None:
        super().__init__(tensors)
        self.sample_elements = dict(sample_elements or {})
        self.channels = dict(channels or {})
        self.histograms: dict[int, Histogram] = {}

    def update(
        self,
        tensor_index: int,
        value: np.ndarray,
        unit_sums: np.ndarray | None = None,
        classes: tuple | None = None,
    ) -> bool:
        """Fold in a chunk of samples; returns whether every value was finite. `unit_sums`,
        `classes`: as `Histogram.add`'s, for `rows(tensor_index, value)` samples."""
        rows = self.rows(tensor_index, value)
        histogram = self.histograms.setdefault(tensor_index, Histogram())
        return histogram.add(rows, self.channels.get(tensor_index, 1), unit_sums, classes)

    def rows(self, tensor_index: int, value: np.ndarray) -> np.ndarray:
        """A chunk's values as (samples, elements per sample)."""
        per_sample = self.sample_elements.get(tensor_index) or (value.size // len(value))
        rows = value.reshape(-1, per_sample) if value.size % per_sample == 0 else value[None]
        return rows.reshape(len(rows), -1)

    def ranges(self) -> dict[int, tuple[float, float]]:
        """The exact (min, max) of every tensor that had a finite value."""
        return {t: (h.min, h.max) for t, h in self.histograms.items() if not h.empty}

    def merge(self, other: RangeObserver) -> None:
        """Add another histogram observer's counts, tensor by tensor (TypeError for another kind
        of observer)."""
        if not isinstance(other, HistogramObserver):
            raise TypeError(f"cannot merge {type(other).__name__} into a histogram observer")
        for t, histogram in other.histograms.items():
            self.histograms.setdefault(t, Histogram()).merge(histogram)

    def state(self) -> dict[str, Any]:
        """{"kind", "histograms": {tensor index: Histogram.state()}}, JSON-ready."""
        return {
            "kind": self.kind,
            "histograms": {str(t): h.state() for t, h in sorted(self.histograms.items())},
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> HistogramObserver:
        """The observer a `state()` describes."""
        observer = cls(int(t) for t in state["histograms"])
        observer.histograms = {
            int(t): Histogram.from_state(h) for t, h in state["histograms"].items()
        }
        return observer


class MeanObserver:
    """The sum of each observed tensor over samples, per element or, for a tensor with
    `classes`, per class of positions and channel (what bias correction reads alike: see
    `mean_classes.py`), and the sample count.

    Sums are kept in fixed point (int64 multiples of `RESOLUTION`), so they add exactly and in
    any order: shards merge to the single-process result bit for bit, as histograms do. Each
    value is rounded to 2^-24 (6e-8), far below what bias correction can resolve, and clipped to
    +-2^22 (4e6); NaN counts as 0. A block of at most `BLOCK` samples is summed in float64,
    which is exact for such integers, then added in int64. Chunks known to be finite and within
    the limit add row by row into a float64 sum left open across chunks (up to `BLOCK` samples):
    no clipping, no check for NaN, no conversion per chunk (a third of the cost on
    pose_detection's layer inputs). Class sums are 128-bit integers (`ClassSums`).
    """

    kind = "mean"
    RESOLUTION = 2.0**-24
    _LIMIT = 2.0**22
    BLOCK = 128  # samples per float64 sum: 128 * 2^(22 + 24) < 2^53

    def __init__(
        self,
        tensors: Iterable[int],
        sample_shapes: Mapping[int, tuple[int, ...]],
        classes: Mapping[int, PositionClasses] | None = None,
    ):
        self.tensors = frozenset(tensors)
        self.sample_shapes = dict(sample_shapes)
        self.classes = dict(classes or {})
        self._class_sums: dict[int, ClassSums] = {}
        self._sums: dict[int, np.ndarray] = {}
        self.counts: dict[int, int] = {}
        self._open: dict[int, tuple[np.ndarray, int]] = {}  # float64 sum, its sample count
        self._means: dict[int, tuple[int, np.ndarray]] = {}  # sample count, mean

    @property
    def sums(self) -> dict[int, np.ndarray]:
        """Per tensor summed element by element, the int64 sum of its values in units of
        `RESOLUTION`."""
        self.close()
        return self._sums

    @property
    def summed(self) -> frozenset[int]:
        """The tensors with sums, per element or per class."""
        return frozenset(self.sums) | frozenset(self._class_sums)

    def close(self) -> None:
        """Add every sum left open into the int64 sums."""
        for t in list(self._open):
            self._close(t)

    def __call__(
        self,
        tensor_index: int,
        value: np.ndarray,
        magnitude: float | None = None,
        finite: bool = False,
    ) -> None:
        """Fold in a chunk of samples; `magnitude`, when known, bounds |value| (within the
        clipping limit, clipping is skipped: one pass less), and `finite` says that no value is
        NaN or infinite."""
        if tensor_index not in self.tensors or not value.size:
            return
        rows = value.reshape(-1, *self.sample_shapes[tensor_index])
        clip = magnitude is None or not magnitude <= self._LIMIT
        if tensor_index in self.classes:
            classes = self.classes[tensor_index]
            sums = self._class_sums_of(tensor_index)
            for start in range(0, len(rows), self.BLOCK):
                totals = self._block_sum(rows[start : start + self.BLOCK], clip)
                classes.add_positions(sums, totals)
        elif finite and not clip and rows.dtype == np.float32 and len(rows) <= self.BLOCK:
            self._add_open(tensor_index, rows)
        else:
            for start in range(0, len(rows), self.BLOCK):
                self._add(tensor_index, self._block_sum(rows[start : start + self.BLOCK], clip))
        self.counts[tensor_index] = self.counts.get(tensor_index, 0) + len(rows)

    def kernel_target(self, tensor_index: int, rows: np.ndarray) -> dict[str, Any] | None:
        """Where the one-pass kernel adds the units of `rows` (samples, elements) of a layer
        input: `Histogram.add`'s `classes` or `unit_sums` argument, by name; counted as added.
        None where the numpy passes must fold them (`class_target`, `open_sum`)."""
        if tensor_index in self.classes:
            target = self.class_target(tensor_index, rows)
            return None if target is None else {"classes": target}
        sums = self.open_sum(tensor_index, rows)
        return None if sums is None else {"unit_sums": sums}

    def class_target(self, tensor_index: int, rows: np.ndarray) -> tuple | None:
        """For a tensor summed per class: the one-pass kernel's `classes` argument, to which
        the caller adds the units of `rows` (samples, elements); counted as added. None for
        rows that are not samples of the tensor's shape."""
        classes = self.classes[tensor_index]
        if rows.shape[1] != classes.of_position.size * classes.channels:
            return None
        sums = self._class_sums_of(tensor_index)
        self.counts[tensor_index] = self.counts.get(tensor_index, 0) + len(rows)
        return classes.kernel_argument(sums)

    def _class_sums_of(self, tensor_index: int) -> ClassSums:
        sums = self._class_sums.get(tensor_index)
        if sums is None:
            classes = self.classes[tensor_index]
            sums = self._class_sums[tensor_index] = ClassSums(classes.count * classes.channels)
        return sums

    def open_sum(self, tensor_index: int, rows: np.ndarray) -> np.ndarray | None:
        """The float64 sum (C order, a sample's shape) to which the caller adds the units of
        `rows` (samples, elements), each value rounded as `_block_sum` rounds it (clipped, NaN
        as 0): the one-pass kernel's (`histogram.one_pass`); counted as added. None where the
        rows are not samples of the tensor's shape, or more than one open sum holds."""
        total, count = self._open.get(tensor_index, (None, 0))
        if total is None:
            total = np.zeros(self.sample_shapes[tensor_index], np.float64)
        if len(rows) > self.BLOCK or rows.shape[1] != total.size:
            return None
        if count + len(rows) > self.BLOCK:
            self._close(tensor_index)
            total, count = np.zeros_like(total), 0
        self._open[tensor_index] = (total, count + len(rows))
        self.counts[tensor_index] = self.counts.get(tensor_index, 0) + len(rows)
        return total

    def _add(self, tensor_index: int, total: np.ndarray) -> None:
        if tensor_index in self._sums:
            self._sums[tensor_index] += total
        else:
            self._sums[tensor_index] = total

    def _add_open(self, tensor_index: int, rows: np.ndarray) -> None:
        """Rows within the limit, finite, float32: their units add exactly in float64."""
        total, count = self._open.get(tensor_index, (None, 0))
        if total is not None and count + len(rows) > self.BLOCK:
            self._close(tensor_index)
            total, count = None, 0
        units = rows * np.float32(1 / self.RESOLUTION)
        np.rint(units, out=units)
        if total is None:
            total = units[0].astype(np.float64)
            units = units[1:]
        for row in units:  # one pass per row, no float64 temporary of the chunk
            np.add(total, row, out=total)
        self._open[tensor_index] = (total, count + len(rows))

    def _close(self, tensor_index: int) -> None:
        total, _ = self._open.pop(tensor_index)
        self._add(tensor_index, total.astype(np.int64))

    def _block_sum(self, rows: np.ndarray, clip: bool) -> np.ndarray:
        # Clipping to a power of two, scaling by one and rounding to an integer are exact in
        # float32 (|units| <= 2^46): the same integers as in float64, with half the memory
        # traffic. Only the sum needs float64.
        if rows.dtype not in (np.float32, np.float64):
            rows = rows.astype(np.float32)  # float16 * 2^24 would overflow
        scale = rows.dtype.type(1 / self.RESOLUTION)
        if clip:
            limit = rows.dtype.type(self._LIMIT)
            units = np.clip(rows, -limit, limit)
            units *= scale
        else:
            units = rows * scale
        np.rint(units, out=units)
        total = np.add.reduce(units, axis=0, dtype=np.float64)
        if not np.isfinite(total).all():
            if not clip:  # an infinity the bound did not know of
                return self._block_sum(rows, clip=True)
            total = np.nan_to_num(units, nan=0.0).sum(axis=0, dtype=np.float64)  # NaN counts 0
        return total.astype(np.int64)

    def mean(self, tensor_index: int) -> np.ndarray | None:
        """The mean (read-only), computed once per sample count: every plan of a quantization
        asks for it, per layer. A tensor summed per class has each element at its class's
        mean."""
        count = self.counts.get(tensor_index)
        if not count or (tensor_index not in self.sums and tensor_index not in self._class_sums):
            return None
        known = self._means.get(tensor_index)
        if known is not None and known[0] == count:
            return known[1]
        if tensor_index in self._class_sums:
            classes = self.classes[tensor_index]
            per_class = self._class_sums[tensor_index].floats().reshape(classes.count, -1)
            per_class = per_class * self.RESOLUTION / (count * classes.sizes[:, None])
            # Rounded to float32 before the expansion: the same values, half the bytes written.
            mean = classes.expand(per_class.astype(np.float32))
            mean = mean.reshape(self.sample_shapes[tensor_index])
        else:
            mean = self.sums[tensor_index].astype(np.float64) * self.RESOLUTION / count
            mean = mean.astype(np.float32)
        mean.setflags(write=False)
        self._means[tensor_index] = (count, mean)
        return mean

    def merge(self, other: MeanObserver) -> None:
        """Add another shard's sums and sample counts (exact: the sums are integers). Sums left
        open on both sides add in float64 while they hold at most `BLOCK` samples together:
        closing them converts every element to int64 (0.2 s of a quantization of
        palm_detection_full, whose folds merge into the fitting fold's statistics). A tensor
        summed per element on one side and per class on the other (statistics of an older
        qtool) is summed per class; ValueError where both sum it over different classes."""
        for t in other._class_sums.keys() | self._class_sums.keys():
            theirs, mine = other.classes.get(t), self.classes.get(t)
            if t in other._class_sums:
                if t in self._class_sums and not _same_classes(theirs, mine):
                    raise ValueError(f"the statistics of tensor {t} pool different positions")
                if t not in self._class_sums:
                    self._to_classes(t, theirs)
                self._class_sums_of(t).add(other._class_sums[t])
            elif t in other.sums:
                self._add_integers(t, mine.reduce_integers(other.sums[t]))
            self.counts[t] = self.counts.get(t, 0) + other.counts.get(t, 0)
            self.sample_shapes.setdefault(t, other.sample_shapes[t])
        for t in other._sums.keys() | other._open.keys():
            if t in self._class_sums:
                continue  # added above
            total, count = other._open.get(t, (None, 0))
            mine, held = self._open.get(t, (None, 0))
            if total is not None and (mine is None or held + count <= self.BLOCK):
                self._open[t] = (total.copy() if mine is None else mine + total, held + count)
            elif total is not None:
                self._add(t, total.astype(np.int64))
            if t in other._sums:
                closed = other._sums[t]
                self._sums[t] = self._sums[t] + closed if t in self._sums else closed.copy()
            self.counts[t] = self.counts.get(t, 0) + other.counts[t]
            self.sample_shapes.setdefault(t, other.sample_shapes[t])

    def _to_classes(self, tensor_index: int, classes: PositionClasses) -> None:
        """Sum a tensor per class of `classes` from now on, its element sums so far included."""
        self.classes[tensor_index] = classes
        self._means.pop(tensor_index, None)
        per_element = self.sums.pop(tensor_index, None)
        self._class_sums[tensor_index] = ClassSums(classes.count * classes.channels)
        if per_element is not None:
            self._add_integers(tensor_index, classes.reduce_integers(per_element))

    def _add_integers(self, tensor_index: int, values: list[int]) -> None:
        have = self._class_sums_of(tensor_index).integers()
        self._class_sums[tensor_index] = ClassSums.from_integers(
            [a + b for a, b in zip(have, values, strict=True)]
        )

    def state(self) -> dict[str, Any]:
        """{"kind", "means": {tensor index: {"count", "shape", "sum"}}}, JSON-ready; the sums in
        units of RESOLUTION, per element or, with "row_classes", "column_classes" and
        "channels" (`PositionClasses`), per class and channel."""
        means: dict[str, Any] = {
            str(t): {"count": self.counts[t], "shape": list(s.shape), "sum": s.ravel().tolist()}
            for t, s in self.sums.items()
        }
        for t, sums in self._class_sums.items():
            classes = self.classes[t]
            means[str(t)] = {
                "count": self.counts[t],
                "shape": list(self.sample_shapes[t]),
                "row_classes": classes.row_class.tolist(),
                "column_classes": classes.column_class.tolist(),
                "channels": classes.channels,
                "sum": sums.integers(),
            }
        return {"kind": self.kind, "means": dict(sorted(means.items(), key=lambda i: int(i[0])))}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> MeanObserver:
        """The observer a `state()` describes; ValueError where its parts do not agree."""
        means = state["means"]
        shapes = {int(t): tuple(int(d) for d in m["shape"]) for t, m in means.items()}
        observer = cls(shapes, shapes)
        for key, m in means.items():
            t = int(key)
            observer.counts[t] = int(m["count"])
            if "row_classes" not in m:
                observer.sums[t] = np.asarray(m["sum"], np.int64).reshape(shapes[t])
                continue
            classes = PositionClasses.checked(m["row_classes"], m["column_classes"], m["channels"])
            if classes.of_position.size * classes.channels != int(np.prod(shapes[t])):
                raise ValueError(f"the classes of tensor {t} do not fit its shape")
            sums = ClassSums.from_integers(list(m["sum"]))
            if sums.low.size != classes.count * classes.channels:
                raise ValueError(
                    f"tensor {t} has {sums.low.size} class sums, not "
                    f"{classes.count * classes.channels}"
                )
            observer.classes[t] = classes
            observer._class_sums[t] = sums
        return observer


def _same_classes(a: PositionClasses, b: PositionClasses) -> bool:
    return a is b or (
        a.channels == b.channels
        and np.array_equal(a.row_class, b.row_class)
        and np.array_equal(a.column_class, b.column_class)
    )

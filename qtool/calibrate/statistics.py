"""Calibration statistics: everything quantization reads from the calibration data.

Per subgraph: a histogram (with exact min/max) of every float activation, and the mean of every
input of a layer with weights (for bias correction). The object merges exactly with the
statistics of other shards of the same model (integer counts, fixed-point sums), and saves to /
loads from JSON, so calibration can run on many machines and quantization read the merge.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from qtool.calibrate.histogram import Histogram, one_pass
from qtool.calibrate.mean_classes import position_classes
from qtool.calibrate.observers import HistogramObserver, MeanObserver
from qtool.calibrate.ranges import MINMAX, Method
from qtool.errors import DataError
from qtool.files import open_regular, os_reason, write_atomic
from qtool.model import Model, TensorType
from qtool.model.calls import called_subgraphs
from qtool.runtime.state import state_tensors
from qtool.spec import weighted_operands

STATISTICS_FORMAT = "qtool-calibration-statistics"
# Version 2 sums layer inputs per class of positions (mean_classes.py); version 1 files, summed
# per element, still load and merge.
STATISTICS_VERSION = 2
_READABLE_VERSIONS = (1, 2)


def model_fingerprint(model: Model) -> str:
    """A digest of a (prepared) float model's graph: statistics only merge and apply within it."""
    digest = hashlib.sha256()
    for subgraph in model.subgraphs:
        for tensor in subgraph.tensors:
            digest.update(f"{tensor.name}|{tensor.shape}|{tensor.dtype};".encode())
        for op in subgraph.operators:
            digest.update(f"{model.op_type(op)}|{op.inputs}|{op.outputs};".encode())
    return digest.hexdigest()


def sample_shape(model: Model, subgraph_index: int, t: int, batched: bool) -> tuple[int, ...]:
    """The shape of one sample of tensor t as the engines hold it."""
    shape = tuple(model.subgraphs[subgraph_index].tensors[t].shape)
    return shape[1:] if batched and shape[:1] == (1,) else shape


def corrected_inputs(model: Model, subgraph_index: int) -> list[int]:
    """Activation inputs of the layers whose bias may be corrected."""
    subgraph = model.subgraphs[subgraph_index]
    inputs = []
    for op in subgraph.operators:
        operands = weighted_operands(model.op_type(op))
        position = None if operands is None else operands.activation
        if position is None or position >= len(op.inputs) or op.inputs[position] < 0:
            continue
        tensor = subgraph.tensors[op.inputs[position]]
        if tensor.dtype == TensorType.FLOAT32 and not model.is_constant(tensor):
            inputs.append(op.inputs[position])
    return sorted(set(inputs))


@dataclass
class SubgraphStatistics:
    """The statistics of one subgraph; also the observer that collects them.

    Small values (a sample at a time, as LiteRT delivers them for unbatchable models) are
    copied and folded in groups of about `GROUP_BYTES`: a few numpy calls per group instead of
    a dozen per tensor and sample. Grouping changes nothing in the result (every statistic
    merges exactly); readers see the statistics after `flush()`, which every accessor does.
    """

    histograms: HistogramObserver
    means: MeanObserver
    samples: int = 0
    # The statistics of the subgraphs this one's control-flow operators ran (directly or not),
    # by subgraph index; their `samples` count the runs.
    calls: dict[int, SubgraphStatistics] = field(default_factory=dict)
    _pending: dict[int, list[np.ndarray]] = field(default_factory=dict, repr=False)
    _pending_bytes: dict[int, int] = field(default_factory=dict, repr=False)
    # Ranges by method, with the count of changes they were computed at: the auto choice plans
    # each method with and without bias correction, on the same statistics.
    _ranges: dict[Method, tuple[int, dict[int, tuple[float, float]]]] = field(
        default_factory=dict, repr=False
    )
    _changes: int = field(default=0, repr=False)

    # With the one-pass kernel a call costs little beyond its Python: grouping copies more
    # than it saves above 64 KB (palm_detection_full: 0.81 -> 0.71 s of 128 samples' calls).
    GROUP_BYTES = 1 << 16 if one_pass is not None else 1 << 20
    tensors_apart = True  # every statistic, and what is held back, is kept per tensor

    @functools.cached_property
    def tensors(self) -> frozenset[int]:
        """The tensors the statistics watch (histograms and means together)."""
        return self.histograms.tensors | self.means.tensors

    @property
    def ordered_tensors(self) -> frozenset[int]:
        """The tensors whose values must arrive element by element as the model laid them out
        (per-element means); histograms take any order."""
        return self.means.tensors

    def __call__(self, tensor_index: int, value: np.ndarray) -> None:
        if tensor_index not in self.tensors:
            return
        self._changes += 1
        if value.nbytes >= self.GROUP_BYTES:
            self._fold(tensor_index, value)
            return
        self._pending.setdefault(tensor_index, []).append(np.array(value))  # views may expire
        held = self._pending_bytes.get(tensor_index, 0) + value.nbytes
        self._pending_bytes[tensor_index] = held
        if held >= self.GROUP_BYTES:
            self._flush_tensor(tensor_index)

    def _fold(self, tensor_index: int, value: np.ndarray) -> None:
        if self._one_pass(tensor_index, value):
            return
        finite = False
        if tensor_index in self.histograms.tensors and value.size:
            finite = self.histograms.update(tensor_index, value)
        histogram = self.histograms.histograms.get(tensor_index)
        # The histogram's exact extremes bound the values, so the means may skip clipping.
        magnitude = None if histogram is None else max(-histogram.min, histogram.max)
        self.means(tensor_index, value, magnitude, finite)

    def _one_pass(self, tensor_index: int, value: np.ndarray) -> bool:
        """Fold a chunk with the C kernel (`histogram.one_pass`): the histogram and, for a
        layer input, the means' sums in one read of memory. False where the numpy passes fold
        it: no kernel, not float32, not a histogram's tensor, samples not in whole rows of the
        mean's shape or more than an open sum takes."""
        if one_pass is None or value.dtype != np.float32 or not value.size:
            return False
        if tensor_index not in self.histograms.tensors:
            return False
        if tensor_index not in self.means.tensors:
            self.histograms.update(tensor_index, value)
            return True
        rows = self.histograms.rows(tensor_index, value)
        target = self.means.kernel_target(tensor_index, rows)
        if target is None:
            return False
        self.histograms.update(tensor_index, value, **target)
        return True

    def _flush_tensor(self, tensor_index: int) -> None:
        parts = self._pending.pop(tensor_index, [])
        self._pending_bytes.pop(tensor_index, None)
        if len(parts) > 1:
            # Whole samples one after the other, flat: a 0-d tensor (a scalar activation) has
            # no axis to join its samples along; both statistics reshape to sample rows anyway.
            self._fold(tensor_index, np.concatenate([part.reshape(-1) for part in parts]))
        elif parts:
            self._fold(tensor_index, parts[0])

    def count_call(self) -> None:
        """One more run of this subgraph by a control-flow operator (the engine's `Callees`)."""
        self.samples += 1

    def flush(self) -> None:
        """Fold every value still held back (the means close their open sums when read)."""
        for tensor_index in list(self._pending):
            self._flush_tensor(tensor_index)
        for called in self.calls.values():
            called.flush()

    def merge(self, other: SubgraphStatistics) -> None:
        """Add the statistics of another shard of the same subgraph (exact)."""
        self.flush()
        other.flush()
        self._changes += 1
        self.histograms.merge(other.histograms)
        self.means.merge(other.means)
        self.samples += other.samples
        for s, called in other.calls.items():
            if s in self.calls:
                self.calls[s].merge(called)
            else:
                self.calls[s] = called

    def ranges(self, method: Method = MINMAX) -> dict[int, tuple[float, float]]:
        """The (low, high) range `method` picks for every tensor with a finite value (min/max by
        default); computed once per method until the statistics change."""
        self.flush()
        known = self._ranges.get(method)
        if known is None or known[0] != self._changes:
            found = {
                t: method.range(h) for t, h in self.histograms.histograms.items() if not h.empty
            }
            known = self._ranges[method] = (self._changes, found)
        return dict(known[1])

    def histogram(self, t: int) -> Histogram | None:
        """Tensor t's histogram; None when no value of t was observed."""
        self.flush()
        return self.histograms.histograms.get(t)

    def mean(self, t: int) -> np.ndarray | None:
        """The mean of tensor t over the samples (a layer input, for bias correction)."""
        self.flush()
        return self.means.mean(t)


def new_subgraph_statistics(
    model: Model, subgraph_index: int, tensors: Iterable[int], batched: bool
) -> SubgraphStatistics:
    """Empty statistics of `tensors` of a subgraph, and of the float activations of every
    subgraph its control flow runs (each run is one sample of it: a leading 1 is its batch)."""
    statistics = _subgraph_statistics(model, subgraph_index, tensors, batched)
    for body in called_subgraphs(model, subgraph_index):
        statistics.calls[body] = _subgraph_statistics(
            model, body, activation_tensors(model, body), True
        )
    return statistics


def activation_tensors(model: Model, subgraph_index: int = 0) -> list[int]:
    """Float tensors whose values come from running the graph: inputs, op outputs, the
    intermediates some ops report (LSTM's gates) and state tensors (LSTM's states, observed at
    every step)."""
    subgraph = model.subgraphs[subgraph_index]
    produced = set(subgraph.inputs) | {
        t for op in subgraph.operators for t in (*op.outputs, *op.intermediates)
    }
    produced.update(state_tensors(model, subgraph_index))
    return [
        t
        for t in sorted(produced)
        if t >= 0
        and subgraph.tensors[t].dtype == TensorType.FLOAT32
        and not model.is_constant(subgraph.tensors[t])
    ]


def _subgraph_statistics(
    model: Model, subgraph_index: int, tensors: Iterable[int], batched: bool
) -> SubgraphStatistics:
    """Empty statistics for one subgraph: histograms of `tensors` and means of the layer inputs
    whose bias may be corrected, with sample shapes as the engines hold them (`batched`: a
    declared leading 1 dropped)."""
    shapes = {t: sample_shape(model, subgraph_index, t, batched) for t in tensors}
    elements = {t: int(np.prod(shape, dtype=np.int64)) for t, shape in shapes.items()}
    channels = {t: (shape[-1] if shape else 1) for t, shape in shapes.items()}
    corrected = corrected_inputs(model, subgraph_index)
    mean_shapes = {t: sample_shape(model, subgraph_index, t, batched) for t in corrected}
    classes = position_classes(model, subgraph_index, mean_shapes)
    return SubgraphStatistics(
        HistogramObserver(shapes, elements, channels),
        MeanObserver(corrected, mean_shapes, classes),
    )


def _state(stats: SubgraphStatistics) -> dict[str, Any]:
    found = {
        "samples": stats.samples,
        "histograms": stats.histograms.state()["histograms"],
        "means": stats.means.state()["means"],
    }
    if stats.calls:
        found["calls"] = {str(s): _state(called) for s, called in sorted(stats.calls.items())}
    return found


def _from_state(raw: dict[str, Any]) -> SubgraphStatistics:
    return SubgraphStatistics(
        HistogramObserver.from_state({"histograms": raw["histograms"]}),
        MeanObserver.from_state({"means": raw["means"]}),
        int(raw["samples"]),
        {int(s): _from_state(called) for s, called in raw.get("calls", {}).items()},
    )


@dataclass
class CalibrationStatistics:
    """Statistics of every calibrated subgraph of one model."""

    fingerprint: str
    subgraphs: dict[int, SubgraphStatistics] = field(default_factory=dict)

    @property
    def samples(self) -> int:
        """The samples observed, summed over the subgraphs."""
        return sum(s.samples for s in self.subgraphs.values())

    def of(self, subgraph_index: int) -> SubgraphStatistics | None:
        """The statistics of a subgraph: an entry point's, or those of a subgraph control flow
        ran, as its caller's statistics hold them."""
        found = self.subgraphs.get(subgraph_index)
        if found is not None:
            return found
        return next(
            (
                entry.calls[subgraph_index]
                for entry in self.subgraphs.values()
                if subgraph_index in entry.calls
            ),
            None,
        )

    def merge(self, other: CalibrationStatistics) -> None:
        """Add another shard's statistics (exact); DataError when they come from another model."""
        if other.fingerprint != self.fingerprint:
            raise DataError("the statistics come from different models and cannot be merged")
        for s, stats in other.subgraphs.items():
            if s in self.subgraphs:
                try:
                    self.subgraphs[s].merge(stats)
                except ValueError as exc:
                    raise DataError(f"the statistics cannot be merged: {exc}") from None
            else:
                self.subgraphs[s] = stats

    def state(self) -> dict[str, Any]:
        """The statistics as JSON-ready data (what `save` writes)."""
        for stats in self.subgraphs.values():
            stats.flush()
        return {
            "format": STATISTICS_FORMAT,
            "version": STATISTICS_VERSION,
            "fingerprint": self.fingerprint,
            "subgraphs": {str(s): _state(stats) for s, stats in sorted(self.subgraphs.items())},
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> CalibrationStatistics:
        """The statistics a `state()` describes; DataError for another format or version, or
        malformed data."""
        if state.get("format") != STATISTICS_FORMAT:
            raise DataError("not a qtool calibration statistics file")
        if state.get("version") not in _READABLE_VERSIONS:
            raise DataError(f"statistics format version {state.get('version')} is not supported")
        try:
            subgraphs = {int(s): _from_state(raw) for s, raw in state["subgraphs"].items()}
            fingerprint = str(state["fingerprint"])
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise DataError(f"malformed calibration statistics ({exc})") from None
        return cls(fingerprint, subgraphs)

    def save(self, path: str | Path, overwrite: bool = True) -> None:
        """Written atomically (never a partial file), compact JSON; without `overwrite` only
        where no file is (checked as the file is put in place)."""
        text = json.dumps(self.state(), separators=(",", ":")) + "\n"
        write_atomic(path, text, overwrite=overwrite)

    @classmethod
    def load(cls, path: str | Path) -> CalibrationStatistics:
        """Statistics saved by `save`; every problem reading the file is a DataError naming it."""
        try:
            with open_regular(path) as handle:
                state = json.loads(handle.read())
        except OSError as exc:
            raise DataError(
                f"{path}: cannot read calibration statistics ({os_reason(exc)})"
            ) from None
        except ValueError as exc:
            raise DataError(f"{path}: not JSON calibration statistics ({exc})") from None
        if not isinstance(state, dict):
            raise DataError(f"{path}: not a qtool calibration statistics file")
        return cls.from_state(state)

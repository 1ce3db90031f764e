"""One calibration pass that also sets samples aside for an honest accuracy estimate.

A quarter of the first `FOLD_WINDOW` samples goes to an evaluation fold: its float outputs are
kept as the reference, and its statistics are kept apart from those of the other samples (the
fitting fold). Quantization choices that need a measurement (which calibration
method, which layers need 16 bits) are fitted on one fold and judged on the other, and the final
model is calibrated on both. A separate held-out dataset, when given, is the evaluation fold
instead and never contributes to calibration.

A model that keeps state (qtool.runtime.state) reads its samples as one sequence: its fold is
the last quarter of the samples, a sequence of its own that starts from the initial state, as
every run of a dataset (calibration, held-out data) does.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial

import numpy as np

from qtool.calibrate.calibrator import CalibrationResult, Calibrator, activation_tensors
from qtool.calibrate.datasets import Batch, Dataset
from qtool.calibrate.statistics import (
    CalibrationStatistics,
    SubgraphStatistics,
    model_fingerprint,
    new_subgraph_statistics,
)
from qtool.errors import DataError, UnsupportedOpError
from qtool.heap import retained_heap
from qtool.model import Model
from qtool.prepare import prepare_float_model
from qtool.runtime import Engine
from qtool.runtime.litert import XnnpackRunner
from qtool.runtime.state import keeps_state

FOLD_WINDOW = 128  # samples among which the fold is chosen (later ones all calibrate)
_FOLD_SHARE = 1 << 30  # a quarter of the 32-bit hash range
_GOLDEN = np.uint64(2654435769)  # 2^32 / golden ratio
MIN_SAMPLES_FOR_HOLDOUT = 8


@dataclass
class EvaluationSet:
    """Held-out samples and what the float model computes on them."""

    inputs: list[np.ndarray]  # one array per model input, (N, *sample_shape)
    reference: list[np.ndarray]  # float outputs, (N, ...)
    source: str  # "calibration fold" or the held-out dataset's name

    def __post_init__(self) -> None:
        refuse_nonfinite(self.reference, self.source)

    @property
    def samples(self) -> int:
        """The number of held-out samples (0 when there are no inputs)."""
        return int(self.inputs[0].shape[0]) if self.inputs else 0


def refuse_nonfinite(reference: list[np.ndarray], source: str) -> None:
    """DataError when the float model computes inf or NaN on the samples: no accuracy can be
    measured against such outputs (an SQNR of NaN, which passes no threshold honestly)."""
    for k, values in enumerate(reference):
        values = np.asarray(values)
        if values.dtype.kind in "fc" and not np.isfinite(values).all():
            rows = values.reshape(values.shape[0], -1) if values.ndim else values.reshape(1, 1)
            bad = int(np.count_nonzero(~np.isfinite(rows).all(axis=1)))
            raise DataError(
                f"the float model computes inf or NaN at output {k} on {bad} of {rows.shape[0]} "
                f"samples of the {source}, so no accuracy can be measured: its data or weights "
                "take it beyond the float32 range (values near 3.4e38?)"
            )


@dataclass
class Collected:
    """What calibrating one subgraph yields: the statistics of every sample and of the fitting
    fold, the evaluation fold (None when there is none: too few samples and no held-out dataset,
    or a model the numpy engine cannot run), and the pass's CalibrationResult."""

    statistics: SubgraphStatistics  # every calibration sample
    fit: SubgraphStatistics  # the calibration samples outside the evaluation fold
    evaluation: EvaluationSet | None
    calibration: CalibrationResult
    fit_data: Dataset | None  # the samples `fit` came from, for further passes (None: unknown)


def selected(
    dataset: Dataset, keep: Callable[[np.ndarray], np.ndarray], limit: int | None
) -> Dataset:
    """The samples of `dataset` whose running index `keep` accepts, read lazily."""

    def read() -> Iterator[Batch]:
        start = 0
        for batch in dataset.iter_chunks(256):
            n = batch[0].shape[0]
            mask = keep(np.arange(start, start + n))
            start += n
            if mask.any():
                yield [values[mask] for values in batch]

    return Dataset(read=read, source=dataset.source, synthetic=dataset.synthetic, limit=limit)


def _materialise(dataset: Dataset) -> list[np.ndarray]:
    chunks = list(dataset.iter_chunks(1 << 30))
    if not chunks:
        return []
    return [np.concatenate(arrays) for arrays in zip(*chunks, strict=True)]


def _litert_runs_reference(model: Model, subgraph_index: int, engine: str) -> bool:
    """Whether the float outputs come from LiteRT: the engine that calibrated, when its
    outputs hold the samples stacked (LiteRT's outputs are the numpy engine's to 104-128 dB
    and come 10x sooner: 0.75 s of a 4 s quantization of pose_detection on the numpy engine)."""
    subgraph = model.subgraphs[subgraph_index]
    stacked = not subgraph.inputs_lead_with_one() or all(
        subgraph.tensors[t].shape[:1] == [1] for t in subgraph.outputs
    )
    # A sequence runs on the numpy engine: LiteRT's runner batches samples.
    sequence = keeps_state(model, subgraph_index)
    return engine == "litert" and subgraph_index == 0 and stacked and not sequence


def _reference(
    model: Model,
    subgraph_index: int,
    inputs: list[np.ndarray],
    observer,
    engine: str,
    elsewhere: Callable[[], list[np.ndarray] | None] | None = None,
    runner: XnnpackRunner | None = None,
) -> list[np.ndarray]:
    """The float outputs on `inputs` (samples stacked), `observer` seeing every tensor, run by
    the engine that calibrated. `elsewhere`: waits for the outputs being computed elsewhere
    (None from it: they could not be); `runner`: the calibration's, for the observer's
    tensors."""
    subgraph = model.subgraphs[subgraph_index]
    outputs = list(subgraph.outputs)
    leading_one = subgraph.inputs_lead_with_one()
    if not _litert_runs_reference(model, subgraph_index, engine):
        return Engine(model, subgraph_index).run(inputs, observers=[observer])
    observers = [observer]
    if elsewhere is not None:
        # Only the observed tensors run here, in batches: read with the outputs, a detector's
        # outputs (a RESHAPE to [1, -1] folds the batch) would have every sample run alone.
        if runner is None:
            runner = XnnpackRunner(
                model, sorted(observer.tensors), ordered=observer.ordered_tensors
            )
        with retained_heap():  # as calibrate(): the observers' temporaries
            runner.run(inputs, [observer])
        found = elsewhere()
        if found is not None:
            return [v.reshape(-1, *v.shape[2:]) if leading_one else v for v in found]
        observers = []
    parts: dict[int, list[np.ndarray]] = {t: [] for t in outputs}

    def keep(t: int, value: np.ndarray) -> None:
        if t in parts:
            parts[t].append(np.array(value))  # a view of the interpreter's memory

    tensors = set(outputs).union(*(o.tensors for o in observers))
    ordered = set(outputs).union(*(o.ordered_tensors for o in observers))
    runner = XnnpackRunner(model, sorted(tensors), ordered=ordered)
    with retained_heap():
        runner.run(inputs, [*observers, keep])
    join = np.concatenate if leading_one else np.stack
    return [join(parts[t]) for t in outputs]


def collect(
    model: Model,
    dataset: Dataset,
    engine: str = "auto",
    subgraph_index: int = 0,
    progress: Callable[[int], None] | None = None,
    holdout: Dataset | None = None,
    evaluate: bool = True,
    on_fit: Callable[[SubgraphStatistics, list[np.ndarray]], None] | None = None,
    float_outputs: Callable[[list[np.ndarray]], Callable[[], list[np.ndarray] | None]]
    | None = None,
) -> Collected:
    """Calibrate `model` on `dataset`, keeping an evaluation fold (or using `holdout`).

    With `evaluate` False, or when the numpy engine cannot run the model (the fold's reference
    outputs and every simulation need it), all samples calibrate and there is no fold.
    `on_fit(fit statistics, evaluation inputs)` is called once both exist, before the
    evaluation samples run (the returned `EvaluationSet` holds that very list of inputs).
    `float_outputs(inputs)`, where LiteRT computes the float outputs, starts computing them
    elsewhere (LiteRT in child processes) and returns what waits for them (samples stacked,
    a leading 1 kept; None: they could not be): this process then only observes.
    """
    tensors = activation_tensors(model, subgraph_index)
    subgraph = model.subgraphs[subgraph_index]
    batched = all(subgraph.tensors[t].shape[:1] == [1] for t in subgraph.inputs)

    def fresh() -> SubgraphStatistics:
        return new_subgraph_statistics(model, subgraph_index, tensors, batched)

    if evaluate:
        try:
            Engine(model, subgraph_index)
        except UnsupportedOpError:
            evaluate = False
    expected = dataset.expected_samples
    in_fold, fold_size = _in_fold, _fold_size
    if keeps_state(model, subgraph_index):
        # A sequence: the fold is its tail, which needs the length known beforehand (unknown:
        # no fold).
        expected = expected or 0
        in_fold, fold_size = partial(_in_tail, expected), _tail_size
    folded = (
        evaluate and holdout is None and (expected is None or expected >= MIN_SAMPLES_FOR_HOLDOUT)
    )
    fit_data = dataset
    if folded:
        fit_data = selected(dataset, lambda i: ~in_fold(i), None)
        fit_data.size_hint = None if expected is None else expected - fold_size(expected)
    fit = fresh()
    began = time.perf_counter()  # the engine's set-up counts in the calibration's time
    calibrator = Calibrator(model, engine, subgraph_index, fit)
    calibration = calibrator.run(fit_data, progress, began)
    fit.samples = calibration.samples
    fit.flush()
    statistics = copy.deepcopy(fit)
    evaluation = None
    if folded or (evaluate and holdout is not None):
        source = holdout or selected(dataset, in_fold, None)
        inputs = _materialise(source)
        if holdout is not None and not (inputs and inputs[0].shape[0]):
            raise DataError(f"{holdout.source}: no held-out samples found")
        if inputs and inputs[0].shape[0]:
            outputs_elsewhere = None
            if float_outputs is not None and _litert_runs_reference(
                model, subgraph_index, calibration.engine
            ):
                outputs_elsewhere = float_outputs(inputs)  # before on_fit's: first in line
            if on_fit is not None:
                on_fit(fit, inputs)
            fold = fresh()
            reference = _reference(
                model,
                subgraph_index,
                inputs,
                fold,
                calibration.engine,
                outputs_elsewhere,
                calibrator.xnnpack,
            )
            fold.samples = int(inputs[0].shape[0])
            if holdout is None:
                statistics.merge(fold)
                if progress:
                    progress(fold.samples)
            evaluation = EvaluationSet(
                inputs, reference, "held-out data" if holdout is not None else "calibration fold"
            )
    if holdout is None and evaluation is not None and statistics.samples < MIN_SAMPLES_FOR_HOLDOUT:
        # A dataset of unknown size (a generator) turned out too small to hold samples out.
        evaluation, fit, fit_data = None, copy.deepcopy(statistics), dataset
    calibration.samples = statistics.samples
    return Collected(statistics, fit, evaluation, calibration, fit_data)


def _in_fold(index: np.ndarray) -> np.ndarray:
    """Whether samples belong to the evaluation fold: those of the first FOLD_WINDOW whose
    golden-ratio (Weyl) sequence value falls in the lowest quarter.

    Every prefix of the data holds close to a quarter of fold samples, and no period in the
    data lines up with the fold: every 4th sample would be exactly the whole faces of a
    dataset built as three crops then a face, an estimate 6 dB too optimistic (measured).
    """
    index = np.asarray(index)
    # From index + 1: sample 0 always calibrates (a generator of one sample has no fold).
    weyl = ((index.astype(np.uint64) + np.uint64(1)) * _GOLDEN) & np.uint64(0xFFFFFFFF)
    return (weyl < _FOLD_SHARE) & (index < FOLD_WINDOW)


def first_samples(dataset: Dataset, count: int = FOLD_WINDOW) -> list[np.ndarray]:
    """The first `count` samples of a dataset, one array per input (samples stacked)."""
    return _materialise(selected(dataset, lambda i: i < count, None))


def fold_inputs(dataset: Dataset) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The samples of the first FOLD_WINDOW outside the evaluation fold and those in it: what
    a choice is fitted on and what judges it (the weight modes' `--target-sqnr`)."""
    window = selected(dataset, lambda i: i < FOLD_WINDOW, None)
    fitting = _materialise(selected(window, lambda i: ~_in_fold(i), None))
    return fitting, _materialise(selected(window, _in_fold, None))


def _fold_size(samples: int) -> int:
    return int(_in_fold(np.arange(min(samples, FOLD_WINDOW))).sum())


def _in_tail(samples: int, index: np.ndarray) -> np.ndarray:
    """The fold of a sequence of `samples`: its last quarter."""
    return np.asarray(index) >= samples - _tail_size(samples)


def _tail_size(samples: int) -> int:
    return samples // 4


def from_statistics(
    model: Model,
    statistics: SubgraphStatistics,
    subgraph_index: int = 0,
    holdout: Dataset | None = None,
    source: str = "statistics",
) -> Collected:
    """What `collect` returns, for statistics gathered earlier (merged shards, say): no pass
    over calibration data; a held-out dataset, when given, is the evaluation fold."""
    evaluation = None
    if holdout is not None:
        inputs = _materialise(holdout)
        if inputs and inputs[0].shape[0]:
            reference = Engine(model, subgraph_index).run(inputs)
            evaluation = EvaluationSet(inputs, reference, "held-out data")
    calibration = CalibrationResult(
        ranges=statistics.ranges(),
        samples=statistics.samples,
        engine="statistics",
        seconds=0.0,
        source=source,
        synthetic=False,
        observer=statistics,
    )
    return Collected(statistics, statistics, evaluation, calibration, None)


def calibration_statistics(
    model: Model,
    data: Mapping[int, Dataset],
    engine: str = "auto",
    progress: Callable[[int], None] | None = None,
) -> CalibrationStatistics:
    """Statistics of every sample (no evaluation fold), to save and merge with other shards
    (`qtool calibrate`), then quantize from (`statistics=`)."""
    prepared = prepare_float_model(model)
    collected = {
        s: collect(prepared.model, dataset, engine, s, progress, evaluate=False)
        for s, dataset in sorted(data.items())
    }
    return CalibrationStatistics(
        model_fingerprint(prepared.model), {s: c.statistics for s, c in collected.items()}
    )

"""One calibration pass that also sets samples aside for honest choices and an honest estimate.

Without a held-out dataset, half of the first `FOLD_WINDOW` calibration samples are set aside in
two folds (which samples: `fold_of`):

- the *selection fold* (a quarter): quantization choices that need a measurement (which
  calibration method, bias correction, rounding optimisation, the layers a target needs in
  16 bits or float) are fitted on the other samples (the *fitting fold*) and judged on it;
- the *cross fold* (a quarter of the fitting fold, with `MIN_SAMPLES_FOR_CROSS` samples or more
  of a known count): the calibration method is judged on it too, fitted on the fitting fold
  without it plus the selection fold, so that the choice reads twice as many samples and a
  method that fails on either fold shows it (`qtool.quantize.auto`);
- the *estimate fold* (a quarter): no choice ever sees it. The accuracy qtool reports is that
  of the plan fitted on the fitting and selection folds with the choices made, measured on it.

The final model is calibrated on every sample. A held-out dataset, when given, is the estimate
fold instead (it never calibrates), and the selection fold comes from the calibration samples
as before. With fewer than `MIN_SAMPLES_FOR_HOLDOUT` calibration samples there are no folds:
without a held-out dataset nothing is estimated, with one the choices are judged on it too, and
the estimate says so (`Collected.shared`).

A model that keeps state (qtool.runtime.state) reads its samples as one sequence: its folds are
its tail (the last quarter the estimate fold, the quarter before it the selection fold), each a
sequence of its own that starts from the initial state, as every run of a dataset (calibration,
held-out data) does.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

import numpy as np

from qtool.calibrate.calibrator import CalibrationResult, Calibrator, activation_tensors
from qtool.calibrate.datasets import Batch, Dataset
from qtool.calibrate.set_aside import FoldSplit, KeptValues
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
from qtool.runtime.parallel import single_threaded_blas
from qtool.runtime.state import keeps_state

FOLD_WINDOW = 128  # samples among which the folds are chosen (later ones all calibrate)
_QUARTER = 1 << 30  # a quarter of the 32-bit hash range
_GOLDEN = np.uint64(2654435769)  # 2^32 / golden ratio
MIN_SAMPLES_FOR_HOLDOUT = 8
MIN_SAMPLES_FOR_CROSS = 16  # fewer: the fitting fold without the cross fold would be too thin
FIT, SELECTION, ESTIMATE, CROSS = 0, 1, 2, 3  # the folds, as `fold_of` numbers them
HELD_OUT = "held-out data"
ESTIMATE_FOLD = "calibration fold"  # the estimate fold's source
SELECTION_FOLD = "selection fold"
CROSS_FOLD = "cross fold"


@dataclass
class EvaluationSet:
    """Held-out samples and what the float model computes on them."""

    inputs: list[np.ndarray]  # one array per model input, (N, *sample_shape)
    reference: list[np.ndarray]  # float outputs, (N, ...)
    source: str  # HELD_OUT, ESTIMATE_FOLD or SELECTION_FOLD

    def __post_init__(self) -> None:
        refuse_nonfinite(self.reference, self.source)
        for values in self.reference:
            # Every candidate is measured against these: read-only, so that what the measures
            # derive from them is computed once (qtool.numerics.measures).
            if isinstance(values, np.ndarray):
                values.setflags(write=False)

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
    """What calibrating one subgraph yields.

    Attributes:
        statistics: every calibration sample (what the final plan is fitted on).
        fit: the fitting fold: what candidate plans are fitted on.
        selection: the samples choices are judged on (None: no choice can be measured).
        estimate: the samples the reported accuracy is measured on (None: not estimated).
        estimate_fit: what the estimated plan is fitted on: every calibration sample with a
            held-out dataset, else the fitting and selection folds.
        calibration: the pass's CalibrationResult.
        fit_data: the samples `fit` came from, for further passes (None: unknown).
        cross: the cross fold (None: none was kept), part of `fit`.
        cross_fit: what the cross fold's candidates are fitted on: the fitting fold without
            it, plus the selection fold.
    """

    statistics: SubgraphStatistics
    fit: SubgraphStatistics
    selection: EvaluationSet | None
    estimate: EvaluationSet | None
    estimate_fit: SubgraphStatistics
    calibration: CalibrationResult
    fit_data: Dataset | None
    cross: EvaluationSet | None = None
    cross_fit: SubgraphStatistics | None = None

    @property
    def judging(self) -> list[tuple[SubgraphStatistics, EvaluationSet]]:
        """The folds the calibration method is judged on, each with what its candidates are
        fitted on: the selection fold, then the cross fold when there is one."""
        if self.selection is None:
            return []
        folds = [(self.fit, self.selection)]
        if self.cross is not None and self.cross_fit is not None:
            folds.append((self.cross_fit, self.cross))
        return folds

    @property
    def shared(self) -> bool:
        """Whether the choices were judged on the estimate's own samples (too few calibration
        samples for a selection fold): the estimate is then optimistic."""
        return self.estimate is not None and self.estimate is self.selection


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
        called = getattr(observer, "calls", {})  # statistics of what control flow runs
        return Engine(model, subgraph_index).run(
            inputs, observers=[observer], calls_observed=called
        )
    samples = int(inputs[0].shape[0])
    if elsewhere is None and runner is not None and runner.places_apart(outputs, samples):
        # The calibration's runner hands the outputs over in their own places: read them in
        # its batched run, as the observer's tensors are.
        keeper = KeptValues(outputs)
        with retained_heap():  # as calibrate(): the observers' temporaries
            runner.run(inputs, [observer, keeper])
        return keeper.stacked(leading_one)
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
    tensors = set(outputs).union(*(o.tensors for o in observers))
    ordered = set(outputs).union(*(o.ordered_tensors for o in observers))
    runner = XnnpackRunner(model, sorted(tensors), ordered=ordered)
    keeper = KeptValues(outputs)
    with retained_heap():
        runner.run(inputs, [*observers, keeper])
    return keeper.stacked(leading_one)


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
    """Calibrate `model` on `dataset`, keeping a selection fold and an estimate fold (or using
    `holdout` as the estimate's samples): the module docstring says what each is for.

    With `evaluate` False, or when the numpy engine cannot run the model (the folds' reference
    outputs and every simulation need it), all samples calibrate and there are no folds.
    `on_fit(fit statistics, selection inputs)` is called once both exist, before the folds'
    samples run (the selection `EvaluationSet` holds that very list of inputs); the cross
    fold's candidates are not started early, since the choice runs only those that can win.
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
    own_estimate = holdout is None
    # A cross fold needs the sample count known: the fitting fold without it must keep samples.
    cross = expected is not None and expected >= MIN_SAMPLES_FOR_CROSS
    assign = partial(fold_of, own_estimate=own_estimate, cross=cross)
    window = FOLD_WINDOW
    if keeps_state(model, subgraph_index):
        # A sequence: the folds are its tail, which needs the length known beforehand (unknown:
        # no folds).
        expected = expected or 0
        assign, window = partial(_tail_folds, expected, own_estimate), expected
    folded = evaluate and (expected is None or expected >= MIN_SAMPLES_FOR_HOLDOUT)
    fit_data = core_data = dataset
    wanted = (CROSS, SELECTION, ESTIMATE) if own_estimate else (CROSS, SELECTION)
    split = FoldSplit(dataset, assign, FIT, wanted)
    if folded:
        fit_data = selected(dataset, lambda i: np.isin(assign(i), (FIT, CROSS)), None)
        core_data = split.fitting
        held_back = None if expected is None else assign(np.arange(min(expected, window))) != FIT
        core_data.size_hint = None if expected is None else expected - int(held_back.sum())
    fit = fresh()
    began = time.perf_counter()  # the engine's set-up counts in the calibration's time
    calibrator = Calibrator(model, engine, subgraph_index, fit)
    calibration = calibrator.run(core_data, progress, began)
    fit.samples = calibration.samples
    fit.flush()
    sets: dict[int, EvaluationSet] = {}
    held: dict[int, list[np.ndarray]] = {}
    elsewhere: dict[int, Callable[[], list[np.ndarray] | None]] = {}
    if evaluate:
        held = dict(split.held_folds()) if folded else {}
        if holdout is not None:
            held[ESTIMATE] = _materialise(holdout)
            if not (held[ESTIMATE] and held[ESTIMATE][0].shape[0]):
                raise DataError(f"{holdout.source}: no held-out samples found")
        held = {fold: inputs for fold, inputs in held.items() if inputs and inputs[0].shape[0]}
        runner = calibrator.xnnpack
        if (
            float_outputs is not None
            and _litert_runs_reference(model, subgraph_index, calibration.engine)
            and not (
                runner is not None
                and all(
                    runner.places_apart(subgraph.outputs, int(inputs[0].shape[0]))
                    for inputs in held.values()
                )
            )
        ):
            # Outputs the calibration's batched run cannot hand over in place (a detector's,
            # folded by a RESHAPE to [1, -1]) come from LiteRT's children meanwhile. Before
            # on_fit's candidates: first in line.
            elsewhere = {fold: float_outputs(inputs) for fold, inputs in held.items()}

    def observe(fold: int) -> tuple[SubgraphStatistics, list[np.ndarray]]:
        """The fold's statistics and float outputs (run by the engine that calibrated)."""
        observed = fresh()
        reference = _reference(
            model,
            subgraph_index,
            held[fold],
            observed,
            calibration.engine,
            elsewhere.get(fold),
            calibrator.xnnpack,
        )
        observed.samples = int(held[fold][0].shape[0])
        if progress and not (fold == ESTIMATE and holdout is not None):
            progress(observed.samples)
        return observed, reference

    # The fitting fold without the cross fold; the cross fold judges only beside a selection.
    core = copy.deepcopy(fit) if CROSS in held and SELECTION in held else None
    if CROSS in held:
        observed, reference = observe(CROSS)
        fit.merge(observed)
        if core is not None:
            sets[CROSS] = EvaluationSet(held[CROSS], reference, CROSS_FOLD)
    statistics = copy.deepcopy(fit)
    estimate_fit = statistics
    with ThreadPoolExecutor(1, thread_name_prefix="qtool-on-fit") as beside:
        # on_fit (the candidates' plans: Python on one core) runs beside the folds'
        # observation (LiteRT and the observers, which release the GIL); it reads `fit`,
        # which nothing here changes (the cross fold is merged into it before).
        started = None
        if on_fit is not None and SELECTION in held:
            started = beside.submit(on_fit, fit, held[SELECTION])
        for fold in (SELECTION, ESTIMATE):
            if fold not in held:
                continue
            observed, reference = observe(fold)
            if fold == SELECTION and core is not None:
                core.merge(copy.deepcopy(observed))  # now what the cross fold's candidates fit on
            if fold == ESTIMATE and holdout is not None:
                source = HELD_OUT
                estimate_fit = statistics  # the final plan's: every calibration sample
            else:
                source = SELECTION_FOLD if fold == SELECTION else ESTIMATE_FOLD
                if fold == ESTIMATE:
                    estimate_fit = copy.deepcopy(statistics)  # the fitting and selection folds
                statistics.merge(observed)
            sets[fold] = EvaluationSet(held[fold], reference, source)
        if started is not None:
            started.result()  # its exception, if any, is raised here
    if folded and statistics.samples < MIN_SAMPLES_FOR_HOLDOUT:
        # A dataset of unknown size (a generator) turned out too small to hold samples out.
        sets = {ESTIMATE: sets[ESTIMATE]} if holdout is not None and ESTIMATE in sets else {}
        fit, fit_data, estimate_fit = copy.deepcopy(statistics), dataset, statistics
    estimate = sets.get(ESTIMATE)
    selection = sets.get(SELECTION, estimate)  # none of its own: judged on the estimate's
    calibration.samples = statistics.samples
    return Collected(
        statistics,
        fit,
        selection,
        estimate,
        estimate_fit,
        calibration,
        fit_data,
        sets.get(CROSS),
        core if CROSS in sets else None,
    )


def fold_of(index: np.ndarray, own_estimate: bool = True, cross: bool = False) -> np.ndarray:
    """Each sample's fold (FIT, SELECTION, ESTIMATE or CROSS): among the first FOLD_WINDOW
    samples, those whose golden-ratio (Weyl) sequence value falls in the lowest quarter are the
    selection fold, with `own_estimate` those in the next quarter the estimate fold, and with
    `cross` those in the third quarter the cross fold (part of the fitting fold).

    Every prefix of the data holds close to a quarter of each fold, and no period in the data
    lines up with a fold: every 4th sample would be exactly the whole faces of a dataset built
    as three crops then a face, an estimate 6 dB too optimistic (measured).
    """
    index = np.asarray(index)
    # From index + 1: sample 0 always calibrates (a generator of one sample has no fold).
    weyl = ((index.astype(np.uint64) + np.uint64(1)) * _GOLDEN) & np.uint64(0xFFFFFFFF)
    inside = index < FOLD_WINDOW
    folds = np.full(index.shape, FIT, np.int8)
    folds[inside & (weyl < _QUARTER)] = SELECTION
    if own_estimate:
        folds[inside & (weyl >= _QUARTER) & (weyl < 2 * _QUARTER)] = ESTIMATE
    if cross:
        folds[inside & (weyl >= 2 * _QUARTER) & (weyl < 3 * _QUARTER)] = CROSS
    return folds


def first_samples(dataset: Dataset, count: int = FOLD_WINDOW) -> list[np.ndarray]:
    """The first `count` samples of a dataset, one array per input (samples stacked)."""
    return _materialise(selected(dataset, lambda i: i < count, None))


def fold_inputs(dataset: Dataset) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The samples of the first FOLD_WINDOW in the fitting fold and those held out of it (the
    selection fold of `fold_of` without an estimate fold): what a choice is fitted on and what
    the accuracy is measured on (the weight modes' `--target-sqnr`)."""
    window = selected(dataset, lambda i: i < FOLD_WINDOW, None)
    fitting = _materialise(selected(window, lambda i: fold_of(i, False) == FIT, None))
    return fitting, _materialise(selected(window, lambda i: fold_of(i, False) != FIT, None))


def _tail_folds(samples: int, own_estimate: bool, index: np.ndarray) -> np.ndarray:
    """Each sample's fold in a sequence of `samples`: with `own_estimate`, the last quarter is
    the estimate fold and the quarter before it the selection fold; else the last quarter is the
    selection fold."""
    index = np.asarray(index)
    quarter = samples // 4
    folds = np.full(index.shape, FIT, np.int8)
    if own_estimate:
        folds[index >= samples - 2 * quarter] = SELECTION
        folds[index >= samples - quarter] = ESTIMATE
    else:
        folds[index >= samples - quarter] = SELECTION
    return folds


def from_statistics(
    model: Model,
    statistics: SubgraphStatistics,
    subgraph_index: int = 0,
    holdout: Dataset | None = None,
    source: str = "statistics",
) -> Collected:
    """What `collect` returns, for statistics gathered earlier (merged shards, say): no pass
    over calibration data, so no folds; a held-out dataset, when given, is the estimate's
    samples and the choices are judged on it too."""
    estimate = None
    if holdout is not None:
        inputs = _materialise(holdout)
        if inputs and inputs[0].shape[0]:
            reference = Engine(model, subgraph_index).run(inputs)
            estimate = EvaluationSet(inputs, reference, HELD_OUT)
    calibration = CalibrationResult(
        ranges=statistics.ranges(),
        samples=statistics.samples,
        engine="statistics",
        seconds=0.0,
        source=source,
        synthetic=False,
        observer=statistics,
    )
    return Collected(statistics, statistics, estimate, estimate, statistics, calibration, None)


@single_threaded_blas()  # as quantize_loaded: LiteRT and the observers take the cores
def calibration_statistics(
    model: Model,
    data: Mapping[int, Dataset],
    engine: str = "auto",
    progress: Callable[[int], None] | None = None,
) -> CalibrationStatistics:
    """Statistics of every sample (no folds), to save and merge with other shards
    (`qtool calibrate`), then quantize from (`statistics=`)."""
    prepared = prepare_float_model(model)
    collected = {
        s: collect(prepared.model, dataset, engine, s, progress, evaluate=False)
        for s, dataset in sorted(data.items())
    }
    return CalibrationStatistics(
        model_fingerprint(prepared.model), {s: c.statistics for s, c in collected.items()}
    )

"""Run a float model over calibration data and record the range of every activation tensor.

Two engines can do the running: qtool's numpy engine (batched and threaded, always available)
and, where the `ai-edge-litert` package is installed, LiteRT (qtool.runtime.litert). `auto`
takes LiteRT when it can run the model and numpy otherwise ("Choosing the calibration engine"
in docs/performance.md gives the measurements behind this rule).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from qtool.calibrate.datasets import Batch, Dataset
from qtool.calibrate.memory import check_memory
from qtool.calibrate.observers import MinMaxObserver, RangeObserver
from qtool.calibrate.statistics import activation_tensors
from qtool.errors import DataError, UnsupportedOpError, UsageError
from qtool.heap import retained_heap
from qtool.model import Model
from qtool.model.calls import call_sites
from qtool.runtime import Engine
from qtool.runtime.litert import (
    XnnpackRunner,
    litert_available,
    litert_can_run,
    run_preserved,
)
from qtool.runtime.state import keeps_state

ENGINES = ("auto", "numpy", "litert")
Progress = Callable[[int], None]
# Samples read from the dataset at a time: enough chunks for every thread to take several.
_CHUNKS_PER_THREAD = 4
# The samples of a model that keeps state run on one LiteRT interpreter: read them all at once.
_SEQUENCE = 1 << 30


@dataclass
class CalibrationResult:
    """What one calibration pass found: the range of every activation, and how it was obtained.

    Attributes:
        samples: the number of samples observed.
        engine: what ran the model: "numpy", "litert", or "statistics" for statistics gathered
            earlier.
        seconds: the wall time of the pass, the engine's set-up included.
        source: where the samples came from (a path, a type name, "synthetic"...).
        synthetic: whether the samples were generated at random rather than given.
        observer: the observer that holds the statistics the ranges come from.
    """

    ranges: dict[
        int, tuple[float, float]
    ]  # tensor index (of the calibrated subgraph) -> (min, max)
    samples: int
    engine: str
    seconds: float
    source: str
    synthetic: bool
    observer: RangeObserver


def choose_engine(model: Model, requested: str, subgraph_index: int = 0) -> str:
    """The engine a calibration runs on: `requested`, or for "auto" the fastest that can run
    the model (docs/performance.md: "Choosing the calibration engine"); for a model that keeps
    state, the numpy engine where it can (samples as one sequence, LSTM states seen at every
    step), else LiteRT's builtin kernels on one interpreter."""
    if requested not in ENGINES:
        raise UsageError(f"`engine` must be one of {', '.join(ENGINES)}, not {requested!r}")
    if requested == "litert" and not litert_available():
        raise UsageError(
            "`engine='litert'` needs the ai-edge-litert package (pip install ai-edge-litert)"
        )
    if keeps_state(model, subgraph_index) and requested == "auto":
        # A sequence: the numpy engine sees every step of an LSTM's states; LiteRT with
        # XNNPACK would batch samples that must run one after another.
        return _auto_without_xnnpack(model, subgraph_index)
    if requested != "auto":
        return requested
    # LiteRT with XNNPACK calibrates subgraph 0 several times faster than the numpy engine on
    # every real model measured (bench/speed.py); other subgraphs only run preserved, slower.
    # Only the numpy engine shows what the subgraphs control flow runs compute.
    if (
        litert_available()
        and subgraph_index == 0
        and not call_sites(model, subgraph_index)
        and litert_can_run(model, xnnpack=True)
    ):
        return "litert"
    return _auto_without_xnnpack(model, subgraph_index)


def _auto_without_xnnpack(model: Model, subgraph_index: int) -> str:
    """ "auto" where LiteRT with XNNPACK cannot calibrate: numpy, else LiteRT's builtin kernels
    with every tensor preserved."""
    try:
        Engine(model, subgraph_index)
    except UnsupportedOpError:
        # When neither engine runs the model, the numpy error says how to add a kernel.
        if litert_available() and litert_can_run(model, xnnpack=False):
            return "litert"
        raise
    return "numpy"


def _xnnpack_runner(model: Model, observer: RangeObserver) -> XnnpackRunner:
    return XnnpackRunner(model, sorted(observer.tensors), ordered=observer.ordered_tensors)


def calibrate(
    model: Model,
    dataset: Dataset,
    engine: str = "auto",
    observer: RangeObserver | None = None,
    progress: Progress | None = None,
    subgraph_index: int = 0,
) -> CalibrationResult:
    """Observe every float activation of one subgraph over the whole dataset."""
    started = time.perf_counter()
    observer = observer or MinMaxObserver(activation_tensors(model, subgraph_index))
    return Calibrator(model, engine, subgraph_index, observer).run(dataset, progress, started)


class Calibrator:
    """The engine that calibrates one subgraph for `observer` (`choose_engine`), and LiteRT's
    runner when LiteRT calibrates subgraph 0: further passes over the same tensors reuse it
    (no second interpreter, no second packing of XNNPACK's weights)."""

    def __init__(
        self, model: Model, engine: str, subgraph_index: int, observer: RangeObserver
    ) -> None:
        check_memory(model, subgraph_index)  # before any engine allocates for a sample
        self.model, self.subgraph_index, self.observer = model, subgraph_index, observer
        self.xnnpack: XnnpackRunner | None = None
        # Only the numpy engine observes what control flow calls; a model that keeps state
        # runs its samples as one sequence.
        calling = bool(call_sites(model, subgraph_index))
        stateful = keeps_state(model, subgraph_index)
        if (
            engine == "auto"
            and subgraph_index == 0
            and litert_available()
            and not stateful
            and not calling
        ):
            # Building LiteRT's runner is the test of whether XNNPACK runs the model
            # (`choose_engine` would load it once more first: 0.1 s of a 2 s quantization).
            with contextlib.suppress(UnsupportedOpError):
                self.xnnpack = _xnnpack_runner(model, observer)
            found = self.xnnpack is not None
            self.engine = "litert" if found else _auto_without_xnnpack(model, 0)
            return
        self.engine = choose_engine(model, engine, subgraph_index)
        if self.engine == "litert" and subgraph_index == 0 and not stateful:
            self.xnnpack = _xnnpack_runner(model, observer)

    def run(
        self, dataset: Dataset, progress: Progress | None = None, started: float | None = None
    ) -> CalibrationResult:
        """One pass over `dataset`; `started`: when the calibration began (its seconds)."""
        started = time.perf_counter() if started is None else started
        model, subgraph_index, observer = self.model, self.subgraph_index, self.observer
        samples = 0

        def counted(size: int) -> Iterator[Batch]:
            nonlocal samples
            for batch in dataset.iter_chunks(size):
                samples += batch[0].shape[0]
                yield batch
                if progress:
                    progress(batch[0].shape[0])

        # Observers allocate temporaries of megabytes as the numpy engine does (heap.py).
        with retained_heap():
            if self.engine == "numpy":
                runner = Engine(model, subgraph_index)
                called = getattr(observer, "calls", {})  # statistics of what control flow runs
                for batch in counted(runner.chunk * runner.threads * _CHUNKS_PER_THREAD):
                    runner.run(batch, observers=[observer], calls_observed=called)
            elif self.xnnpack is not None:
                xnnpack = self.xnnpack
                for batch in counted(xnnpack.batch * xnnpack.threads * _CHUNKS_PER_THREAD):
                    xnnpack.run(batch, [observer])
            else:
                # One interpreter per batch: a sequence (a model that keeps state) is one batch.
                size = _SEQUENCE if keeps_state(model, subgraph_index) else 64
                for batch in counted(size):
                    run_preserved(model, batch, observer, sorted(observer.tensors), subgraph_index)
        if not samples:
            raise DataError(f"{dataset.source}: no calibration samples found")
        return CalibrationResult(
            ranges=observer.ranges(),
            samples=samples,
            engine=self.engine,
            seconds=time.perf_counter() - started,
            source=dataset.source,
            synthetic=dataset.synthetic,
            observer=observer,
        )

"""LiteRT as a calibration engine.

LiteRT only lets intermediate tensors be read when nothing fuses them away: either with every
tensor preserved on the builtin kernels (no XNNPACK, several times slower than plain inference),
or, what `XnnpackRunner` does, with every observed tensor made an output of the model, which
XNNPACK then writes out as it runs. The runner feeds batches (the input resized to a chunk of
samples) when the model keeps its samples apart under that resize, runs one interpreter with
XNNPACK on every engine thread (fewer interpreters mean less weight packing: faster than one
single-threaded interpreter per thread on every development model), and hands observers
read-only views of the interpreter's memory, in chunk order (qtool.runtime.parallel), without
copying them.
"""

from __future__ import annotations

import copy
import importlib.util
import itertools
import math
import os
from collections import deque
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import ExitStack, contextmanager

import numpy as np

from qtool.errors import DataError, ModelError, UnsupportedOpError, first_line
from qtool.model import Model, model_to_bytes
from qtool.model.temporary import TemporaryModelFile, interpreter_source, model_for_litert
from qtool.runtime import Engine
from qtool.runtime.engine import samples_per_pass
from qtool.runtime.parallel import (
    ApartObservation,
    ObservedChunk,
    Observer,
    OrderedObservation,
    engine_threads,
    run_chunks,
    spread_by_size,
    tensors_apart,
)


def litert_available() -> bool:
    """Whether the ai-edge-litert package is installed (found without importing it)."""
    return importlib.util.find_spec("ai_edge_litert") is not None


def litert_can_run(model: Model, xnnpack: bool) -> bool:
    """Whether LiteRT loads the model, with XNNPACK (which also runs MediaPipe's custom ops
    Convolution2DTransposeBias, MaxPoolingWithArgmax2D and MaxUnpooling2D) or without."""
    from ai_edge_litert.interpreter import Interpreter

    try:
        if xnnpack:
            _allocated(lambda: Interpreter(model_content=model_to_bytes(model), num_threads=1))
        else:
            litert_interpreter(model)
    except UnsupportedOpError:
        return False
    return True


def litert_interpreter(model: Model):
    """A LiteRT interpreter that keeps every intermediate tensor readable after invoke()."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    # Without default delegates XNNPACK cannot fuse tensors away.
    return _allocated(
        lambda: Interpreter(
            model_content=model_to_bytes(model),
            experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
            experimental_preserve_all_tensors=True,
        )
    )


@contextmanager
def native_stderr_quiet() -> Iterator[None]:
    """LiteRT's C++ logs ("INFO: Created TensorFlow Lite XNNPACK delegate") go to file
    descriptor 2, past Python: point it at /dev/null meanwhile. Its errors still arrive as
    exceptions."""
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to quiet
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _allocated(make: Callable, resize: Callable | None = None):
    """An interpreter from `make`, optionally resized, with its tensors allocated; LiteRT's
    refusals become UnsupportedOpError."""
    try:
        with native_stderr_quiet():
            interpreter = make()
            if resize is not None:
                resize(interpreter)
            interpreter.allocate_tensors()
    except (RuntimeError, ValueError) as exc:
        detail = first_line(exc, type(exc).__name__)
        raise UnsupportedOpError(f"LiteRT cannot run the model: {detail}") from None
    return interpreter


def litert_feeder(model: Model, interpreter, subgraph_index: int) -> Callable[[list], None]:
    """A function running one sample (inputs in subgraph order) through the subgraph.

    Subgraph 0 runs through the interpreter itself; other subgraphs only through the signature
    whose entry point they are.
    """
    if subgraph_index == 0:
        indices = [d["index"] for d in interpreter.get_input_details()]

        def run_main(values: list) -> None:
            for index, value in zip(indices, values, strict=True):
                interpreter.set_tensor(index, value)
            interpreter.invoke()

        return run_main
    signature = next(s for s in model.signature_defs if s["subgraph_index"] == subgraph_index)
    runner = interpreter.get_signature_runner(signature["signature_key"])
    by_tensor = {entry["tensor_index"]: entry["name"] for entry in signature["inputs"]}
    names = [by_tensor[t] for t in model.subgraphs[subgraph_index].inputs]

    def run_signature(values: list) -> None:
        runner(**dict(zip(names, values, strict=True)))

    return run_signature


def run_preserved(
    model: Model, feeds: Sequence[np.ndarray], observer: Observer, tensors: Sequence[int], s: int
) -> None:
    """Every sample through the builtin kernels with all tensors kept (any subgraph)."""
    interpreter = litert_interpreter(model)
    batched = model.subgraphs[s].inputs_lead_with_one()
    feed = litert_feeder(model, interpreter, s)
    for i in range(feeds[0].shape[0]):
        feed([values[i : i + 1] if batched else values[i] for values in feeds])
        for t in tensors:
            observer(t, np.asarray(interpreter.get_tensor(t, s)))


# Parts whose tensors are being observed while the next part runs: two interpreters in turn.
_IN_FLIGHT = 2


class _StillReferenced(Exception):
    """LiteRT refused to invoke: a view of the interpreter's memory is still alive."""


def _invoke(interpreter, inputs: Sequence[int], values: Sequence[np.ndarray]) -> None:
    for index, value in zip(inputs, values, strict=True):
        interpreter.set_tensor(index, value)
    try:
        interpreter.invoke()
    except RuntimeError as exc:
        detail = first_line(exc, "failed")
        if "reference to internal data" in detail:
            raise _StillReferenced from None
        # a kernel refusing this data (an index out of range)
        raise DataError(f"LiteRT cannot run the model on this data: {detail}") from None


class _NotBatchable(Exception):
    """A resized interpreter gave some tensor a shape other than the batch's."""


class XnnpackRunner:
    """Runs subgraph 0 of a float model in LiteRT with XNNPACK, `tensors` made readable."""

    def __init__(
        self,
        model: Model,
        tensors: Sequence[int],
        threads: int | None = None,
        ordered: Collection[int] = (),
    ) -> None:
        subgraph = model.subgraphs[0]
        self.inputs = list(subgraph.inputs)
        self.tensors = [t for t in sorted(set(tensors)) if t not in self.inputs]
        self.declared = {t: list(subgraph.tensors[t].shape) for t in self.tensors}
        # Only subgraph 0's output list changes: shallow copies serialise the same graph.
        main = copy.copy(subgraph)
        main.outputs = list(subgraph.outputs) + [
            t for t in self.tensors if t not in subgraph.outputs
        ]
        exposed = copy.copy(model)
        exposed.subgraphs = [main, *model.subgraphs[1:]]
        # A large model goes to LiteRT as a file it maps: no copy of its weights here.
        self.blob = model_for_litert(exposed)
        # `threads` interpreters side by side, each XNNPACK on one thread; by default one
        # interpreter, XNNPACK on every engine thread. XNNPACK's values do not depend on its
        # thread count (tested).
        self.threads = max(1, threads or 1)
        self.xnnpack_threads = 1 if threads else engine_threads()
        # A sample of an input declared without a leading 1 is the whole declared shape.
        self.leading_one = subgraph.inputs_lead_with_one()
        apart = _keeps_samples_apart(model)
        self.batch = samples_per_pass(subgraph) if apart is not False else 1
        # Where the numpy engine vetted every operator's batch rule, a tensor LiteRT resizes to
        # another shape of the same size (a RESHAPE to a constant [1, -1] folds the batch into
        # its last axis) holds every sample's values, read as declared, but not necessarily
        # each in its own place: a CONCATENATION along the folded axis puts all samples of its
        # first input before those of the second. Fine for histograms; tensors in `ordered`
        # (per-element means, reference outputs) need their own places, so batch 1 for them.
        self.vetted = apart is True
        # Overlapping observation with inference takes a second interpreter, which packs
        # XNNPACK's weights again: worth it where a sample's activations outweigh the weights
        # (MediaPipe's models: 13-50 MB of activations a sample, 1-7 MB of weights), not on a
        # stack of large FULLY_CONNECTED layers (300 MB of weights, kilobytes of activations).
        activations = sum(
            4 * math.prod(max(d, 1) for d in shape) for shape in self.declared.values()
        )
        self._overlap = activations >= model.weights_nbytes()
        self.ordered = frozenset(ordered)
        self.read_shapes: dict[int, dict[int, list[int]]] = {}  # batch -> tensor -> view shape
        # Idle interpreters by batch size; the first one fails now (UnsupportedOpError) if
        # LiteRT cannot run the model.
        self._free: dict[int, list] = {1: [self._check(1)]}

    def run(self, feeds: Sequence[np.ndarray], observers: Sequence[Observer]) -> None:
        """Every sample of `feeds` (N, *sample_shape) through the model, tensors observed."""
        try:
            self._run(feeds, observers)
        except _NotBatchable:
            self.batch = 1  # nothing was observed yet: run again sample by sample
            self._run(feeds, observers)

    def places_apart(self, tensors: Collection[int], samples: int) -> bool:
        """Whether a run of `samples` samples hands each of `tensors` over with every sample's
        values in its own place, as those in `ordered` (not folded into another shape by a
        resized interpreter); the interpreters that run makes are made now."""
        if any(t not in self.tensors for t in tensors):
            return False
        try:
            sizes = {stop - start for start, stop in self._bounds(samples)}
            sizes = {size if self.leading_one else 1 for size in sizes}
            for size in sizes:
                if not self._free.get(size):
                    self._free.setdefault(size, []).append(self._check(size))
        except _NotBatchable:
            self.batch = 1  # as `run` does: every sample alone, in its own place
            return True
        return not any(t in self.read_shapes.get(size, {}) for size in sizes for t in tensors)

    def _bounds(self, n: int) -> list[tuple[int, int]]:
        """Where the parts of a run of n samples start and stop: as few parts as the batch
        allows, of sizes differing by one at most (64 samples at a batch of 17: 4 x 16, not 17,
        17, 17, 13): every interpreter of another size costs an allocation and XNNPACK's weight
        packing, a fifth of a 64-sample calibration."""
        count = -(-n // self.batch)
        return list(itertools.pairwise([n * k // count for k in range(count + 1)]))

    def _run(self, feeds: Sequence[np.ndarray], observers: Sequence[Observer]) -> None:
        bounds = self._bounds(feeds[0].shape[0])
        parts = [
            [f[start:stop] if self.leading_one else f[start] for f in feeds]
            for start, stop in bounds
        ]
        # An interpreter for every part size before anything is observed: a size LiteRT
        # cannot batch raises _NotBatchable now, not after a part of another size was seen.
        sizes = {self._batch_of(part) for part in parts}
        if not self._overlap:
            # Where the weights outweigh a sample's activations, idle interpreters of sizes
            # this run does not use are resized to the sizes it needs, or let go: each holds
            # XNNPACK's own packed copy of the weights (a 100 MB FULLY_CONNECTED stack: 100 MB
            # each), which a resize keeps.
            spare = []
            for size, free in self._free.items():
                if size not in sizes:
                    spare += free
                    free.clear()
            for size in sizes:
                if spare and not self._free.get(size):
                    self._free.setdefault(size, []).append(self._check(size, spare.pop()))
            del spare
        for size in sizes:
            if not self._free.get(size):
                self._free.setdefault(size, []).append(self._check(size))

        if self.threads == 1 and engine_threads() > 1 and tensors_apart(observers):
            self._run_overlapped(parts, observers, self._overlap)
            return

        def work(k: int, order: OrderedObservation) -> None:
            part = parts[k]
            batch = self._batch_of(part)
            with self._interpreter(batch) as held:
                interpreter = self._invoked(held, batch, part)
                for t, value in self._values(interpreter, batch, part).items():
                    order.emit(k, t, value)
                order.finish(k)
                order.wait_observed(k)  # the views must be gone before the next invoke()

        run_chunks(len(parts), work, observers, self.threads)

    def _run_overlapped(
        self, parts: list[list[np.ndarray]], observers: Sequence[Observer], overlap: bool
    ) -> None:
        """The parts through two interpreters in turn (one with `overlap` False): while
        observers read one part's tensors (on every engine thread, `ApartObservation`), the
        other interpreter runs the next part (LiteRT and numpy both release the GIL). A part's
        interpreter is invoked again only once its tensors were observed: their views are its
        memory."""
        in_flight_limit = _IN_FLIGHT if overlap else 1
        with ApartObservation(observers, self._groups(engine_threads())) as apart:
            in_flight: deque[tuple[ObservedChunk, ExitStack]] = deque()
            try:
                for part in parts:
                    batch = self._batch_of(part)
                    holding = ExitStack()
                    held = holding.enter_context(self._interpreter(batch))
                    try:
                        interpreter = self._invoked(held, batch, part)
                        values = self._values(interpreter, batch, part)
                    except BaseException:
                        holding.close()
                        raise
                    in_flight.append((apart.submit(values), holding))
                    del values, interpreter
                    if len(in_flight) == in_flight_limit:
                        self._settle(in_flight.popleft())
            finally:
                while in_flight:
                    self._settle(in_flight.popleft())

    @staticmethod
    def _settle(entry: tuple[ObservedChunk, ExitStack]) -> None:
        """Wait for a part's observation, then give its interpreter back."""
        observed, holding = entry
        try:
            observed.wait()
        finally:
            holding.close()

    def _batch_of(self, part: list[np.ndarray]) -> int:
        """Samples per invoke for a part: its length, or 1 for inputs without a leading 1."""
        return part[0].shape[0] if self.leading_one else 1

    def _values(self, interpreter, batch: int, part: list[np.ndarray]) -> dict[int, np.ndarray]:
        """The inputs of a run, then views of the observed tensors in the interpreter's memory."""
        values = dict(zip(self.inputs, part, strict=True))
        views = self.read_shapes.get(batch, {})
        for t in self.tensors:
            value = interpreter.tensor(t)()
            values[t] = value.reshape(views[t]) if t in views else value
        return values

    def _groups(self, count: int) -> list[list[int]]:
        """The observed tensors in `count` groups of about equal size (the inputs go with the
        first group)."""
        sizes = {t: max(1, math.prod(shape)) for t, shape in self.declared.items()}
        return spread_by_size(sizes, count)

    @contextmanager
    def _interpreter(self, batch: int) -> Iterator[list]:
        """An idle interpreter for `batch`, in a one-item list whose item the user may replace;
        the item goes back to the idle ones."""
        free = self._free.setdefault(batch, [])
        held = [free.pop() if free else self._check(batch)]
        try:
            yield held
        finally:
            free.append(held[0])

    def _invoked(self, held: list, batch: int, part: list[np.ndarray]):
        """The interpreter in `held` after running `part`, or a new one put in its place.

        LiteRT refuses to invoke while anything still references the views of the last run.
        Observers are done with them (wait_observed), but a stack sampler (Dask's worker
        profiler) holding a frame can keep one alive a little longer: that interpreter is left
        to it and a new one runs the chunk.
        """
        try:
            _invoke(held[0], self.inputs, part)
        except _StillReferenced:
            held[0] = self._check(batch)
            _invoke(held[0], self.inputs, part)
        return held[0]

    def _check(self, batch: int, reuse=None):
        """An interpreter for `batch` samples per invoke whose observed tensors all hold them
        along their leading axis: a new one, or `reuse` (an idle one of another size) resized,
        which keeps XNNPACK's packed weights (a 300 MB FULLY_CONNECTED stack: 0.3 ms, not
        0.3-0.7 s and a second packing's memory; same values, tested)."""
        from ai_edge_litert.interpreter import Interpreter

        def resize(interpreter) -> None:
            if batch != 1 or reuse is not None:
                for detail in interpreter.get_input_details():
                    interpreter.resize_tensor_input(detail["index"], [batch, *detail["shape"][1:]])

        def make():
            if reuse is not None:
                return reuse
            return Interpreter(**interpreter_source(self.blob), num_threads=self.xnnpack_threads)

        try:
            interpreter = _allocated(make, resize)
        except UnsupportedOpError:
            if batch == 1:
                raise
            raise _NotBatchable from None  # e.g. a RESHAPE to a constant [1, ...]
        if isinstance(self.blob, TemporaryModelFile):
            self.blob.release_pages()  # packed by XNNPACK: the mapped weights are only cache
        if batch != 1:
            shapes = {d["index"]: list(d["shape"]) for d in interpreter.get_tensor_details()}
            views = {}
            for t, declared in self.declared.items():
                if not declared:
                    raise _NotBatchable
                batched = [declared[0] * batch, *declared[1:]]
                if shapes.get(t) == batched:
                    continue
                if (
                    not self.vetted
                    or t in self.ordered
                    or math.prod(shapes.get(t, [0])) != math.prod(batched)
                ):
                    raise _NotBatchable
                views[t] = batched
            self.read_shapes[batch] = views
        return interpreter


def _keeps_samples_apart(model: Model) -> bool | None:
    """Whether resizing the inputs' leading 1 to a batch keeps samples independent: every
    input declared with a leading 1 and the numpy engine's batch rules running every operator
    on the whole batch. None when the numpy engine cannot plan the model (unknown ops): the
    shapes of the resized interpreter decide."""
    if not model.subgraphs[0].inputs_lead_with_one():
        return False
    try:
        engine = Engine(model, threads=1)
    except (UnsupportedOpError, ModelError):
        return None
    return not engine.serial and all(step.mode == "batch" for step in engine.steps)

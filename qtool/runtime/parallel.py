"""Running chunks of samples on several threads while observers see them in chunk order.

The engine runs independent chunks of samples through the graph on worker threads (numpy
releases the GIL inside its loops and BLAS calls). Observers, though, are stateful and may depend
on the order they see values in, so `OrderedObservation` calls them exactly as a single thread
would: chunk 0's tensors in production order, then chunk 1's, and so on, never two calls at once.
A chunk that runs ahead of its turn has its tensors queued; whichever thread finishes the chunk
whose turn it is delivers the queue. The queue is bounded: a thread whose chunk is ahead waits
while more than `max_pending_bytes` are queued. Observers that keep their statistics tensor by
tensor say so (`tensors_apart`); LiteRT's runner then has a chunk's tensors observed on several
threads at once (`ApartObservation`), and the numpy engine has each value observed by the
thread that made it as soon as its tensor's earlier chunks were (`TensorOrderedObservation`).
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import TypeVar

import numpy as np

from qtool.errors import UsageError

Observer = Callable[[int, np.ndarray], None]
Result = TypeVar("Result")

_PENDING_BYTES = 1 << 28  # queued tensors of chunks ahead of their turn


# Beyond it, each thread's chunk of live tensors costs more memory than it saves time.
MAX_DEFAULT_THREADS = 4


def available_cores() -> int:
    """The cores this process may run on (its affinity, where the system tells)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def engine_threads() -> int:
    """Threads the engines use: $QTOOL_THREADS if set, else one per available core (at most
    `MAX_DEFAULT_THREADS`).

    On the 2-core development machine, two threads calibrate the six development models 1.2 to
    1.6x faster than one with the numpy engine (bench/speed.py, quiet machine; pose_detection
    51 -> 81 samples/s), and as fast as one two-threaded XNNPACK interpreter with LiteRT.
    Results never depend on the thread count (observers see chunks in order).
    """
    requested = os.environ.get("QTOOL_THREADS", "").strip()
    if not requested:
        return min(available_cores(), MAX_DEFAULT_THREADS)
    try:
        return max(1, int(requested))
    except ValueError:
        raise UsageError(f"QTOOL_THREADS must be a whole number, not {requested!r}") from None


_blas_controller = None
_blas_lock = threading.Lock()


@contextmanager
def single_threaded_blas() -> Iterator[None]:
    """BLAS limited to the calling thread for the duration (the engine's threads take the cores).

    OpenBLAS splitting the engine's small matrix products over cores was measured 5x slower than
    one thread per product on a 2-core machine (bench/speed.py); `threadpoolctl` sets the limit
    in whichever BLAS numpy loaded.
    """
    global _blas_controller
    from threadpoolctl import ThreadpoolController

    with _blas_lock:
        if _blas_controller is None:
            _blas_controller = ThreadpoolController()
    with _blas_controller.limit(limits=1, user_api="blas"):
        yield


class Cancelled(Exception):
    """Raised in a worker whose run was abandoned because another chunk failed."""


class _ChunkedObservation:
    """What both orderings share: the observers, which chunks are finished, the bound on the
    bytes queued ahead of the front chunk (`_front`), and giving up the run."""

    def __init__(
        self,
        observers: Sequence[Observer],
        chunks: int,
        max_pending_bytes: int = _PENDING_BYTES,
    ) -> None:
        self._observers = list(observers)
        self._chunks = chunks
        self._max_pending = max_pending_bytes
        self._finished = [False] * chunks
        self._pending_bytes = 0
        self._failed = False
        self._state = threading.Condition()
        # The chunk that never waits for the queue to drain, so the run always moves on: each
        # ordering moves it (the chunk whose turn it is, the lowest unfinished one).
        self._front = 0

    def _admit(self, chunk: int, value: np.ndarray) -> None:
        """Count `value` as queued, once `chunk` may queue it: a chunk other than the front
        waits while more than the pending-bytes limit is queued. Called holding the state
        lock; raises Cancelled once aborted."""
        while chunk != self._front and self._pending_bytes > self._max_pending and not self._failed:
            self._state.wait()
        if self._failed:
            raise Cancelled
        self._pending_bytes += value.nbytes

    def abort(self) -> None:
        """Give up the run: every waiting and later call that waits raises Cancelled."""
        with self._state:
            self._failed = True
            self._state.notify_all()


class OrderedObservation(_ChunkedObservation):
    """Delivers (tensor, value) pairs of `chunks` chunks to observers in serial order."""

    def __init__(
        self,
        observers: Sequence[Observer],
        chunks: int,
        max_pending_bytes: int = _PENDING_BYTES,
    ) -> None:
        super().__init__(observers, chunks, max_pending_bytes)
        # `_front` is the chunk whose tensors observers see now.
        self._queues: list[deque[tuple[int, np.ndarray]]] = [deque() for _ in range(chunks)]
        self._delivering = threading.Lock()  # held by the one thread calling observers

    def emit(self, chunk: int, tensor: int, value: np.ndarray) -> None:
        """Queue one tensor value of `chunk` and deliver whatever is in turn. A chunk ahead of
        the turn waits while more than the pending-bytes limit is queued; raises Cancelled once
        aborted."""
        if not self._observers:
            return
        with self._state:
            self._admit(chunk, value)
            self._queues[chunk].append((tensor, value))
        self._deliver()

    def finish(self, chunk: int) -> None:
        """Mark `chunk` complete, so that delivery moves on to the next chunk once its values are
        seen."""
        with self._state:
            if self._finished[chunk]:
                return
            self._finished[chunk] = True
        self._deliver()

    def wait_observed(self, chunk: int) -> None:
        """Return once observers have seen all of a finished chunk (its values may then be
        overwritten)."""
        with self._state:
            while self._front <= chunk and not self._failed:
                self._state.wait()
            if self._failed:
                raise Cancelled

    def _next(self) -> tuple[int, np.ndarray] | None:
        """The next pair to deliver, advancing the turn past finished chunks; None when none
        is ready."""
        with self._state:
            while self._front < self._chunks and not self._failed:
                queue = self._queues[self._front]
                if queue:
                    tensor, value = queue.popleft()
                    self._pending_bytes -= value.nbytes
                    self._state.notify_all()
                    return tensor, value
                if not self._finished[self._front]:
                    return None
                self._front += 1
                self._state.notify_all()
            return None

    def _deliver(self) -> None:
        # Whoever holds `_delivering` calls the observers; a thread that finds it taken leaves
        # its pairs queued, and the holder re-checks for them after letting go.
        while self._delivering.acquire(blocking=False):
            try:
                while (item := self._next()) is not None:
                    for observe in self._observers:
                        observe(*item)
                    del item  # a value may be a view its producer wants back once observed
            except BaseException:
                self.abort()
                raise
            finally:
                self._delivering.release()
            if not self._ready():
                return

    def _ready(self) -> bool:
        with self._state:
            if self._failed or self._front >= self._chunks:
                return False
            return bool(self._queues[self._front]) or self._finished[self._front]


class TensorOrderedObservation(_ChunkedObservation):
    """Delivers (tensor, value) pairs of `chunks` chunks to observers that keep their
    statistics tensor by tensor (`tensors_apart`): each tensor's values in chunk order, one
    call at a time, but different tensors on whichever threads produce them, at once.

    With `OrderedObservation` a chunk ahead of its turn queued its whole output (palm
    detection: 50 MB a sample) and one thread at a time observed, while the other computed:
    two threads calibrated face_landmark 1.7x slower than they ran it unobserved. Here a value
    is observed by the thread that made it as soon as its tensor's earlier chunks were, so
    observing spreads over the threads and little waits in queues. A chunk beyond the lowest
    unfinished one waits while more than `max_pending_bytes` are queued (the lowest never does,
    so the run always moves on).
    """

    def __init__(
        self,
        observers: Sequence[Observer],
        chunks: int,
        max_pending_bytes: int = _PENDING_BYTES,
    ) -> None:
        super().__init__(observers, chunks, max_pending_bytes)
        # `_front` is the lowest unfinished chunk.
        self._next: dict[int, int] = {}  # tensor -> the chunk whose value it takes next
        self._queued: dict[int, dict[int, np.ndarray]] = {}  # tensor -> chunk -> value
        self._busy: set[int] = set()  # tensors some thread is observing

    def emit(self, chunk: int, tensor: int, value: np.ndarray) -> None:
        """Queue one value of `chunk` and observe what is in turn for its tensor; raises
        Cancelled once aborted."""
        if not self._observers:
            return
        with self._state:
            self._admit(chunk, value)
            self._queued.setdefault(tensor, {})[chunk] = value
        self._deliver(tensor)

    def finish(self, chunk: int) -> None:
        """Mark `chunk` complete: tensors it never produced move on to the next chunk."""
        with self._state:
            if self._finished[chunk]:
                return
            self._finished[chunk] = True
            while self._front < self._chunks and self._finished[self._front]:
                self._front += 1
            self._state.notify_all()
            waiting = [t for t, queued in self._queued.items() if queued]
        for tensor in waiting:
            self._deliver(tensor)

    def _take(self, tensor: int) -> np.ndarray | None:
        """The tensor's value in turn (its next chunk's, past finished chunks that never
        produced it), None when it has not arrived. Called holding the state lock."""
        turn = self._next.get(tensor, 0)
        queued = self._queued.get(tensor, {})
        while turn < self._chunks and turn not in queued and self._finished[turn]:
            turn += 1
        self._next[tensor] = turn
        if turn not in queued:
            return None
        value = queued.pop(turn)
        self._next[tensor] = turn + 1
        self._pending_bytes -= value.nbytes
        self._state.notify_all()
        return value

    def _deliver(self, tensor: int) -> None:
        # The thread that marks a tensor busy observes its values in turn until none is
        # ready; a thread finding it busy leaves its value queued for that thread to find.
        while True:
            with self._state:
                if tensor in self._busy or self._failed:
                    return
                value = self._take(tensor)
                if value is None:
                    return
                self._busy.add(tensor)
            try:
                for observe in self._observers:
                    observe(tensor, value)
            except BaseException:
                self.abort()
                raise
            finally:
                del value  # a value may be a view its producer wants back once observed
                with self._state:
                    self._busy.discard(tensor)


def tensors_apart(observers: Sequence[Observer]) -> bool:
    """Whether every observer takes calls for different tensors at the same time (its
    `tensors_apart` attribute: statistics kept tensor by tensor). Each tensor's values still
    arrive one call at a time, in chunk order."""
    return bool(observers) and all(getattr(o, "tensors_apart", False) for o in observers)


def spread_by_size(sizes: Mapping[int, int], count: int) -> list[list[int]]:
    """`count` groups of the tensors of `sizes` (tensor -> elements) of about equal total
    size: the largest first, each to the lightest group so far."""
    groups: list[list[int]] = [[] for _ in range(count)]
    loads = [0] * count
    for t in sorted(sizes, key=lambda t: (-sizes[t], t)):
        lightest = loads.index(min(loads))
        groups[lightest].append(t)
        loads[lightest] += sizes[t]
    return groups


class ApartObservation:
    """Observers that take different tensors at once (`tensors_apart`) see a chunk's tensors
    on one thread per group: each tensor's calls in chunk order.

    LiteRT computes a chunk on every core, then the observers alone run, three times as long
    (histograms, means): on one thread they left the other cores idle. Two threads observe
    pose_detection's chunks 1.3x faster (numpy releases the GIL in its loops). `submit` hands
    a chunk over and returns at once, so the caller can have LiteRT run the next chunk
    meanwhile (LiteRT releases the GIL while it runs); `observe` waits for the chunk.
    """

    def __init__(self, observers: Sequence[Observer], groups: Sequence[Sequence[int]]) -> None:
        self._observers = list(observers)
        self._groups = [list(g) for g in groups if g]
        self._group_of = {t: k for k, g in enumerate(self._groups) for t in g}
        self._pool = ThreadPoolExecutor(
            max(1, len(self._groups)), thread_name_prefix="qtool-observe"
        )
        # A tensor's calls stay in chunk order: a chunk's share of a group starts only once the
        # group's share of the previous chunk is done (one future per group, chained).
        self._last: list[Future | None] = [None] * max(1, len(self._groups))

    def __enter__(self) -> ApartObservation:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._pool.shutdown(wait=True)

    def observe(self, values: Mapping[int, np.ndarray]) -> None:
        """Every (tensor, value) of one chunk, observed when this returns; tensors outside the
        groups go with the first."""
        self.submit(values).wait()

    def submit(self, values: Mapping[int, np.ndarray]) -> ObservedChunk:
        """Start observing one chunk; the returned handle waits for it (and raises what an
        observer raised). The caller must drop its own references to the values."""
        shares: list[list[tuple[int, np.ndarray]]] = [[] for _ in self._last]
        for t, value in values.items():
            shares[self._group_of.get(t, 0)].append((t, value))
        futures = []
        for k, share in enumerate(shares):
            previous = self._last[k]
            futures.append(self._pool.submit(self._deliver, previous, share))
            self._last[k] = futures[-1]
        return ObservedChunk(futures)

    def _deliver(self, previous: Future | None, share: list[tuple[int, np.ndarray]]) -> None:
        try:
            if previous is not None:
                wait([previous])
            for t, value in share:
                for observe in self._observers:
                    observe(t, value)
        finally:
            share.clear()  # the values may be views their producer wants back


class ObservedChunk:
    """The observation of one chunk handed to `ApartObservation.submit`."""

    def __init__(self, futures: list[Future]) -> None:
        self._futures = futures

    def wait(self) -> None:
        """Return once every observer has seen the chunk (its values may then be overwritten);
        raise the first failure of an observer."""
        wait(self._futures)
        for future in self._futures:
            future.result()


def run_chunks(
    count: int,
    work: Callable[[int, OrderedObservation], Result],
    observers: Sequence[Observer],
    threads: int,
    max_pending_bytes: int = _PENDING_BYTES,
    by_tensor: bool = False,
) -> list[Result]:
    """`work(k, order)` for every chunk k on up to `threads` threads, results in chunk order.

    `work` hands its chunk's tensors to `order.emit(k, tensor, value)`; the chunk counts as
    finished when `work` returns (or when it calls `order.finish(k)` itself). With `by_tensor`
    (observers that are `tensors_apart`, and a `work` that needs no `wait_observed`) each
    tensor's values are observed in chunk order, different tensors at once
    (`TensorOrderedObservation`). On a failure the other chunks stop and the failure of the
    earliest chunk is raised.
    """
    observation = TensorOrderedObservation if by_tensor and threads > 1 else OrderedObservation
    order = observation(observers, count, max_pending_bytes)

    def run(k: int) -> Result:
        result = work(k, order)
        order.finish(k)
        return result

    threads = min(threads, count)
    if threads <= 1:
        return [run(k) for k in range(count)]
    with ThreadPoolExecutor(threads, thread_name_prefix="qtool-chunk") as pool:
        futures = [pool.submit(run, k) for k in range(count)]
        return _gather(futures, order)


def _gather(futures: list[Future], order: OrderedObservation | TensorOrderedObservation) -> list:
    done, _ = wait(futures, return_when="FIRST_EXCEPTION")
    if any(f.exception() is not None for f in done):
        order.abort()
        for future in futures:
            future.cancel()
        wait(futures)
        errors = [f.exception() for f in futures if not f.cancelled() and f.exception()]
        raise next((e for e in errors if not isinstance(e, Cancelled)), errors[0])
    return [f.result() for f in futures]

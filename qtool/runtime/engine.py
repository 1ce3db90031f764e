"""The numpy reference engine: runs a float TFLite subgraph on a batch of samples.

Batching. TFLite models are usually declared with batch 1. The engine runs N samples in one pass
by letting the sample axis take the place of that leading 1: an activation of declared shape
[1, H, W, C] is held as [N, H, W, C]. Each kernel has a rule saying whether its TFLite semantics
stay per-sample under that substitution (convolutions and elementwise ops do; a RESHAPE that
moves the batch axis does not). An operator whose rule fails but whose outputs are all declared
with a leading 1 runs once per sample and its results are stacked; if an operator fits neither,
the whole graph runs one sample at a time.

Constants. Operators whose inputs are all constant (DEQUANTIZE of float16 weights, DENSIFY of
sparse weights, shape arithmetic) are evaluated once when the engine is built.

Memory. A tensor is dropped after its last consumer, so a pass holds only live activations.

Control flow. IF, WHILE and CALL_ONCE run other subgraphs, each on an engine of its own
(`Callees`), one sample at a time; observers of those subgraphs' tensors (`calls_observed`) see
every run.

State. A model that keeps state between invocations (LSTM state tensors, resource variables:
`qtool.runtime.state`) runs its samples as one sequence: one at a time, in order, on one thread,
each continuing from the state the previous one left, across `run` calls until `reset`.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from qtool.errors import DataError, ModelError, UnsupportedOpError
from qtool.heap import retained_heap
from qtool.model.calls import call_sites
from qtool.model.graph import Model, Operator, Subgraph
from qtool.model.types import BuiltinOperator, TensorType, dtype_name, numpy_dtype
from qtool.runtime.parallel import (
    Observer,
    OrderedObservation,
    engine_threads,
    run_chunks,
    single_threaded_blas,
    tensors_apart,
)
from qtool.runtime.registry import KernelEntry, OpContext, lookup
from qtool.runtime.state import ModelState, keeps_state

Replacer = Callable[[int, np.ndarray], np.ndarray]
OPAQUE_TYPES = (TensorType.RESOURCE, TensorType.VARIANT, TensorType.STRING)

# Samples per pass (measured on the real models of bench/speed.py): small feature maps want
# many samples per pass to spread the fixed Python cost of each operator call, large ones few,
# so that an operator's input and output stay in the caches (its kernel blocks its temporaries
# itself) and a pass's tensors (queued until observed, see parallel.py) stay a modest size.
_LARGEST_TENSOR_BYTES = 1 << 24
_PASS_BYTES = 160 << 20
_MAX_CHUNK = 64


@dataclass(frozen=True)
class _Step:
    index: int  # operator index in the subgraph
    entry: KernelEntry
    op_type: str
    mode: str  # "batch" (whole chunk at once) or "loop" (once per sample, stacked)
    frees: tuple[int, ...]  # tensors whose last reader is this step


class Engine:
    """Executes one subgraph of a float model with numpy."""

    def __init__(
        self,
        model: Model,
        subgraph_index: int = 0,
        threads: int | None = None,
        state: ModelState | None = None,
    ) -> None:
        self.model = model
        self.threads = max(1, threads or engine_threads())
        self.subgraph_index = subgraph_index
        self.subgraph = model.subgraphs[subgraph_index]
        # The state of a sequence, shared with the engines of the subgraphs CALL_ONCE runs.
        self.stateful = state is not None or keeps_state(model, subgraph_index)
        self.state = state if state is not None else ModelState(model)
        self.variables = {t for t, tensor in enumerate(self.subgraph.tensors) if tensor.is_variable}
        self.constants: dict[int, np.ndarray] = {}
        for index, tensor in enumerate(self.subgraph.tensors):
            value = model.tensor_data(tensor)
            # Sparse tensors hold their stored values (DENSIFY expands them); a variable tensor
            # starts from zeros whatever its buffer holds (LiteRT's ResetVariableTensor).
            if value is not None and index not in self.variables:
                self.constants[index] = value
        produced = set(self.subgraph.inputs) | {
            t for op in self.subgraph.operators for t in op.outputs
        }
        for index, tensor in enumerate(self.subgraph.tensors):
            # An empty constant (e.g. an empty axis list) has no bytes, hence no buffer data.
            if (
                index not in produced
                and index not in self.constants
                and index not in self.variables
                and 0 in tensor.shape
            ):
                self.constants[index] = np.zeros(tensor.shape, numpy_dtype(tensor.dtype))
        self.steps: list[_Step] = []
        self.batched_inputs = self.subgraph.inputs_lead_with_one()
        self.calling = {site.op_index for site in call_sites(model, subgraph_index)}
        self.serial = not self.batched_inputs or self.stateful
        if self.stateful:
            self.threads = 1  # a sequence runs in order
        self._plan()

    def reset(self) -> None:
        """Start a new sequence: the model's state back to its initial value."""
        self.state.reset()

    # ------------------------------------------------------------------ planning

    def _has_leading_axis(self, tensor_index: int) -> bool:
        return len(self.subgraph.tensors[tensor_index].shape) >= 1

    def _rows(self, tensor_index: int) -> int:
        """Rows of one sample along axis 0 (the declared leading dimension)."""
        return max(1, self.subgraph.tensors[tensor_index].shape[0])

    def _entry(self, op_index: int) -> KernelEntry:
        op = self.subgraph.operators[op_index]
        code = self.model.operator_codes[op.opcode_index]
        is_custom = code.builtin_code == BuiltinOperator.CUSTOM
        op_type = code.name
        entry = lookup(op_type, is_custom)
        if entry is None:
            how = (
                f"register a numpy kernel with qtool.runtime.register_custom_op({op_type!r}, fn) "
                "in a module loaded with `custom_ops`"
                if is_custom
                else "no numpy kernel exists for this builtin yet; try `engine='litert'`"
            )
            raise UnsupportedOpError(
                f"operator {op_index} ({op_type}) in subgraph {self.subgraph_index} has no kernel: "
                f"{how}"
            )
        return entry

    def _plan(self) -> None:
        order = self.subgraph.topological_order()
        batched: set[int] = set(self.subgraph.inputs) if self.batched_inputs else set()
        runtime_steps: list[tuple[int, KernelEntry, str]] = []
        for op_index in order:
            op = self.subgraph.operators[op_index]
            entry = self._entry(op_index)
            live_inputs = [t for t in op.inputs if t >= 0 and t not in self.constants]
            if not live_inputs and op.inputs and op_index not in self.calling:
                self._fold_constant(op_index, entry)
                continue
            ctx = OpContext(
                self.model,
                self.subgraph,
                op_index,
                op,
                [self.constants.get(t) if t >= 0 else None for t in op.inputs],
            )
            batched_inputs = [t for t in live_inputs if t in batched]
            if batched_inputs:
                # Batch rules assume the sample axis replaced a declared 1; a tensor declared
                # [k, ...] is held sample-major as [N * k, ...] and only loops split it again.
                replaced_ones = all(self.subgraph.leading_one(t) for t in batched_inputs)
                if replaced_ones and entry.batch_rule(ctx):
                    mode = "batch"
                elif all(self._has_leading_axis(t) for t in op.outputs + batched_inputs):
                    mode = "loop"
                else:
                    self.serial = True
                    mode = "batch"
                batched.update(op.outputs)
            else:
                mode = "batch"
            runtime_steps.append((op_index, entry, mode))
        last_use: dict[int, int] = {}
        for position, (op_index, _, _) in enumerate(runtime_steps):
            for t in self.subgraph.operators[op_index].inputs:
                if t >= 0 and t not in self.constants:
                    last_use[t] = position
        keep = set(self.subgraph.outputs)
        frees: dict[int, list[int]] = {}
        for t, position in last_use.items():
            if t not in keep:
                frees.setdefault(position, []).append(t)
        self.steps = [
            _Step(
                op_index,
                entry,
                self.model.op_type(self.subgraph.operators[op_index]),
                "batch" if self.serial else mode,
                tuple(frees.get(position, ())),
            )
            for position, (op_index, entry, mode) in enumerate(runtime_steps)
        ]
        self.chunk = samples_per_pass(
            self.subgraph, [self.subgraph.operators[step.index] for step in self.steps]
        )

    def _fold_constant(self, op_index: int, entry: KernelEntry) -> None:
        values = entry.fold(self.model, self.subgraph, op_index, self.constants.__getitem__)
        outputs = self.subgraph.operators[op_index].outputs
        self.constants.update(zip(outputs, values, strict=True))

    # ------------------------------------------------------------------ running

    def sample_shape(self, input_position: int) -> list[int]:
        """Shape of one sample of a subgraph input, as calibration data provides it."""
        shape = list(self.subgraph.tensors[self.subgraph.inputs[input_position]].shape)
        return shape[1:] if self.batched_inputs else shape

    def run(
        self,
        feeds: Sequence[np.ndarray],
        observers: Sequence[Observer] = (),
        replace: Replacer | None = None,
        chunk: int | None = None,
        profile: dict[str, float] | None = None,
        calls_observed: Mapping[int, Observer] | None = None,
    ) -> list[np.ndarray]:
        """Run N samples; `feeds[i]` has shape (N, *sample_shape(i)). Returns outputs (N, ...).

        The samples go through the graph `chunk` at a time (default: `self.chunk`), chunks in
        parallel on `self.threads` threads. Observers see every tensor as it is produced (model
        inputs first, then each operator's outputs, constants folded at build time excluded),
        one call per tensor and chunk, in the order a single thread would make them and never
        two at once; observers that all keep their statistics tensor by tensor
        (`tensors_apart`) see each tensor's values in that order, different tensors at once on
        the threads that made them (`TensorOrderedObservation`). `replace` (called on the
        worker threads, so it must not keep state) may first swap the value for another (e.g.
        its fake-quantized version). With `profile`,
        the seconds spent in each op type's kernels (summed over threads) are added to it.
        `calls_observed[s]` observes the tensors of subgraph s whenever a control-flow op runs
        it (never two calls at once, in no set order).
        """
        callees = Callees(self.model, calls_observed or {}, self.state) if self.calling else None
        feeds = self._check_feeds(feeds)
        n = feeds[0].shape[0] if feeds else 1
        step = 1 if self.serial else max(1, chunk or self.chunk)
        parts = []
        for start in range(0, n, step):
            part = [f[start : start + step] for f in feeds]
            if not self.batched_inputs:
                part = [p[0] for p in part]  # the sample is the whole declared tensor
            parts.append(part)
        timings = [Counter() if profile is not None else None for _ in parts]

        def run_part(k: int, order: OrderedObservation) -> list[np.ndarray]:
            return self._run_chunk(k, parts[k], order, replace, timings[k], callees)

        with single_threaded_blas(), retained_heap():
            results = run_chunks(
                len(parts), run_part, observers, self.threads, by_tensor=tensors_apart(observers)
            )
        if profile is not None:
            for timing in timings:
                for op_type, seconds in timing.items():
                    profile[op_type] = profile.get(op_type, 0.0) + seconds
        return [
            self._constant_rows(t, n)
            if t in self.constants
            else self._join([r[i] for r in results], t, n)
            for i, t in enumerate(self.subgraph.outputs)
        ]

    def _constant_rows(self, tensor_index: int, n: int) -> np.ndarray:
        """An output computed from constants at build time (a DEQUANTIZE of float16 weights),
        as `_join` lays out any output: the same value for each of the N samples."""
        value = self.constants[tensor_index]
        if self.batched_inputs and value.ndim and value.shape[0] == 1:
            return np.repeat(value, n, axis=0)
        return np.repeat(value[None], n, axis=0)

    def _join(self, parts: list[np.ndarray], tensor_index: int, n: int) -> np.ndarray:
        """Samples of an output back together as (N, ...): its declared batch-1 axis holds them,
        any other leading axis gets a sample axis in front of it."""
        if not self.batched_inputs or not parts[0].ndim:
            return np.stack(parts)
        joined = parts[0] if len(parts) == 1 else np.concatenate(parts)
        if self.subgraph.tensors[tensor_index].shape[0] == 1:
            return joined
        return joined.reshape(n, joined.shape[0] // max(n, 1), *joined.shape[1:])

    def _check_feeds(self, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
        inputs = self.subgraph.inputs
        if len(feeds) != len(inputs):
            raise DataError(f"the model has {len(inputs)} inputs, but {len(feeds)} were given")
        checked = []
        counts = set()
        for position, (t, feed) in enumerate(zip(inputs, feeds, strict=True)):
            tensor = self.subgraph.tensors[t]
            feed = np.asarray(feed)
            expected = self.sample_shape(position)
            if list(feed.shape[1:]) != expected and not _matches_dynamic(
                feed.shape[1:], tensor, self.batched_inputs
            ):
                raise DataError(
                    f"input {tensor.name!r}: expected samples of shape {expected} "
                    f"(data shape (N, {', '.join(map(str, expected))})), got {list(feed.shape)}"
                )
            dtype = numpy_dtype(tensor.dtype)
            if feed.dtype != dtype:
                if not np.can_cast(feed.dtype, dtype, casting="same_kind"):
                    raise DataError(
                        f"input {tensor.name!r}: expected {dtype_name(tensor.dtype)} "
                        f"data, got {feed.dtype}"
                    )
                feed = feed.astype(dtype)
            counts.add(feed.shape[0])
            checked.append(feed)
        if len(counts) > 1:
            raise DataError(f"inputs have different sample counts: {sorted(counts)}")
        return checked

    def _run_chunk(
        self,
        k: int,
        feeds: list[np.ndarray],
        order: OrderedObservation,
        replace: Replacer | None,
        timing: Counter | None,
        callees: Callees | None = None,
    ) -> list[np.ndarray]:
        values: dict[int, np.ndarray] = {}
        batch = feeds[0].shape[0] if feeds and self.batched_inputs else 1

        def emit(t: int, value: np.ndarray) -> np.ndarray:
            if replace is not None:
                value = replace(t, value)
            order.emit(k, t, value)
            return value

        for t, feed in zip(self.subgraph.inputs, feeds, strict=True):
            values[t] = emit(t, feed)
        constants, state = self.constants, self.state
        for step in self.steps:
            op = self.subgraph.operators[step.index]
            inputs = [
                None
                if t < 0
                else values[t]
                if t in values
                else state.variable(self.subgraph, t)
                if t in self.variables
                else constants[t]
                for t in op.inputs
            ]
            started = time.perf_counter()
            if step.mode == "loop" and batch > 1:
                outputs = self._run_looped(step, op, inputs, batch, callees)
            else:
                ctx = OpContext(
                    self.model, self.subgraph, step.index, op, inputs, batch, state, callees
                )
                outputs = step.entry.outputs(ctx)
            if timing is not None:
                timing[step.op_type] += time.perf_counter() - started
            for t, value in zip(op.outputs, outputs, strict=True):
                values[t] = emit(t, value)
            for t, value in state.take_observed():
                emit(t, value)
            for t in step.frees:
                values.pop(t, None)
        return [values[t] if t in values else constants[t] for t in self.subgraph.outputs]

    def _run_looped(
        self, step: _Step, op, inputs: list, batch: int, callees: Callees | None
    ) -> list[np.ndarray]:
        per_sample = []
        rows = {
            i: self._rows(t) for i, t in enumerate(op.inputs) if t >= 0 and t not in self.constants
        }
        for s in range(batch):
            sliced = [
                x[s * rows[i] : (s + 1) * rows[i]] if i in rows else x for i, x in enumerate(inputs)
            ]
            ctx = OpContext(
                self.model, self.subgraph, step.index, op, sliced, 1, self.state, callees
            )
            per_sample.append(step.entry.outputs(ctx))
        return [np.concatenate(parts) for parts in zip(*per_sample, strict=True)]

    def call(
        self, values: Sequence[np.ndarray], observers: Sequence[Observer], callees: Callees
    ) -> list[np.ndarray]:
        """One invocation, as a control-flow op makes it: every input whole, as declared (one
        sample), the outputs likewise; on the calling thread."""
        feeds = self._check_feeds(
            [np.asarray(v) if self.batched_inputs else np.asarray(v)[None] for v in values]
        )
        part = feeds if self.batched_inputs else [f[0] for f in feeds]
        order = OrderedObservation(observers, 1)
        outputs = self._run_chunk(0, part, order, None, None, callees)
        order.finish(0)
        return outputs


class Callees:
    """The subgraphs control-flow operators run during one engine run: an engine per subgraph
    (made on first use, shared by nested calls, sharing the caller's state), and observers of
    their tensors."""

    def __init__(self, model: Model, observers: Mapping[int, Observer], state: ModelState) -> None:
        self.model = model
        self.observers = dict(observers)
        self.state = state
        self.engines: dict[int, Engine] = {}
        self.runs: Counter = Counter()  # runs of each subgraph
        self._lock = threading.Lock()  # engines made, observers and counts kept, one at a time

    def run(self, subgraph_index: int, values: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The outputs of subgraph `subgraph_index` on `values` (its inputs, whole)."""
        if not 0 <= subgraph_index < len(self.model.subgraphs):
            raise ModelError(f"a call names subgraph {subgraph_index}, which does not exist")
        observer = self.observers.get(subgraph_index)
        with self._lock:
            engine = self.engines.get(subgraph_index)
            if engine is None:
                engine = Engine(self.model, subgraph_index, 1, self.state)
                self.engines[subgraph_index] = engine
            self.runs[subgraph_index] += 1
            count = getattr(observer, "count_call", None)  # statistics count their runs
            if count is not None:
                count()
        observers = [] if observer is None else [self._locked(observer)]
        return engine.call(values, observers, self)

    def _locked(self, observer: Observer) -> Observer:
        def observe(t: int, value: np.ndarray) -> None:
            with self._lock:
                observer(t, value)

        return observe


def join_chunks(parts: Sequence[np.ndarray]) -> np.ndarray:
    """The values one tensor took in successive chunks (as observers see them), joined along
    their rows. A 0-d value (a scalar tensor, whose chunks hold one sample each) becomes one
    row, so that chunks of scalars join as chunks of anything else."""
    return np.concatenate([np.reshape(part, (-1, *np.shape(part)[1:])) for part in parts])


def samples_per_pass(subgraph: Subgraph, operators: Sequence[Operator] | None = None) -> int:
    """Samples per pass from the per-sample sizes of the tensors `operators` (default: all of
    the subgraph's) produce."""
    sizes = [
        int(np.prod(tensor.shape)) * np.dtype(numpy_dtype(tensor.dtype)).itemsize
        for op in (subgraph.operators if operators is None else operators)
        for tensor in (subgraph.tensors[t] for t in op.outputs)
        if tensor.dtype not in OPAQUE_TYPES  # a resource handle is a small id
    ]
    if not sizes:
        return _MAX_CHUNK
    by_largest = _LARGEST_TENSOR_BYTES // max(max(sizes), 1)
    by_total = _PASS_BYTES // max(sum(sizes), 1)
    return int(np.clip(min(by_largest, by_total), 1, _MAX_CHUNK))


def _matches_dynamic(sample_shape: tuple, tensor, batched: bool) -> bool:
    signature = tensor.shape_signature
    if not signature:
        return False
    expected = signature[1:] if batched else signature
    return len(expected) == len(sample_shape) and all(
        e == -1 or e == s for e, s in zip(expected, sample_shape, strict=True)
    )

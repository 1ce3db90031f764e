"""Run a float model over calibration data and record the range of every activation tensor.

Two engines can do the running: qtool's numpy engine (batched, always available) and, where the
`ai-edge-litert` package is installed, the LiteRT interpreter with every intermediate tensor kept.
`auto` takes numpy when it has a kernel for every operator and LiteRT otherwise (README: "Choosing
the calibration engine" gives the measurements behind this rule).
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from qtool.calibrate.datasets import Batch, Dataset, InputSpec
from qtool.calibrate.observers import MinMaxObserver, RangeObserver
from qtool.errors import DataError, UnsupportedOpError, UsageError
from qtool.model import Model, TensorType, model_to_bytes, numpy_dtype
from qtool.runtime import Engine

ENGINES = ("auto", "numpy", "litert")
Progress = Callable[[int], None]


@dataclass
class CalibrationResult:
    ranges: dict[int, tuple[float, float]]  # tensor index (subgraph 0) -> (min, max)
    samples: int
    engine: str
    seconds: float
    source: str
    synthetic: bool
    observer: RangeObserver


def model_inputs(model: Model, subgraph_index: int = 0) -> list[InputSpec]:
    """The inputs calibration data must provide, with the names users may key them by."""
    subgraph = model.subgraphs[subgraph_index]
    signature_names: dict[int, str] = {}
    for signature in model.signature_defs:
        if signature["subgraph_index"] == subgraph_index:
            for entry in signature["inputs"] or []:
                signature_names[entry["tensor_index"]] = entry["name"]
    batched = all(subgraph.tensors[t].shape[:1] == [1] for t in subgraph.inputs)
    specs = []
    for t in subgraph.inputs:
        tensor = subgraph.tensors[t]
        aliases = {tensor.name.split(":")[0]}
        if t in signature_names:
            aliases.add(signature_names[t])
        if tensor.name.startswith("serving_default_"):
            aliases.add(tensor.name.removeprefix("serving_default_").split(":")[0])
        shape = tuple(tensor.shape[1:] if batched else tensor.shape)
        specs.append(
            InputSpec(
                name=tensor.name,
                aliases=tuple(sorted(aliases - {tensor.name})),
                sample_shape=shape,
                dtype=numpy_dtype(tensor.dtype),
            )
        )
    return specs


def activation_tensors(model: Model, subgraph_index: int = 0) -> list[int]:
    """Float tensors whose values come from running the graph (inputs and op outputs)."""
    subgraph = model.subgraphs[subgraph_index]
    produced = set(subgraph.inputs) | {t for op in subgraph.operators for t in op.outputs}
    return [
        t
        for t in sorted(produced)
        if t >= 0
        and subgraph.tensors[t].dtype == TensorType.FLOAT32
        and not model.is_constant(subgraph.tensors[t])
    ]


def litert_available() -> bool:
    return importlib.util.find_spec("ai_edge_litert") is not None


def choose_engine(model: Model, requested: str, subgraph_index: int = 0) -> str:
    if requested not in ENGINES:
        raise UsageError(f"--engine must be one of {', '.join(ENGINES)}, not {requested!r}")
    if requested == "litert" and not litert_available():
        raise UsageError(
            "--engine litert needs the ai-edge-litert package (pip install ai-edge-litert)"
        )
    if requested != "auto":
        return requested
    try:
        Engine(model, subgraph_index)
    except UnsupportedOpError:
        # When neither engine runs the model, the numpy error says how to add a kernel.
        if litert_available() and _litert_can_run(model):
            return "litert"
        raise
    return "numpy"


def _litert_can_run(model: Model) -> bool:
    try:
        litert_interpreter(model)
    except UnsupportedOpError:
        return False
    return True


def litert_interpreter(model: Model):
    """A LiteRT interpreter that keeps every intermediate tensor readable after invoke()."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    # Without default delegates XNNPACK cannot fuse tensors away.
    try:
        interpreter = Interpreter(
            model_content=model_to_bytes(model),
            experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
            experimental_preserve_all_tensors=True,
        )
        interpreter.allocate_tensors()
    except (RuntimeError, ValueError) as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UnsupportedOpError(f"LiteRT cannot run the model: {detail}") from None
    return interpreter


def calibrate(
    model: Model,
    dataset: Dataset,
    engine: str = "auto",
    observer: RangeObserver | None = None,
    progress: Progress | None = None,
    chunk: int = 32,
    subgraph_index: int = 0,
) -> CalibrationResult:
    """Observe every float activation of one subgraph over the whole dataset."""
    observer = observer or MinMaxObserver(activation_tensors(model, subgraph_index))
    chosen = choose_engine(model, engine, subgraph_index)
    started = time.perf_counter()
    samples = 0

    def counted(size: int) -> Iterator[Batch]:
        nonlocal samples
        for batch in dataset.iter_chunks(size):
            samples += batch[0].shape[0]
            yield batch
            if progress:
                progress(batch[0].shape[0])

    if chosen == "numpy":
        runner = Engine(model, subgraph_index)
        for batch in counted(chunk):
            runner.run(batch, observers=[observer], chunk=chunk)
    else:
        _run_litert(model, counted(64), observer, subgraph_index)
    if not samples:
        raise DataError(f"{dataset.source}: no calibration samples found")
    return CalibrationResult(
        ranges=observer.ranges(),
        samples=samples,
        engine=chosen,
        seconds=time.perf_counter() - started,
        source=dataset.source,
        synthetic=dataset.synthetic,
        observer=observer,
    )


def _run_litert(
    model: Model, chunks: Iterable[Batch], observer: RangeObserver, subgraph_index: int
) -> None:
    interpreter = litert_interpreter(model)
    subgraph = model.subgraphs[subgraph_index]
    batched = all(subgraph.tensors[t].shape[:1] == [1] for t in subgraph.inputs)
    feed = litert_feeder(model, interpreter, subgraph_index)
    observed = sorted(observer.tensors)
    for batch in chunks:
        for i in range(batch[0].shape[0]):
            try:
                feed([values[i : i + 1] if batched else values[i] for values in batch])
            except RuntimeError as exc:  # a kernel refusing this sample (an index out of range)
                detail = str(exc).strip().splitlines()[0] if str(exc).strip() else "failed"
                raise DataError(f"LiteRT cannot run the model on this data: {detail}") from None
            for t in observed:
                observer(t, np.asarray(interpreter.get_tensor(t, subgraph_index)))


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

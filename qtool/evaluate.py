"""Compare a quantized model with its float reference over a dataset: each output's record
(`qtool.quantize.accuracy.OutputAccuracy`: its kind, SQNR, fitting measures) and, when given,
the user's metric.

The reference runs on qtool's numpy engine (LiteRT when the engine lacks a kernel). The candidate
runs in LiteRT when `ai-edge-litert` is installed; otherwise it is simulated: its int8 weights and
biases are dequantized, every quantized activation is fake-quantized (quantized and dequantized
with its own scale and zero point) as it is produced, and the resulting float graph runs on the
numpy engine. The simulation reproduces the rounding and clamping of every tensor, not the
integer arithmetic inside kernels, so its SQNR is close to, not equal to, LiteRT's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qtool.calibrate import Dataset
from qtool.calibrate.collect import refuse_nonfinite
from qtool.calibrate.memory import check_memory
from qtool.errors import UnsupportedOpError, UsageError
from qtool.model import Model, TensorType, numpy_dtype
from qtool.model.edit import clone_model
from qtool.model.lowbit import constant_values
from qtool.numerics import dequantize, quantize
from qtool.quantize.accuracy import (
    LITERT,
    SIMULATION,
    OutputAccuracy,
    OutputsMeter,
    model_output_steps,
    output_kinds,
)
from qtool.quantize.user_metric import UserMetric
from qtool.runtime import Engine
from qtool.runtime.litert import litert_available, litert_feeder, litert_interpreter
from qtool.spec import boundary_ops

ENGINES = ("auto", "litert", "simulate")
CHUNK = 32
INTEGER_TYPES = (TensorType.INT8, TensorType.UINT8, TensorType.INT16, TensorType.INT32)


@dataclass(frozen=True)
class Comparison:
    """The comparison of a candidate model with its float reference, output by output, and the
    user's metric on all outputs (None without one)."""

    outputs: list[OutputAccuracy]
    samples: int
    engine: str  # how the candidate ran: "litert" or "simulate"
    metric: float | None = None

    @property
    def worst_db(self) -> float:
        """The lowest output SQNR (dB)."""
        return min(o.sqnr_db for o in self.outputs)

    def to_dict(self) -> dict:
        """JSON-ready: samples, engine, every output's record and the metric."""
        return {
            "samples": self.samples,
            "engine": self.engine,
            "outputs": [o.to_dict() for o in self.outputs],
            "metric": self.metric,
        }


def compare_models(
    reference: Model,
    candidate: Model,
    dataset: Dataset,
    engine: str = "auto",
    metric: UserMetric | None = None,
) -> Comparison:
    """Run both models over `dataset` (float samples of the reference's inputs) and compare.
    With a `metric`, every output is kept to call it once on all samples."""
    if engine not in ENGINES:
        raise UsageError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    if engine == "auto":
        engine = "litert" if litert_available() else "simulate"
    if engine == "litert" and not litert_available():
        raise UsageError("engine 'litert' needs the ai-edge-litert package")
    ref_graph, cand_graph = reference.subgraphs[0], candidate.subgraphs[0]
    if len(ref_graph.inputs) != len(cand_graph.inputs) or len(ref_graph.outputs) != len(
        cand_graph.outputs
    ):
        raise UsageError(
            f"the models differ in inputs/outputs: reference {len(ref_graph.inputs)} -> "
            f"{len(ref_graph.outputs)}, candidate {len(cand_graph.inputs)} -> "
            f"{len(cand_graph.outputs)}"
        )
    for model in (reference, candidate):
        check_memory(model, what="running")
    run_reference = _float_runner(reference)
    run_candidate = (
        _litert_runner(candidate) if engine == "litert" else _simulated_runner(candidate)
    )
    steps = model_output_steps(candidate)
    meter = None
    kept: tuple[list, list] = ([], [])
    for batch in dataset.iter_chunks(CHUNK):
        expected, got = run_reference(batch), run_candidate(batch)
        refuse_nonfinite(expected, dataset.source)
        got = [np.reshape(g, np.shape(w)) for w, g in zip(expected, got, strict=True)]
        if meter is None:  # the kinds from the graph and the first chunk's values
            meter = OutputsMeter(
                [cand_graph.tensors[t].name for t in cand_graph.outputs],
                output_kinds(reference, 0, expected),
                [ref_graph.tensors[t].shape for t in ref_graph.outputs],
                [steps.get(t) for t in cand_graph.outputs],
            )
        meter.add(expected, got)
        if metric is not None:
            kept[0].append(expected)
            kept[1].append(got)
    if meter is None or not meter.samples:
        raise UsageError(f"{dataset.source}: no samples to compare on")
    value = None
    if metric is not None:
        whole = [[np.concatenate(parts) for parts in zip(*side, strict=True)] for side in kept]
        value = metric(*whole)
    return Comparison(
        outputs=meter.results(LITERT if engine == "litert" else SIMULATION),
        samples=meter.samples,
        engine=engine,
        metric=value,
    )


# --------------------------------------------------------------------------- runners


def _float_runner(model: Model):
    try:
        engine = Engine(model)
    except UnsupportedOpError:
        if not litert_available():
            raise
        return _litert_runner(model)
    return lambda batch: engine.run(batch, chunk=CHUNK)


def _litert_runner(model: Model):
    """Runs samples one at a time in LiteRT, quantizing integer inputs and dequantizing outputs."""
    interpreter = litert_interpreter(model)
    subgraph = model.subgraphs[0]
    feed = litert_feeder(model, interpreter, 0)
    batched = all(subgraph.tensors[t].shape[:1] == [1] for t in subgraph.inputs)
    inputs = [subgraph.tensors[t] for t in subgraph.inputs]

    def run(batch: list[np.ndarray]) -> list[np.ndarray]:
        results: list[list[np.ndarray]] = [[] for _ in subgraph.outputs]
        for i in range(batch[0].shape[0]):
            feed(
                [
                    _to_input(values[i : i + 1] if batched else values[i], tensor)
                    for values, tensor in zip(batch, inputs, strict=True)
                ]
            )
            for k, t in enumerate(subgraph.outputs):
                value = np.asarray(interpreter.get_tensor(t))
                results[k].append(_real(value, subgraph.tensors[t]))
        # A sample of a 0-d output has no row to join along: stacked, as unbatched ones.
        return [np.concatenate(r) if batched and r[0].ndim else np.stack(r) for r in results]

    return run


def _to_input(values: np.ndarray, tensor) -> np.ndarray:
    if tensor.dtype in INTEGER_TYPES and tensor.quantized and values.dtype.kind == "f":
        q = tensor.quantization
        return quantize(values, q.scale, q.zero_point, dtype=numpy_dtype(tensor.dtype))
    return values.astype(numpy_dtype(tensor.dtype))


def _real(values: np.ndarray, tensor) -> np.ndarray:
    if tensor.quantized and values.dtype.kind in "iu":
        q = tensor.quantization
        axis = q.quantized_dimension if q.per_axis else None
        return dequantize(values, q.scale, q.zero_point, axis)
    return values.astype(np.float32)


# --------------------------------------------------------------------------- simulation


def simulation_model(model: Model) -> tuple[Model, dict[int, tuple]]:
    """A float copy of an int8 model, and the (scale, zero point, dtype) of each activation that
    the numpy engine must fake-quantize as it is produced (subgraph 0)."""
    work = clone_model(model)
    subgraph = work.subgraphs[0]
    fake: dict[int, tuple] = {}
    for t, tensor in enumerate(subgraph.tensors):
        if tensor.dtype not in INTEGER_TYPES or not tensor.quantized:
            continue
        q = tensor.quantization
        axis = q.quantized_dimension if q.per_axis else None
        values = constant_values(work, tensor)  # int4 unpacked
        if values is not None:
            real = dequantize(values, q.scale, q.zero_point, axis)
            tensor.buffer = work.add_buffer(real)
        else:
            fake[t] = (q.scale, q.zero_point, numpy_dtype(tensor.dtype), axis)
        tensor.dtype = TensorType.FLOAT32
        tensor.quantization = None
    # QUANTIZE and DEQUANTIZE become identities on float values: the fake quantization of their
    # outputs already applies the rounding they stand for.
    for op in subgraph.operators:
        if work.op_type(op) in boundary_ops():
            op.opcode_index = work.opcode_for("RESHAPE")
            op.options_type = "ReshapeOptions"
            op.options = {"new_shape": list(subgraph.tensors[op.outputs[0]].shape)}
    return work, fake


def _simulated_runner(model: Model):
    work, fake = simulation_model(model)
    engine = Engine(work)

    def fake_quantize(t: int, value: np.ndarray) -> np.ndarray:
        if t not in fake:
            return value
        scale, zero_point, dtype, axis = fake[t]
        if axis is not None:
            return value  # per-axis activations do not occur in the int8 spec
        return dequantize(quantize(value, scale, zero_point, dtype=dtype), scale, zero_point)

    return lambda batch: engine.run(batch, replace=fake_quantize, chunk=CHUNK)

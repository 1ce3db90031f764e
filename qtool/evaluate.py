"""Compare a quantized model with its float reference over a dataset: per-output SQNR and top-1.

The reference runs on qtool's numpy engine (LiteRT when the engine lacks a kernel). The candidate
runs in LiteRT when `ai-edge-litert` is installed; otherwise it is simulated: its int8 weights and
biases are dequantized, every quantized activation is fake-quantized (quantized and dequantized
with its own scale and zero point) as it is produced, and the resulting float graph runs on the
numpy engine. The simulation reproduces the rounding and clamping of every tensor, not the
integer arithmetic inside kernels, so its SQNR is close to, not equal to, LiteRT's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from qtool.calibrate import Dataset
from qtool.calibrate.collect import refuse_nonfinite
from qtool.calibrate.memory import check_memory
from qtool.errors import UnsupportedOpError, UsageError
from qtool.model import Model, TensorType, numpy_dtype
from qtool.model.edit import clone_model
from qtool.model.lowbit import constant_values
from qtool.numerics import SqnrAccumulator, dequantize, quantize
from qtool.runtime import Engine
from qtool.runtime.litert import litert_available, litert_feeder, litert_interpreter
from qtool.spec import boundary_ops

ENGINES = ("auto", "litert", "simulate")
CHUNK = 32
INTEGER_TYPES = (TensorType.INT8, TensorType.UINT8, TensorType.INT16, TensorType.INT32)


@dataclass(frozen=True)
class OutputAccuracy:
    """How close one output of the candidate stays to the reference: SQNR in dB (inf when exact)
    and the top-1 agreement."""

    name: str  # the candidate's output tensor name
    sqnr_db: float
    top1: float | None  # share of samples whose argmax agrees; None unless classifier-like

    def to_dict(self) -> dict:
        """Every field, JSON-ready."""
        return asdict(self)


@dataclass(frozen=True)
class Comparison:
    """The comparison of a candidate model with its float reference, output by output."""

    outputs: list[OutputAccuracy]
    samples: int
    engine: str  # how the candidate ran: "litert" or "simulate"

    @property
    def worst_db(self) -> float:
        """The lowest output SQNR (dB)."""
        return min(o.sqnr_db for o in self.outputs)

    def to_dict(self) -> dict:
        """JSON-ready: samples, engine and every output's accuracy."""
        return {
            "samples": self.samples,
            "engine": self.engine,
            "outputs": [o.to_dict() for o in self.outputs],
        }


PASS_THROUGH = ("DEQUANTIZE", "QUANTIZE", "RESHAPE", "SQUEEZE")
CLASS_SCORES = ("SOFTMAX", "LOG_SOFTMAX")


def classifier_like(model: Model, tensor_index: int) -> bool:
    """A vector of class scores: written by SOFTMAX/LOG_SOFTMAX (through reshapes and
    (de)quantization), with one axis of size >= 2."""
    subgraph = model.subgraphs[0]
    shape = subgraph.tensors[tensor_index].shape
    if sum(d > 1 for d in shape) != 1:
        return False
    producers = subgraph.producers()
    while tensor_index in producers:
        op = subgraph.operators[producers[tensor_index]]
        op_type = model.op_type(op)
        if op_type in CLASS_SCORES:
            return True
        if op_type not in PASS_THROUGH:
            return False
        tensor_index = op.inputs[0]
    return False


def compare_models(
    reference: Model, candidate: Model, dataset: Dataset, engine: str = "auto"
) -> Comparison:
    """Run both models over `dataset` (float samples of the reference's inputs) and compare."""
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
    outputs = [cand_graph.tensors[t] for t in cand_graph.outputs]
    sqnr = [SqnrAccumulator() for _ in outputs]
    agree = [0] * len(outputs)
    samples = 0
    for batch in dataset.iter_chunks(CHUNK):
        expected, got = run_reference(batch), run_candidate(batch)
        refuse_nonfinite(expected, dataset.source)
        samples += batch[0].shape[0]
        for k, (want, have) in enumerate(zip(expected, got, strict=True)):
            have = np.asarray(have, np.float64).reshape(want.shape)
            sqnr[k].add(want, have)
            n = want.shape[0]
            agree[k] += int(np.sum(want.reshape(n, -1).argmax(1) == have.reshape(n, -1).argmax(1)))
    if not samples:
        raise UsageError(f"{dataset.source}: no samples to compare on")
    return Comparison(
        outputs=[
            OutputAccuracy(
                name=tensor.name,
                sqnr_db=acc.db,
                top1=agree[k] / samples
                if classifier_like(reference, ref_graph.outputs[k])
                else None,
            )
            for k, (tensor, acc) in enumerate(zip(outputs, sqnr, strict=True))
        ],
        samples=samples,
        engine=engine,
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
        return [np.concatenate(r) if batched else np.stack(r) for r in results]

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

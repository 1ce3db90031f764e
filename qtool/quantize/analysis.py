"""Per-layer quantization error: where in the network accuracy is lost.

The float model and its int8 version both run in LiteRT with every intermediate tensor kept; each
int8 activation is dequantized and compared with the float tensor of the same name (the
rewriter keeps names; boundary copies carry an `_int8` suffix). The result is the SQNR of every
layer as the real int8 kernels compute it, not a simulation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qtool.calibrate import Dataset
from qtool.errors import UsageError
from qtool.model import Model, Tensor, TensorType
from qtool.numerics import dequantize, quantize, sqnr_from_sums
from qtool.runtime.litert import litert_available, litert_feeder, litert_interpreter

MAX_SAMPLES = 32


@dataclass(frozen=True)
class LayerError:
    """The SQNR (dB) of one int8 activation against the float tensor of the same name, both run
    in LiteRT."""

    subgraph: int
    tensor: str
    op: str  # type of the operator producing the tensor in the int8 model
    sqnr_db: float


def layer_errors(
    float_model: Model, int8_model: Model, dataset: Dataset, subgraph_index: int = 0
) -> list[LayerError]:
    """SQNR of every int8 activation against the float model, worst first."""
    if not litert_available():
        raise UsageError("`layer_errors` runs both models in LiteRT: pip install ai-edge-litert")
    pairs = _matching_tensors(float_model, int8_model, subgraph_index)
    signal = dict.fromkeys(pairs, 0.0)
    noise = dict.fromkeys(pairs, 0.0)
    float_run = _TensorReader(float_model, subgraph_index)
    int8_run = _TensorReader(int8_model, subgraph_index)
    int8_tensors = int8_model.subgraphs[subgraph_index].tensors
    batch = next(dataset.iter_chunks(MAX_SAMPLES))  # a few dozen samples rank layers reliably
    # A sample is the whole declared tensor where an input has no leading 1 to hold it.
    leading_one = float_model.subgraphs[subgraph_index].inputs_lead_with_one()
    for i in range(batch[0].shape[0]):
        sample = [values[i : i + 1] if leading_one else values[i] for values in batch]
        reference, quantized = float_run(sample), int8_run(sample)
        for f, q in pairs:
            expected = reference(f).astype(np.float64)
            got = _real_values(int8_tensors[q], quantized(q))
            signal[(f, q)] += float(np.sum(expected**2))
            noise[(f, q)] += float(np.sum((expected - got) ** 2))
    producers = int8_model.subgraphs[subgraph_index].producers()
    errors = [
        LayerError(
            subgraph=subgraph_index,
            tensor=float_model.subgraphs[subgraph_index].tensors[f].name,
            op=int8_model.op_type(int8_model.subgraphs[subgraph_index].operators[producers[q]])
            if q in producers
            else "input",
            sqnr_db=sqnr_from_sums(signal[(f, q)], noise[(f, q)]),
        )
        for (f, q) in pairs
    ]
    return sorted(errors, key=lambda e: e.sqnr_db)


def _matching_tensors(float_model: Model, int8_model: Model, s: int) -> list[tuple[int, int]]:
    """(float tensor, int8 tensor) pairs of the activations the int8 model computes in int8."""
    float_graph, int8_graph = float_model.subgraphs[s], int8_model.subgraphs[s]
    produced = set(int8_graph.inputs) | {t for op in int8_graph.operators for t in op.outputs}
    quantized = {
        int8_graph.tensors[t].name: t
        for t in produced
        if int8_graph.tensors[t].dtype in (TensorType.INT8, TensorType.UINT8)
        and int8_graph.tensors[t].quantized
    }
    pairs = []
    for t, tensor in enumerate(float_graph.tensors):
        if tensor.dtype != TensorType.FLOAT32 or float_model.is_constant(tensor):
            continue
        match = quantized.get(tensor.name, quantized.get(f"{tensor.name}_int8"))
        if match is not None:
            pairs.append((t, match))
    return pairs


def _real_values(tensor: Tensor, values: np.ndarray) -> np.ndarray:
    q = tensor.quantization
    return dequantize(values, q.scale, q.zero_point).astype(np.float64)


class _TensorReader:
    """Runs one sample in LiteRT and returns a reader of any tensor's value."""

    def __init__(self, model: Model, subgraph_index: int) -> None:
        self.interpreter = litert_interpreter(model)
        self.subgraph_index = subgraph_index
        self.feed = litert_feeder(model, self.interpreter, subgraph_index)
        self.inputs = model.subgraphs[subgraph_index].inputs
        self.model = model

    def __call__(self, sample: list[np.ndarray]):
        subgraph = self.model.subgraphs[self.subgraph_index]
        self.feed(
            [
                self._as_input(subgraph.tensors[t], x)
                for t, x in zip(self.inputs, sample, strict=True)
            ]
        )
        return lambda t: np.array(self.interpreter.get_tensor(t, self.subgraph_index))

    @staticmethod
    def _as_input(tensor: Tensor, values: np.ndarray) -> np.ndarray:
        """Float samples as the model's input type (integer inputs of an --io int8 model)."""
        if tensor.dtype == TensorType.FLOAT32 or not tensor.quantized:
            return values
        dtype = np.int8 if tensor.dtype == TensorType.INT8 else np.uint8
        return quantize(values, tensor.quantization.scale, tensor.quantization.zero_point, dtype)

"""A float model and another version of it (a converter baseline, a qtool output) run in LiteRT
on the same held-out samples, compared output by output in dB.

Outputs are matched by name through the models' serving signature (TensorFlow's converter keeps
the signature's output names in every mode; their tensor order can differ). A model's state
(resource variables) carries from one sample to the next, as in a stream; every model gets a
fresh interpreter, so both start from the same initial state.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from qtool.numerics import dequantize, quantize, sqnr_db


def signature_outputs(path: Path, samples: np.ndarray) -> dict[str, np.ndarray]:
    """`{output name: outputs of every sample stacked}` through the default signature, each
    sample fed as a batch of one. A model with integer inputs or outputs (a peer's full-integer
    model) gets its samples quantized and its outputs dequantized with their parameters."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path))
    signatures = interpreter.get_signature_list()
    key = "serving_default" if "serving_default" in signatures else next(iter(signatures))
    (input_name,) = signatures[key]["inputs"]
    runner = interpreter.get_signature_runner(key)
    feed = runner.get_input_details()[input_name]
    outputs = runner.get_output_details()
    found: dict[str, list[np.ndarray]] = {}
    for sample in samples:
        value = _to_type(sample[None].astype(np.float32), feed)
        for name, got in runner(**{input_name: value}).items():
            found.setdefault(name, []).append(_to_float(np.asarray(got), outputs[name]))
    return {name: np.concatenate(parts) for name, parts in found.items()}


def _to_type(value: np.ndarray, detail: dict) -> np.ndarray:
    if detail["dtype"] == np.float32:
        return value
    scale, zero_point = detail["quantization"]
    return quantize(value, scale, zero_point, dtype=detail["dtype"])


def _to_float(value: np.ndarray, detail: dict) -> np.ndarray:
    if value.dtype == np.float32:
        return value.copy()
    scale, zero_point = detail["quantization"]
    return dequantize(value, scale, zero_point)


def worst_sqnr(reference: dict[str, np.ndarray], candidate: dict[str, np.ndarray]) -> float:
    """The lowest SQNR (dB) over the outputs both have, float64 sums (qtool's sqnr_db)."""
    return min(sqnr_db(reference[name], candidate[name]) for name in reference)

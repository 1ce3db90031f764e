"""Measure how far the integer op qtool writes is from the float op, in output LSBs.

For one `OpCase` and a value range: build the float one-op model, quantize it with qtool
(min/max calibration on samples of the range), then feed the quantized model inputs whose
integer codes are known (every code the spec allows for the operand, its extremes included,
and the calibration samples' codes) and compare each runtime's output with the float op run on
the DEQUANTIZED inputs and constants (the values the integer op really holds): the error is
|runtime - clamp(float op)| / output scale.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType

from qtool.calibrate import Dataset, model_inputs
from qtool.model import Model, model_to_bytes, numpy_dtype, parse_model
from qtool.model.build import GraphBuilder
from qtool.numerics import dequantize
from qtool.quantize import QuantizeOptions, quantize_loaded
from qtool.spec import load_spec
from tests.check.oracles import tflm_run
from tests.quantize.op_cases import OUTPUTS, RANGES, OpCase, Operand

CALIBRATION_SAMPLES = 8
RESOLVERS = {
    "builtin": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
    "xnnpack": OpResolverType.AUTO,
}


def operand_range(operand: Operand, profile: str, position: int) -> tuple[float, float]:
    """The value range of a float operand: `profile`'s for the first, the next profiles in turn
    for later ones (two inputs of one op get different ranges, so their scales differ)."""
    from tests.quantize.op_cases import POSITIVE_RANGES

    table = POSITIVE_RANGES if operand.domain == "positive" else RANGES
    names = list(table)
    start = names.index(profile) if profile in table else list(RANGES).index(profile) % len(names)
    return table[names[(start + position) % len(names)]]


@dataclass
class Built:
    """A case's float model and the values its real-valued operands got."""

    model: Model
    constants: dict[int, np.ndarray]  # position -> float constant (const, weight, bias)
    act_positions: list[int]  # positions that are model inputs, in input order


def build(case: OpCase, constants: dict[int, np.ndarray], output_shapes=None) -> bytes:
    builder = GraphBuilder()
    indices = []
    for p, operand in enumerate(case.operands):
        if operand is None:
            indices.append(-1)
        elif operand.kind in ("act", "bool"):
            dtype = np.bool_ if operand.kind == "bool" else np.float32
            indices.append(builder.input(f"in{p}", list(operand.shape), dtype))
        elif operand.kind == "int":
            value = np.asarray(operand.value, np.dtype(operand.dtype))
            indices.append(builder.constant(f"c{p}", value))
        else:
            indices.append(builder.constant(f"c{p}", np.asarray(constants[p], np.float32)))
    n = OUTPUTS.get(case.op_type, 1)
    dtypes = list(case.output_dtypes) * n if len(case.output_dtypes) == 1 else case.output_dtypes
    shapes = output_shapes or [[]] * n
    outputs = [
        builder.tensor(f"out{k}", list(shape), np.dtype(dtype))
        for k, (shape, dtype) in enumerate(zip(shapes, dtypes, strict=True))
    ]
    builder.op(
        case.op_type,
        indices,
        outputs,
        options_type=case.options_type,
        options=dict(case.options),
        version=case.version,
    )
    return model_to_bytes(builder.finish(outputs))


def run(data: bytes, feeds: list[np.ndarray], resolver=RESOLVERS["builtin"]) -> list:
    interpreter = Interpreter(model_content=data, experimental_op_resolver_type=resolver)
    interpreter.allocate_tensors()
    for detail, feed in zip(interpreter.get_input_details(), feeds, strict=True):
        interpreter.set_tensor(detail["index"], np.asarray(feed, detail["dtype"]))
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]).copy() for d in interpreter.get_output_details()]


def _draw(rng: np.random.Generator, operand: Operand, span, n: int) -> np.ndarray:
    shape = (n, *operand.shape)
    if operand.kind == "bool":
        return rng.random(shape) < 0.5
    low, high = span
    return rng.uniform(low, high, shape).astype(np.float32)


@dataclass
class Measured:
    """Errors (output LSBs; integer outputs: elements that differ) per runtime."""

    errors: dict[str, float] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)  # runtime -> why it did not run
    op_params: dict = field(default_factory=dict)
    quantized: bytes = b""


def quantized_case(case: OpCase, profile: str, scheme: str = "int8", seed: int = 0):
    """(float model bytes, quantized model, calibration samples, constants) of a case."""
    rng = np.random.default_rng(zlib.crc32(f"{case.op_type}{profile}{seed}".encode()))
    constants = {}
    for p, operand in enumerate(case.operands):
        if operand is None:
            continue
        if operand.kind == "const":
            constants[p] = _draw(rng, operand, operand_range(operand, profile, p), 1)[0]
        elif operand.kind in ("weight", "bias"):
            constants[p] = rng.standard_normal(operand.shape).astype(np.float32)
    probe = build(case, constants)
    inputs = [
        _draw(rng, o, operand_range(o, profile, p), CALIBRATION_SAMPLES)
        for p, o in enumerate(case.operands)
        if o is not None and o.kind in ("act", "bool")
    ]
    first = run(probe, [x[0] for x in inputs])
    data = build(case, constants, [list(o.shape) for o in first])
    model = parse_model(data)
    specs = model_inputs(model)
    samples = [x.reshape(CALIBRATION_SAMPLES, *s.sample_shape) for x, s in zip(inputs, specs)]
    options = QuantizeOptions(
        calibration="minmax",
        bias_correction=False,
        activations=scheme,
        engine="numpy",
    )
    result = quantize_loaded(model, Dataset.from_arrays(samples), options)
    return data, result, inputs, rng


def measure(
    case: OpCase, profile: str, scheme: str = "int8", runtimes=("builtin", "xnnpack")
) -> Measured:
    data, result, inputs, rng = quantized_case(case, profile, scheme)
    quantized = result.model
    subgraph = quantized.subgraphs[0]
    ops = [op for op in subgraph.operators if quantized.op_type(op) == case.op_type]
    assert len(ops) == 1, f"{case.op_type}: {[quantized.op_type(o) for o in subgraph.operators]}"
    (op,) = ops
    out = Measured(quantized=model_to_bytes(quantized))
    spec = load_spec((), scheme)
    rule = spec.rule(case.op_type)
    # Inputs: codes over the operand's whole allowed range plus the calibration samples'.
    feeds, constants = [], {}
    for p, operand in enumerate(case.operands):
        if operand is None or operand.kind == "int":
            continue
        tensor = subgraph.tensors[op.inputs[p]]
        if operand.kind == "bool":
            feeds.append(np.concatenate([inputs[len(feeds)], rng.random((8, *operand.shape)) < 0.5]))
            continue
        q = tensor.quantization
        if quantized.is_constant(tensor):
            axis = q.quantized_dimension if q.scale.size > 1 else None
            stored = quantized.tensor_data(tensor)
            constants[p] = dequantize(stored, q.scale, q.zero_point, axis).reshape(stored.shape)
            continue
        assert tensor.dtype != 0, f"{case.op_type} input {p} stayed float"
        low, high = rule.input_rule(p).range
        codes = rng.integers(low, high, (8, *operand.shape), endpoint=True)
        codes.reshape(8, -1)[0, :2] = (low, high)
        calibration = inputs[len(feeds)]
        calibrated = np.clip(
            np.round(calibration / q.scale[0] + q.zero_point[0]), low, high
        )
        all_codes = np.concatenate([codes, calibrated]).astype(np.int64)
        feeds.append(
            dequantize(all_codes.astype(np.int32), q.scale, q.zero_point)
        )
        out.op_params[f"in{p}"] = (float(q.scale[0]), int(q.zero_point[0]))
    for p, value in constants.items():
        out.op_params[f"const{p}"] = "dequantized"
    n = feeds[0].shape[0] if feeds else 1
    reference_model = build(case, {**_float_constants(case), **constants}, _shapes(data))
    reference = _per_sample(reference_model, feeds, n, RESOLVERS["builtin"])
    params = []
    for k, t in enumerate(op.outputs):
        q = subgraph.tensors[t].quantization
        params.append(None if q is None or not q.scale.size else q)
        if params[-1] is not None:
            out.op_params[f"out{k}"] = (float(q.scale[0]), int(q.zero_point[0]))
    for name in runtimes:
        try:
            if name == "tflm":
                got = _tflm(out.quantized, feeds, n)
            else:
                got = _per_sample(out.quantized, feeds, n, RESOLVERS[name])
        except RuntimeError as exc:  # LiteRT refuses the model at prepare
            out.failures[name] = str(exc).splitlines()[0][:200]
            continue
        out.errors[name] = max(
            _error(g, r, q, subgraph.tensors[t].dtype)
            for g, r, q, t in zip(got, reference, params, op.outputs, strict=True)
        )
    return out


def _float_constants(case: OpCase) -> dict[int, np.ndarray]:
    return {}


def _shapes(data: bytes) -> list[list[int]]:
    model = parse_model(data)
    subgraph = model.subgraphs[0]
    return [list(subgraph.tensors[t].shape) for t in subgraph.outputs]


def _per_sample(data: bytes, feeds, n: int, resolver) -> list[np.ndarray]:
    runs = [run(data, [f[i] for f in feeds], resolver) for i in range(n)]
    return [np.stack(parts) for parts in zip(*runs, strict=True)]


def _tflm(data: bytes, feeds, n: int) -> list[np.ndarray]:
    runs = []
    for i in range(n):
        result = tflm_run(data, [np.asarray(f[i]) for f in feeds])
        if not result["runs"]:
            raise RuntimeError(result["error"])
        runs.append([np.asarray(o) for o in result["outputs"]])
    return [np.stack(parts) for parts in zip(*runs, strict=True)]


def _error(got: np.ndarray, reference: np.ndarray, q, dtype) -> float:
    if q is None:  # an integer or boolean output: elements that differ
        return float(np.count_nonzero(got != reference))
    info = np.iinfo(numpy_dtype(dtype))
    scale, zero = float(q.scale[0]), int(q.zero_point[0])
    low, high = scale * (info.min - zero), scale * (info.max - zero)
    expected = np.clip(reference.astype(np.float64), low, high)
    return float(np.max(np.abs(got.astype(np.float64) - expected)) / scale)

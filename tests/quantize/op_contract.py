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
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType

from qtool.calibrate import Dataset, model_inputs
from qtool.model import Model, TensorType, model_to_bytes, numpy_dtype, parse_model
from qtool.model.build import GraphBuilder
from qtool.model.sparsity import densify
from qtool.numerics import dequantize
from qtool.quantize import QuantizeOptions, quantize_loaded
from qtool.spec import kernel_contracts, load_spec
from tests.check.oracles import tflm_run
from tests.quantize.op_cases import OUTPUTS, POSITIVE_RANGES, RANGES, OpCase, Operand
from tests.quantize.test_sparse_weights import sparse_constant

CALIBRATION_SAMPLES = 8
SPARSE_DENSITY = 0.25  # of "sparse" weights: the int8 sparse form is then the smaller one
SAMPLES = 8  # samples of codes drawn over the whole range
RESOLVERS = {
    "builtin": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
    "xnnpack": OpResolverType.AUTO,
}


def operand_range(
    operand: Operand, profile: str, position: int, ranges: dict | None = None
) -> tuple[float, float]:
    """The value range of a float operand: `profile`'s for the first, the next profiles in turn
    for later ones (two inputs of one op get different ranges, so their scales differ)."""
    table = POSITIVE_RANGES if operand.domain == "positive" else (ranges or RANGES)
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
        elif operand.kind == "sparse":
            indices.append(sparse_constant(builder, f"c{p}", constants[p]))
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
    kept_float: str | None = None  # why qtool kept the op float (a kernel contract)
    quantized: bytes = b""


def quantized_case(
    case: OpCase,
    profile: str,
    scheme: str = "int8",
    seed: int = 0,
    ranges: dict | None = None,
    target: str | None = None,
):
    """(float model bytes, qtool's result, calibration samples, rng) of a case, quantized for
    `target` when given; `ranges` replaces the profiles of `RANGES`."""
    rng = np.random.default_rng(zlib.crc32(f"{case.op_type}{profile}{seed}".encode()))
    constants = {}
    for p, operand in enumerate(case.operands):
        if operand is None:
            continue
        if operand.kind == "const":
            constants[p] = _draw(rng, operand, operand_range(operand, profile, p, ranges), 1)[0]
        elif operand.kind in ("weight", "bias"):
            constants[p] = rng.standard_normal(operand.shape).astype(np.float32)
        elif operand.kind == "sparse":  # pruned: a quarter of the weights left
            kept = rng.random(operand.shape) < SPARSE_DENSITY
            constants[p] = np.where(kept, rng.standard_normal(operand.shape), 0).astype(np.float32)
    probe = build(case, constants)
    inputs = [
        _draw(rng, o, operand_range(o, profile, p, ranges), CALIBRATION_SAMPLES)
        for p, o in enumerate(case.operands)
        if o is not None and o.kind in ("act", "bool")
    ]
    first = run(probe, [x[0] for x in inputs])
    data = build(case, constants, [list(o.shape) for o in first])
    model = parse_model(data)
    specs = model_inputs(model)
    samples = [
        x.reshape(CALIBRATION_SAMPLES, *s.sample_shape) for x, s in zip(inputs, specs, strict=True)
    ]
    options = QuantizeOptions(
        calibration="minmax",
        bias_correction=False,
        activations=scheme,
        engine="numpy",
        target=target,
    )
    result = quantize_loaded(model, Dataset.from_arrays(samples), options)
    return data, result, inputs, rng


def _codes(rng, operand: Operand, low: int, high: int, zero_point: int) -> np.ndarray:
    """Codes over the operand's allowed range, both ends included; only codes of positive values
    for an op defined on them."""
    if operand.domain == "positive":
        low = max(low, zero_point + 1)
    codes = rng.integers(low, high, (SAMPLES, *operand.shape), endpoint=True)
    flat = codes.reshape(SAMPLES, -1)
    if flat.shape[1] >= 2:
        flat[0, :2] = (low, high)
    else:  # one value a sample (a 0-d operand): the ends in the first two samples
        flat[:2, 0] = (low, high)
    return codes


def measure(
    case: OpCase,
    profile: str,
    scheme: str = "int8",
    runtimes=("builtin", "xnnpack"),
    tflm: Callable[[bytes], bool] | None = None,
    target: str | None = None,
) -> Measured:
    """The case's errors in each runtime of `runtimes`, and in TFLite Micro when `tflm` says the
    quantized model runs there; quantized for `target` when given."""
    data, result, inputs, rng = quantized_case(case, profile, scheme, target=target)
    quantized = result.model
    subgraph = quantized.subgraphs[0]
    ops = [op for op in subgraph.operators if quantized.op_type(op) == case.op_type]
    assert len(ops) == 1, f"{case.op_type}: {[quantized.op_type(o) for o in subgraph.operators]}"
    (op,) = ops
    out = Measured(quantized=model_to_bytes(quantized))
    kept = [f.reason for f in result.float_ops if f.op_type == case.op_type]
    if kept:
        out.kept_float = kept[0]
        return out
    # The covered op must be there, computing in integers (a target without it, TFLite Micro
    # without DENSIFY, gets the form it runs).
    if case.covers is not None and target is None:
        covered = [o for o in subgraph.operators if quantized.op_type(o) == case.covers]
        assert covered and all(
            subgraph.tensors[o.outputs[0]].dtype in (TensorType.INT8, TensorType.INT16)
            for o in covered
        ), f"{case.covers}: {[quantized.op_type(o) for o in subgraph.operators]}"
    # The scheme the op got (a 16x8 request falls back to int8 where int16 cannot run).
    first = next(t for t in op.inputs if t >= 0 and subgraph.tensors[t].quantization)
    computed = "int16" if subgraph.tensors[first].dtype == TensorType.INT16 else "int8"
    rule = load_spec((), computed).rule(case.op_type)
    # Inputs: codes over the operand's whole allowed range plus the calibration samples'.
    feeds, constants, real_inputs = [], {}, {}
    for p, operand in enumerate(case.operands):
        if operand is None or operand.kind == "int":
            continue
        tensor = subgraph.tensors[op.inputs[p]]
        if operand.kind == "bool":
            drawn = rng.random((SAMPLES, *operand.shape)) < 0.5
            feeds.append(np.concatenate([drawn, inputs[len(feeds)]]))
            continue
        if operand.kind == "sparse" and not quantized.is_constant(tensor):
            constants[p] = real_inputs[p] = _densified(quantized, subgraph, op.inputs[p])
            continue
        q = tensor.quantization
        if quantized.is_constant(tensor):
            axis = q.quantized_dimension if q.scale.size > 1 else None
            stored = quantized.tensor_data(tensor)
            constants[p] = dequantize(stored, q.scale, q.zero_point, axis).reshape(stored.shape)
            real_inputs[p] = constants[p]
            continue
        low, high = rule.input_rule(p).range
        scale, zero = q.scale[0], int(q.zero_point[0])
        calibration = np.clip(np.round(inputs[len(feeds)] / scale + zero), low, high)
        codes = np.concatenate([_codes(rng, operand, low, high, zero), calibration])
        feeds.append(dequantize(codes.astype(np.int32), q.scale, q.zero_point))
        real_inputs[p] = feeds[-1]
    n = feeds[0].shape[0]
    reference_model = build(case.densified(), constants, _shapes(data))
    reference = _per_sample(reference_model, feeds, n, RESOLVERS["builtin"])
    params = []
    for t in op.outputs:
        q = subgraph.tensors[t].quantization
        params.append(None if q is None or not q.scale.size else q)
    ties = _ties(case, real_inputs, reference[0].shape, computed)
    if tflm is not None and tflm(out.quantized):
        runtimes = (*runtimes, "tflm")
    for name in runtimes:
        try:
            if name == "tflm":
                got = _tflm(out.quantized, feeds, n)
            else:
                got = _per_sample(out.quantized, feeds, n, RESOLVERS[name])
        except (RuntimeError, ValueError) as exc:  # the runtime refuses the model
            out.failures[name] = " ".join(str(exc).split())[:300]
            continue
        out.errors[name] = max(
            _error(g, r, q, subgraph.tensors[t].dtype, ties)
            for g, r, q, t in zip(got, reference, params, op.outputs, strict=True)
        )
    return out


def _ties(case: OpCase, real_inputs: dict, shape, scheme: str) -> np.ndarray | None:
    """For a comparison: the elements whose inputs are closer than its kernel resolves
    (kernel_contracts.comparison_scale: values rounded to 1/256), where either answer is right."""
    contracts = kernel_contracts(scheme)
    if case.op_type not in contracts.comparison_ops:
        return None
    first, second = (np.broadcast_to(real_inputs[p], shape) for p in sorted(real_inputs))
    return np.abs(first.astype(np.float64) - second) <= 2 * contracts.comparison_scale[0]


def _densified(model: Model, subgraph, tensor: int) -> np.ndarray:
    """The real weights a DENSIFY gives the op as `tensor`: its sparse input's codes expanded
    and dequantized."""
    (densify_op,) = [
        o for o in subgraph.operators if tensor in o.outputs and model.op_type(o) == "DENSIFY"
    ]
    stored = subgraph.tensors[densify_op.inputs[0]]
    codes = densify(model.tensor_data(stored), stored.shape, stored.sparsity)
    q = stored.quantization
    axis = q.quantized_dimension if q.scale.size > 1 else None
    return dequantize(codes, q.scale, q.zero_point, axis).reshape(codes.shape)


def _shapes(data: bytes) -> list[list[int]]:
    model = parse_model(data)
    subgraph = model.subgraphs[0]
    return [list(subgraph.tensors[t].shape) for t in subgraph.outputs]


def _per_sample(data: bytes, feeds, n: int, resolver) -> list[np.ndarray]:
    """Every sample invoked in one interpreter (outputs stacked)."""
    interpreter = Interpreter(model_content=data, experimental_op_resolver_type=resolver)
    interpreter.allocate_tensors()
    inputs, outputs = interpreter.get_input_details(), interpreter.get_output_details()
    runs = []
    for i in range(n):
        for detail, feed in zip(inputs, feeds, strict=True):
            interpreter.set_tensor(detail["index"], np.asarray(feed[i], detail["dtype"]))
        interpreter.invoke()
        runs.append([interpreter.get_tensor(d["index"]).copy() for d in outputs])
    return [np.stack(parts) for parts in zip(*runs, strict=True)]


def _tflm(data: bytes, feeds, n: int) -> list[np.ndarray]:
    result = tflm_run(data, [[np.asarray(f[i]) for f in feeds] for i in range(n)])
    if not result["runs"]:
        raise RuntimeError(result["error"])
    runs = [[np.asarray(o) for o in outputs] for outputs in result["runs_outputs"]]
    return [np.stack(parts) for parts in zip(*runs, strict=True)]


def _error(got: np.ndarray, reference: np.ndarray, q, dtype, ties) -> float:
    if q is None:  # an integer or boolean output: elements that differ (ties aside)
        differ = got != reference
        return float(np.count_nonzero(differ if ties is None else differ & ~ties))
    info = np.iinfo(numpy_dtype(dtype))
    scale, zero = float(q.scale[0]), int(q.zero_point[0])
    low, high = scale * (info.min - zero), scale * (info.max - zero)
    expected = np.clip(reference.astype(np.float64), low, high)
    return float(np.max(np.abs(got.astype(np.float64) - expected)) / scale)

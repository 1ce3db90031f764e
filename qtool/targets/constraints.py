"""Target constraints: small named functions with a stable id and the text users read.

Each function takes the op and the limits a target profile gives it, and returns None when the op
meets the constraint, else what the op has instead (e.g. "stride 4x4"). The text is a template
filled with the same limits, so `[stride-range] Stride must be in [1, 3]` always states the
profile's numbers. Profiles (schemas/targets/*.json) choose which constraints apply to which ops.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from qtool.model import TensorType
from qtool.spec import int16_without
from qtool.targets.opview import TargetOp

Check = Callable[..., str | None]


@dataclass(frozen=True)
class Constraint:
    """A registered constraint: its stable id, the text template users read, and the check
    function."""

    id: str
    template: str
    check: Check

    def text(self, params: dict[str, Any]) -> str:
        """The constraint's text with a profile's limits filled in (lists joined with commas)."""
        return self.template.format(**{k: _show(v) for k, v in params.items()})


def _show(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


CONSTRAINTS: dict[str, Constraint] = {}


def constraint(constraint_id: str, template: str) -> Callable[[Check], Check]:
    """Register the decorated check function under `constraint_id` with its text template."""

    def register(check: Check) -> Check:
        CONSTRAINTS[constraint_id] = Constraint(constraint_id, template, check)
        return check

    return register


def _bad_tensors(tensors, wrong: Callable[[Any], str | None]) -> str | None:
    problems = [f"'{t.name}' {problem}" for t in tensors if (problem := wrong(t)) is not None]
    return "; ".join(problems) if problems else None


# ------------------------------------------------------------------ the op list


@constraint("op-list", "{op} is not among the operators {target} supports")
def op_listed(op: TargetOp, **_: Any) -> str | None:
    """Flags any op: placement gives only its text, for ops missing from the profile's list."""
    return f"op {op.type}"  # only evaluated for ops missing from the profile's list


# ------------------------------------------------------------------ tensors


@constraint("feature-map-types", "Feature maps (activations) must be one of: {allowed}")
def feature_map_types(op: TargetOp, allowed: list[str]) -> str | None:
    """Feature maps (non-constant inputs and outputs) whose type is not in `allowed` (lower-case
    names, "int8")."""
    return _bad_tensors(
        op.feature_maps,
        lambda t: None if op.type_name(t) in allowed else f"is {op.type_name(t)}",
    )


@constraint(
    "int16-kernel",
    "Int16 feature maps need the runtime's 16x8 kernel (schemas/int16x8_spec.json, profile "
    "{profile}: ops without one)",
)
def int16_kernel(op: TargetOp, profile: str) -> str | None:
    """An op the spec's 16x8 profile `profile` lists as having no int16 kernel on its runtime,
    with int16 feature maps."""
    if op.type not in int16_without(profile):
        return None
    return _bad_tensors(
        op.feature_maps, lambda t: "is int16" if op.type_name(t) == "int16" else None
    )


@constraint("quantized", "Feature maps and weights must have quantization parameters")
def quantized(op: TargetOp) -> str | None:
    """Feature maps and weights without a scale, except BOOL, INT32 and INT64 tensors."""
    return _bad_tensors(
        op.data_tensors,
        lambda t: (
            None
            if t.quantized or t.dtype in (TensorType.BOOL, TensorType.INT32, TensorType.INT64)
            else f"is {op.type_name(t)} without scale/zero point"
        ),
    )


@constraint("per-tensor", "Per-axis (per-channel) quantization is not supported")
def per_tensor(op: TargetOp) -> str | None:
    """Feature maps and weights with per-axis scales."""
    return _bad_tensors(
        op.data_tensors,
        lambda t: (
            f"has {len(t.quantization.scale)} per-axis scales"
            if t.quantized and t.quantization.per_axis
            else None
        ),
    )


@constraint("no-hybrid", "Weights and activations must both be quantized (no hybrid ops)")
def no_hybrid(op: TargetOp) -> str | None:
    """Quantized weights read with a float32 or float16 input (a hybrid op)."""
    weights, ifm = op.weights, op.ifm
    if weights is None or ifm is None or not weights.quantized:
        return None
    if op.type_name(ifm) in ("float32", "float16"):
        return f"{op.type_name(weights)} weights '{weights.name}' with {op.type_name(ifm)} input"
    return None


@constraint("max-rank", "Tensors must have at most {max} dimensions")
def max_rank(op: TargetOp, max: int) -> str | None:
    """Feature maps of more than `max` dimensions."""
    return _bad_tensors(
        op.feature_maps, lambda t: f"has shape {t.shape}" if len(t.shape) > max else None
    )


@constraint("inner-dims", "Only the {count} innermost dimensions of a tensor may be larger than 1")
def inner_dims(op: TargetOp, count: int) -> str | None:
    """Feature maps with a dimension larger than 1 outside the `count` innermost ones."""
    return _bad_tensors(
        op.feature_maps,
        lambda t: f"has shape {t.shape}" if any(d > 1 for d in t.shape[:-count]) else None,
    )


@constraint("dim-range", "Tensor dimensions must be in [1, {max}]")
def dim_range(op: TargetOp, max: int) -> str | None:
    """Feature maps with a dimension outside [1, max]."""
    return _bad_tensors(
        op.feature_maps,
        lambda t: f"has shape {t.shape}" if any(not 1 <= d <= max for d in t.shape) else None,
    )


@constraint("static-shape", "Only the first dimension of a tensor may be dynamic")
def static_shape(op: TargetOp) -> str | None:
    """Feature maps whose shape signature makes a dimension other than the first dynamic."""

    def dynamic(t) -> str | None:
        signature = t.shape_signature or []
        return f"has shape signature {signature}" if any(d < 0 for d in signature[1:]) else None

    return _bad_tensors(op.feature_maps, dynamic)


@constraint("constant-params", "Parameter tensors ({what}) must be constant")
def constant_params(op: TargetOp, what: str, inputs: list[int]) -> str | None:
    """Inputs at the positions `inputs` (the parameters `what` names) that are computed at run
    time."""
    return _bad_tensors(
        (t for p in inputs if (t := op.input(p)) is not None),
        lambda t: None if op.constant(t) else "is computed at run time",
    )


@constraint("same-quantization", "Inputs must have the output's scale and zero point")
def same_quantization(op: TargetOp) -> str | None:
    """Non-constant inputs whose scale and zero point differ from the quantized output's."""
    out = op.ofm
    if out is None or not out.quantized:
        return None
    return _bad_tensors(
        op.feature_maps[: -len(op.outputs)],
        lambda t: None if out.quantization.same_params(t.quantization) else "has other parameters",
    )


# ------------------------------------------------------------------ weights and bias


@constraint("weights-constant", "Weights and bias must be constant")
def weights_constant(op: TargetOp) -> str | None:
    """Weights or a bias computed at run time."""
    return _bad_tensors(
        (t for t in (op.weights, op.bias) if t is not None),
        lambda t: None if op.constant(t) else "is computed at run time",
    )


@constraint("weight-types", "Weights must be one of: {allowed}")
def weight_types(op: TargetOp, allowed: list[str]) -> str | None:
    """Weights of a type not in `allowed`."""
    return _constant_type(op, op.weights, "weights", "are", allowed)


@constraint("bias-types", "Bias must be one of: {allowed}")
def bias_types(op: TargetOp, allowed: list[str]) -> str | None:
    """A bias of a type not in `allowed`."""
    return _constant_type(op, op.bias, "bias", "is", allowed)


def _constant_type(op: TargetOp, tensor, label: str, verb: str, allowed: list[str]) -> str | None:
    if tensor is None or op.type_name(tensor) in allowed:
        return None
    return f"{label} '{tensor.name}' {verb} {op.type_name(tensor)}"


@constraint("bias-required", "A bias is required")
def bias_required(op: TargetOp) -> str | None:
    """An op without a bias (an absent optional bias input counts)."""
    return "no bias" if op.bias is None else None


@constraint("weight-sum", "The sum of absolute weights of an output channel must be at most {max}")
def weight_sum(op: TargetOp, max: int) -> str | None:
    """Output channels whose absolute integer weights (less a per-tensor zero point) sum to more
    than `max`; only constant, quantized, dense weights are checked."""
    weights = op.weights
    values = None if weights is None else op.model.tensor_data(weights)
    if values is None or not weights.quantized or weights.sparsity is not None:
        return None
    q = weights.quantization
    zero = q.zero_point.reshape(-1)[0] if q.zero_point.size == 1 else 0
    magnitudes = np.abs(values.astype(np.int64) - int(zero))
    axis = op.weight_axis or 0  # output channels: the spec's per-axis dimension
    sums = magnitudes.sum(axis=tuple(d for d in range(values.ndim) if d != axis))
    largest = int(sums.max()) if sums.size else 0
    return f"a channel sums to {largest}" if largest > max else None


# ------------------------------------------------------------------ options and geometry


@constraint("fused-activation", "The fused activation must be one of: {allowed}")
def fused_activation(op: TargetOp, allowed: list[str]) -> str | None:
    """A fused activation not in `allowed` (the schema's names, "RELU6")."""
    return None if op.activation in allowed else f"fused {op.activation}"


@constraint("stride-range", "Stride height and width must be in [1, {max}]")
def stride_range(op: TargetOp, max: int) -> str | None:
    """A stride outside [1, max] in height or width."""
    height, width = op.stride
    return None if 1 <= height <= max and 1 <= width <= max else f"stride {height}x{width}"


@constraint(
    "large-stride",
    "Stride above {max} is only supported with dilation 1 and no padding (VALID, or SAME where "
    "the windows tile the input exactly)",
)
def large_stride(op: TargetOp, max: int) -> str | None:
    """A stride above `max` unless the op reads no padding and has dilation 1."""
    height, width = op.stride
    if height <= max and width <= max:
        return None
    if op.pads_nothing and op.dilation == (1, 1):
        return None
    return f"stride {height}x{width}, padding {op.padding}, dilation {op.dilation}"


@constraint("same-dilation", "Dilation must be the same along height and width")
def same_dilation(op: TargetOp) -> str | None:
    """Different dilation factors along height and width."""
    height, width = op.dilation
    return None if height == width else f"dilation {height}x{width}"


@constraint(
    "kernel-size",
    "With padding {padding}, the kernel height must be at most {max_height} and height x "
    "width at most {max_area}",
)
def kernel_size(op: TargetOp, padding: str, max_height: int, max_area: int) -> str | None:
    """A filter window taller than `max_height` or larger than `max_area`, for ops with padding
    `padding` ("ANY": every padding)."""
    kernel = op.kernel
    if kernel is None or (padding != "ANY" and op.padding != padding):
        return None
    height, width = kernel
    return (
        None if height <= max_height and height * width <= max_area else f"kernel {height}x{width}"
    )


@constraint("kernel-max", "With padding {padding}, kernel height and width must be at most {max}")
def kernel_max(op: TargetOp, padding: str, max: int) -> str | None:
    """A filter window higher or wider than `max`, for ops with padding `padding`."""
    kernel = op.kernel
    if kernel is None or op.padding != padding or (kernel[0] <= max and kernel[1] <= max):
        return None
    return f"kernel {kernel[0]}x{kernel[1]}"


@constraint("hw-area", "The input's height x width must be at most {max}")
def hw_area(op: TargetOp, max: int) -> str | None:
    """An input whose height x width (of its shape taken as NHWC, leading 1s added) exceeds
    `max`."""
    shape = op.ifm.shape if op.ifm is not None else []
    padded = [1] * (4 - len(shape)) + list(shape)
    area = int(padded[-3]) * int(padded[-2])
    return None if area <= max else f"input {list(shape)}"


@constraint("stride-within-window", "The stride must not exceed the pooling window")
def stride_within_window(op: TargetOp) -> str | None:
    """A stride larger than the pooling window along height or width."""
    kernel, stride = op.kernel, op.stride
    if kernel is None or (stride[0] <= kernel[0] and stride[1] <= kernel[1]):
        return None
    return f"window {kernel[0]}x{kernel[1]}, stride {stride[0]}x{stride[1]}"


@constraint("argmax-depth", "The input depth must be at most {max}, reduced along the depth axis")
def argmax_depth(op: TargetOp, max: int) -> str | None:
    """An arg-max along an axis other than the last, or over a depth above `max`; an axis
    computed at run time passes."""
    shape = op.ifm.shape if op.ifm is not None else []
    axis = op.values(1)
    if axis is None or not shape:
        return None
    along = int(np.asarray(axis).reshape(-1)[0]) % len(shape)
    if along != len(shape) - 1 or shape[-1] > max:
        return f"input {list(shape)}, axis {along}"
    return None


@constraint("reduce-axes", "Only reductions over axes {allowed} of a {rank}-D input are supported")
def reduce_axes(op: TargetOp, allowed: list[list[int]], rank: int) -> str | None:
    """A reduction over axes that are not one of `allowed` on an input of rank `rank`, or over
    axes computed at run time."""
    axes = op.values(1)
    shape = op.ifm.shape if op.ifm is not None else []
    if axes is None:
        return "axes computed at run time"
    normal = sorted({int(a) % max(len(shape), 1) for a in np.asarray(axes).reshape(-1)})
    if len(shape) == rank and normal in [sorted(a) for a in allowed]:
        return None
    return f"axes {normal} of input {list(shape)}"


@constraint(
    "mean-size",
    "Reduced elements must number at most {max_elements}, a reduced axis at most {max_axis}, "
    "and the depth may be reduced only if height, width or depth is 1",
)
def mean_size(op: TargetOp, max_elements: int, max_axis: int) -> str | None:
    """A MEAN over more than `max_elements` elements, along an axis longer than `max_axis`, or
    over the depth while none of height, width and depth is 1."""
    axes, shape = op.values(1), list(op.ifm.shape) if op.ifm is not None else []
    if axes is None or not shape:
        return None
    axes = sorted({int(a) % len(shape) for a in np.asarray(axes).reshape(-1)})
    reduced = [shape[a] for a in axes]
    depth_reduced = len(shape) - 1 in axes
    hwc = shape[-3:] if len(shape) >= 3 else shape
    if (
        int(np.prod(reduced)) > max_elements
        or any(size > max_axis for size in reduced)
        or (depth_reduced and 1 not in hwc)
    ):
        return f"axes {axes} of input {shape}"
    return None


@constraint(
    "resize-factor",
    "Output height and width must equal the input's, or be {factors} times it "
    "(2 with half-pixel centres; for align_corners, of size - 1)",
)
def resize_factor(op: TargetOp, factors: list[int]) -> str | None:
    """A resize of a 4-D input whose output height and width are neither the input's nor the same
    one of `factors` times it (2 only with half-pixel centres; ratios of size - 1 with
    align_corners)."""
    ifm, ofm = op.ifm, op.ofm
    if ifm is None or ofm is None or len(ifm.shape) != 4:
        return None
    (h, w), (oh, ow) = ifm.shape[1:3], ofm.shape[1:3]
    if (h == w == 1) or list(ifm.shape) == list(ofm.shape):
        return None
    align = bool(op.option("align_corners", False))
    if align:
        ratio_h = (oh - 1) / (h - 1) if h > 1 else 1
        ratio_w = (ow - 1) / (w - 1) if w > 1 else 1
    else:
        ratio_h, ratio_w = oh / h, ow / w
    allowed = [2] if op.option("half_pixel_centers", False) else factors
    detail = f"{h}x{w} -> {oh}x{ow}"
    if ratio_h != ratio_w:
        # One axis may stay 1 while the other scales.
        ok = (oh == 1 and h == 1 and ratio_w in allowed) or (
            ow == 1 and w == 1 and ratio_h in allowed
        )
        return None if ok else detail
    return None if ratio_h in allowed else detail


@constraint("input-count", "The op must have between {min} and {max} inputs")
def input_count(op: TargetOp, min: int, max: int) -> str | None:
    """An op whose number of present inputs is outside [min, max]."""
    count = sum(t is not None for t in op.inputs)
    return None if min <= count <= max else f"{count} inputs"


@constraint("output-count", "The op must have between {min} and {max} outputs")
def output_count(op: TargetOp, min: int, max: int) -> str | None:
    """An op whose number of outputs is outside [min, max]."""
    return None if min <= len(op.outputs) <= max else f"{len(op.outputs)} outputs"


@constraint("unit-strides", "Slice strides must all be 1")
def unit_strides(op: TargetOp) -> str | None:
    """A strided slice whose constant strides (input 3) are not all 1."""
    strides = op.values(3)
    if strides is None or np.all(np.asarray(strides) == 1):
        return None
    return f"strides {np.asarray(strides).tolist()}"


@constraint("op-version", "Operator version must be at most {max}")
def op_version(op: TargetOp, max: int) -> str | None:
    """An operator version above `max`."""
    return None if op.version <= max else f"version {op.version}"


@constraint(
    "flat-output", "The output must be one-dimensional (at most one dimension larger than 1)"
)
def flat_output(op: TargetOp) -> str | None:
    """An output with more than one dimension larger than 1."""
    out = op.ofm
    if out is None or sum(d > 1 for d in out.shape) <= 1:
        return None
    return f"output {out.shape}"


@constraint("max-elements", "The input must have at most {max} elements")
def max_elements(op: TargetOp, max: int) -> str | None:
    """An input (the first feature map) of more than `max` elements."""
    ifm = op.ifm
    count = int(np.prod(ifm.shape)) if ifm is not None and ifm.shape else 1
    return None if count <= max else f"{count} elements"

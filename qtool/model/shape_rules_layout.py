"""Shape rules of the operators that move data around: reshapes, joins and splits, slices and
gathers, pads and tiles (see `shape_rules.py`)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from qtool.model.shape_rules import (
    Dim,
    Inferred,
    OpView,
    Shape,
    ShapeError,
    axis_index,
    broadcast,
    declared_shape,
    elements,
    need_rank,
    pairs,
    rule,
    same_dim,
    same_shape,
    target_shape,
)
from qtool.model.types import TensorType

# --------------------------------------------------------------------------- reshapes


def _reshape_target(view: OpView) -> list[int] | None:
    """RESHAPE's target as TFLite picks it: an int32 vector input, else the new_shape option."""
    if view.present(1) and view.rank(1) == 1 and view.tensor(1).dtype == TensorType.INT32:
        return view.ints(1, "shape")
    target = view.option_ints("new_shape")
    return [] if target == [0] else target


@rule("reshape")
def _reshape(view: OpView) -> Inferred:
    count = elements(view.shape(0))
    target = _reshape_target(view)
    if target is None:
        out = declared_shape(view.subgraph.tensors[view.op.outputs[0]])
        if count is not None and elements(out) not in (None, count):
            raise ShapeError(f"reshapes {count} elements into {list(out)}")
        return view.unknown()
    if target.count(-1) > 1 or any(d < -1 for d in target):
        raise ShapeError(f"invalid target shape {target}")
    known = math.prod(d for d in target if d != -1)
    if count is None:
        return [tuple(None if d == -1 else d for d in target)]
    if -1 in target:
        if count == 0:  # TFLite: 0, unless the target holds a 0 too (then the non-zero ratio)
            sizes = [d for d in view.shape(0) if d]
            known_sizes = [d for d in target if d not in (-1, 0)]
            stretch = 0 if known else math.prod(sizes) // max(math.prod(known_sizes), 1)
        elif known == 0 or count % known:
            raise ShapeError(f"cannot reshape {count} elements into {target}")
        else:
            stretch = count // known
        return [tuple(stretch if d == -1 else d for d in target)]
    if known != count:
        raise ShapeError(f"cannot reshape {count} elements into {target}")
    return [tuple(target)]


@rule("squeeze")
def _squeeze(view: OpView) -> Inferred:
    shape = view.shape(0)
    dims = view.option_ints("squeeze_dims")
    if not dims:
        if None in shape:
            return view.unknown()
        return [tuple(d for d in shape if d != 1)]
    dims = [axis_index(d, len(shape), "squeeze dimension") for d in dims]
    for d in dims:
        if shape[d] not in (1, None):
            raise ShapeError(f"squeezes dimension {d} of size {shape[d]}")
    return [tuple(d for i, d in enumerate(shape) if i not in dims)]


@rule("expand_dims")
def _expand_dims(view: OpView) -> Inferred:
    axis = view.scalar(1, "axis")
    if axis is None:
        return view.unknown()
    shape = view.shape(0)
    axis = axis_index(axis, len(shape) + 1)
    return [(*shape[:axis], 1, *shape[axis:])]


@rule("transpose")
def _transpose(view: OpView) -> Inferred:
    perm = view.ints(1, "perm")
    shape = view.shape(0)
    if perm is None:
        return [(None,) * len(shape)]
    if sorted(perm) != list(range(len(shape))):
        raise ShapeError(f"perm {perm} is not a permutation of the {len(shape)} axes")
    return [tuple(shape[p] for p in perm)]


# --------------------------------------------------------------------------- joins and splits


def _inputs(view: OpView) -> list[Shape]:
    return [view.shape(i) for i in range(len(view.op.inputs))]


@rule("concatenation")
def _concatenation(view: OpView) -> Inferred:
    shapes = _inputs(view)
    first = shapes[0]
    if any(len(s) != len(first) for s in shapes):
        raise ShapeError(f"inputs of different ranks {[list(s) for s in shapes]}")
    if not first:
        return [(len(shapes),)]  # scalars concatenate into a vector
    axis = axis_index(int(view.option("axis")), len(first))
    for s in shapes:
        if not all(
            same_dim(a, b) for i, (a, b) in enumerate(zip(s, first, strict=True)) if i != axis
        ):
            raise ShapeError(f"inputs {[list(s) for s in shapes]} differ off axis {axis}")
    sizes = [s[axis] for s in shapes]
    total = None if None in sizes else sum(sizes)
    return [(*first[:axis], total, *first[axis + 1 :])]


@rule("pack")
def _pack(view: OpView) -> Inferred:
    shapes = _inputs(view)
    if view.option("values_count") != len(shapes):
        raise ShapeError(f"values_count {view.option('values_count')} for {len(shapes)} inputs")
    first = shapes[0]
    if not all(same_shape(s, first) for s in shapes):
        raise ShapeError(f"inputs of different shapes {[list(s) for s in shapes]}")
    axis = axis_index(int(view.option("axis")), len(first) + 1)
    return [(*first[:axis], len(shapes), *first[axis:])]


@rule("unpack")
def _unpack(view: OpView) -> Inferred:
    shape = need_rank(view, 0, range(1, 17), "input")
    axis = axis_index(int(view.option("axis")), len(shape))
    if shape[axis] != view.outputs or view.option("num") != view.outputs:
        raise ShapeError(
            f"{view.outputs} outputs (num {view.option('num')}) for a dimension of {shape[axis]}"
        )
    return [shape[:axis] + shape[axis + 1 :]] * view.outputs


def _split_axis(view: OpView, axis_input: int, value_input: int) -> int | None:
    axis = view.scalar(axis_input, "axis")
    return None if axis is None else axis_index(axis, view.rank(value_input))


@rule("split")
def _split(view: OpView) -> Inferred:
    if view.option("num_splits") != view.outputs:
        raise ShapeError(f"num_splits {view.option('num_splits')} for {view.outputs} outputs")
    axis = _split_axis(view, 0, 1)
    if axis is None:
        return view.unknown()
    shape = view.shape(1)
    size = shape[axis]
    if size is not None and size % view.outputs:
        raise ShapeError(f"dimension {size} does not split into {view.outputs} equal parts")
    part = None if size is None else size // view.outputs
    return [(*shape[:axis], part, *shape[axis + 1 :])] * view.outputs


@rule("split_v")
def _split_v(view: OpView) -> Inferred:
    sizes = view.ints(1, "size_splits")
    axis = _split_axis(view, 2, 0)
    if sizes is None or axis is None:
        return view.unknown()
    if len(sizes) != view.outputs or sizes.count(-1) > 1 or any(s < -1 for s in sizes):
        raise ShapeError(f"size_splits {sizes} for {view.outputs} outputs")
    shape = view.shape(0)
    size = shape[axis]
    if size is not None:
        rest = size - sum(s for s in sizes if s != -1)
        if rest < 0 or (-1 not in sizes and rest):
            raise ShapeError(f"size_splits {sizes} do not add up to the dimension {size}")
        sizes = [rest if s == -1 else s for s in sizes]
    return [(*shape[:axis], None if s == -1 else s, *shape[axis + 1 :]) for s in sizes]


# --------------------------------------------------------------------------- slices and gathers


@rule("slice")
def _slice(view: OpView) -> Inferred:
    shape = view.shape(0)
    begin, size = view.ints(1, "begin"), view.ints(2, "size")
    if begin is None or size is None:
        return [(None,) * len(shape)]
    if len(begin) != len(shape) or len(size) != len(shape):
        raise ShapeError(f"begin {begin} and size {size} for rank {len(shape)}")
    out: list[Dim] = []
    for b, s, d in zip(begin, size, shape, strict=True):
        end = None if d is None else (d if s == -1 else b + s)
        if b < 0 or s < -1 or (d is not None and not b <= end <= d):
            raise ShapeError(f"begin {begin} and size {size} leave the shape {list(shape)}")
        out.append(None if end is None else end - b)
    return [tuple(out)]


def _slice_size(
    size: int, begin: int, end: int, stride: int, masks: tuple[bool, bool], offset: bool = False
) -> int:
    """Elements one STRIDED_SLICE axis keeps: TFLite's clamping of begin and end (with
    `offset`, end counts from the clamped begin)."""
    forward = stride > 0
    low, high = (0, size) if forward else (-1, size - 1)
    start = size - 1 if masks[0] and not forward else (0 if masks[0] else begin)
    if not masks[0]:
        start = min(max(start + size if start < 0 else start, low), high)
    stop = (size if forward else -1) if masks[1] else (end + start if offset else end)
    if not masks[1]:
        stop = min(max(stop + size if stop < 0 else stop, low), high)
    if start < 0:
        return 0
    return len(range(start, stop, stride))


def _check_shrink(spec: int, size: Dim, begin: int | None, stride: int, whole: bool) -> None:
    """A shrunk axis keeps the one element at its begin. LiteRT's kernel writes nothing when the
    stride is negative or the begin lies outside the axis (TensorFlow refuses both)."""
    if stride < 0:
        raise ShapeError(f"slice spec {spec} shrinks its axis with the negative stride {stride}")
    if size is not None and begin is not None and not whole and not -size <= begin < size:
        raise ShapeError(
            f"slice spec {spec} shrinks its axis to index {begin}, outside its {size} elements"
        )


@rule("strided_slice")
def _strided_slice(view: OpView) -> Inferred:
    """TFLite's spec expansion: an ellipsis stands for the axes the spec leaves out, a new-axis
    bit inserts a 1, a shrink bit drops its axis; every other axis keeps a clamped range."""
    begin, end, strides = (
        view.ints(i, name) for i, name in ((1, "begin"), (2, "end"), (3, "strides"))
    )
    offset = bool(view.option("offset"))
    if (begin is None and not offset) or end is None or strides is None:
        return view.unknown()  # with an offset, LiteRT's shape needs no begin
    if begin is None:
        begin = [0] * len(end)  # read only for its length
    if not len(begin) == len(end) == len(strides):
        raise ShapeError(f"begin {begin}, end {end} and strides {strides} differ in length")
    if 0 in strides:
        raise ShapeError(f"strides {strides} hold a 0")
    names = ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")
    mask = {name: int(view.option(name)) for name in names}
    if any(value < 0 for value in mask.values()):
        raise ShapeError("negative slice mask")

    def bit(name: str, i: int) -> bool:
        return bool(mask[name] >> i & 1)

    if view.option("offset"):
        return _offset_slice(view, begin, end, strides, bit)
    shape, count = view.shape(0), len(begin)
    added = sum(bit("new_axis_mask", i) and not bit("ellipsis_mask", i) for i in range(count))
    effective = len(shape) + added
    out: list[Dim] = []
    dim = expanded = i = 0
    while i < effective:
        if bit("ellipsis_mask", i):
            stop = max(i + 1, min(i + 1 + added + len(shape) - count, effective))
            out.extend(shape[dim : dim + stop - i])
            dim, expanded, i = dim + stop - i, stop - i - 1, stop
            continue
        spec = i - expanded
        i += 1
        if bit("new_axis_mask", spec):
            out.append(1)
            continue
        if dim >= len(shape):
            raise ShapeError(f"the slice spec has more axes than the input's {len(shape)}")
        size = shape[dim]
        dim += 1
        if spec >= count:
            out.append(size)
            continue
        if bit("shrink_axis_mask", spec):
            _check_shrink(spec, size, begin[spec], strides[spec], bit("begin_mask", spec))
            continue
        masks = (bit("begin_mask", spec), bit("end_mask", spec))
        out.append(
            None
            if size is None
            else _slice_size(size, begin[spec], end[spec], strides[spec], masks)
        )
    return [tuple(out)]


def _offset_slice(
    view: OpView,
    begin: list[int],
    end: list[int],
    strides: list[int],
    bit: Callable[[str, int], bool],
) -> Inferred:
    """STRIDED_SLICE with `offset`: `end` holds sizes counted from the begins. LiteRT makes each
    kept axis ceil(size / stride) long and reads one size per axis of the input, so the spec must
    name every axis, without ellipsis or new axis; and where the begins are constant, each slice
    must stay inside the input (else LiteRT's kernel leaves part of its output unwritten)."""
    shape, count = view.shape(0), len(end)
    if count != len(shape) or any(
        bit("ellipsis_mask", i) or bit("new_axis_mask", i) for i in range(count)
    ):
        raise ShapeError(
            f"an offset slice needs one size per input axis ({len(shape)}, got {count}) and no "
            "ellipsis or new axis"
        )
    known = view.value(1) is not None
    out: list[Dim] = []
    for i, size in enumerate(shape):
        if bit("shrink_axis_mask", i):
            _check_shrink(i, size, begin[i] if known else None, strides[i], bit("begin_mask", i))
            continue
        length = max(-(-end[i] // strides[i]), 0)  # LiteRT's ceil(size / stride)
        masks = (bit("begin_mask", i), bit("end_mask", i))
        if known and size is not None:
            kept = _slice_size(size, begin[i], end[i], strides[i], masks, offset=True)
            if kept != length:
                raise ShapeError(
                    f"the offset slice of axis {i} (begin {begin[i]}, size {end[i]}, stride "
                    f"{strides[i]}) leaves the input's {size} elements"
                )
        out.append(length)
    return [tuple(out)]


@rule("gather")
def _gather(view: OpView) -> Inferred:
    params, indices = view.shape(0), view.shape(1)
    if not params:
        raise ShapeError("params (input 0) must have rank >= 1")
    axis = axis_index(int(view.option("axis")), len(params))
    batch_dims = int(view.option("batch_dims"))
    batch_dims = axis_index(batch_dims, max(len(indices), 1), "batch_dims") if indices else 0
    if batch_dims > axis:
        raise ShapeError(f"batch_dims {batch_dims} exceeds axis {axis}")
    if not same_shape(params[:batch_dims], indices[:batch_dims]):
        raise ShapeError(f"params {list(params)} and indices {list(indices)} differ in batch")
    values = view.ints(1, "indices")
    if values and params[axis] is not None and not all(0 <= v < params[axis] for v in values):
        raise ShapeError(f"indices out of [0, {params[axis]})")
    return [(*params[:axis], *indices[batch_dims:], *params[axis + 1 :])]


@rule("gather_nd")
def _gather_nd(view: OpView) -> Inferred:
    params, indices = view.shape(0), view.shape(1)
    if not indices or indices[-1] is None or not 1 <= indices[-1] <= len(params):
        raise ShapeError(f"indices {list(indices)} cannot index params {list(params)}")
    depth = indices[-1]
    values = view.ints(1, "indices")
    if values:
        table = np.asarray(values).reshape(-1, depth)
        if any(
            params[k] is not None and not np.all((table[:, k] >= 0) & (table[:, k] < params[k]))
            for k in range(depth)
        ):
            raise ShapeError(f"indices out of the range of params {list(params)}")
    return [(*indices[:-1], *params[depth:])]


# --------------------------------------------------------------------------- pads and tiles


@rule("pad")
def _pad(view: OpView) -> Inferred:
    shape = view.shape(0)
    widths = pairs(view, 1, len(shape), "paddings")
    if widths is None:
        return [(None,) * len(shape)]
    if view.present(2) and view.value(2) is not None and view.value(2).size != 1:
        raise ShapeError("constant_values must be one value")
    if view.facts.options == "MirrorPadOptions":
        mode = view.option("mode")  # REFLECT (0) cannot repeat the edge, SYMMETRIC (1) can
        for (before, after), d in zip(widths, shape, strict=True):
            if d is not None and max(before, after) > d - (mode == 0):
                raise ShapeError(f"paddings {widths} exceed what shape {list(shape)} can mirror")
    return [
        tuple(None if d is None else d + a + b for d, (a, b) in zip(shape, widths, strict=True))
    ]


@rule("tile")
def _tile(view: OpView) -> Inferred:
    shape = view.shape(0)
    multiples = view.ints(1, "multiples")
    if multiples is None:
        return [(None,) * len(shape)]
    if len(multiples) != len(shape) or any(m < 0 for m in multiples):
        raise ShapeError(f"multiples {multiples} for shape {list(shape)}")
    return [tuple(None if d is None else d * m for d, m in zip(shape, multiples, strict=True))]


@rule("broadcast_to")
def _broadcast_to(view: OpView) -> Inferred:
    target = target_shape(view, 1, "shape")
    if target is None:
        return view.unknown()
    shape = view.shape(0)
    if len(shape) > len(target) or broadcast([shape, target]) != target:
        raise ShapeError(f"shape {list(shape)} does not broadcast to {list(target)}")
    return [target]

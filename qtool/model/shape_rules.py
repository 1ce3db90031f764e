"""Shape rules: what an operator's declared operand shapes and constant arguments must satisfy.

Each rule (named by `schemas/ops.json`) sees one operator through an `OpView` and returns the
output shapes the operator computes from its inputs, or raises `ShapeError` saying why it cannot
compute anything. Dimensions a model leaves dynamic (-1 in `shape_signature`) are None and match
anything; an output a rule cannot know statically (it depends on a run-time tensor) is None. The
validator compares the results with the declared output shapes, so the engine, whose kernels
follow the same TFLite semantics, only ever runs operators whose shapes fit together.

The rules of the operators that move data (reshapes, joins, slices, gathers, pads) are in
`shape_rules_layout.py`, the spatial ones (convolutions, pools, resizes, space/depth/batch) in
`shape_rules_nn.py`; all register into `RULES`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from qtool.errors import ModelError
from qtool.model.calls import callees
from qtool.model.custom_options import struct_options
from qtool.model.graph import Model, Operator, Subgraph, Tensor
from qtool.model.types import TensorType
from qtool.op_facts import OpFacts

Dim = int | None
Shape = tuple[Dim, ...]
Inferred = list[Shape | None]  # one per output; None: not known before running
Rule = Callable[["OpView"], Inferred]

RULES: dict[str, Rule] = {}


class ShapeError(ValueError):
    """The operator's operands cannot go together; the message says how."""


def rule(*names: str) -> Callable[[Rule], Rule]:
    """Register the decorated function in RULES under each of `names` (the rule names of
    ops.json)."""

    def register(fn: Rule) -> Rule:
        for name in names:
            RULES[name] = fn
        return fn

    return register


def declared_shape(tensor: Tensor) -> Shape:
    """A tensor's shape with the dimensions it declares dynamic as None."""
    signature = tensor.shape_signature
    dynamic = signature is not None and len(signature) == len(tensor.shape)
    return tuple(
        None if dynamic and signature[i] < 0 else int(d) for i, d in enumerate(tensor.shape)
    )


@dataclass
class OpView:
    """One operator as a shape rule sees it: declared shapes, constant values, options."""

    model: Model
    subgraph: Subgraph
    op: Operator
    facts: OpFacts

    def present(self, i: int) -> bool:
        """Whether input i is given (listed, and not -1)."""
        return i < len(self.op.inputs) and self.op.inputs[i] >= 0

    def tensor(self, i: int) -> Tensor:
        """The tensor of input i (the caller checks that it is present)."""
        return self.subgraph.tensors[self.op.inputs[i]]

    def shape(self, i: int) -> Shape:
        """The declared shape of input i, dynamic dimensions as None."""
        return declared_shape(self.tensor(i))

    def rank(self, i: int) -> int:
        """The number of dimensions input i declares."""
        return len(self.tensor(i).shape)

    def value(self, i: int) -> np.ndarray | None:
        """The constant value of input i, flattened (None for activations and absent inputs)."""
        if not self.present(i) or self.tensor(i).sparsity is not None:
            return None
        data = self.model.tensor_data(self.tensor(i))
        return None if data is None else np.asarray(data).reshape(-1)

    def ints(self, i: int, what: str) -> list[int] | None:
        """Input i as a list of integers when it is a constant (its type is checked earlier)."""
        value = self.value(i)
        if value is None:
            return None
        if value.dtype.kind not in "iu":
            raise ShapeError(f"{what} (input {i}) must hold integers, not {value.dtype}")
        return [int(v) for v in value]

    def scalar(self, i: int, what: str) -> int | None:
        """Input i as one integer when it is a constant, None when it is not; ShapeError when it
        holds more than one value."""
        values = self.ints(i, what)
        if values is not None and len(values) != 1:
            raise ShapeError(f"{what} (input {i}) must be one value, got {values[:8]}")
        return None if values is None else values[0]

    def option(self, name: str) -> Any:
        """An option by name: from the custom options struct for custom ops that have one (a
        malformed one raises ShapeError), else from the options table with the schema's defaults."""
        if self.facts.custom_options:
            try:
                return struct_options(self.op, self.facts.custom_options)[name]
            except ModelError as exc:
                raise ShapeError(str(exc)) from None
        return self.op.option(name, table=self.facts.options)

    def option_ints(self, name: str) -> list[int]:
        """A vector option (new_shape, squeeze_dims) as integers; absent is empty."""
        value = self.option(name)
        return [] if value is None else [int(v) for v in np.asarray(value).reshape(-1)]

    @property
    def outputs(self) -> int:
        """The number of outputs the operator lists."""
        return len(self.op.outputs)

    def unknown(self) -> Inferred:
        """A result for every output saying its shape is not known before running."""
        return [None] * self.outputs


# --------------------------------------------------------------------------- helpers


def axis_index(axis: int, rank: int, what: str = "axis") -> int:
    """`axis` counted from 0 (a negative one counts from the end); ShapeError when out of range."""
    if not -rank <= axis < rank:
        raise ShapeError(f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def elements(shape: Shape) -> int | None:
    """The number of elements of a shape; None when a dimension is dynamic."""
    return None if None in shape else math.prod(shape)


def same_dim(a: Dim, b: Dim) -> bool:
    """Whether two dimensions can be equal (a dynamic one matches any)."""
    return a is None or b is None or a == b


def same_shape(a: Shape, b: Shape) -> bool:
    """Whether two shapes have the same rank and dimensions that can be equal."""
    return len(a) == len(b) and all(same_dim(x, y) for x, y in zip(a, b, strict=True))


def broadcast(shapes: Sequence[Shape]) -> Shape:
    """numpy/TFLite broadcasting of declared shapes."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = []
    for position in range(rank):
        dims = [s[position - rank + len(s)] for s in shapes if position - rank + len(s) >= 0]
        sizes = {d for d in dims if d is not None and d != 1}
        if len(sizes) > 1:
            raise ShapeError(f"shapes {[list(s) for s in shapes]} do not broadcast")
        if sizes:
            out.append(sizes.pop())
        else:
            out.append(None if None in dims else 1)
    return tuple(out)


def need_rank(view: OpView, i: int, ranks: Sequence[int] | range, what: str) -> Shape:
    """The shape of input i; ShapeError naming `what` unless its rank is one of `ranks`."""
    shape = view.shape(i)
    if len(shape) not in ranks:
        wanted = " or ".join(map(str, ranks)) if len(ranks) < 4 else f"{ranks[0]}..{ranks[-1]}"
        raise ShapeError(f"{what} (input {i}) must have rank {wanted}, has shape {list(shape)}")
    return shape


# --------------------------------------------------------------------------- elementwise


@rule("compiled")
def _compiled(view: OpView) -> Inferred:
    # A device compiler's program (Vela's ethos-u op) computes the shapes the model declares.
    return view.unknown()


@rule("elementwise")
def _elementwise(view: OpView) -> Inferred:
    return [view.shape(0)]


@rule("last_axis")
def _last_axis(view: OpView) -> Inferred:
    need_rank(view, 0, range(1, 17), "input")
    return [view.shape(0)]


@rule("broadcast")
def _broadcast(view: OpView) -> Inferred:
    return [broadcast([view.shape(i) for i in range(len(view.op.inputs))])]


@rule("select")
def _select(view: OpView) -> Inferred:
    condition, x, y = (view.shape(i) for i in range(3))
    if not same_shape(x, y):
        raise ShapeError(f"x {list(x)} and y {list(y)} differ in shape")
    row_mask = len(condition) == 1 and len(x) >= 1 and same_dim(condition[0], x[0])
    if not (same_shape(condition, x) or row_mask or not condition):
        raise ShapeError(f"condition {list(condition)} fits neither x {list(x)} nor its rows")
    return [x]


@rule("densify")
def _densify(view: OpView) -> Inferred:
    if view.tensor(0).sparsity is None:
        raise ShapeError("input 0 is not a sparse tensor")
    return [view.shape(0)]


# --------------------------------------------------------------------------- reductions


def _reduced_axes(view: OpView) -> list[int] | None:
    axes = view.ints(1, "axis")
    rank = view.rank(0)
    return None if axes is None else sorted({axis_index(a, max(rank, 1)) for a in axes})


@rule("reduce")
def _reduce(view: OpView) -> Inferred:
    axes = _reduced_axes(view)
    if axes is None:
        return view.unknown()
    shape = view.shape(0)
    if view.option("keep_dims"):
        return [tuple(1 if i in axes else d for i, d in enumerate(shape))]
    return [tuple(d for i, d in enumerate(shape) if i not in axes)]


def _single_axis(view: OpView) -> int | None:
    need_rank(view, 0, range(1, 17), "input")
    axis = view.scalar(1, "axis")
    return None if axis is None else axis_index(axis, view.rank(0))


@rule("arg_reduce")
def _arg_reduce(view: OpView) -> Inferred:
    output_type = view.option("output_type")
    if output_type not in (TensorType.INT32, TensorType.INT64):
        raise ShapeError(f"output_type must be INT32 or INT64, not {output_type}")
    out = view.subgraph.tensors[view.op.outputs[0]]
    if out.dtype != output_type:
        raise ShapeError("the output's type differs from output_type")
    axis = _single_axis(view)
    shape = view.shape(0)
    return view.unknown() if axis is None else [shape[:axis] + shape[axis + 1 :]]


@rule("cumsum")
def _cumsum(view: OpView) -> Inferred:
    _single_axis(view)
    return [view.shape(0)]


@rule("reverse")
def _reverse(view: OpView) -> Inferred:
    axes = view.ints(1, "axis")
    for axis in axes or ():
        axis_index(axis, view.rank(0))
    return [view.shape(0)]


# --------------------------------------------------------------------------- fills and shapes


def pairs(view: OpView, i: int, rank: int, what: str) -> list[list[int]] | None:
    """A constant [rank, 2] input (paddings, crops) as rows, checked non-negative."""
    values = view.ints(i, what)
    if values is None:
        return None
    if len(values) != 2 * rank or any(v < 0 for v in values):
        raise ShapeError(f"{what} {values} must be {rank} non-negative pairs")
    return [values[k : k + 2] for k in range(0, 2 * rank, 2)]


def target_shape(view: OpView, i: int, what: str) -> Shape | None:
    """A shape given by constant input i (a size vector such as FILL's dims); None when the input
    is not a constant; ShapeError when a size is negative."""
    values = view.ints(i, what)
    if values is not None and any(v < 0 for v in values):
        raise ShapeError(f"{what} {values} holds a negative size")
    return None if values is None else tuple(values)


@rule("fill")
def _fill(view: OpView) -> Inferred:
    if view.value(1) is not None and view.value(1).size != 1:
        raise ShapeError("the fill value must be one value")
    target = target_shape(view, 0, "dims")
    return [target] if target is not None else view.unknown()


@rule("shape")
def _shape(view: OpView) -> Inferred:
    out_type = view.option("out_type")
    if out_type not in (TensorType.INT32, TensorType.INT64):
        raise ShapeError(f"out_type must be INT32 or INT64, not {out_type}")
    if view.subgraph.tensors[view.op.outputs[0]].dtype != out_type:
        raise ShapeError("the output's type differs from out_type")
    return [(view.rank(0),)]


@rule("range")
def _range(view: OpView) -> Inferred:
    values = [view.value(i) for i in range(3)]
    if any(v is not None and v.size != 1 for v in values):
        raise ShapeError("start, limit and delta must be one value each")
    if any(v is None for v in values):
        return view.unknown()
    start, limit, delta = (float(v[0]) for v in values)
    finite = all(map(math.isfinite, (start, limit, delta)))
    if not finite or delta == 0 or (limit - start) * delta < 0:
        raise ShapeError(f"range({start:g}, {limit:g}, {delta:g}) does not reach its limit")
    return [(math.ceil(abs((limit - start) / delta)),)]


# --------------------------------------------------------------------------- control flow


def _called(view: OpView) -> list[Subgraph]:
    """The subgraphs a control-flow op runs (`calls.callees`), each index in range."""
    found = []
    for name, index in callees(view.op, view.model.op_type(view.op)):
        if not 0 <= index < len(view.model.subgraphs):
            raise ShapeError(f"option {name} is {index}: the model has no such subgraph")
        found.append(view.model.subgraphs[index])
    return found


def _passed(view: OpView, callee: Subgraph, what: str, inputs: int, outputs: int | None) -> None:
    if len(callee.inputs) != inputs or (outputs is not None and len(callee.outputs) != outputs):
        wanted = f"{inputs} inputs" + ("" if outputs is None else f" and {outputs} outputs")
        raise ShapeError(
            f"its {what} subgraph takes {len(callee.inputs)} inputs and gives "
            f"{len(callee.outputs)} outputs, the op passes {wanted}"
        )


def _declared_outputs(callee: Subgraph) -> Inferred:
    return [declared_shape(callee.tensors[t]) for t in callee.outputs]


@rule("if")
def _if(view: OpView) -> Inferred:
    """LiteRT's IF (if.cc): a one-element bool condition; each branch takes the other inputs
    and gives the outputs; outputs as the branches declare them when they agree."""
    condition = view.shape(0)
    if elements(condition) not in (None, 1):
        raise ShapeError(f"the condition must hold one value, has shape {list(condition)}")
    then_branch, else_branch = _called(view)
    for what, branch in (("then", then_branch), ("else", else_branch)):
        _passed(view, branch, what, len(view.op.inputs) - 1, view.outputs)
    shapes = _declared_outputs(then_branch)
    others = _declared_outputs(else_branch)
    return [a if same_shape(a, b) else None for a, b in zip(shapes, others, strict=True)]


@rule("while")
def _while(view: OpView) -> Inferred:
    """LiteRT's WHILE (while.cc): as many outputs as inputs, the condition takes them all and
    gives one value, the body takes and gives them all; outputs as the body declares them."""
    condition, body = _called(view)
    count = len(view.op.inputs)
    if view.outputs != count:
        raise ShapeError(f"has {count} inputs but {view.outputs} outputs (loop variables)")
    _passed(view, condition, "condition", count, 1)
    _passed(view, body, "body", count, count)
    return _declared_outputs(body)


@rule("call_once")
def _call_once(view: OpView) -> Inferred:
    (init,) = _called(view)
    _passed(view, init, "init", 0, 0)
    return []

"""Kernel registry: builtin kernels (one module per op family) and user kernels for custom ops.

A kernel is a function `kernel(ctx: OpContext) -> np.ndarray | list[np.ndarray]` that computes an
operator's outputs from `ctx.inputs` with TFLite's float semantics. Each kernel also says whether
it may run on a whole batch of samples at once (the sample axis replacing the model's batch-1
leading dimension) through a predicate over the operator's static description.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from qtool.errors import UsageError
from qtool.files import note_input
from qtool.model.graph import Model, Operator, Subgraph, Tensor
from qtool.model.types import ActivationFunctionType, numpy_dtype
from qtool.op_facts import options_table

KERNEL_MODULES = (
    "qtool.runtime.kernels.conv",
    "qtool.runtime.kernels.pooling",
    "qtool.runtime.kernels.resize",
    "qtool.runtime.kernels.elementwise",
    "qtool.runtime.kernels.activations",
    "qtool.runtime.kernels.reduce",
    "qtool.runtime.kernels.layout",
    "qtool.runtime.kernels.joins",
    "qtool.runtime.kernels.slicing",
    "qtool.runtime.kernels.padding",
    "qtool.runtime.kernels.generators",
    "qtool.runtime.kernels.quant",
    "qtool.runtime.kernels.mediapipe",
    "qtool.runtime.kernels.control",
    "qtool.runtime.kernels.variables",
    "qtool.runtime.kernels.recurrent",
)


class OpContext:
    """What a kernel sees of one operator.

    At plan time `inputs` holds only constant values (activations are None) and `batch` is 1;
    batch predicates use it to decide on static grounds. At run time every input is present and
    activations carry `batch` samples along their leading axis, and `state` is the run's
    `ModelState` (variable tensors, resource variables: qtool.runtime.state) and `calls` what runs
    the subgraphs control flow calls (`qtool.runtime.engine.Callees`).
    """

    __slots__ = ("batch", "calls", "index", "inputs", "model", "op", "op_type", "state", "subgraph")

    def __init__(
        self,
        model: Model,
        subgraph: Subgraph,
        index: int,
        op: Operator,
        inputs: list[np.ndarray | None],
        batch: int = 1,
        state: Any = None,
        calls: Any = None,
    ) -> None:
        self.model = model
        self.subgraph = subgraph
        self.index = index
        self.op = op
        self.op_type = model.op_type(op)
        self.inputs = inputs
        self.batch = batch
        self.state = state  # None at plan time and when folding constants
        # What runs the subgraphs a control-flow op calls (the engine's `Callees`); None at
        # plan time and when folding constants.
        self.calls = calls

    def option(self, name: str) -> Any:
        """An option of the operator by snake_case name; an operator written without its options
        table gets the table's defaults."""
        # An operator written without its options table takes that table's defaults.
        return self.op.option(name, table=options_table(self.op_type))

    def input_tensor(self, i: int) -> Tensor | None:
        """The tensor of input i; None when that optional input is absent (-1 or not listed)."""
        if i >= len(self.op.inputs) or self.op.inputs[i] < 0:
            return None
        return self.subgraph.tensors[self.op.inputs[i]]

    def input(self, i: int) -> np.ndarray | None:
        """Input `i`, or None when the optional input is absent (index -1 or not given)."""
        return self.inputs[i] if i < len(self.inputs) else None

    def output_tensor(self, i: int = 0) -> Tensor:
        """The tensor of output i."""
        return self.subgraph.tensors[self.op.outputs[i]]

    def output_dtype(self, i: int = 0) -> np.dtype:
        """The numpy dtype of output i as the model declares it."""
        return numpy_dtype(self.output_tensor(i).dtype)

    def input_shape(self, i: int) -> list[int] | None:
        """The declared shape of input i (batch 1); None when the input is absent."""
        tensor = self.input_tensor(i)
        return None if tensor is None else list(tensor.shape)

    def output_shape(self, i: int = 0) -> list[int]:
        """The declared shape of output i (batch 1, not the run's sample count)."""
        return list(self.output_tensor(i).shape)

    def batched_shape(self, shape: Any) -> list[int]:
        """A shape from the model (declared for batch 1) with the run's sample count put in."""
        shape = [int(d) for d in np.asarray(shape).reshape(-1)]
        if self.batch != 1 and shape and shape[0] == 1:
            shape[0] = self.batch
        return shape


Kernel = Callable[[OpContext], "np.ndarray | list[np.ndarray]"]
BatchRule = Callable[[OpContext], bool]


def always(_: OpContext) -> bool:
    """A batch rule: the kernel runs on any number of samples at once."""
    return True


def never(_: OpContext) -> bool:
    """A batch rule: the kernel runs one sample at a time."""
    return False


@dataclass(frozen=True)
class KernelEntry:
    """A registered kernel and its batch rule (whether it may run on several samples at once)."""

    fn: Kernel
    batch_rule: BatchRule

    def outputs(self, ctx: OpContext) -> list[np.ndarray]:
        """The kernel's outputs as a list (kernels of one-output ops return the array)."""
        result = self.fn(ctx)
        return list(result) if isinstance(result, list | tuple) else [result]

    def fold(
        self, model: Model, subgraph: Subgraph, op_index: int, value_of: Callable[[int], Any]
    ) -> list[np.ndarray]:
        """The outputs of an operator whose inputs are all constants, `value_of` giving each
        one's value: the one constant folder, used by the engine at build time and by the
        quantizer before planning."""
        op = subgraph.operators[op_index]
        values = [value_of(t) if t >= 0 else None for t in op.inputs]
        return self.outputs(OpContext(model, subgraph, op_index, op, values))


_BUILTIN: dict[str, KernelEntry] = {}
_CUSTOM: dict[str, KernelEntry] = {}
_loaded = False


def kernel(*op_types: str, batch: BatchRule = always) -> Callable[[Kernel], Kernel]:
    """Register a builtin kernel for one or more BuiltinOperator names."""

    def register(fn: Kernel) -> Kernel:
        for op_type in op_types:
            _BUILTIN[op_type] = KernelEntry(fn, batch)
        return fn

    return register


def register_custom_op(name: str, fn: Kernel, batch: BatchRule = never) -> None:
    """Register a numpy kernel for a custom op (matched on its custom code).

    `batch` says whether the kernel handles several samples along axis 0; by default the engine
    calls it once per sample, which is always correct.
    """
    _CUSTOM[name] = KernelEntry(fn, batch)


def custom_op(name: str, batch: BatchRule = never) -> Callable[[Kernel], Kernel]:
    """Decorator form of `register_custom_op`."""

    def register(fn: Kernel) -> Kernel:
        register_custom_op(name, fn, batch)
        return fn

    return register


def load_custom_ops(module: str) -> None:
    """Import a user module that registers custom-op kernels (the `--custom-ops` option)."""
    try:
        imported = importlib.import_module(module)
    except ImportError as exc:
        raise UsageError(f"`custom_ops={module!r}`: cannot import ({exc})") from None
    if getattr(imported, "__file__", None):
        note_input(imported.__file__)  # the user's code is an input: no output may replace it


def lookup(op_type: str, is_custom: bool) -> KernelEntry | None:
    """The kernel of a builtin op type, or of a custom op by custom code (`is_custom`); None when
    there is none. Loads the builtin kernel modules on first use."""
    global _loaded
    if not _loaded:
        for module in KERNEL_MODULES:
            importlib.import_module(module)
        _loaded = True
    return (_CUSTOM if is_custom else _BUILTIN).get(op_type)


def builtin_kernels() -> list[str]:
    """The names of the builtin operators the engine has kernels for, sorted."""
    lookup("", False)
    return sorted(_BUILTIN)


_ACTIVATION_RANGES: dict[int, tuple[float | None, float | None]] = {
    ActivationFunctionType.RELU: (0, None),
    ActivationFunctionType.RELU_N1_TO_1: (-1, 1),
    ActivationFunctionType.RELU6: (0, 6),
}


def is_clamp_activation(code: int) -> bool:
    """Whether a fused activation is NONE or a clamp (what kernels that reject others accept)."""
    return code == ActivationFunctionType.NONE or code in _ACTIVATION_RANGES


def fused(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """The operator's fused activation as TFLite's kernels apply it, in place.

    An operator written without its options table (LiteRT accepts that) has no activation.
    """
    return activation_clamp(_fused_code(ctx), x)


def fused_float_range(ctx: OpContext) -> tuple[float, float]:
    """The [low, high] that `fused` clamps a float32 result to (for kernels that clamp as they
    write their output)."""
    low, high = _float_range(_fused_code(ctx), np.dtype(np.float32))
    return float(low), float(high)


def _fused_code(ctx: OpContext) -> int:
    if ctx.op.options_type is None:
        return ActivationFunctionType.NONE
    return ctx.option("fused_activation_function")


def _float_range(code: int, dtype: np.dtype) -> tuple:
    low, high = _ACTIVATION_RANGES.get(code, (None, None))
    finite = np.finfo(dtype)
    return (finite.min if low is None else low), (finite.max if high is None else high)


def activation_clamp(code: int, x: np.ndarray) -> np.ndarray:
    """A fused activation code applied to x in place, as TFLite's kernels do.

    They clamp to CalculateActivationRange, which knows only the RELU family: TANH and SIGN_BIT
    run as NONE (checked against LiteRT). Floats are also clamped to [lowest, max] without an
    activation, so an inf result saturates to +-FLT_MAX; NaN stays.
    """
    if x.dtype.kind == "f":
        low, high = _float_range(code, x.dtype)
    else:
        low, high = _ACTIVATION_RANGES.get(code, (None, None))
    if low is None and high is None:
        return x
    return np.clip(x, low, high, out=x)

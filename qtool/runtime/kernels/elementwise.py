"""Elementwise binary and unary operators: arithmetic, comparisons, logic, math functions, casts.

Batching. Binary ops broadcast numpy-style, which stays per-sample as long as every operand's
axis facing the output's leading axis is either the sample axis or broadcast over it; see
`broadcasts_per_sample`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from qtool.runtime.registry import OpContext, fused, kernel

Binary = Callable[[np.ndarray, np.ndarray], np.ndarray]
Unary = Callable[[np.ndarray], np.ndarray]


# ------------------------------------------------------------------ batching and activations


def leading_axis_per_sample(ctx: OpContext, shapes: Sequence[Sequence[int]]) -> bool:
    """Whether broadcasting operands of these declared shapes keeps samples apart.

    `shapes` are the operands' declared shapes as aligned against the output (right-aligned, as
    numpy broadcasts). An activation's leading axis carries the samples, so it must face the
    output's leading axis; a constant must broadcast over that axis (lower rank or leading 1).
    A constant [3, 4] next to an activation [1, 4] makes TFLite output [3, 4] for every sample,
    which the sample axis cannot hold.
    """
    rank = max((len(s) for s in shapes), default=0)
    if rank == 0:
        return False
    for i, shape in enumerate(shapes):
        activation = ctx.inputs[i] is None
        if len(shape) < rank:
            if activation:  # its sample axis would line up with a non-leading output axis
                return False
        elif shape[0] != 1:
            return False
    return True


def broadcasts_per_sample(ctx: OpContext) -> bool:
    """Batch rule of ops broadcasting all their inputs together (ADD, LESS, SELECT_V2, ...)."""
    return leading_axis_per_sample(ctx, [ctx.input_shape(i) or [] for i in range(len(ctx.inputs))])


# ------------------------------------------------------------------ binary functions


def _divide(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if not np.issubdtype(np.result_type(x, y), np.integer):
        return np.divide(x, y)
    # Integer DIV is C++ division, truncating toward zero; numpy floors.
    quotient = np.floor_divide(x, y)
    inexact = (quotient * y != x) & ((x < 0) != (y < 0))
    return quotient + inexact.astype(quotient.dtype)


def _floor_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if np.issubdtype(np.result_type(x, y), np.integer):
        return np.floor_divide(x, y)
    # TFLite divides in double before flooring: 7 / 0.1 floors to 69, not to 70 as in float32.
    quotient = np.floor(np.divide(x, y, dtype=np.float64))
    return quotient.astype(np.result_type(x, y))


def _floor_mod(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    # C's truncated remainder (fmod, or % on integers) moved into the divisor's sign.
    remainder = np.fmod(x, y)
    return np.where((remainder != 0) & ((y < 0) != (remainder < 0)), remainder + y, remainder)


def _squared_difference(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    diff = x - y
    return diff * diff


# TFLite's `a > b ? a : b`: a NaN in the first operand loses, ties return the second (-0 vs 0).
def _maximum(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.where(x > y, x, y)


def _minimum(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.where(x < y, x, y)


# Ops whose options carry a fused activation.
_ARITHMETIC: dict[str, Binary] = {
    "ADD": np.add,
    "SUB": np.subtract,
    "MUL": np.multiply,
    "DIV": _divide,
}

_BINARY: dict[str, Binary] = {
    "POW": np.power,
    "SQUARED_DIFFERENCE": _squared_difference,
    "MAXIMUM": _maximum,
    "MINIMUM": _minimum,
    "FLOOR_DIV": _floor_div,
    "FLOOR_MOD": _floor_mod,
    "LESS": np.less,
    "LESS_EQUAL": np.less_equal,
    "GREATER": np.greater,
    "GREATER_EQUAL": np.greater_equal,
    "EQUAL": np.equal,
    "NOT_EQUAL": np.not_equal,
    "LOGICAL_AND": np.logical_and,
    "LOGICAL_OR": np.logical_or,
}


def _binary_kernel(fn: Binary, activation: bool) -> Callable[[OpContext], np.ndarray]:
    def run(ctx: OpContext) -> np.ndarray:
        # inf/NaN (x / 0, overflow) are results in TFLite, not errors worth a warning.
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            # asarray: ufuncs give numpy scalars for 0-d operands (scalar shape arithmetic).
            out = np.asarray(fn(ctx.inputs[0], ctx.inputs[1]))
        return fused(ctx, out) if activation else out

    return run


for _name, _fn in _ARITHMETIC.items():
    kernel(_name, batch=broadcasts_per_sample)(_binary_kernel(_fn, activation=True))
for _name, _fn in _BINARY.items():
    kernel(_name, batch=broadcasts_per_sample)(_binary_kernel(_fn, activation=False))


# ------------------------------------------------------------------ select


def _select_shapes(ctx: OpContext) -> list[list[int]]:
    """SELECT's operand shapes aligned on the output; a rank-1 condition picks rows of x/y."""
    shapes = [ctx.input_shape(i) or [] for i in range(3)]
    condition, x = shapes[0], shapes[1]
    if len(condition) == 1 and len(x) > 1:
        shapes[0] = condition + [1] * (len(x) - 1)
    return shapes


def _select_per_sample(ctx: OpContext) -> bool:
    return leading_axis_per_sample(ctx, _select_shapes(ctx))


@kernel("SELECT", batch=_select_per_sample)
def select(ctx: OpContext) -> np.ndarray:
    """SELECT: x where the condition holds, y elsewhere; the condition has x's shape, is a
    scalar, or a vector along x's first axis."""
    # Version 1 takes a condition of x's shape, a scalar, or a vector along x's first axis; no
    # other broadcasting (x and y have the same declared shape).
    condition, x, y = ctx.inputs
    if condition.ndim == 1 and x.ndim > 1:
        condition = condition.reshape(-1, *[1] * (x.ndim - 1))
    return np.where(condition, x, y)


@kernel("SELECT_V2", batch=broadcasts_per_sample)
def select_v2(ctx: OpContext) -> np.ndarray:
    """SELECT_V2: x where the condition holds, y elsewhere, all three broadcast."""
    return np.where(*ctx.inputs)


# ------------------------------------------------------------------ unary functions


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return 1 / np.sqrt(x)


_UNARY: dict[str, Unary] = {
    "ABS": np.abs,
    "NEG": np.negative,
    "FLOOR": np.floor,
    "CEIL": np.ceil,
    "ROUND": np.rint,  # half to even, as TFLite's RoundToNearest
    "EXP": np.exp,
    "LOG": np.log,
    "SQRT": np.sqrt,
    "RSQRT": _rsqrt,
    "SQUARE": np.square,
    "SIN": np.sin,
    "COS": np.cos,
    "SIGN": np.sign,
    "LOGICAL_NOT": np.logical_not,
    "ZEROS_LIKE": np.zeros_like,
}


def _unary_kernel(fn: Unary) -> Callable[[OpContext], np.ndarray]:
    def run(ctx: OpContext) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return np.asarray(fn(ctx.inputs[0]))

    return run


for _name, _fn in _UNARY.items():
    kernel(_name)(_unary_kernel(_fn))


# ------------------------------------------------------------------ cast


def _float_to_int(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """LiteRT's saturating conversion: truncate toward zero, clamp to the range, NaN -> max."""
    info = np.iinfo(dtype)
    whole = np.trunc(x.astype(np.float64))
    high = ~(whole < info.max)  # float(info.max) may round up (2**63), hence `<` on that side
    low = whole <= info.min
    out = np.where(high | low, 0, whole).astype(dtype)
    out[high] = info.max
    out[low] = info.min
    return out


@kernel("CAST")
def cast(ctx: OpContext) -> np.ndarray:
    """CAST to the output tensor's type: float to integer truncates and saturates (NaN gives the
    maximum), integers wrap, complex to real keeps the real part."""
    # The tensors' types decide, as in LiteRT; CastOptions (in/out_data_type) only repeat them.
    x = ctx.inputs[0]
    dtype = ctx.output_dtype()
    if np.iscomplexobj(x) and dtype.kind != "c":
        x = x.real
    if x.dtype.kind == "f" and dtype.kind in "iu":
        return _float_to_int(x, dtype)
    return x.astype(dtype)  # integers wrap, nonzero -> True, bool -> 0/1

"""Activation functions: the ReLU family, LOGISTIC, TANH, GELU, ELU, HARD_SWISH, softmaxes and
L2_NORMALIZATION.

`sigmoid` and `softmax` are TFLite's LOGISTIC and SOFTMAX for other kernels to reuse.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from qtool.runtime.kernels import native
from qtool.runtime.kernels.elementwise import broadcasts_per_sample
from qtool.runtime.registry import OpContext, fused, kernel

# LiteRT's LOGISTIC: exactly 1 above this input, exp(x) below -9 (reference_ops::Logistic).
_LOGISTIC_UPPER = np.float32(16.619047164916992)
_LOGISTIC_LOWER = np.float32(-9.0)

_L2_EPSILON = np.float32(1e-6)  # hard-coded in TFLite's L2_NORMALIZATION kernel

# Elements per piece of multi-step elementwise functions: the temporaries stay in cache, which
# makes GELU or LOGISTIC on a 64-sample chunk several times faster than whole-array passes.
_BLOCK = 1 << 16


def _blockwise(fn: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> np.ndarray:
    """`fn`, elementwise and dtype-preserving, applied to x in cache-sized pieces."""
    x = np.asarray(x)
    if x.size <= _BLOCK:
        return fn(x)
    out = np.empty(x.shape, x.dtype)
    flat_x, flat_out = x.reshape(-1), out.reshape(-1)
    for start in range(0, x.size, _BLOCK):
        flat_out[start : start + _BLOCK] = fn(flat_x[start : start + _BLOCK])
    return out


def sigmoid(x: np.ndarray) -> np.ndarray:
    """TFLite's LOGISTIC: 1 / (1 + exp(-x)) in float32, with its cutoffs for large |x|."""
    return _blockwise(_sigmoid, x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    low = x < _LOGISTIC_LOWER
    e = np.exp(np.where(low, x, -x))  # one exp per element and no overflow either side
    out = np.where(low, e, 1 / (1 + e))
    out[x > _LOGISTIC_UPPER] = 1
    return out


def softmax(x: np.ndarray, beta: float = 1.0, axis: int = -1) -> np.ndarray:
    """TFLite's SOFTMAX: exp((x - max) * beta) normalised along `axis`, in x's precision."""
    x = np.asarray(x)
    e = np.exp((x - x.max(axis=axis, keepdims=True)) * x.dtype.type(beta))
    return e / e.sum(axis=axis, keepdims=True)


def _last_axis_per_sample(ctx: OpContext) -> bool:
    # A rank-1 tensor's last axis is the sample axis.
    return len(ctx.input_shape(0) or []) >= 2


# ------------------------------------------------------------------ piecewise linear


def _relu_kernel(low: float, high: float | None) -> Callable[[OpContext], np.ndarray]:
    def run(ctx: OpContext) -> np.ndarray:
        x = ctx.inputs[0]
        if high is None:
            return np.maximum(x, x.dtype.type(low))
        return np.clip(x, x.dtype.type(low), x.dtype.type(high))

    return run


kernel("RELU")(_relu_kernel(0, None))
kernel("RELU6")(_relu_kernel(0, 6))
kernel("RELU_N1_TO_1")(_relu_kernel(-1, 1))
kernel("RELU_0_TO_1")(_relu_kernel(0, 1))


@kernel("LEAKY_RELU")
def leaky_relu(ctx: OpContext) -> np.ndarray:
    """LEAKY_RELU: x where x > 0, alpha * x elsewhere."""
    # `x > 0 ? x : alpha * x`, not max(x, alpha * x): they differ for alpha > 1.
    x = ctx.inputs[0]
    return np.where(x > 0, x, x * x.dtype.type(ctx.option("alpha")))


@kernel("PRELU", batch=broadcasts_per_sample)
def prelu(ctx: OpContext) -> np.ndarray:
    """PRELU: x where x >= 0, alpha * x elsewhere (alpha broadcast against x)."""
    x, alpha = ctx.inputs
    if native.kernels is not None and x.dtype == alpha.dtype == np.float32:
        channels = _trailing(alpha)
        if channels.ndim and x.shape[x.ndim - channels.ndim :] == channels.shape:
            # The C kernel: the formula itself in one pass (native.py).
            x, out = np.ascontiguousarray(x), np.empty(x.shape, np.float32)
            rows = x.size // channels.size if channels.size else 0
            native.kernels.prelu(x, np.ascontiguousarray(channels), out, rows, channels.size)
            return out
    fast = (
        x.dtype == alpha.dtype == np.float32
        and x.shape == np.broadcast_shapes(x.shape, alpha.shape)
        and np.all(np.isfinite(alpha))
    )
    if not fast:
        return np.where(x >= 0, x, x * alpha)
    # `x >= 0 ? x : alpha * x` by cheaper passes that give the same bits, infinities included:
    # max(x, alpha * x) when every alpha <= 1 (and none is 0, which makes inf * 0 a NaN),
    # min(x, alpha * x) when every alpha >= 1, else max(x, 0) + alpha * min(x, 0).
    if np.all((alpha <= 1) & (alpha != 0)):
        return _blockwise_with(x, alpha, _prelu_pick(np.maximum))
    if np.all(alpha >= 1):
        return _blockwise_with(x, alpha, _prelu_pick(np.minimum))
    return _blockwise_with(x, alpha, _prelu_split)


def _prelu_pick(pick: np.ufunc) -> Callable[[np.ndarray, np.ndarray, np.ndarray], None]:
    def run(x: np.ndarray, alpha: np.ndarray, out: np.ndarray) -> None:
        np.multiply(x, alpha, out=out)
        pick(out, x, out=out)

    return run


def _prelu_split(x: np.ndarray, alpha: np.ndarray, out: np.ndarray) -> None:
    negative = np.minimum(x, 0)
    with np.errstate(invalid="ignore"):  # -inf * 0 is NaN, as in TFLite
        negative *= alpha
    np.maximum(x, 0, out=out)
    out += negative


def _blockwise_with(
    x: np.ndarray, operand: np.ndarray, fn: Callable[[np.ndarray, np.ndarray, np.ndarray], None]
) -> np.ndarray:
    """fn(x, operand, out) over cache-sized blocks of x's leading axes, when `operand`
    broadcasts over them; in one go otherwise."""
    out = np.empty_like(x)
    operand = _trailing(operand)
    if operand.ndim >= x.ndim:
        fn(x, operand, out)
        return out
    operand = operand.reshape(-1)
    rows = x.reshape(-1, operand.size)
    # numpy restarts its inner loop at every row: a per-channel operand (16 channels) made
    # PRELU cost 1-1.5 ns an element. Rows side by side against the operand repeated as often
    # run the same operations in long loops.
    side_by_side = _rows_side_by_side(rows.shape[0], operand.size)
    rows = rows.reshape(-1, operand.size * side_by_side)
    operand = np.tile(operand, side_by_side)
    targets = out.reshape(rows.shape)
    step = max(1, _BLOCK // max(1, rows[0].size))
    for start in range(0, rows.shape[0], step):
        fn(rows[start : start + step], operand, targets[start : start + step])
    return out


def _trailing(operand: np.ndarray) -> np.ndarray:
    """An operand broadcast against x without its leading 1s (which broadcast anyway; without
    them, blocks of x can be whole rows)."""
    while operand.ndim and operand.shape[0] == 1:
        operand = operand[0]
    return operand


_LONG_ROW = 1024  # elements of a row beyond which numpy's per-row cost no longer shows


def _rows_side_by_side(rows: int, size: int) -> int:
    """The fewest rows of `size` elements that make a row of at least `_LONG_ROW` and divide
    `rows` (1 when none does below four times that, or for a small array)."""
    if rows * size < 16 * _LONG_ROW:
        return 1
    least = -(-_LONG_ROW // max(size, 1))
    return next((k for k in range(least, 4 * least + 1) if rows % k == 0), 1)


def _hard_swish(x: np.ndarray) -> np.ndarray:
    return x * np.clip(x + 3, 0, 6).astype(x.dtype, copy=False) / 6


@kernel("HARD_SWISH")
def hard_swish(ctx: OpContext) -> np.ndarray:
    """HARD_SWISH: x * relu6(x + 3) / 6."""
    return _blockwise(_hard_swish, ctx.inputs[0])


# ------------------------------------------------------------------ smooth


@kernel("LOGISTIC")
def logistic(ctx: OpContext) -> np.ndarray:
    """LOGISTIC: 1 / (1 + exp(-x)), with TFLite's float32 cutoffs for large |x|."""
    return sigmoid(ctx.inputs[0])


@kernel("TANH")
def tanh(ctx: OpContext) -> np.ndarray:
    """TANH, elementwise."""
    return np.tanh(ctx.inputs[0])


def _elu(x: np.ndarray) -> np.ndarray:
    return np.where(x < 0, np.expm1(np.minimum(x, 0)), x)


@kernel("ELU")
def elu(ctx: OpContext) -> np.ndarray:
    """ELU: exp(x) - 1 where x < 0, x elsewhere."""
    return _blockwise(_elu, ctx.inputs[0])


# Eigen's float tanh, which LiteRT's GELU uses (std::tanh only serves TANH): a [9/8] rational
# approximation whose argument is clamped where it reaches exactly +-1. Its few-ulp differences
# from the true tanh matter in the left tail, where 1 + tanh cancels down to those ulps.
_EIGEN_TANH_CLAMP = np.float32(7.90738964080810547)
_EIGEN_TANH_P = np.array(
    [1.394553628e-8, 2.102733560e-5, 3.520756727e-3, 1.340216100e-1], np.float32
)  # odd numerator x + x^3 * P(x^2), highest power first
_EIGEN_TANH_Q = np.array(
    [8.015776984e-7, 3.326951409e-4, 2.597254514e-2, 4.673548340e-1, 1.0], np.float32
)  # even denominator Q(x^2)


def _horner(coefficients: np.ndarray, x: np.ndarray) -> np.ndarray:
    out = np.full_like(x, coefficients[0])
    for c in coefficients[1:]:
        out *= x
        out += c
    return out


def _eigen_tanh(x: np.ndarray) -> np.ndarray:
    x = np.clip(x, -_EIGEN_TANH_CLAMP, _EIGEN_TANH_CLAMP)
    x2 = x * x
    return (x2 * x * _horner(_EIGEN_TANH_P, x2) + x) / _horner(_EIGEN_TANH_Q, x2)


# erfc from the Chebyshev fit of Press et al. (Numerical Recipes, "erfcc"): relative error below
# 1.2e-7 over the whole line, including the far tail GELU needs (no scipy at run time).
_ERFC_FIT = np.array(
    [
        0.17087277,
        -0.82215223,
        1.48851587,
        -1.13520398,
        0.27886807,
        -0.18628806,
        0.09678418,
        0.37409196,
        1.00002368,
        -1.26551223,
    ]
)


def _erfc(x: np.ndarray) -> np.ndarray:
    z = np.abs(x)
    t = 0.5 * z
    t += 1
    np.reciprocal(t, out=t)
    tail = _horner(_ERFC_FIT, t)
    tail -= z * z
    np.exp(tail, out=tail)
    tail *= t
    return np.where(x >= 0, tail, 2 - tail)


_SQRT_2_OVER_PI = np.float32(np.sqrt(2 / np.pi))
_MINUS_SQRT_HALF = np.float32(-np.sqrt(0.5))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    inner = _SQRT_2_OVER_PI * (x + np.float32(0.044715) * (x * x * x))
    return np.float32(0.5) * x * (1 + _eigen_tanh(inner))


def _gelu_erf(x: np.ndarray) -> np.ndarray:
    # 0.5 x erfc(-x / sqrt 2), TFLite's form that keeps precision for large negative x; the
    # argument is rounded to float32 first as there.
    erfc = _erfc((x * _MINUS_SQRT_HALF).astype(np.float64)).astype(x.dtype)
    return np.float32(0.5) * x * erfc


@kernel("GELU")
def gelu(ctx: OpContext) -> np.ndarray:
    """GELU: x * Phi(x) with the exact erf form, or its tanh approximation when `approximate` is
    set."""
    return _blockwise(_gelu_tanh if ctx.option("approximate") else _gelu_erf, ctx.inputs[0])


# ------------------------------------------------------------------ normalisations


@kernel("SOFTMAX", batch=_last_axis_per_sample)
def softmax_op(ctx: OpContext) -> np.ndarray:
    """SOFTMAX: exp((x - max) * beta) normalised along the last axis."""
    return softmax(ctx.inputs[0], ctx.option("beta"))


@kernel("LOG_SOFTMAX", batch=_last_axis_per_sample)
def log_softmax(ctx: OpContext) -> np.ndarray:
    """LOG_SOFTMAX along the last axis, computed from x - max for stability."""
    x = ctx.inputs[0]
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


@kernel("L2_NORMALIZATION", batch=_last_axis_per_sample)
def l2_normalization(ctx: OpContext) -> np.ndarray:
    """L2_NORMALIZATION: x divided by its L2 norm along the last axis (at least TFLite's 1e-6),
    then the fused activation."""
    x = ctx.inputs[0]
    norm = np.sqrt(np.sum(x * x, axis=-1, keepdims=True))
    return fused(ctx, x / np.maximum(norm, _L2_EPSILON))

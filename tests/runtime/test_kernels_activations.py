"""Activation kernels against LiteRT, tails and saturation included."""

from __future__ import annotations

import numpy as np
import pytest

from qtool.model import model_to_bytes
from qtool.model.types import ActivationFunctionType
from qtool.runtime.engine import Engine
from qtool.runtime.kernels.activations import sigmoid, softmax
from tests.litert import run_litert_samples
from tests.runtime.harness import Act, Const, build_single_op, check_op
from tests.runtime.test_kernels_elementwise import builtin_litert  # noqa: F401 (a fixture)

N = 3  # samples per activation
SHAPES = {"4d": (N, 4, 5, 3), "2d": (N, 10), "rank-1": (N,)}  # rank 1: the sample axis only

# Input ranges: the bulk, wide ranges reaching the saturated regions, and tails alone (where the
# largest output is tiny, so the tolerance is tight on what LiteRT computes there).
RANGES = {
    "bulk": (-4, 4),
    "tiny": (-1e-3, 1e-3),
    "wide": (-30, 30),
    "left-tail": (-20, -8),
    "right-tail": (8, 20),
}


def uniform(shape: tuple[int, ...], low: float, high: float, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(low, high, shape).astype(np.float32)


def normal(shape: tuple[int, ...], scale: float = 1.0, seed: int = 0) -> np.ndarray:
    return (scale * np.random.default_rng(seed).standard_normal(shape)).astype(np.float32)


# ------------------------------------------------------------------ piecewise linear


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
@pytest.mark.parametrize("op", ["RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "HARD_SWISH"])
def test_piecewise_linear(op: str, shape: tuple[int, ...]) -> None:
    check_op(op, [Act(normal(shape, 4))])


@pytest.mark.parametrize("alpha", [0.2, 0.0, 1.5, -0.3])
@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_leaky_relu(shape: tuple[int, ...], alpha: float) -> None:
    # alpha > 1 tells `x > 0 ? x : alpha x` apart from max(x, alpha x).
    check_op(
        "LEAKY_RELU",
        [Act(normal(shape, 3))],
        options_type="LeakyReluOptions",
        options={"alpha": alpha},
    )


# Alpha shapes against an input [1, 4, 5, 3] (LiteRT wants the output of the input's shape). An
# activation alpha of lower rank has its samples on a non-leading axis: the op runs per sample.
PRELU_ALPHAS = {
    "channel": ("const", (3,)),
    "1x1xC": ("const", (1, 1, 3)),
    "HxWxC": ("const", (4, 5, 3)),
    "full": ("const", (1, 4, 5, 3)),
    "activation": ("act", (N, 4, 5, 3)),
    "activation-1x1xC": ("act", (N, 1, 1, 3)),
    "activation-lower-rank": ("act", (N, 3)),
}


@pytest.mark.parametrize("alpha", PRELU_ALPHAS.values(), ids=PRELU_ALPHAS.keys())
def test_prelu(alpha: tuple[str, tuple[int, ...]], kernel_code: str) -> None:
    role, shape = alpha
    value = uniform(shape, -0.5, 1.5, seed=1)
    check_op("PRELU", [Act(normal((N, 4, 5, 3), 3)), Act(value) if role == "act" else Const(value)])


# Alphas that take each of PRELU's exact shortcuts: max(x, a x) for 0 < a <= 1 (negative a
# included), min(x, a x) for a >= 1, and max(x, 0) + a min(x, 0) for a mix or a zero.
PRELU_SHORTCUTS = {
    "at-most-1": np.array([0.25, 1.0, -0.5, 0.75], np.float32),
    "at-least-1": np.array([1.0, 1.5, 3.0, 2.0], np.float32),
    "mixed": np.array([0.25, 1.5, -2.0, 0.5], np.float32),
    "with-zero": np.array([0.0, 0.5, 1.0, 0.25], np.float32),
}


@pytest.mark.parametrize("alpha", PRELU_SHORTCUTS.values(), ids=PRELU_SHORTCUTS.keys())
def test_prelu_shortcuts_are_exact(alpha: np.ndarray, kernel_code: str) -> None:
    # Bit for bit against LiteRT, infinities included (inf * 0 makes max() a NaN, hence the
    # zero-alpha case goes the split way). Large enough for the blocked path.
    x = normal((N, 40, 30, 4), 5, seed=3)
    x[0, 0, 0] = [np.inf, -np.inf, np.inf, -np.inf]
    x[0, 0, 1] = [-np.inf, np.inf, -np.inf, np.inf]
    model = build_single_op("PRELU", [Act(x), Const(alpha)], output_shapes=[[1, 40, 30, 4]])
    expected = run_litert_samples(model_to_bytes(model), [x])[0]
    np.testing.assert_array_equal(Engine(model).run([x])[0], expected)


# ------------------------------------------------------------------ smooth


@pytest.mark.parametrize("span", RANGES.values(), ids=RANGES.keys())
@pytest.mark.parametrize("op", ["LOGISTIC", "TANH"])
def test_sigmoid_like(op: str, span: tuple[float, float]) -> None:
    # LOGISTIC switches to exp(x) below -9 and to exactly 1 above 16.62 (LiteRT's cutoffs).
    check_op(op, [Act(uniform((N, 6, 50), *span))])


@pytest.mark.parametrize(
    "span",
    [(-4, 4), (-1e-3, 1e-3), (-30, 30), (-6, -3), (-12.5, -8), (3, 30)],
    ids=["bulk", "tiny", "wide", "tail", "far-tail", "right"],
)
@pytest.mark.parametrize("approximate", [False, True], ids=["erf", "tanh"])
def test_gelu(approximate: bool, span: tuple[float, float]) -> None:
    # In the left tails the output is a few ulps of 0.5 x (1 + tanh) or a tiny erfc: there
    # LiteRT's Eigen tanh and erfc, not the exact functions, set the reference.
    check_op(
        "GELU",
        [Act(uniform((N, 8, 64), *span))],
        options_type="GeluOptions",
        options={"approximate": approximate},
    )


@pytest.mark.parametrize("span", [(-4, 4), (-30, 5), (-1e-3, 1e-3)], ids=["bulk", "wide", "tiny"])
@pytest.mark.usefixtures("builtin_litert")  # ELU is missing from LiteRT's reference resolver
def test_elu(span: tuple[float, float]) -> None:
    check_op("ELU", [Act(uniform((N, 6, 20), *span))])


# ------------------------------------------------------------------ normalisations

NORM_SHAPES = {"2d": (N, 10), "3d": (N, 4, 7), "4d": (N, 2, 3, 5), "rank-1": (N,)}


@pytest.mark.parametrize("beta", [1.0, 0.5, 2.0, 0.0])
@pytest.mark.parametrize("shape", NORM_SHAPES.values(), ids=NORM_SHAPES.keys())
def test_softmax(shape: tuple[int, ...], beta: float) -> None:
    check_op(
        "SOFTMAX", [Act(normal(shape, 5))], options_type="SoftmaxOptions", options={"beta": beta}
    )


@pytest.mark.parametrize("shape", NORM_SHAPES.values(), ids=NORM_SHAPES.keys())
def test_log_softmax(shape: tuple[int, ...]) -> None:
    check_op("LOG_SOFTMAX", [Act(normal(shape, 5))])


ACTIVATION_REJECTED = pytest.mark.skip(
    reason="LiteRT rejects fused activations on L2_NORMALIZATION"
)


@pytest.mark.parametrize(
    "activation",
    [
        ActivationFunctionType.NONE,
        pytest.param(ActivationFunctionType.RELU, marks=ACTIVATION_REJECTED),
        pytest.param(ActivationFunctionType.RELU6, marks=ACTIVATION_REJECTED),
    ],
)
@pytest.mark.parametrize("shape", NORM_SHAPES.values(), ids=NORM_SHAPES.keys())
def test_l2_normalization(shape: tuple[int, ...], activation: int) -> None:
    x = normal(shape, 2)
    if len(shape) > 1:  # a row of zeros and a row whose norm is below the epsilon
        rows = x.reshape(-1, shape[-1])
        rows[0] = 0
        rows[-1] *= 1e-8
    check_op(
        "L2_NORMALIZATION",
        [Act(x)],
        options_type="L2NormOptions",
        options={"fused_activation_function": activation},
    )


def act(*shape: int) -> Act:
    return Act(np.zeros((N, *shape), np.float32))


@pytest.mark.parametrize(
    ("op", "inputs", "out_shape", "mode"),
    [
        ("SOFTMAX", [act(10)], [1, 10], "batch"),
        ("SOFTMAX", [act()], [1], "loop"),
        ("LOG_SOFTMAX", [act()], [1], "loop"),
        ("L2_NORMALIZATION", [act()], [1], "loop"),
        ("L2_NORMALIZATION", [act(2, 3)], [1, 2, 3], "batch"),
        ("TANH", [act()], [1], "batch"),
        ("PRELU", [act(4, 3), Const(np.zeros((4, 3), np.float32))], [1, 4, 3], "batch"),
        ("PRELU", [act(4, 3), act(3)], [1, 4, 3], "loop"),
    ],
)
def test_batch_rule(op: str, inputs: list[Act | Const], out_shape: list[int], mode: str) -> None:
    """Normalising along the last axis is per sample unless that axis is the sample axis."""
    model = build_single_op(op, inputs, output_shapes=[out_shape])
    assert Engine(model).steps[0].mode == mode


def test_shared_helpers() -> None:
    """`sigmoid`/`softmax` for other kernels: any axis and shape, float32 kept."""
    x = normal((2, 5, 3), 6)
    probabilities = softmax(x, beta=0.5, axis=1)
    assert probabilities.dtype == np.float32
    np.testing.assert_allclose(probabilities.sum(axis=1), 1, rtol=1e-6)
    expected = np.exp(0.5 * x) / np.exp(0.5 * x).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(probabilities, expected, rtol=1e-5)
    s = sigmoid(np.array([-50, -9.5, 0, 3, 16.7, 100], np.float32))
    assert s.dtype == np.float32
    np.testing.assert_allclose(
        s, [np.exp(-50), np.exp(-9.5), 0.5, 1 / (1 + np.exp(-3)), 1, 1], rtol=1e-6
    )

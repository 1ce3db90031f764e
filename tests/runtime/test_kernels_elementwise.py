"""Elementwise kernels (arithmetic, comparisons, logic, SELECT, math functions, CAST) against LiteRT."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from qtool.model import model_to_bytes
from qtool.model.build import GraphBuilder
from qtool.model.types import ActivationFunctionType, tensor_type
from qtool.runtime.engine import Engine
from tests.litert import run_litert, run_litert_samples
from tests.runtime import harness
from tests.runtime.harness import Act, Const, build_single_op, check_op

N = 3  # samples per activation

# Operand layouts of binary ops: ("act", (N, *sample shape)) or ("const", declared shape). The
# last two defeat the batch rule: a constant with a leading 3 makes the output [3, 4] per sample
# (the engine runs serially); an activation of lower rank than the output runs per sample.
BROADCASTS = {
    "same": [("act", (N, 4, 5, 3)), ("act", (N, 4, 5, 3))],
    "act-act": [("act", (N, 4, 1, 3)), ("act", (N, 1, 5, 3))],
    "const-vector": [("act", (N, 4, 5, 3)), ("const", (3,))],
    "const-leading-1": [("act", (N, 4, 5, 3)), ("const", (1, 1, 5, 3))],
    "const-first": [("const", (5, 3)), ("act", (N, 4, 5, 3))],
    "const-scalar": [("act", (N, 4, 5, 3)), ("const", ())],
    "rank-1": [("act", (N,)), ("act", (N,))],
    "const-leading-3": [("act", (N, 4)), ("const", (3, 4))],
    "act-lower-rank": [("act", (N, 4)), ("const", (1, 3, 4))],
}
SMALL_BROADCASTS = ["same", "const-vector", "const-first", "const-scalar", "const-leading-3"]

ACTIVATIONS = {
    "none": ActivationFunctionType.NONE,
    "relu": ActivationFunctionType.RELU,
    "relu_n1_to_1": ActivationFunctionType.RELU_N1_TO_1,
    "relu6": ActivationFunctionType.RELU6,
    "tanh": ActivationFunctionType.TANH,  # ignored by TFLite's arithmetic kernels
    "sign_bit": ActivationFunctionType.SIGN_BIT,  # ditto
}


def sample(
    shape: tuple[int, ...], dtype: type = np.float32, seed: int = 0, kind: str = "normal"
) -> np.ndarray:
    """Test data: "normal", "nonzero" (safe divisors), "positive", "small" (ties likely)."""
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    integer = np.issubdtype(dtype, np.integer)
    if kind == "nonzero":
        magnitude = rng.integers(1, 7, shape) if integer else rng.uniform(0.5, 2, shape)
        value = magnitude * rng.choice([-1, 1], shape)
    elif kind == "positive":
        value = rng.integers(0, 5, shape) if integer else rng.uniform(0.1, 3, shape)
    elif kind == "small":
        value = rng.integers(-2, 3, shape)
    else:
        value = rng.integers(-20, 21, shape) if integer else 2 * rng.standard_normal(shape)
    return np.asarray(value).astype(dtype)


def operands(
    layout: str, dtype: type = np.float32, kinds: tuple[str, ...] = ("normal", "normal")
) -> list[Act | Const]:
    items: list[Act | Const] = []
    for k, ((role, shape), kind) in enumerate(zip(BROADCASTS[layout], kinds, strict=True)):
        value = sample(shape, dtype, seed=k, kind=kind)
        items.append(Act(value) if role == "act" else Const(value))
    return items


@pytest.fixture
def builtin_litert(monkeypatch: pytest.MonkeyPatch) -> None:
    """For ops missing from LiteRT's reference resolver (CEIL, ROUND, ELU): its builtin kernels."""
    monkeypatch.setattr(harness, "run_litert", functools.partial(run_litert, reference=False))


def run_exact(op: str, values: list[np.ndarray], **kwargs) -> None:
    """One sample through LiteRT and the engine, compared bit for bit (NaN equal to NaN)."""
    model = build_single_op(
        op, [Act(v, batched=False) for v in values], output_shapes=[list(values[0].shape)], **kwargs
    )
    expected = run_litert(model_to_bytes(model), values)[0]
    got = Engine(model).run([v[None] for v in values])[0][0]
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


# ------------------------------------------------------------------ arithmetic

ARITHMETIC = ["ADD", "SUB", "MUL", "DIV"]
ARITHMETIC_CASES = [pytest.param(layout, "none", id=layout) for layout in BROADCASTS] + [
    pytest.param("act-act", name, id=f"act-act-{name}") for name in ACTIVATIONS if name != "none"
]


def arithmetic_options(op: str, activation: str) -> dict:
    return {
        "options_type": f"{op.capitalize()}Options",
        "options": {"fused_activation_function": ACTIVATIONS[activation]},
    }


@pytest.mark.parametrize(("layout", "activation"), ARITHMETIC_CASES)
@pytest.mark.parametrize("op", ARITHMETIC)
def test_arithmetic(op: str, layout: str, activation: str) -> None:
    kinds = ("normal", "nonzero" if op == "DIV" else "normal")
    check_op(op, operands(layout, kinds=kinds), **arithmetic_options(op, activation))


INT_ARITHMETIC = [(op, np.int32) for op in ARITHMETIC] + [(op, np.int64) for op in ARITHMETIC[:3]]


@pytest.mark.parametrize("activation", ["none", "relu", "relu_n1_to_1", "relu6"])
@pytest.mark.parametrize("layout", SMALL_BROADCASTS)
@pytest.mark.parametrize(("op", "dtype"), INT_ARITHMETIC)
def test_integer_arithmetic(op: str, dtype: type, layout: str, activation: str) -> None:
    # Shape arithmetic; DIV truncates toward zero like C++ (-7 / 2 == -3).
    kinds = ("normal", "nonzero" if op == "DIV" else "normal")
    check_op(
        op,
        operands(layout, dtype, kinds),
        output_dtypes=[dtype],
        **arithmetic_options(op, activation),
    )


# ------------------------------------------------------------------ other binary math

BINARY_MATH = {  # op: operand kinds
    "POW": ("positive", "normal"),
    "SQUARED_DIFFERENCE": ("normal", "normal"),
    "MAXIMUM": ("small", "small"),
    "MINIMUM": ("small", "small"),
    "FLOOR_DIV": ("normal", "nonzero"),
    "FLOOR_MOD": ("normal", "nonzero"),
}


@pytest.mark.parametrize(
    "layout",
    [
        "same",
        "act-act",
        "const-vector",
        "const-first",
        "const-scalar",
        "const-leading-3",
        "act-lower-rank",
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("op", list(BINARY_MATH))
def test_binary_math(op: str, dtype: type, layout: str) -> None:
    kinds = BINARY_MATH[op]
    if op == "POW" and dtype == np.int32:
        kinds = ("normal", "positive")  # integer POW rejects negative exponents
    check_op(op, operands(layout, dtype, kinds), output_dtypes=[dtype])


@pytest.mark.parametrize(
    ("op", "x", "y"),
    [
        # float32 7 / 0.1 rounds to 70, TFLite divides in double: 69.
        ("FLOOR_DIV", [7.0, -7.0, 1.0, 0.3, 10.0, -5.0, 5.0], [0.1, 0.1, 0.1, 0.1, 0.1, 2.0, -2.0]),
        (
            "FLOOR_MOD",
            [7.0, -7.0, 1.0, -0.0, 10.0, -5.0, 5.0],
            [0.1, 0.1, -0.1, 3.0, 0.1, 2.0, -2.0],
        ),
        ("MAXIMUM", [np.nan, 1.0, -0.0, 0.0, np.inf], [1.0, np.nan, 0.0, -0.0, np.nan]),
        ("MINIMUM", [np.nan, 1.0, -0.0, 0.0, -np.inf], [1.0, np.nan, 0.0, -0.0, np.nan]),
        # Arithmetic saturates inf to +-FLT_MAX even without a fused activation; NaN stays.
        ("DIV", [1.0, -1.0, 0.0, np.inf], [0.0, 0.0, 0.0, 2.0]),
        ("ADD", [3e38, -3e38, np.inf, np.nan], [3e38, -3e38, -np.inf, 1.0]),
        ("SUB", [3e38, -3e38, np.inf, np.nan], [-3e38, 3e38, np.inf, 1.0]),
        ("MUL", [3e38, -3e38, np.inf, np.nan], [3e38, 3e38, 0.0, 1.0]),
    ],
)
def test_binary_special_values(op: str, x: list[float], y: list[float]) -> None:
    run_exact(op, [np.array(x, np.float32), np.array(y, np.float32)])


# ------------------------------------------------------------------ comparisons and logic

COMPARISONS = ["LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "EQUAL", "NOT_EQUAL"]


# Booleans have only (in)equality in TFLite.
COMPARISON_CASES = [(op, dtype) for op in COMPARISONS for dtype in (np.float32, np.int32, np.int64)]
COMPARISON_CASES += [("EQUAL", np.bool_), ("NOT_EQUAL", np.bool_)]


@pytest.mark.parametrize(
    "layout",
    ["same", "act-act", "const-vector", "const-first", "const-leading-3", "act-lower-rank"],
)
@pytest.mark.parametrize(("op", "dtype"), COMPARISON_CASES)
def test_comparison(op: str, dtype: type, layout: str) -> None:
    # Values in -2..2 so that ties, where the <= / < variants differ, are frequent.
    check_op(op, operands(layout, dtype, ("small", "small")), output_dtypes=[np.bool_])


@pytest.mark.parametrize(
    "layout",
    ["same", "act-act", "const-vector", "const-scalar", "const-leading-3", "act-lower-rank"],
)
@pytest.mark.parametrize("op", ["LOGICAL_AND", "LOGICAL_OR"])
def test_logical_binary(op: str, layout: str) -> None:
    check_op(op, operands(layout, np.bool_), output_dtypes=[np.bool_])


def test_logical_not() -> None:
    check_op("LOGICAL_NOT", [Act(sample((N, 4, 5), np.bool_))], output_dtypes=[np.bool_])


# ------------------------------------------------------------------ select

# (condition, x, y) layouts. SELECT (v1) takes a condition of x's shape, a scalar, or a vector
# along x's first axis; SELECT_V2 broadcasts all three.
SELECT_CASES = {
    "same": [("act", (N, 3, 4)), ("act", (N, 3, 4)), ("act", (N, 3, 4))],
    "same-const-y": [("act", (N, 3, 4)), ("act", (N, 3, 4)), ("const", (1, 3, 4))],
    "const-x-y": [("act", (N, 3, 4)), ("const", (1, 3, 4)), ("const", (1, 3, 4))],
    "vector-condition": [("act", (N,)), ("act", (N, 3, 4)), ("act", (N, 3, 4))],
    "const-vector-condition": [("const", (1,)), ("act", (N, 3, 4)), ("act", (N, 3, 4))],
    "scalar-condition": [("const", ()), ("act", (N, 3, 4)), ("act", (N, 3, 4))],
}
SELECT_V2_CASES = {
    "same": SELECT_CASES["same"],
    "act-broadcast": [("act", (N, 3, 1)), ("act", (N, 1, 4)), ("const", ())],
    "const-condition": [("const", (3, 4)), ("act", (N, 3, 4)), ("const", (4,))],
    "const-condition-leading-1": [("const", (1, 1, 4)), ("act", (N, 3, 4)), ("act", (N, 3, 1))],
    "scalar-condition": SELECT_CASES["scalar-condition"],
    "act-lower-rank": [("act", (N, 4)), ("act", (N, 3, 4)), ("const", (1, 3, 1))],
    "const-leading-2": [("act", (N, 3, 4)), ("const", (2, 1, 1, 4)), ("act", (N, 3, 4))],
}


def select_operands(layout: list[tuple[str, tuple[int, ...]]], dtype: type) -> list[Act | Const]:
    items: list[Act | Const] = []
    for k, (role, shape) in enumerate(layout):
        value = sample(shape, np.bool_ if k == 0 else dtype, seed=k)
        items.append(Act(value) if role == "act" else Const(value))
    return items


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize(
    ("op", "layout"),
    [("SELECT", name) for name in SELECT_CASES] + [("SELECT_V2", name) for name in SELECT_V2_CASES],
)
def test_select(op: str, layout: str, dtype: type) -> None:
    cases = SELECT_CASES if op == "SELECT" else SELECT_V2_CASES
    check_op(op, select_operands(cases[layout], dtype), output_dtypes=[dtype])


# ------------------------------------------------------------------ unary


def unary_data(op: str, shape: tuple[int, ...], low: float, high: float) -> np.ndarray:
    rng = np.random.default_rng(7)
    if op in ("ROUND", "FLOOR", "CEIL", "SIGN"):  # halves (ties of ROUND), whole numbers, zeros
        return (rng.integers(2 * low, 2 * high + 1, shape) / 2).astype(np.float32)
    return rng.uniform(low, high, shape).astype(np.float32)


UNARY_FLOAT = [  # op, input range
    ("ABS", -5, 5),
    ("NEG", -5, 5),
    ("FLOOR", -5, 5),
    ("CEIL", -5, 5),
    ("ROUND", -5, 5),
    ("EXP", -20, 20),
    ("EXP", 80, 88),
    ("EXP", -100, -80),  # the top of float32, denormals
    ("LOG", 1e-3, 100),
    ("SQRT", 0, 100),
    ("RSQRT", 1e-3, 100),
    ("SQUARE", -10, 10),
    ("SIN", -10, 10),
    ("COS", -10, 10),
    ("SIGN", -2, 2),
    ("ZEROS_LIKE", -5, 5),
]


@pytest.mark.parametrize("shape", [(N, 4, 5, 3), (N, 7)], ids=["4d", "2d"])
@pytest.mark.parametrize(("op", "low", "high"), UNARY_FLOAT)
def test_unary_float(
    op: str, low: float, high: float, shape: tuple[int, ...], request: pytest.FixtureRequest
) -> None:
    if op in ("CEIL", "ROUND"):
        request.getfixturevalue("builtin_litert")
    check_op(op, [Act(unary_data(op, shape, low, high))])


NO_INT64 = pytest.mark.skip(reason="LiteRT's ABS and SIGN take no int64 (the kernel does)")


@pytest.mark.parametrize(
    ("op", "dtype"),
    [
        *[(op, np.int32) for op in ("ABS", "NEG", "SIGN", "ZEROS_LIKE")],
        pytest.param("ABS", np.int64, marks=NO_INT64),
        pytest.param("SIGN", np.int64, marks=NO_INT64),
        ("NEG", np.int64),
        ("ZEROS_LIKE", np.int64),
    ],
)
def test_unary_integer(op: str, dtype: type) -> None:
    check_op(op, [Act(sample((N, 4, 5), dtype))], output_dtypes=[dtype])


# ------------------------------------------------------------------ cast

FLOAT_SPECIALS = [
    0.0,
    -0.0,
    0.5,
    -0.5,
    1.9,
    -1.9,
    2.5,
    127.7,
    -128.9,
    255.9,
    300.0,
    -300.0,
    70000.5,
    -70000.5,
    3e9,
    -3e9,
    1e30,
    -1e30,
    np.inf,
    -np.inf,
    np.nan,
]
INT_SPECIALS = [0, 1, -1, 127, 128, -129, 255, 256, 300, -300, 70000, 2**31 - 1, -(2**31)]


def cast_input(src: type, dst: type) -> np.ndarray:
    """Rows of values at the edges of both types (truncation, saturation, wrapping, NaN)."""
    rng = np.random.default_rng(3)
    if src == np.bool_:
        return rng.random((N, 6)) < 0.5
    specials = np.array(FLOAT_SPECIALS if np.issubdtype(src, np.floating) else INT_SPECIALS)
    if np.issubdtype(src, np.integer):
        info = np.iinfo(src)
        specials = specials[(specials >= info.min) & (specials <= info.max)]
    if np.issubdtype(dst, np.floating):  # no tolerance check holds NaN or inf
        specials = specials[np.isfinite(specials)]
    if np.float16 in (src, dst):  # beyond float16's range
        specials = specials[np.abs(np.nan_to_num(specials)) < 6e4]
    rows = [rng.permutation(specials) for _ in range(N)]
    return np.stack(rows).astype(src)


CASTS = (
    [
        (np.float32, d)
        for d in (
            np.int32,
            np.int64,
            np.int16,
            np.uint16,
            np.uint8,
            np.int8,
            np.uint32,
            np.bool_,
            np.float16,
        )
    ]
    + [(np.int32, d) for d in (np.float32, np.int64, np.int16, np.uint8, np.int8, np.bool_)]
    + [
        (np.int64, np.int32),
        (np.int64, np.float32),
        (np.uint8, np.int8),
        (np.uint8, np.float32),
        (np.int16, np.float32),
        (np.bool_, np.float32),
        (np.bool_, np.int32),
        (np.float16, np.float32),
        (np.float16, np.int32),
    ]
)


@pytest.mark.parametrize("with_options", [False, True], ids=["tensor-types", "options"])
@pytest.mark.parametrize(
    ("src", "dst"), CASTS, ids=[f"{np.dtype(s).name}-{np.dtype(d).name}" for s, d in CASTS]
)
def test_cast(src: type, dst: type, with_options: bool) -> None:
    x = cast_input(src, dst)
    options = (
        {
            "options_type": "CastOptions",
            "options": {"in_data_type": tensor_type(src), "out_data_type": tensor_type(dst)},
        }
        if with_options
        else {}
    )
    check_op("CAST", [Act(x)], output_dtypes=[dst], **options)


# ------------------------------------------------------------------ batch rules


def zeros(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return np.zeros(shape, dtype)


@pytest.mark.parametrize(
    ("op", "inputs", "out_shape", "mode"),
    [
        ("ADD", [Act(zeros(N, 4)), Const(zeros(4))], [1, 4], "batch"),
        ("ADD", [Const(zeros(1, 1, 4)), Act(zeros(N, 2, 4))], [1, 2, 4], "batch"),
        ("ADD", [Act(zeros(N, 4)), Const(zeros(1, 3, 4))], [1, 3, 4], "loop"),
        ("ADD", [Act(zeros(N, 4)), Const(zeros(3, 4))], [3, 4], "loop"),
        (
            "SELECT",
            [Act(zeros(N, dtype=bool)), Act(zeros(N, 4)), Const(zeros(1, 4))],
            [1, 4],
            "batch",
        ),
        (
            "SELECT_V2",
            [Const(zeros(4, dtype=bool)), Act(zeros(N, 1)), Const(zeros())],
            [1, 4],
            "batch",
        ),
        (
            "SELECT_V2",
            [Act(zeros(N, 4, dtype=bool)), Act(zeros(N, 4)), Const(zeros(2, 1, 4))],
            [2, 1, 4],
            "loop",
        ),
        (
            "SELECT_V2",
            [Act(zeros(N, 4, dtype=bool)), Act(zeros(N, 3, 4)), Const(zeros())],
            [1, 3, 4],
            "loop",
        ),
    ],
)
def test_batch_rule(op: str, inputs: list[Act | Const], out_shape: list[int], mode: str) -> None:
    """The plan the rules lead to: batched when per-sample correct, never more pessimistic."""
    model = build_single_op(op, inputs, output_shapes=[out_shape])
    engine = Engine(model)
    assert ("serial" if engine.serial else engine.steps[0].mode) == mode


def test_folded_scalar_arithmetic() -> None:
    """Scalar shape arithmetic, folded at engine build, feeding a batched op."""
    b = GraphBuilder()
    x = b.input("x", [1, 3])
    total = b.op(
        "ADD",
        [b.constant("two", np.int32(2)), b.constant("five", np.int32(5))],
        output_shape=[],
        output_dtype=np.int32,
        options_type="AddOptions",
    )
    half = b.op(
        "DIV",
        [total, b.constant("minus_two", np.int32(-2))],
        output_shape=[],
        output_dtype=np.int32,
        options_type="DivOptions",
    )  # -3, truncated
    scale = b.op("CAST", [half], output_shape=[], output_dtype=np.float32)
    offset = b.op(
        "ADD",
        [b.constant("big", np.float32(3e38)), b.constant("big2", np.float32(3e38))],
        output_shape=[],
        options_type="AddOptions",
        options={"fused_activation_function": ActivationFunctionType.RELU6},
    )
    scaled = b.op("MUL", [x, scale], output_shape=[1, 3], options_type="MulOptions")
    y = b.op("SUB", [scaled, offset], output_shape=[1, 3], options_type="SubOptions")
    model = b.finish([y])
    feed = sample((N, 3))
    expected = run_litert_samples(model_to_bytes(model), [feed])[0]
    np.testing.assert_array_equal(Engine(model).run([feed])[0], expected)

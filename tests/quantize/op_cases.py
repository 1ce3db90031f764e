"""One-op float models for every op type of both spec tables, for the op-contract tests.

An `OpCase` says how to build the op: its operands in order (float activations, float constants,
weights, integer or boolean operands), its options and how many outputs it has. The tests give
each float operand a value range (`RANGES`: asymmetric, negative-only, positive-only, tiny,
large) and put float constants on either side of two-input ops (`layouts`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from qtool.model.types import ActivationFunctionType, Padding, TensorType

# The value ranges every float operand is drawn from (name -> (low, high)).
RANGES = {
    "asymmetric": (-1.0, 3.0),
    "negative": (-5.0, -0.5),
    "positive": (0.25, 4.0),
    "tiny": (-1e-6, 2e-6),
    "large": (-3000.0, 1200.0),
}
# Ops defined on positive inputs only get these.
POSITIVE_RANGES = {"positive": (0.25, 4.0), "tiny": (1e-6, 3e-6), "large": (10.0, 5000.0)}


@dataclass(frozen=True)
class Operand:
    """One input of the op: `kind` is "act" (a float model input), "const" (a float constant),
    "weight"/"bias" (a float constant of those roles), "sparse" (weights stored sparse behind a
    DENSIFY, as MediaPipe stores them), "int" (an integer constant `value`), "bool" (a boolean
    model input); None in `OpCase.operands` is an absent optional input."""

    kind: str
    shape: tuple[int, ...] = ()
    value: tuple | None = None  # "int" operands: the constant's values (nested tuples)
    dtype: str = "int32"  # "int" operands
    domain: str = "any"  # "any" or "positive" (float operands)

    @property
    def real(self) -> bool:
        """Whether the operand is real-valued data that the test draws from a range."""
        return self.kind in ("act", "const")


def act(*shape: int, domain: str = "any") -> Operand:
    return Operand("act", shape, domain=domain)


def integers(value, dtype: str = "int32") -> Operand:
    array = np.asarray(value)
    return Operand("int", array.shape, _frozen(array.tolist()), dtype)


def _frozen(value):
    return tuple(_frozen(v) for v in value) if isinstance(value, list) else value


@dataclass(frozen=True)
class OpCase:
    """How to build a one-op model of `op_type`; `covers` names the op type the case is for when
    that op only exists to feed this one (DENSIFY expanding a CONV_2D's sparse weights)."""

    op_type: str
    operands: tuple[Operand | None, ...]
    options_type: str | None = None
    options: dict = field(default_factory=dict)
    version: int = 1
    output_dtypes: tuple[str, ...] = ("float32",)
    covers: str | None = None

    @property
    def name(self) -> str:
        """The op type the case is for."""
        return self.covers or self.op_type

    def densified(self) -> OpCase:
        """The case with sparse weights stored dense (the float reference of what DENSIFY
        expands)."""
        operands = tuple(
            replace(o, kind="weight") if o is not None and o.kind == "sparse" else o
            for o in self.operands
        )
        return replace(self, operands=operands)

    def layouts(self) -> list[OpCase]:
        """This case, and with a two-input op's float activations made constants on either
        side (one at a time)."""
        positions = [p for p, o in enumerate(self.operands) if o is not None and o.kind == "act"]
        cases = [self]
        if len(positions) == 2 and self.op_type not in NO_CONSTANT_SIDE:
            for p in positions:
                operands = list(self.operands)
                operands[p] = replace(operands[p], kind="const")
                cases.append(replace(self, operands=tuple(operands)))
        return cases

    def layout_name(self) -> str:
        kinds = [o.kind for o in self.operands if o is not None and o.real]
        return "-".join(kinds) if len(kinds) > 1 else ""


# Two-input ops whose inputs stay activations (a constant side would be folded or meaningless).
NO_CONSTANT_SIDE = frozenset({"SELECT", "SELECT_V2", "CONCATENATION", "PACK"})

NONE = ActivationFunctionType.NONE
X = act(1, 4, 4, 3)


def _unary(op_type: str, options_type: str | None = None, domain: str = "any", **options):
    return OpCase(op_type, (act(1, 4, 4, 3, domain=domain),), options_type, options)


def _binary(op_type: str, options_type: str | None = None, output: str = "float32", **options):
    return OpCase(op_type, (X, act(1, 4, 4, 3)), options_type, options, output_dtypes=(output,))


def _conv(stride: int = 1) -> dict:
    return {
        "padding": Padding.SAME,
        "stride_h": stride,
        "stride_w": stride,
        "dilation_h_factor": 1,
        "dilation_w_factor": 1,
        "fused_activation_function": NONE,
    }


def _pool() -> dict:
    return {
        "padding": Padding.VALID,
        "stride_w": 2,
        "stride_h": 2,
        "filter_width": 2,
        "filter_height": 2,
        "fused_activation_function": NONE,
    }


_AXIS = integers([1, 2])
CASES: dict[str, OpCase] = {
    c.name: c
    for c in [
        _binary("ADD", "AddOptions", fused_activation_function=NONE),
        _binary("SUB", "SubOptions", fused_activation_function=NONE),
        _binary("MUL", "MulOptions", fused_activation_function=NONE),
        OpCase("DIV", (X, act(1, 4, 4, 3, domain="positive")), "DivOptions"),
        _binary("MAXIMUM"),
        _binary("MINIMUM"),
        _binary("SQUARED_DIFFERENCE"),
        _binary("LESS", output="bool"),
        _binary("LESS_EQUAL", output="bool"),
        _binary("GREATER", output="bool"),
        _binary("GREATER_EQUAL", output="bool"),
        _binary("EQUAL", output="bool"),
        _binary("NOT_EQUAL", output="bool"),
        OpCase("AVERAGE_POOL_2D", (X,), "Pool2DOptions", _pool()),
        OpCase("MAX_POOL_2D", (X,), "Pool2DOptions", _pool()),
        OpCase(
            "CONCATENATION",
            (X, act(1, 4, 4, 2)),
            "ConcatenationOptions",
            {"axis": 3, "fused_activation_function": NONE},
        ),
        OpCase(
            "CONV_2D",
            (act(1, 5, 5, 3), Operand("weight", (4, 3, 3, 3)), Operand("bias", (4,))),
            "Conv2DOptions",
            _conv(),
        ),
        OpCase(
            "DEPTHWISE_CONV_2D",
            (act(1, 5, 5, 2), Operand("weight", (1, 3, 3, 4)), Operand("bias", (4,))),
            "DepthwiseConv2DOptions",
            {**_conv(), "depth_multiplier": 2},
        ),
        OpCase(
            "FULLY_CONNECTED",
            (act(1, 6), Operand("weight", (4, 6)), Operand("bias", (4,))),
            "FullyConnectedOptions",
            {"fused_activation_function": NONE},
        ),
        OpCase(
            "TRANSPOSE_CONV",
            (
                integers([1, 8, 8, 2]),
                Operand("weight", (2, 3, 3, 3)),
                X,
                Operand("bias", (2,)),
            ),
            "TransposeConvOptions",
            {"padding": Padding.SAME, "stride_h": 2, "stride_w": 2},
            version=3,
        ),
        OpCase(
            "CONV_2D",
            (act(1, 5, 5, 16), Operand("sparse", (8, 3, 3, 16)), Operand("bias", (8,))),
            "Conv2DOptions",
            _conv(),
            covers="DENSIFY",
        ),
        OpCase("BATCH_MATMUL", (act(1, 3, 4), act(1, 4, 5)), "BatchMatMulOptions"),
        _unary("L2_NORMALIZATION", "L2NormOptions"),
        _unary("LOGISTIC"),
        _unary("TANH"),
        _unary("SOFTMAX", "SoftmaxOptions", beta=1.0),
        _unary("LOG_SOFTMAX"),
        _unary("RELU"),
        _unary("RELU6"),
        _unary("RELU_N1_TO_1"),
        _unary("LEAKY_RELU", "LeakyReluOptions", alpha=0.2),
        _unary("HARD_SWISH"),
        _unary("ELU"),
        _unary("GELU", "GeluOptions", approximate=False),
        _unary("ABS"),
        _unary("NEG"),
        _unary("RSQRT", domain="positive"),
        _unary("SQRT", domain="positive"),
        _unary("LOG", domain="positive"),
        _unary("EXP"),
        OpCase("PRELU", (X, Operand("const", (3,))), version=1),
        OpCase("RESHAPE", (X, integers([1, 12, 4])), "ReshapeOptions", {"new_shape": [1, 12, 4]}),
        OpCase("SQUEEZE", (act(1, 4, 1, 3),), "SqueezeOptions", {"squeeze_dims": [2]}),
        OpCase("EXPAND_DIMS", (X, integers(1))),
        OpCase("TRANSPOSE", (X, integers([0, 2, 1, 3]))),
        OpCase("PAD", (X, integers([[0, 0], [1, 1], [2, 0], [0, 0]]))),
        OpCase("PADV2", (X, integers([[0, 0], [1, 1], [2, 0], [0, 0]]), Operand("const", ()))),
        OpCase("MIRROR_PAD", (X, integers([[0, 0], [1, 1], [2, 0], [0, 0]])), "MirrorPadOptions"),
        OpCase("GATHER", (X, integers([2, 0, 3])), "GatherOptions", {"axis": 1}),
        OpCase("GATHER_ND", (X, integers([[0, 1], [0, 3]]))),
        OpCase("SLICE", (X, integers([0, 1, 0, 1]), integers([1, 2, 3, 2]))),
        OpCase(
            "STRIDED_SLICE",
            (X, integers([0, 0, 1, 0]), integers([1, 4, 4, 3]), integers([1, 2, 1, 1])),
            "StridedSliceOptions",
        ),
        OpCase("SPLIT", (integers(3), act(1, 4, 4, 4)), "SplitOptions", {"num_splits": 2}),
        OpCase(
            "SPLIT_V",
            (X, integers([1, 3]), integers(1)),
            "SplitVOptions",
            {"num_splits": 2},
        ),
        OpCase("PACK", (X, X), "PackOptions", {"values_count": 2, "axis": 0}),
        OpCase("UNPACK", (act(1, 2, 4, 3),), "UnpackOptions", {"num": 2, "axis": 1}),
        OpCase("TILE", (X, integers([1, 2, 1, 2]))),
        OpCase("BROADCAST_TO", (act(1, 4, 1, 3), integers([1, 4, 5, 3])), version=2),
        OpCase("REVERSE_V2", (X, integers([1]))),
        OpCase(
            "SELECT",
            (Operand("bool", (1, 4, 4, 3)), X, act(1, 4, 4, 3)),
        ),
        OpCase(
            "SELECT_V2",
            (Operand("bool", (1, 4, 4, 3)), X, act(1, 4, 4, 3)),
        ),
        OpCase("DEPTH_TO_SPACE", (act(1, 2, 2, 4),), "DepthToSpaceOptions", {"block_size": 2}),
        OpCase("SPACE_TO_DEPTH", (act(1, 4, 4, 1),), "SpaceToDepthOptions", {"block_size": 2}),
        OpCase(
            "SPACE_TO_BATCH_ND", (act(1, 4, 4, 1), integers([2, 2]), integers([[0, 0], [0, 0]]))
        ),
        OpCase(
            "BATCH_TO_SPACE_ND", (act(4, 2, 2, 1), integers([2, 2]), integers([[0, 0], [0, 0]]))
        ),
        OpCase("RESIZE_BILINEAR", (X, integers([7, 6])), "ResizeBilinearOptions"),
        OpCase("RESIZE_NEAREST_NEIGHBOR", (X, integers([7, 6])), "ResizeNearestNeighborOptions"),
        OpCase("MEAN", (X, _AXIS), "ReducerOptions", {"keep_dims": True}),
        OpCase("SUM", (X, _AXIS), "ReducerOptions", {"keep_dims": True}),
        OpCase("REDUCE_MAX", (X, _AXIS), "ReducerOptions", {"keep_dims": True}),
        OpCase("REDUCE_MIN", (X, _AXIS), "ReducerOptions", {"keep_dims": True}),
        OpCase("REDUCE_PROD", (act(1, 2, 2, 3), _AXIS), "ReducerOptions", {"keep_dims": True}),
        OpCase(
            "ARG_MAX",
            (X, integers(3)),
            "ArgMaxOptions",
            {"output_type": TensorType.INT32},
            output_dtypes=("int32",),
        ),
        OpCase(
            "ARG_MIN",
            (X, integers(3)),
            "ArgMinOptions",
            {"output_type": TensorType.INT32},
            output_dtypes=("int32",),
        ),
        OpCase(
            "SHAPE",
            (X,),
            "ShapeOptions",
            {"out_type": TensorType.INT32},
            output_dtypes=("int32",),
        ),
        OpCase("FILL", (integers([2, 3]), act())),
    ]
}
# The boundary ops are in every case: each model's inputs are QUANTIZEd and its outputs
# DEQUANTIZEd (the test feeds values whose codes it knows and reads the codes back).
BOUNDARY = frozenset({"QUANTIZE", "DEQUANTIZE"})
# Ops a one-op model cannot show: they carry state from one invocation to the next (variables)
# or run a whole sequence (the LSTM). Their contracts are proven over sequences in LiteRT and
# TFLite Micro, in the tests named.
COVERED_ELSEWHERE = {
    "UNIDIRECTIONAL_SEQUENCE_LSTM": "tests/quantize/test_recurrent.py",
    "READ_VARIABLE": "tests/quantize/test_stateful.py",
    "ASSIGN_VARIABLE": "tests/quantize/test_stateful.py",
    # Control flow copies bytes: proven on built IF and WHILE models, in dB against the float.
    "IF": "tests/quantize/test_graph_forms.py",
    "WHILE": "tests/quantize/test_graph_forms.py",
    # SHAPE reads no value (its input is 'shape_only'): it reads the float input as it is.
    "SHAPE": "tests/quantize/test_patterns.py",
}
# Outputs per op (when not 1).
OUTPUTS = {"SPLIT": 2, "SPLIT_V": 2, "UNPACK": 2}


def ranges_for(case: OpCase) -> dict[str, tuple[float, float]]:
    positive = any(o is not None and o.domain == "positive" for o in case.operands)
    return POSITIVE_RANGES if positive and case.op_type != "DIV" else RANGES

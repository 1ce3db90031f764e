"""Random networks from a menu of spec ops: every one quantizes, audits clean and runs in LiteRT.

Fixtures cover the ops one converter happens to emit; these graphs combine ops in ways no fixture
does (concatenations of pinned outputs, residual adds after pools, chains of same-scale ops...),
which is where planning bugs hide. Seeds are fixed, so the suite is deterministic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from qtool.calibrate import Dataset
from qtool.check.audit import audit_model
from qtool.model import Model, model_to_bytes, parse_model
from qtool.model.build import GraphBuilder
from qtool.numerics import sqnr_db
from qtool.quantize import quantize_loaded
from tests.litert import run_litert_samples

SAME, VALID = 0, 1
RELU, RELU6 = 1, 3


@dataclass
class Act:
    index: int
    shape: list[int]  # [1, H, W, C]


class RandomNet:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.builder = GraphBuilder()
        self.acts = [Act(self.builder.input("image", [1, 8, 8, 3]), [1, 8, 8, 3])]
        self.count = 0

    def name(self, kind: str) -> str:
        self.count += 1
        return f"{kind.lower()}_{self.count}"

    def pick(self, condition: Callable[[Act], bool] = lambda a: True) -> Act | None:
        candidates = [a for a in self.acts if condition(a)]
        return candidates[self.rng.integers(len(candidates))] if candidates else None

    def emit(self, op_type: str, inputs: list[int], shape: list[int], **options) -> Act:
        options_type = options.pop("options_type", None)
        index = self.builder.op(
            op_type,
            inputs,
            output_shape=shape,
            name=self.name(op_type),
            options_type=options_type,
            options=options,
        )
        act = Act(index, shape)
        self.acts.append(act)
        return act

    def const(self, values: np.ndarray) -> int:
        return self.builder.constant(self.name("const"), np.asarray(values, np.float32))

    # ---------------------------------------------------------------- the menu

    def conv(self) -> None:
        a = self.pick()
        _, h, w, c = a.shape
        out, k = int(self.rng.integers(2, 9)), int(self.rng.choice([1, 3]))
        stride = int(self.rng.choice([1, 2])) if h > 2 and w > 2 else 1
        weights = self.rng.standard_normal((out, k, k, c)) / np.sqrt(k * k * c)
        shape = [1, -(-h // stride), -(-w // stride), out]
        self.emit(
            "CONV_2D",
            [a.index, self.const(weights), self.const(self.rng.normal(0, 0.1, out))],
            shape,
            options_type="Conv2DOptions",
            padding=SAME,
            stride_w=stride,
            stride_h=stride,
            fused_activation_function=int(self.rng.choice([0, RELU, RELU6])),
            dilation_w_factor=1,
            dilation_h_factor=1,
        )

    def depthwise(self) -> None:
        a = self.pick()
        c = a.shape[3]
        weights = self.rng.standard_normal((1, 3, 3, c)) / 3
        self.emit(
            "DEPTHWISE_CONV_2D",
            [a.index, self.const(weights), self.const(self.rng.normal(0, 0.1, c))],
            a.shape,
            options_type="DepthwiseConv2DOptions",
            padding=SAME,
            stride_w=1,
            stride_h=1,
            depth_multiplier=1,
            fused_activation_function=RELU6,
            dilation_w_factor=1,
            dilation_h_factor=1,
        )

    def pool(self) -> None:
        a = self.pick(lambda a: a.shape[1] % 2 == 0 and a.shape[2] % 2 == 0 and a.shape[1] > 1)
        if a is None:
            return
        op = str(self.rng.choice(["MAX_POOL_2D", "AVERAGE_POOL_2D"]))
        _, h, w, c = a.shape
        self.emit(
            op,
            [a.index],
            [1, h // 2, w // 2, c],
            options_type="Pool2DOptions",
            padding=VALID,
            stride_w=2,
            stride_h=2,
            filter_width=2,
            filter_height=2,
            fused_activation_function=0,
        )

    def binary(self) -> None:
        a = self.pick()
        op = str(self.rng.choice(["ADD", "MUL", "SUB", "MAXIMUM", "MINIMUM"]))
        b = self.pick(lambda b: b.shape == a.shape and b is not a)
        other = b.index if b is not None else self.const(self.rng.normal(0, 1, a.shape[3]))
        options = {"options_type": f"{op.title()}Options"} if op in ("ADD", "MUL", "SUB") else {}
        self.emit(op, [a.index, other], a.shape, **options)

    def unary(self) -> None:
        a = self.pick()
        op = str(self.rng.choice(["LOGISTIC", "TANH", "RELU", "RELU6", "HARD_SWISH", "LEAKY_RELU"]))
        options = {"options_type": "LeakyReluOptions", "alpha": 0.1} if op == "LEAKY_RELU" else {}
        self.emit(op, [a.index], a.shape, **options)

    def concat(self) -> None:
        a = self.pick()
        b = self.pick(lambda b: b.shape[:3] == a.shape[:3])
        shape = [*a.shape[:3], a.shape[3] + b.shape[3]]
        self.emit(
            "CONCATENATION",
            [a.index, b.index],
            shape,
            options_type="ConcatenationOptions",
            axis=3,
            fused_activation_function=0,
        )

    def pad(self) -> None:
        a = self.pick(lambda a: a.shape[1] < 12)
        if a is None:
            return
        paddings = self.builder.constant(
            self.name("pads"), np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32)
        )
        _, h, w, c = a.shape
        self.emit("PAD", [a.index, paddings], [1, h + 2, w + 2, c])

    def resize(self) -> None:
        a = self.pick(lambda a: a.shape[1] <= 6)
        if a is None:
            return
        _, h, w, c = a.shape
        size = self.builder.constant(self.name("size"), np.array([2 * h, 2 * w], np.int32))
        self.emit(
            "RESIZE_BILINEAR",
            [a.index, size],
            [1, 2 * h, 2 * w, c],
            options_type="ResizeBilinearOptions",
            align_corners=False,
            half_pixel_centers=True,
        )

    def transpose(self) -> None:
        a = self.pick()
        perm = self.builder.constant(self.name("perm"), np.array([0, 2, 1, 3], np.int32))
        _, h, w, c = a.shape
        self.emit("TRANSPOSE", [a.index, perm], [1, w, h, c])

    def finish(self) -> Model:
        a = self.pick(lambda a: a.index != self.acts[0].index) or self.acts[-1]
        c = a.shape[3]
        axes = self.builder.constant(self.name("axes"), np.array([1, 2], np.int32))
        pooled = self.emit(
            "MEAN", [a.index, axes], [1, c], options_type="ReducerOptions", keep_dims=False
        )
        weights = self.rng.standard_normal((6, c)) / np.sqrt(c)
        logits = self.builder.fully_connected(
            pooled.index, weights, self.rng.normal(0, 0.1, 6), self.name("fc")
        )
        probs = self.builder.op(
            "SOFTMAX",
            [logits],
            output_shape=[1, 6],
            name="probs",
            options_type="SoftmaxOptions",
            options={"beta": 1.0},
        )
        return parse_model(model_to_bytes(self.builder.finish([probs, logits])))


MENU = ("conv", "depthwise", "pool", "binary", "unary", "concat", "pad", "resize", "transpose")


def random_model(seed: int) -> Model:
    net = RandomNet(seed)
    net.conv()
    for _ in range(int(net.rng.integers(4, 10))):
        getattr(net, str(net.rng.choice(MENU)))()
    return net.finish()


@pytest.mark.parametrize("seed", range(48))
def test_random_network_quantizes_audits_and_runs(seed: int) -> None:
    model = random_model(seed)
    rng = np.random.default_rng(1000 + seed)
    calibration = rng.uniform(0, 1, (32, 8, 8, 3)).astype(np.float32)
    holdout = rng.uniform(0, 1, (16, 8, 8, 3)).astype(np.float32)
    result = quantize_loaded(model, Dataset.from_arrays([calibration], "random"))
    assert result.float_ops == []
    findings = audit_model(result.model)
    assert [f for f in findings if f.severity == "error"] == [], [f.message for f in findings]
    reference = run_litert_samples(model_to_bytes(model), [holdout], reference=False)
    got = run_litert_samples(model_to_bytes(result.model), [holdout], reference=False)
    # The logits output is where quantization noise is measured; softmax may saturate.
    assert sqnr_db(reference[1], got[1]) > 15, [
        model.op_type(op) for op in model.subgraphs[0].operators
    ]

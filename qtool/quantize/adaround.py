"""Rounding optimisation (AdaRound-style): round each weight up or down so that the layer's
output, not each weight, is closest to float on the calibration data.

For one output channel with real weights w, scale s and integer weights q, the squared output
error over the data is (w - s q)^T H (w - s q), where H = E[x x^T] is the second moment of the
input patches the channel sees. Rounding to nearest minimises each term of the diagonal alone;
correlated inputs make other choices better. Starting from nearest, coordinate descent flips
single weights between floor and ceil while the exact quadratic error drops (a few sweeps; every
flip updates H (w - s q) in O(K)), vectorised over the channels that share H.

H is gathered in one pass over the calibration samples, for the chosen layers only:
FULLY_CONNECTED (rows of its input), CONV_2D (im2col patches, subsampled), DEPTHWISE_CONV_2D
(one small H per channel). Other layers keep round-to-nearest.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from qtool.model import Model, Operator, Subgraph
from qtool.runtime import Engine
from qtool.runtime.kernels.conv import out_size_and_padding

SWEEPS = 6
DAMPING = 1e-3  # of the mean diagonal, so that a rank-deficient H stays positive definite
MAX_PATCHES = 8192  # per chunk of samples, for the second moment of convolution inputs
SUPPORTED = ("FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D")


def supported(model: Model, subgraph: Subgraph, op: Operator) -> bool:
    """Layers whose input patches this module can form (grouped convolutions cannot)."""
    op_type = model.op_type(op)
    if op_type not in SUPPORTED:
        return False
    if op_type == "CONV_2D":
        channels = subgraph.tensors[op.inputs[0]].shape[-1]
        return subgraph.tensors[op.inputs[1]].shape[-1] == channels
    return True


def _patches(x: np.ndarray, op: Operator, kernel: tuple[int, int], rng) -> np.ndarray:
    """Input patches [P, KH, KW, C] of a convolution's windows, at most MAX_PATCHES of them."""
    n, height, width, channels = x.shape
    kh, kw = kernel
    sh, sw = op.option("stride_h"), op.option("stride_w")
    dh, dw = op.option("dilation_h_factor"), op.option("dilation_w_factor")
    padding = op.option("padding")
    (oh, top), (ow, left) = (
        out_size_and_padding(padding, size, k, s, d)
        for size, k, s, d in ((height, kh, sh, dh), (width, kw, sw, dw))
    )
    rows = (oh - 1) * sh + (kh - 1) * dh + 1
    cols = (ow - 1) * sw + (kw - 1) * dw + 1
    padded = np.zeros((n, max(rows, top + height), max(cols, left + width), channels), x.dtype)
    padded[:, top : top + height, left : left + width] = x
    count = n * oh * ow
    chosen = rng.choice(count, size=min(count, MAX_PATCHES), replace=False)
    sample, rest = np.divmod(chosen, oh * ow)
    oy, ox = np.divmod(rest, ow)
    iy = oy[:, None] * sh + np.arange(kh)[None, :] * dh  # [P, KH]
    ix = ox[:, None] * sw + np.arange(kw)[None, :] * dw  # [P, KW]
    return padded[sample[:, None, None], iy[:, :, None], ix[:, None, :]]  # [P, KH, KW, C]


class SecondMoments:
    """E[x x^T] of the inputs each chosen layer's weights multiply, over calibration samples."""

    def __init__(self, model: Model, subgraph_index: int, ops: Iterable[int]) -> None:
        self.model = model
        self.subgraph: Subgraph = model.subgraphs[subgraph_index]
        self.ops = [i for i in ops if supported(model, self.subgraph, self.subgraph.operators[i])]
        self.by_input: dict[int, list[int]] = {}
        for i in self.ops:
            self.by_input.setdefault(self.subgraph.operators[i].inputs[0], []).append(i)
        self.sums: dict[int, np.ndarray] = {}
        self.counts: dict[int, int] = {}
        self.rng = np.random.default_rng(0)

    def __call__(self, t: int, value: np.ndarray) -> None:
        declared = self.subgraph.tensors[t].shape[1:]
        if list(np.shape(value)[1:]) != list(declared):
            return  # a dynamic shape run at another size: the patches follow the declared one
        for i in self.by_input.get(t, ()):
            rows = self._rows(i, value)  # [P, K]: one H for all channels; [P, C, K]: one each
            moment = rows.T @ rows if rows.ndim == 2 else np.einsum("pck,pcl->ckl", rows, rows)
            self.sums[i] = self.sums.get(i, 0) + moment
            self.counts[i] = self.counts.get(i, 0) + rows.shape[0]

    def _rows(self, i: int, value: np.ndarray) -> np.ndarray:
        op = self.subgraph.operators[i]
        op_type = self.model.op_type(op)
        weights = self.model.tensor_data(self.subgraph.tensors[op.inputs[1]])
        x = np.asarray(value, np.float64)
        if op_type == "FULLY_CONNECTED":
            return x.reshape(-1, weights.shape[1])
        _, kh, kw, _ = weights.shape
        x = x.reshape(-1, *self.subgraph.tensors[op.inputs[0]].shape[1:])
        patches = _patches(x, op, (kh, kw), self.rng)
        if op_type == "CONV_2D":
            return patches.reshape(len(patches), -1)  # (kh, kw, c) order of the weights
        multiplier = weights.shape[3] // x.shape[3]
        per_channel = np.repeat(patches, multiplier, axis=3)  # output channel k reads k // mult
        return per_channel.reshape(len(patches), kh * kw, -1).transpose(0, 2, 1)

    def moment(self, i: int) -> np.ndarray | None:
        """H = E[x x^T] of operator i's input rows, damped by DAMPING times its mean diagonal so
        that it stays positive definite: [K, K], or [C, K, K] for a depthwise layer; None when
        nothing was observed for it."""
        if i not in self.sums:
            return None
        h = self.sums[i] / self.counts[i]
        diagonal = np.diagonal(h, axis1=-2, axis2=-1)
        damping = DAMPING * np.mean(diagonal, axis=-1, keepdims=True)
        return h + damping[..., None] * np.eye(h.shape[-1])


def gather_moments(
    model: Model, subgraph_index: int, ops: Iterable[int], chunks: Iterable[Sequence[np.ndarray]]
) -> SecondMoments:
    """Second moments of the chosen layers' inputs over batches of calibration samples."""
    moments = SecondMoments(model, subgraph_index, ops)
    if moments.ops:
        engine = Engine(model, subgraph_index)
        for batch in chunks:
            engine.run(batch, observers=[moments])
    return moments


def optimise_rounding(
    weights: np.ndarray, scale: np.ndarray, moment: np.ndarray, layout: str, qmax: int = 127
) -> np.ndarray:
    """Integer weights (in [-qmax, qmax], weight layout) minimising the layer's output error
    under H.

    `layout` says how the weight tensor maps to (channel, K): "rows" (FULLY_CONNECTED and
    CONV_2D: channel first), "depthwise" ([1, KH, KW, C]: channel last, one H per channel).
    `scale` is one per channel, or one per weight of the rows ([O, K]: blockwise weights).
    """
    w = layer_rows(weights, layout)
    s = np.asarray(scale, np.float64)
    s = s.reshape(w.shape) if s.size == w.size and s.size > w.shape[0] else s.reshape(-1, 1)
    s = s * np.ones((w.shape[0], 1))
    q = _descend(w, np.broadcast_to(s, w.shape), moment, qmax)
    if layout == "depthwise":
        return q.T.reshape(weights.shape).astype(np.int8)
    return q.reshape(weights.shape).astype(np.int8)


def _descend(w: np.ndarray, s: np.ndarray, moment: np.ndarray, qmax: int = 127) -> np.ndarray:
    """Coordinate descent over floor/ceil choices; `s` the scale of each weight, `moment`
    [K, K] or [C, K, K]."""
    ratio = w / s
    floor, ceil = np.floor(ratio), np.ceil(ratio)  # equal where w / s is an integer: no choice
    q = np.clip(np.round(ratio), -qmax, qmax)
    shared = moment.ndim == 2
    diagonal = np.diagonal(moment, axis1=-2, axis2=-1)
    error = w - q * s
    gradient = error @ moment if shared else np.einsum("ck,ckl->cl", error, moment)
    for _ in range(SWEEPS):
        flips = 0
        for k in range(w.shape[1]):
            other = np.where(q[:, k] == floor[:, k], ceil[:, k], floor[:, k])
            step = (q[:, k] - other) * s[:, k]  # change of error[:, k]
            hkk = diagonal[k] if shared else diagonal[:, k]
            gain = 2 * step * gradient[:, k] + step**2 * hkk
            better = (gain < 0) & (np.abs(other) <= qmax)
            if not better.any():
                continue
            flips += int(better.sum())
            q[better, k] = other[better]
            row = moment[k][None, :] if shared else moment[better, k, :]
            gradient[better] += step[better, None] * row
        if not flips:
            break
    return q


def layer_rows(weights: np.ndarray, layout: str) -> np.ndarray:
    """The weights as the rows H multiplies (float64): [O, K] for "rows", [C, KH*KW] for
    "depthwise"."""
    if layout == "depthwise":
        return weights.reshape(-1, weights.shape[-1]).T.astype(np.float64)
    return weights.reshape(weights.shape[0], -1).astype(np.float64)


def output_error(error_rows: np.ndarray, moment: np.ndarray) -> float:
    """The layer's mean squared output error for weight errors `error_rows` (`layer_rows`'s
    layout) under the second moment of its inputs ([K, K], or [C, K, K] per channel)."""
    if moment.ndim == 2:
        return float(np.sum((error_rows @ moment) * error_rows))
    return float(np.einsum("ck,ckl,cl->", error_rows, moment, error_rows))


def layer_layout(model: Model, op: Operator) -> str:
    """How `optimise_rounding` reads the operator's weights: "depthwise" for DEPTHWISE_CONV_2D,
    else "rows"."""
    return "depthwise" if model.op_type(op) == "DEPTHWISE_CONV_2D" else "rows"

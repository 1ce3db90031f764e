"""qtool's tf_quantize against a live TensorFlow, bit for bit (skipped without TensorFlow).

TensorFlow's reference CPU kernel is the definition; Intel builds substitute a oneDNN kernel for
some attribute combinations, which rounds differently, so it is switched off before the import.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from qtool.errors import UsageError
from qtool.numerics import TF_MODES, TF_TYPES, tf_quantize

os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
tf = pytest.importorskip(
    "tensorflow", reason="TensorFlow is not installed; the live QuantizeV2 comparison is skipped"
)

CASES_PER_COMBINATION = 25


def _random_range(rng: np.random.Generator) -> tuple[float, float]:
    kind = rng.integers(0, 4)
    if kind == 0:
        lo, hi = sorted(rng.normal(0, 10, 2))
    elif kind == 1:
        lo, hi = 0.0, abs(rng.normal(0, 5))
    elif kind == 2:
        lo, hi = sorted(rng.normal(0, 1, 2) * 10.0 ** rng.integers(-6, 6))
    else:
        lo, hi = float(rng.integers(-130, 1)), float(rng.integers(0, 130))
    return lo, hi


def _random_data(rng: np.random.Generator, shape: tuple[int, ...], lo: float, hi: float):
    width = max(abs(lo), abs(hi), 1e-6)
    x = np.concatenate(
        [
            rng.uniform(lo - 1, hi + 1, shape).ravel(),
            # Values whose scaled form sits on or next to a .5 tie.
            (rng.integers(-300, 300, shape) + 0.5).ravel() * (width / 256),
            [lo, hi, 0.0, 1e-39, -np.inf, np.inf],
        ]
    )
    return x.astype(np.float32)


def _tensorflow(x, lo, hi, T, mode, round_mode, narrow, axis, emr):
    r = tf.raw_ops.QuantizeV2(
        input=x,
        min_range=lo,
        max_range=hi,
        T=getattr(tf, T),
        mode=mode,
        round_mode=round_mode,
        narrow_range=narrow,
        axis=-1 if axis is None else axis,
        ensure_minimum_range=emr,
    )
    storage = tf.as_dtype(TF_TYPES[T].storage)
    return tf.bitcast(r.output, storage).numpy(), r.output_min.numpy(), r.output_max.numpy()


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return np.array_equal(
        np.asarray(a, np.float32).view(np.uint32), np.asarray(b, np.float32).view(np.uint32)
    )


@pytest.mark.parametrize("T", sorted(TF_TYPES))
@pytest.mark.parametrize("mode", TF_MODES)
def test_matches_tensorflow_on_random_data(mode: str, T: str) -> None:
    rng = np.random.default_rng([TF_MODES.index(mode), sorted(TF_TYPES).index(T)])
    compared = 0
    for _ in range(CASES_PER_COMBINATION):
        round_mode = "HALF_AWAY_FROM_ZERO"
        if mode == "SCALED" and rng.random() < 0.5:
            round_mode = "HALF_TO_EVEN"
        narrow = bool(rng.random() < 0.5)
        emr = float(rng.choice([0.0, 0.01, 0.1]))
        axis = None if mode == "MIN_FIRST" or rng.random() < 0.5 else 0
        if axis is None:
            lo, hi = _random_range(rng)
            x = _random_data(rng, (7,), lo, hi)
        else:
            ranges = [_random_range(rng) for _ in range(3)]
            lo = np.array([r[0] for r in ranges], np.float32)
            hi = np.array([r[1] for r in ranges], np.float32)
            x = _random_data(rng, (3, 5), float(lo.min()), float(hi.max())).reshape(3, -1)
        lo32, hi32 = np.float32(lo), np.float32(hi)
        try:
            ours = tf_quantize(x, lo32, hi32, T, mode, round_mode, narrow, axis, emr)
        except UsageError:
            continue  # TensorFlow computes NaN here: no defined output to compare
        out, out_min, out_max = _tensorflow(x, lo32, hi32, T, mode, round_mode, narrow, axis, emr)
        assert np.array_equal(ours.output, out), (x, lo, hi, narrow, emr, round_mode, axis)
        assert _same_bits(ours.output_min, out_min)
        assert _same_bits(ours.output_max, out_max)
        compared += 1
    assert compared >= CASES_PER_COMBINATION // 2

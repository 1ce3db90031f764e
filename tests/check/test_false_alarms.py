"""A CI gate must not cry wolf: dead weight channels are an info, clean conversions stay clean."""

from __future__ import annotations

import numpy as np
import pytest

from qtool.check import audit_model
from qtool.model import QuantParams, parse_model
from tests.check.helpers import mutate, op_index, op_tensor, tf_model
from tests.check.target_models import FLOAT_FIXTURES, qtool_int8


def _kill_channels(model, channels: list[int]) -> None:
    """Make CONV_2D output channels dead as TF writes them: weights ~1e-10, scale ~1e-12."""
    conv = op_index(model, "CONV_2D")
    x, w, b = (op_tensor(model, conv, "input", p) for p in range(3))
    tensors = model.subgraphs[0].tensors
    w_scale = tensors[w].quantization.scale.copy()
    w_scale[channels] = 1e-12
    tensors[w].quantization = QuantParams.of(w_scale, np.zeros_like(w_scale, np.int64), 0)
    x_scale = np.float32(tensors[x].quantization.scale[0])
    tensors[b].quantization = QuantParams.of(
        (x_scale * w_scale).astype(np.float32), np.zeros(w_scale.size, np.int64), 0
    )
    weights = model.tensor_data(tensors[w]).copy()
    weights[channels] = np.where(weights[channels] > 0, 100, -100)
    model.set_tensor_data(model.subgraphs[0], w, weights)
    bias = model.tensor_data(tensors[b]).copy()
    bias[channels] = 0
    model.set_tensor_data(model.subgraphs[0], b, bias)


def test_dead_channels_are_one_info_not_tiny_scale_warnings() -> None:
    mutated, _ = mutate(tf_model("cnn_int8"), lambda m: _kill_channels(m, [0, 2]))
    findings = audit_model(mutated)
    assert [f for f in findings if f.severity != "info"] == []
    dead = [f for f in findings if f.rule == "QT-DEAD-CHANNELS"]
    # The bias's scale is a product of scales, tiny by construction: not reported at all.
    assert sorted(f.role for f in dead) == ["weight"]
    assert all("2 of" in f.message and "compute 0" in f.message for f in dead)


def test_tiny_scale_of_a_live_tensor_still_warns() -> None:
    def tiny_activation(m) -> None:
        conv = op_index(m, "CONV_2D")
        out = op_tensor(m, conv, "output", 0)
        m.subgraphs[0].tensors[out].quantization = QuantParams.of(1e-12, 0)

    mutated, _ = mutate(tf_model("cnn_int8"), tiny_activation)
    assert "QT-TINY-SCALE" in {f.rule for f in audit_model(mutated) if f.severity == "warning"}


@pytest.mark.parametrize("name", FLOAT_FIXTURES)
def test_qtool_conversions_have_no_warnings(name: str) -> None:
    findings = audit_model(parse_model(qtool_int8(name)))
    assert [f for f in findings if f.severity != "info"] == []

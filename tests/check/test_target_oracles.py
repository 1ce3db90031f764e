"""`qtool check --target` agrees with the vendors' tools, op by op, on every int8 model we have.

Models: TensorFlow's int8 conversions of the fixtures, qtool's own conversions of the float
fixtures, and purpose-built models on the edges of the constraints (tests/check/target_models.py).
Each oracle runs once per model (cached): Vela for ethos-u, TFLite Micro for tflm, LiteRT's default
XNNPACK delegate for xnnpack. Where a tool departs from its own documentation, the profile says so
in its notes, with the evidence these tests reproduce.
"""

from __future__ import annotations

import numpy as np
import pytest

from qtool.model import parse_model
from qtool.targets.placement import CANNOT_RUN, ON_TARGET, place_model
from tests.check.helpers import TF_INT8
from tests.check.oracles import litert_reference_outputs, tflm_result, vela_cpu_ops, xnnpack_ops
from tests.check.target_models import BUILDERS, FLOAT_FIXTURES, int8_model, qtool_int8, with_version


def model_bytes(key: str) -> bytes:
    kind, name = key.split(":")
    if kind == "tf":
        return (TF_INT8 / f"{name}.tflite").read_bytes()
    if kind == "qtool":
        return qtool_int8(name)
    return int8_model(name)


MODELS_UNDER_TEST = (
    [f"tf:{p.stem}" for p in sorted(TF_INT8.glob("*.tflite"))]
    + [f"qtool:{name}" for name in FLOAT_FIXTURES]
    + [f"built:{name}" for name in BUILDERS]
)


def _placement(data: bytes, target: str):
    return place_model(parse_model(data), target).ops


@pytest.mark.parametrize("key", MODELS_UNDER_TEST)
def test_ethos_u_placement_matches_vela(key: str) -> None:
    data = model_bytes(key)
    ours = {(p.subgraph, p.index) for p in _placement(data, "ethos-u") if p.status != ON_TARGET}
    assert ours == vela_cpu_ops(data)


@pytest.mark.parametrize("key", MODELS_UNDER_TEST)
def test_xnnpack_placement_matches_litert(key: str) -> None:
    data = model_bytes(key)
    ours = {
        p.index for p in _placement(data, "xnnpack") if p.subgraph == 0 and p.status == ON_TARGET
    }
    assert ours == xnnpack_ops(data)


@pytest.mark.parametrize("key", MODELS_UNDER_TEST)
def test_tflm_verdict_matches_tflite_micro(key: str) -> None:
    data = model_bytes(key)
    placement = _placement(data, "tflm")
    result = tflm_result(data)
    assert result["runs"] == all(p.status == ON_TARGET for p in placement), result.get("error")
    if result["runs"]:
        # TFLM computes LiteRT's int8 results exactly (the reference kernels).
        for ours, theirs in zip(result["outputs"], litert_reference_outputs(data), strict=True):
            np.testing.assert_array_equal(
                np.asarray(ours, theirs.dtype).reshape(theirs.shape), theirs
            )
    else:
        assert any(p.status == CANNOT_RUN for p in placement)


def test_purpose_built_models_exercise_the_constraints() -> None:
    """The edge models are not all trivially accepted: each oracle refuses some of them."""
    vela_cpu = [name for name in BUILDERS if vela_cpu_ops(int8_model(name))]
    tflm_refuses = [name for name in BUILDERS if not tflm_result(int8_model(name))["runs"]]
    assert {"conv_kernel_9x9", "conv_stride4_valid"}.isdisjoint(vela_cpu)
    assert {"avgpool_10x10_same", "depthwise_stride4", "resize_bilinear_3x"} <= set(vela_cpu)
    assert tflm_refuses == ["select_op", "negate_after_conv"]


def test_tflm_ignores_op_versions_as_the_profile_notes() -> None:
    data = with_version(int8_model("conv_stride4_valid"), "CONV_2D", 9)
    assert tflm_result(data)["runs"]
    assert all(p.status == ON_TARGET for p in _placement(data, "tflm"))
    assert not vela_cpu_ops(data)
